"""Run FastMCP background tasks (SEP-2663) as Temporal workflows.

```python
from fastmcp import FastMCP
from fastmcp_temporal import TemporalTasksExtension

mcp = FastMCP("Server")
mcp.add_extension(TemporalTasksExtension())
```

The public names load on first use, so importing `fastmcp_temporal.workflows`
(a replayer, a worker of workflows only) does not drag FastMCP in with it. The errors
exported are those a program that starts servers or reads payloads may catch.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmcp_temporal._fastmcp_private import UpstreamChanged
    from fastmcp_temporal._policy import ExecutionPolicy, execution_policy
    from fastmcp_temporal._settings import TemporalTasksSettings
    from fastmcp_temporal.connection._client import TemporalConnectionError
    from fastmcp_temporal.connection._codec import EncryptionCodec, UnknownEncryptionKeyError
    from fastmcp_temporal.connection._converter import encrypted_data_converter
    from fastmcp_temporal.connection._stores import PayloadStoreError
    from fastmcp_temporal.devserver import DevServerError
    from fastmcp_temporal.server._extension import TemporalTasksExtension
    from fastmcp_temporal.worker._plugin import McpTasksPlugin
    from fastmcp_temporal.worker._resumable import checkpoint, last_checkpoint

__version__ = metadata.version("fastmcp-temporal")

__all__ = [
    "DevServerError",
    "EncryptionCodec",
    "ExecutionPolicy",
    "McpTasksPlugin",
    "PayloadStoreError",
    "TemporalConnectionError",
    "TemporalTasksExtension",
    "TemporalTasksSettings",
    "UnknownEncryptionKeyError",
    "UpstreamChanged",
    "checkpoint",
    "encrypted_data_converter",
    "execution_policy",
    "last_checkpoint",
]

_EXPORTS = {
    "DevServerError": "fastmcp_temporal.devserver",
    "EncryptionCodec": "fastmcp_temporal.connection._codec",
    "ExecutionPolicy": "fastmcp_temporal._policy",
    "McpTasksPlugin": "fastmcp_temporal.worker._plugin",
    "PayloadStoreError": "fastmcp_temporal.connection._stores",
    "TemporalConnectionError": "fastmcp_temporal.connection._client",
    "TemporalTasksExtension": "fastmcp_temporal.server._extension",
    "TemporalTasksSettings": "fastmcp_temporal._settings",
    "UnknownEncryptionKeyError": "fastmcp_temporal.connection._codec",
    "UpstreamChanged": "fastmcp_temporal._fastmcp_private",
    "checkpoint": "fastmcp_temporal.worker._resumable",
    "encrypted_data_converter": "fastmcp_temporal.connection._converter",
    "execution_policy": "fastmcp_temporal._policy",
    "last_checkpoint": "fastmcp_temporal.worker._resumable",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fastmcp_temporal' has no attribute {name!r}")
