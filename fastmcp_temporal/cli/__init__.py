"""The `fastmcp-temporal` command: worker, dev server, operator views, codec server, payload gc."""
