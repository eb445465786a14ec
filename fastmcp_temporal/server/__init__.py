"""The MCP-facing side: what runs in the FastMCP server process.

`TemporalTasksExtension` answers `tools/call` (creating a task or a durable call),
`tasks/get`, `tasks/update` and `tasks/cancel` from Temporal, and scopes every task
to its caller. Nothing here runs a tool body; that is the worker's side.
"""
