"""What several test files share, one concern per module, imported as `helpers.<module>`.

`pyproject.toml` puts `tests/` on the path (pytest's `pythonpath`), and the apps the tests
launch (`fault_app.py`, `redeploy_app.py`) sit beside it, so they import these helpers too.
A test module never imports another test module: what two of them need lives here.
"""
