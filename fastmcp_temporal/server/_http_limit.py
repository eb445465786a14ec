"""How large a request the server takes over streamable HTTP, and the error past it.

mcp caps a streamable-HTTP request body at 4 MiB and answers a larger one with a bare
413, which a client reports as "Server returned an error response". A task's arguments
may be as large as its payload store takes, so the extension raises that cap to
`http_request_limit` in every streamable-HTTP app its server builds, and answers a body
over it with a JSON-RPC error (at HTTP 413) naming the size, the limit and the setting.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from mcp_types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastmcp_temporal import _fastmcp_private

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.http import StarletteWithLifespan
    from starlette.routing import Route

SETTING = "FASTMCP_TEMPORAL_HTTP_REQUEST_LIMIT"


def limit_http_requests(server: FastMCP, limit: Callable[[], int]) -> None:
    """Take requests of up to `limit()` bytes in every streamable-HTTP app `server` builds."""
    build = server.http_app

    @functools.wraps(build)
    def http_app(*args: Any, **kwargs: Any) -> StarletteWithLifespan:
        app = build(*args, **kwargs)
        if app.state.transport_type == "streamable-http":
            _apply(app, limit())
        return app

    server.http_app = http_app  # type: ignore[method-assign]


def _apply(app: StarletteWithLifespan, limit: int) -> None:
    """Guard the MCP route with `limit`, and raise mcp's own cap to it once the app's lifespan builds it."""
    route = _fastmcp_private.streamable_http_route(app)
    route.app = BodySizeLimit(route.app, limit)
    app.router.lifespan_context = _raising_session_cap(app.router.lifespan_context, route, limit)


def _raising_session_cap(lifespan: Any, route: Route, limit: int) -> Callable[[Any], Any]:
    @asynccontextmanager
    async def raised(app: Any) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            _fastmcp_private.raise_session_body_limit(route, limit)
            yield state

    return raised


class _OverLimit(Exception):
    def __init__(self, received: int) -> None:
        self.received = received


class BodySizeLimit:
    """Answers a POST whose body is over `limit` bytes with a JSON-RPC error at HTTP 413."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared = _declared_size(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(f"{declared:,} bytes", scope, receive, send)
            return
        received = 0

        async def receive_within_limit() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise _OverLimit(received)
            return message

        try:
            await self.app(scope, receive_within_limit, send)
        except _OverLimit as over:
            await self._refuse(f"more than {over.received:,} bytes", scope, receive, send)

    async def _refuse(self, size: str, scope: Scope, receive: Receive, send: Send) -> None:
        message = (
            f"This request is {size}, over this server's limit of {self.limit:,} bytes per HTTP request; "
            f"raise {SETTING} (http_request_limit) on the server, or send less."
        )
        error = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
        await JSONResponse(error, status_code=413)(scope, receive, send)


def _declared_size(scope: Scope) -> int | None:
    length = Headers(scope=scope).get("content-length")
    return int(length) if length is not None and length.isdigit() else None
