"""Servers, clients and callers shared by the over-the-wire tests.

A FastMCP server with its tools on a test's extension, served in memory or over real
streamable HTTP (uvicorn on a free loopback port, stopped even when a test fails), the
source of a one-tool app for `fastmcp-temporal worker`, the clients that reach a server
(opted in to tasks or not, with a bearer token or none, or a raw 2025-11-25-era session),
the callers FastMCP's `StaticTokenVerifier` knows, with what a task sees of each, tools
the tests hold while they act, and a "Temporal" that accepts TCP connections and never
answers, with what a start-up that cannot reach Temporal must say.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx2
import uvicorn
from fastmcp import Client, Context, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.dependencies import get_access_token, get_http_headers, get_http_request

from fastmcp_temporal import TemporalTasksExtension
from helpers.waits import DEADLINE

TOKENS: dict[str, dict[str, Any]] = {
    "token-a": {"client_id": "client-a", "scopes": ["read"]},
    "token-b": {"client_id": "client-b", "scopes": ["read"]},
    "token-u1": {"client_id": "shared-app", "sub": "user-1"},
    "token-u2": {"client_id": "shared-app", "sub": "user-2"},
    # Two scopes that `fastmcp_tasks` joins into the same string, "tenant-app|alice-user"
    "token-sub": {"client_id": "tenant-app", "sub": "alice-user"},
    "token-pipe": {"client_id": "tenant-app|alice-user"},
}


WORKER_SERVER = """
from fastmcp import FastMCP
from fastmcp_temporal import TemporalTasksExtension

mcp = FastMCP("cli-worker")
mcp.add_extension(TemporalTasksExtension())


@mcp.tool(task=True)
async def square(n: int) -> int:
    return n * n
"""
"""The source of a server file for `fastmcp-temporal worker`: one task tool, `square`."""

VERSION_2025_11_25 = "2025-11-25"
CALL_ID = 1


class NoTasksClient(Client):
    """A modern client that does not fold in the tasks extension, so it never opts in."""

    _auto_internal_extensions = False


def server_with(
    extension: TemporalTasksExtension, *tools: Callable[..., Any], name: str = "test-server", **options: Any
) -> FastMCP:
    """A FastMCP server (built with `options`) running `tools` as tasks on `extension`."""
    server = FastMCP(name, **options)
    server.add_extension(extension)
    for fn in tools:
        server.tool(fn, task=True)
    return server


def verifier(extra: dict[str, dict[str, Any]] | None = None) -> StaticTokenVerifier:
    return StaticTokenVerifier(tokens={**TOKENS, **(extra or {})})


@asynccontextmanager
async def serving_http(server: FastMCP, **app_options: Any) -> AsyncIterator[str]:
    """Serve `server` (its `http_app(**app_options)`) over streamable HTTP on a free loopback port; stop it
    gracefully."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY only then
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(server.http_app(**app_options), log_level="warning", lifespan="on"))
    serving = asyncio.create_task(web.serve(sockets=[sock]))
    try:
        with anyio.fail_after(DEADLINE):
            while not web.started:
                if serving.done():
                    serving.result()  # startup failed: raise its error here
                await anyio.sleep(0.02)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        web.should_exit = True
        with anyio.fail_after(DEADLINE):
            await serving
        sock.close()


def http_client(url: str, token: str | None = None, headers: dict[str, str] | None = None) -> Client:
    return Client(StreamableHttpTransport(url, headers=headers, auth=token))


