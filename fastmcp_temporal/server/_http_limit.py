"""How large a request the server takes over streamable HTTP, how many bytes at once, and the errors past them.

mcp caps a streamable-HTTP request body at 4 MiB and answers a larger one with a bare
413, which a client reports as "Server returned an error response". A task's arguments
may be as large as its payload store takes, so the extension raises that cap to
`http_request_limit` in every streamable-HTTP app its server builds, and answers a body
over it with a JSON-RPC error (at HTTP 413) naming the size, the limit and the setting.

A request's bytes are held several times over while it is parsed, validated, converted
and stored, so a handful of maximal requests at once could take more memory than the
process has. Each app therefore counts the body bytes of the requests it is processing
(declared by Content-Length, or received so far) and refuses one that would take the
count past `request_memory_budget` with a JSON-RPC error at HTTP 503 and `Retry-After`,
before processing its body (the body is read and dropped, so the client can finish
sending it and read the refusal): nothing of it has started, and the same request sent
again later is taken. A request is always taken when no other is in flight, so a budget below
`http_request_limit` never refuses a request for good.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastmcp_temporal import _fastmcp_private

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.http import StarletteWithLifespan
    from starlette.routing import Route

SETTING = "FASTMCP_TEMPORAL_HTTP_REQUEST_LIMIT"
BUDGET_SETTING = "FASTMCP_TEMPORAL_REQUEST_MEMORY_BUDGET"
RETRY_AFTER_SECONDS = 2
"""What a refused client is told to wait: about the time a maximal request takes to process."""


def limit_http_requests(server: FastMCP, limit: Callable[[], int], budget: Callable[[], int]) -> None:
    """Take requests of up to `limit()` bytes, and up to `budget()` bytes of them at once, in every
    streamable-HTTP app `server` builds."""
    build = server.http_app

    @functools.wraps(build)
    def http_app(*args: Any, **kwargs: Any) -> StarletteWithLifespan:
        app = build(*args, **kwargs)
        if app.state.transport_type == "streamable-http":
            _apply(app, limit(), budget())
        return app

    server.http_app = http_app  # type: ignore[method-assign]


def _apply(app: StarletteWithLifespan, limit: int, budget: int) -> None:
    """Guard the MCP route with `limit` and `budget`, and raise mcp's own cap to `limit` once the
    app's lifespan builds it."""
    route = _fastmcp_private.streamable_http_route(app)
    route.app = BodySizeLimit(RequestMemoryBudget(route.app, budget), limit)
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


class _OverBudget(Exception):
    pass


class RequestMemoryBudget:
    """Answers a POST that would take the body bytes in flight past `budget` with a JSON-RPC error
    at HTTP 503 and `Retry-After`, unless no other request is in flight.

    A request holds its bytes (its Content-Length, or what it has sent so far) until its
    processing ends, that is until the app has answered it.
    """

    def __init__(self, app: ASGIApp, budget: int) -> None:
        self.app = app
        self.budget = budget
        self.in_flight = 0

    def _admits(self, size: int) -> bool:
        return self.in_flight == 0 or self.in_flight + size <= self.budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared = _declared_size(scope) or 0
        if not self._admits(declared):
            await self._refuse(declared, scope, receive, send)
            return
        held = declared
        self.in_flight += held
        received = 0

        async def receive_within_budget() -> Message:
            nonlocal held, received
            message = await receive()
            received += len(message.get("body", b""))
            if received > held:
                if not self._admits(received - held):
                    raise _OverBudget
                self.in_flight += received - held
                held = received
            return message

        try:
            await self.app(scope, receive_within_budget, send)
        except _OverBudget:
            await self._refuse(received, scope, receive, send)
        finally:
            self.in_flight -= held

    async def _refuse(self, size: int, scope: Scope, receive: Receive, send: Send) -> None:
        message = (
            f"This server is processing {self.in_flight:,} bytes of requests, and this one ({size:,} bytes "
            f"so far) would take it past its request memory budget of {self.budget:,} bytes; retry in "
            f"{RETRY_AFTER_SECONDS} seconds, or raise {BUDGET_SETTING} (request_memory_budget) on the server "
            "if it has the memory."
        )
        error = {"jsonrpc": "2.0", "id": None, "error": {"code": INTERNAL_ERROR, "message": message}}
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        await JSONResponse(error, status_code=503, headers=headers)(scope, receive, send)
        await _drain(receive)


async def _drain(receive: Receive) -> None:
    """Read the rest of a refused body and drop it, chunk by chunk: a client still sending a big
    body reads the refusal once it is done, instead of losing its connection mid-upload."""
    with suppress(_OverLimit):
        while (message := await receive())["type"] == "http.request" and message.get("more_body", False):
            pass


def _declared_size(scope: Scope) -> int | None:
    length = Headers(scope=scope).get("content-length")
    return int(length) if length is not None and length.isdigit() else None
