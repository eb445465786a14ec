"""Run FastMCP background tasks (SEP-2663) as Temporal workflows.

```python
from fastmcp import FastMCP
from fastmcp_temporal import TemporalTasksExtension

mcp = FastMCP("Server")
mcp.add_extension(TemporalTasksExtension())
```

The public names load on first use, so importing `fastmcp_temporal.workflows`
(a replayer, a worker of workflows only) does not drag FastMCP in with it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmcp_temporal._policy import ExecutionPolicy, execution_policy
    from fastmcp_temporal._settings import TemporalTasksSettings
    from fastmcp_temporal.connection._codec import EncryptionCodec
    from fastmcp_temporal.connection._converter import encrypted_data_converter
    from fastmcp_temporal.server._extension import TemporalTasksExtension
    from fastmcp_temporal.worker._plugin import McpTasksPlugin
    from fastmcp_temporal.worker._resumable import checkpoint, last_checkpoint

__all__ = [
    "EncryptionCodec",
    "ExecutionPolicy",
    "McpTasksPlugin",
    "TemporalTasksExtension",
    "TemporalTasksSettings",
    "checkpoint",
    "encrypted_data_converter",
    "execution_policy",
    "last_checkpoint",
]

_EXPORTS = {
    "EncryptionCodec": "fastmcp_temporal.connection._codec",
    "ExecutionPolicy": "fastmcp_temporal._policy",
    "McpTasksPlugin": "fastmcp_temporal.worker._plugin",
    "TemporalTasksExtension": "fastmcp_temporal.server._extension",
    "TemporalTasksSettings": "fastmcp_temporal._settings",
    "checkpoint": "fastmcp_temporal.worker._resumable",
    "encrypted_data_converter": "fastmcp_temporal.connection._converter",
    "execution_policy": "fastmcp_temporal._policy",
    "last_checkpoint": "fastmcp_temporal.worker._resumable",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fastmcp_temporal' has no attribute {name!r}")