class WireError(Exception):
    """A JSON-RPC error a raw session's request was answered with."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["message"])
        self.code: int = error["code"]
        self.error = error


@dataclass
class Session2025_11_25:
    """A raw streamable-HTTP session of the 2025-11-25 era, as the TypeScript SDK's client holds one."""

    http: httpx2.AsyncClient
    url: str
    headers: dict[str, str]
    initialized: dict[str, Any] = field(default_factory=dict)
    """The `initialize` result."""
    _last_id: int = CALL_ID  # `request` numbers its requests after the held call's

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request; its result, read from the JSON or SSE answer (`WireError` for an error)."""
        self._last_id += 1
        message = {"jsonrpc": "2.0", "id": self._last_id, "method": method, "params": params}
        response = await self.http.post(self.url, headers=self.headers, json=message)
        if (session_id := response.headers.get("mcp-session-id")) is not None:
            self.headers["Mcp-Session-Id"] = session_id
        lines = [line for line in response.text.splitlines() if line.startswith("data:")] or [response.text]
        answer = json.loads(lines[-1].removeprefix("data:"))
        if "error" in answer:
            raise WireError(answer["error"])
        return answer["result"]

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        response = await self.http.post(self.url, headers=self.headers, json=message)
        assert response.status_code == 202, response.text

    async def call_wait_forever(self) -> None:
        """`tools/call` of "wait_forever" as request `CALL_ID`, its response stream held open."""
        params = {"name": "wait_forever", "arguments": {}}
        message = {"jsonrpc": "2.0", "id": CALL_ID, "method": "tools/call", "params": params}
        async with self.http.stream("POST", self.url, headers=self.headers, json=message) as response:
            async for _ in response.aiter_lines():
                pass
            await anyio.sleep_forever()  # a client that cancels by notification keeps its stream

    async def cancel_the_call(self) -> None:
        await self.notify("notifications/cancelled", {"requestId": CALL_ID, "reason": "the user aborted"})

    async def withdraw(self, request_id: int) -> None:
        """`notifications/cancelled` for the request `request_id`, as a client that stops waiting sends."""
        await self.notify("notifications/cancelled", {"requestId": request_id, "reason": "the client gave up"})

    async def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        """Answer the server-to-client request `request_id` with `result`."""
        message = {"jsonrpc": "2.0", "id": request_id, "result": result}
        response = await self.http.post(self.url, headers=self.headers, json=message)
        assert response.status_code == 202, response.text

    @asynccontextmanager
    async def held(self, method: str, params: dict[str, Any]) -> AsyncIterator[HeldRequest]:
        """Send a request and read its SSE answer as it comes (`HeldRequest`); its connection is
        closed on exit, or at `HeldRequest.drop`."""
        self._last_id += 1
        message = {"jsonrpc": "2.0", "id": self._last_id, "method": method, "params": params}
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](64)
        connection = anyio.CancelScope()

        async def read() -> None:
            with connection, send:
                async with self.http.stream("POST", self.url, headers=self.headers, json=message) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data:") and line.removeprefix("data:").strip():
                            await send.send(json.loads(line.removeprefix("data:")))

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            yield HeldRequest(self._last_id, receive, connection.cancel)
            connection.cancel()


@dataclass
class HeldRequest:
    """A raw session's request whose SSE answer is held open: what the server sends on it, in order."""

    id: int
    messages: anyio.abc.ObjectReceiveStream[dict[str, Any]]
    drop: Callable[[], None]
    """Close the request's connection, as a client that crashes or loses the network does."""
    notifications: list[dict[str, Any]] = field(default_factory=list)

    async def asked(self) -> dict[str, Any]:
        """The next server-to-client request sent on this request's stream."""
        return await self.next_message(lambda message: "method" in message and "id" in message)

    async def told(self, status: str) -> dict[str, Any]:
        """The next `notifications/tasks/status` on this stream telling `status`."""
        return await self.next_message(lambda message: message.get("params", {}).get("status") == status and "id" not in message)

    async def answer(self) -> dict[str, Any]:
        """The request's own answer (its `result` or `error` message)."""
        return await self.next_message(lambda message: message.get("id") == self.id and "method" not in message)

    async def next_message(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with anyio.fail_after(DEADLINE):
            async for message in self.messages:
                if "id" not in message:
                    self.notifications.append(message)
                if wanted(message):
                    return message
        raise AssertionError(f"request {self.id}'s stream ended first; notifications: {self.notifications}")


@asynccontextmanager
async def session_2025_11_25(
    url: str,
    *,
    capabilities: dict[str, Any] | None = None,
    token: str | None = None,
    version: str = VERSION_2025_11_25,
) -> AsyncIterator[Session2025_11_25]:
    """A session initialized at `version`, declaring `capabilities`, with `token` as its bearer."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    client_info = {"name": "raw", "version": "1"}
    params = {"protocolVersion": version, "capabilities": capabilities or {}, "clientInfo": client_info}
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        session = Session2025_11_25(http, url, headers)
        session.initialized = await session.request("initialize", params)
        assert session.initialized["protocolVersion"] == version, session.initialized
        headers["Mcp-Protocol-Version"] = version
        await session.notify("notifications/initialized", {})
        yield session


async def whoami() -> dict[str, Any]:
    """Who the task runs as, read with no `ctx` parameter."""
    token = get_access_token()
    headers = get_http_headers(include_all=True)
    try:
        get_http_request()
        request = "available"
    except RuntimeError:
        request = "none"  # the reference fabricates no Request inside a task
    return {
        "request": request,
        "client_id": token.client_id if token else None,
        "claims": token.claims if token else None,
        "tenant": headers.get("x-tenant"),
        "authorization": headers.get("authorization"),
    }


def identity(token: str | None, tenant: str | None = None) -> dict[str, Any]:
    """What `whoami` returns for a caller with this bearer token and x-tenant header."""
    return {
        "request": "none",
        "client_id": TOKENS[token]["client_id"] if token else None,
        "claims": TOKENS[token] if token else None,
        "tenant": tenant,
        "authorization": f"Bearer {token}" if token else None,
    }


async def square(n: int) -> int:
    return n * n


def gated_tool(started: anyio.Event, release: anyio.Event) -> Callable[[], Awaitable[str]]:
    """A tool, `gated`, that says it started and returns "done" once released; it reports no progress."""

    async def gated() -> str:
        started.set()
        await release.wait()
        return "done"

    return gated


def reporting_once(
    go: anyio.Event, finish: anyio.Event, message: str, started: anyio.Event | None = None
) -> Callable[[Context], Awaitable[str]]:
    """A tool, `reports`, that says it started (if `started` is given), reports `message` once `go`
    is set, and returns "done" once `finish` is."""

    async def reports(ctx: Context) -> str:
        if started is not None:
            started.set()
        await go.wait()
        await ctx.report_progress(1, 2, message)
        await finish.wait()
        return "done"

    return reports


@contextmanager
def silent_tcp_server() -> Iterator[str]:
    """A loopback host:port that accepts connections and never sends a byte; closed on exit."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept_until_closed() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:  # the listener was closed
                return

    acceptor = threading.Thread(target=accept_until_closed, daemon=True)
    acceptor.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        acceptor.join(timeout=DEADLINE)
        for connection in accepted:
            connection.close()


def assert_startup_paragraph(message: str, address: str, reason: str, connect_timeout: int) -> None:
    """One paragraph: what failed and why, after how long, and a fix an installed command gives."""
    assert "\n" not in message
    what = f"Cannot reach Temporal namespace 'default' at {address}: {reason} (gave up after "
    assert message.startswith(what), message
    assert f" s; connect_timeout is {connect_timeout} s). " in message
    assert "`fastmcp-temporal dev-server`" in message and "FASTMCP_TEMPORAL_ADDRESS" in message
