"""How large a request the server takes over streamable HTTP, how many bytes at once, how long its
body may stall, and the errors past them.

mcp caps a streamable-HTTP request body at 4 MiB and answers a larger one with a bare
413, which a client reports as "Server returned an error response". A task's arguments
may be as large as its payload store takes, so the extension raises that cap to
`http_request_limit` in every streamable-HTTP app its server builds, and answers a body
over it with a JSON-RPC error (at HTTP 413) naming the size, the limit and the setting.

A request's bytes are held several times over while it is parsed, validated, converted
and stored, so a handful of maximal requests at once could take more memory than the
process has. Each app therefore counts the body bytes it has received of the requests it is
processing (never what a Content-Length declares: a socket that declares 64 MiB and sends 10
bytes holds 10), and refuses a request whose next bytes would take the count past
`request_memory_budget`, or its caller's count past `request_memory_caller_share` of it, with a
JSON-RPC error at HTTP 503 and `Retry-After`, before processing its body (the rest of the body is
read and dropped first, so the client can finish sending it and read the refusal): nothing of it
has started, and the same request sent again later is taken. A request is always taken when no other
holds bytes, so a budget below `http_request_limit` never refuses a request for good. The first
`UNCOUNTED_BYTES` of each body are not counted, so small requests are never refused.

A body whose next bytes do not come within `request_body_timeout` is cut, a refused one too: the
request gets a JSON-RPC error at HTTP 408 and its connection is closed, so an upload that stalls
lets go of its bytes and its socket. So is a body that trickles, each gap inside the timeout: one
that brings less than `request_body_min_rate` bytes a second over a window of
`request_body_timeout` (the first from the request's start). A floor, not a deadline on the whole
body: it bounds how long a body holds the budget by the bytes it has left to send, so a big
upload over a slow but steady link is taken, and one that crawls to hold what it has sent is cut
within a window. Bodies without a Content-Length (chunked) are counted and cut the same way. uvicorn bounds the rest of a connection's idle life itself: `timeout_keep_alive`
closes one silent between requests, `h11_max_incomplete_event_size` bounds the headers it buffers.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import anyio
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal.server._scope import caller_key

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.http import StarletteWithLifespan
    from starlette.routing import Route

    from fastmcp_temporal._settings import TemporalTasksSettings

SETTING = "FASTMCP_TEMPORAL_HTTP_REQUEST_LIMIT"
BUDGET_SETTING = "FASTMCP_TEMPORAL_REQUEST_MEMORY_BUDGET"
SHARE_SETTING = "FASTMCP_TEMPORAL_REQUEST_MEMORY_CALLER_SHARE"
TIMEOUT_SETTING = "FASTMCP_TEMPORAL_REQUEST_BODY_TIMEOUT"
MIN_RATE_SETTING = "FASTMCP_TEMPORAL_REQUEST_BODY_MIN_RATE"
RETRY_AFTER_SECONDS = 2
"""What a refused client is told to wait: about the time a maximal request takes to process."""
UNCOUNTED_BYTES = 64 * 1024
"""The bytes of each body the budget does not count: what uvicorn buffers of a connection's body
whatever the app does (its flow-control high-water mark), and more than a read, an answer or a
list takes, so those are never refused."""


def limit_http_requests(server: FastMCP, settings: Callable[[], TemporalTasksSettings]) -> None:
    """Bound the requests of every streamable-HTTP app `server` builds by `settings()`:
    `http_request_limit`, `request_memory_budget`, `request_memory_caller_share`,
    `request_body_timeout` and `request_body_min_rate`."""
    build = server.http_app

    @functools.wraps(build)
    def http_app(*args: Any, **kwargs: Any) -> StarletteWithLifespan:
        app = build(*args, **kwargs)
        if app.state.transport_type == "streamable-http":
            _apply(app, settings())
        return app

    server.http_app = http_app  # type: ignore[method-assign]


def _apply(app: StarletteWithLifespan, settings: TemporalTasksSettings) -> None:
    """Guard the MCP route with the bounds `settings` set, and raise mcp's own cap to
    `http_request_limit` once the app's lifespan builds it."""
    route = _fastmcp_private.streamable_http_route(app)
    budgeted = RequestMemoryBudget(route.app, settings.request_memory_budget, settings.request_memory_caller_share)
    limited = BodySizeLimit(budgeted, settings.http_request_limit)
    timeout = settings.request_body_timeout.total_seconds()
    route.app = SlowBodyCut(limited, timeout, settings.request_body_min_rate)
    app.router.lifespan_context = _raising_session_cap(
        app.router.lifespan_context, route, settings.http_request_limit
    )


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
    def __init__(self, refusal: str, body_complete: bool) -> None:
        self.refusal = refusal
        self.body_complete = body_complete


