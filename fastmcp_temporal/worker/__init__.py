"""The worker side: where tool bodies run.

`McpTasksPlugin` loads the task workflow and the tool-leg activity into any Temporal
worker, with the heartbeats, progress, checkpoints, metrics and lost-payload handling
a leg needs. It depends on the connection layer, never on the MCP-facing side.
"""
