"""One module per scenario, each registered in `bench/registry.py`."""