class RequestMemoryBudget:
    """Answers a POST whose body would take the bytes held past `budget`, or its caller's bytes past
    `caller_share` of it, with a JSON-RPC error at HTTP 503 and `Retry-After`, unless no other
    request holds bytes.

    A request holds the bytes of its body received so far, past its first `UNCOUNTED_BYTES`, until
    its processing ends, that is until the app has answered it.
    """

    def __init__(self, app: ASGIApp, budget: int, caller_share: float) -> None:
        self.app = app
        self.budget = budget
        self.caller_budget = int(budget * caller_share)
        self.held = 0
        self.held_by: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        caller = caller_key(scope)
        held = received = 0

        async def receive_within_budget() -> Message:
            nonlocal held, received
            message = await receive()
            received += len(message.get("body", b""))
            counted = max(0, received - UNCOUNTED_BYTES)
            if counted > held:
                refusal = self._refusal(caller, held, counted - held, received)
                if refusal is not None:
                    raise _OverBudget(refusal, body_complete=not message.get("more_body", False))
                self._hold(caller, counted - held)
                held = counted
            return message

        try:
            await self.app(scope, receive_within_budget, send)
        except _OverBudget as over:
            if not over.body_complete:
                await _drain(receive)
            await self._refuse(over.refusal, scope, receive, send)
        finally:
            self._hold(caller, -held)

    def _hold(self, caller: str, size: int) -> None:
        self.held += size
        self.held_by[caller] = self.held_by.get(caller, 0) + size
        if not self.held_by[caller]:
            del self.held_by[caller]

    def _refusal(self, caller: str, own: int, more: int, received: int) -> str | None:
        """Why a request of `caller` holding `own` bytes (`received` so far) cannot hold `more`, or
        None when it can."""
        if self.held == own:
            return None
        retry = f"retry in {RETRY_AFTER_SECONDS} seconds"
        if self.held + more > self.budget:
            return (
                f"This server is processing {self.held:,} bytes of requests, and this one ({received:,} bytes "
                f"so far) would take it past its request memory budget of {self.budget:,} bytes; {retry}, or "
                f"raise {BUDGET_SETTING} (request_memory_budget) on the server if it has the memory."
            )
        mine = self.held_by.get(caller, 0)
        if mine + more > self.caller_budget:
            return (
                f"Your requests in process hold {mine:,} bytes, and this one ({received:,} bytes so far) "
                f"would take them past one caller's share of this server's request memory budget, "
                f"{self.caller_budget:,} bytes; {retry} once your other requests are answered, or raise "
                f"{SHARE_SETTING} (request_memory_caller_share) on the server."
            )
        return None

    async def _refuse(self, refusal: str, scope: Scope, receive: Receive, send: Send) -> None:
        error = {"jsonrpc": "2.0", "id": None, "error": {"code": INTERNAL_ERROR, "message": refusal}}
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        await JSONResponse(error, status_code=503, headers=headers)(scope, receive, send)


class _BodyCut(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


class _BodyPace:
    """How a body arrives, against the two bounds on it: its next bytes within `timeout`, and at least
    `floor` bytes a second over each window of `timeout` (the first from the request's start), judged
    as the next bytes come: a body that stops coming is a stalled one."""

    def __init__(self, timeout: float, floor: int, now: float) -> None:
        self.timeout = timeout
        self.window_bytes = floor * timeout
        self.window_start = now
        self.in_window = 0

    def arrived(self, size: int, now: float) -> None:
        """Count `size` bytes come at `now`; a window that ends under its floor cuts the body."""
        self.in_window += size
        if now - self.window_start < self.timeout:
            return
        if self.in_window < self.window_bytes:
            raise self.too_slow(now)
        self.window_start, self.in_window = now, 0

    def too_slow(self, now: float) -> _BodyCut:
        return _BodyCut(
            f"This request's body arrived too slowly: {self.in_window:,} bytes in {now - self.window_start:.0f} s, "
            f"under this server's floor of {self.window_bytes / self.timeout:,.0f} bytes a second, so the server "
            f"dropped it unprocessed; send it again over a faster connection, or lower {MIN_RATE_SETTING} "
            "(request_body_min_rate) on the server for clients whose uploads are this slow."
        )

    def stalled(self) -> _BodyCut:
        return _BodyCut(
            f"This request's body stopped arriving: nothing came for {self.timeout:g} s, so the server dropped "
            f"it unprocessed; send it again, or raise {TIMEOUT_SETTING} (request_body_timeout) on the server "
            "for clients whose uploads pause longer."
        )


class SlowBodyCut:
    """Answers a POST whose body stops arriving for `timeout` seconds, or arrives at less than `floor`
    bytes a second over `timeout`, with a JSON-RPC error at HTTP 408 and closes its connection, so the
    request lets go of the bytes and the socket it held."""

    def __init__(self, app: ASGIApp, timeout: float, floor: int) -> None:
        self.app = app
        self.timeout = timeout
        self.floor = floor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body_complete = responded = False
        clock = anyio.current_time
        pace = _BodyPace(self.timeout, self.floor, clock())

        async def receive_in_time() -> Message:
            nonlocal body_complete
            if body_complete:
                return await receive()
            with anyio.move_on_after(self.timeout):
                message = await receive()
                body_complete = message["type"] != "http.request" or not message.get("more_body", False)
                if not body_complete:  # a body that has come whole is taken, however it came
                    pace.arrived(len(message.get("body", b"")), clock())
                return message
            raise pace.stalled()

        async def send_noting_the_response(message: Message) -> None:
            nonlocal responded
            responded = True
            await send(message)

        try:
            await self.app(scope, receive_in_time, send_noting_the_response)
        except _BodyCut as cut:
            if not responded:  # else a refusal was answered; uvicorn closes the idle socket after it
                await self._cut(cut.reason, scope, receive, send)

    async def _cut(self, reason: str, scope: Scope, receive: Receive, send: Send) -> None:
        error = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": reason}}
        await JSONResponse(error, status_code=408, headers={"Connection": "close"})(scope, receive, send)


async def _drain(receive: Receive) -> None:
    """Read the rest of a refused body and drop it, chunk by chunk, before the refusal is sent: a
    client still sending a big body reads the refusal once it is done, instead of losing its
    connection mid-upload, and one that stops sending is cut like any stalled body."""
    with suppress(_OverLimit):
        while (message := await receive())["type"] == "http.request" and message.get("more_body", False):
            pass


def _declared_size(scope: Scope) -> int | None:
    length = Headers(scope=scope).get("content-length")
    return int(length) if length is not None and length.isdigit() else None
