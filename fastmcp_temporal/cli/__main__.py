"""`python -m fastmcp_temporal.cli`: the `fastmcp-temporal` command."""

from fastmcp_temporal.cli._main import main

main()
