"""The request memory budget against idle sockets: stalled uploads cannot shut other callers out.

Each test serves real streamable HTTP (uvicorn on a loopback port), holds uploads open on
raw sockets that send part of a body and then nothing, and checks what others see from a
real `fastmcp.Client`: their requests are served, their tasks complete in Temporal. The
budget counts the bytes a server has received, not the Content-Length a caller declares;
a body that stops arriving is cut after `request_body_timeout`; one caller holds at most
its share (`request_memory_caller_share`) of the budget.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from anyio.abc import SocketStream
from fastmcp import FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import WorkflowExecutionStatus

from helpers.servers import http_client, server_with, serving_http, verifier
from helpers.temporal import workflow_of
from helpers.waits import DEADLINE, eventually

pytestmark = pytest.mark.anyio

KIB, MIB = 1024, 1024 * 1024
LIMIT = 64 * MIB
"""The default http_request_limit."""
LONG = timedelta(minutes=10)
"""A request_body_timeout no test outlasts: what is served then is served without any cut."""


async def weigh(blob: str) -> int:
    return len(blob)


class BodyBytesRead:
    """Counts the request body bytes the app has read, so a test knows its uploads have arrived."""

    def __init__(self) -> None:
        self.total = 0

    def middleware(self) -> Middleware:
        return Middleware(_Counting, counter=self)


class _Counting:
    def __init__(self, app: ASGIApp, counter: BodyBytesRead) -> None:
        self.app, self.counter = app, counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted() -> Message:
            message = await receive()
            self.counter.total += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


@asynccontextmanager
async def serving(server: FastMCP) -> AsyncIterator[tuple[str, BodyBytesRead]]:
    read = BodyBytesRead()
    async with serving_http(server, middleware=[read.middleware()]) as url:
        yield url, read


@asynccontextmanager
async def stalled_upload(
    url: str, body: bytes, *, declared: int | None, token: str | None = None, source: str | None = None
) -> AsyncIterator[SocketStream]:
    """A POST to the MCP route (from the loopback address `source`, when given) that sends `body` (as
    its only chunk when `declared` is None) and then nothing, its connection held open: stalled when
    `body` is less than it declares."""
    target = urlsplit(url)
    headers = [
        f"POST {target.path} HTTP/1.1",
        f"Host: {target.netloc}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
    ]
    headers.append("Transfer-Encoding: chunked" if declared is None else f"Content-Length: {declared}")
    if token is not None:
        headers.append(f"Authorization: Bearer {token}")
    sent = body if declared is not None else f"{len(body):x}\r\n".encode() + body + b"\r\n"
    host, port = target.hostname or "127.0.0.1", target.port or 80
    async with await anyio.connect_tcp(host, port, local_host=source) as stream:
        await stream.send("\r\n".join(headers).encode() + b"\r\n\r\n" + sent)
        yield stream


async def response_of(stream: SocketStream, *, until_closed: bool) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the response on `stream`: read to the connection's close
    (`until_closed`), or to the end of the body its Content-Length announces."""
    received = b""
    with anyio.fail_after(DEADLINE):
        while not _complete(received, until_closed):
            try:
                received += await stream.receive()
            except anyio.EndOfStream:
                break
    head, _, body = received.partition(b"\r\n\r\n")
    assert until_closed or _complete(received, until_closed), received
    return int(head.split()[1]), json.loads(body)


async def trickled_until_answered(stream: SocketStream, gap: float) -> tuple[int, dict[str, Any]]:
    """Send one more byte of the body on `stream` every `gap` seconds until the server answers and
    closes the connection; that answer."""

    async def trickle() -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            while True:
                await anyio.sleep(gap)
                await stream.send(b" ")

    async with anyio.create_task_group() as trickling:
        trickling.start_soon(trickle)
        answer = await response_of(stream, until_closed=True)
        trickling.cancel_scope.cancel()
    return answer


def _complete(received: bytes, until_closed: bool) -> bool:
    head, separator, body = received.partition(b"\r\n\r\n")
    if until_closed or not separator:
        return False
    length = next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return len(body) >= int(length.split(b":")[1])


async def served_task(url: str, token: str | None, blob: str = "x") -> str:
    """Call `weigh` as a task as `token`'s caller, check its result; its task id."""
    async with http_client(url, token) as client:
        task = await call_tool_task(client, "weigh", {"blob": blob})
        assert (await task.result()).data == len(blob)
        return task.task_id


async def test_uploads_that_declare_the_limit_and_stall_leave_every_caller_served(make_extension) -> None:
    extension = make_extension(request_body_timeout=LONG)
    async with serving(server_with(extension, weigh, auth=verifier())) as (url, read), AsyncExitStack() as held:
        for _ in range(2):
            await held.enter_async_context(stalled_upload(url, b'{"jsonrpc"', declared=LIMIT, token="token-a"))
        await eventually(lambda: read.total >= 20, what="the server to read both stalled uploads' 10 bytes")

        served = [await served_task(url, token) for token in ("token-b", "token-a")]

        for task_id in served:
            described = await (await workflow_of(extension, task_id)).describe()
            assert described.status == WorkflowExecutionStatus.COMPLETED


async def test_a_body_that_stalls_is_cut_after_request_body_timeout_and_holds_nothing_after(
    make_extension,
) -> None:
    extension = make_extension(
        request_body_timeout=timedelta(seconds=3), request_memory_budget=MIB, http_request_limit=2 * MIB
    )
    taken, chunked = b" " * (700 * KIB), b" " * (50 * KIB)
    async with (
        serving(server_with(extension, weigh)) as (url, read),
        stalled_upload(url, taken, declared=900 * KIB) as with_length,
        stalled_upload(url, chunked, declared=None) as without_length,
    ):
        await eventually(lambda: read.total >= len(taken), what="the first upload to arrive")
        # Past the caller's share with the first: refused, and then cut as it stalls too.
        async with stalled_upload(url, b" " * (200 * KIB), declared=900 * KIB) as refused:
            for stream in (with_length, without_length, refused):
                status, body = await response_of(stream, until_closed=True)
                assert status == 408
                assert body["error"]["code"] == INVALID_REQUEST
                message = body["error"]["message"]
                assert "stopped arriving" in message and "FASTMCP_TEMPORAL_REQUEST_BODY_TIMEOUT" in message
        # Taken only if the cut uploads hold nothing: 900 KiB and their 700 KiB are past the 1 MiB budget.
        await served_task(url, None, "x" * (900 * KIB))


async def test_one_caller_holds_at_most_its_share_of_the_budget(make_extension) -> None:
    extension = make_extension(request_body_timeout=LONG, request_memory_budget=4 * MIB)
    part = b" " * (3 * MIB // 2)
    server = server_with(extension, weigh, auth=verifier())
    async with (
        serving(server) as (url, read),
        stalled_upload(url, part, declared=3 * MIB, token="token-a"),
    ):
        await eventually(lambda: read.total >= len(part), what="the first upload to arrive")
        async with stalled_upload(url, part * 2, declared=3 * MIB, token="token-a") as past_its_share:
            status, body = await response_of(past_its_share, until_closed=False)
        assert status == 503 and body["error"]["code"] == INTERNAL_ERROR
        assert "FASTMCP_TEMPORAL_REQUEST_MEMORY_CALLER_SHARE" in body["error"]["message"]

        task_id = await served_task(url, "token-b", "x" * len(part))

        described = await (await workflow_of(extension, task_id)).describe()
        assert described.status == WorkflowExecutionStatus.COMPLETED


async def test_bodies_that_trickle_from_three_addresses_are_cut_and_a_fourth_address_is_served(
    make_extension,
) -> None:
    """Each upload sends a byte well within request_body_timeout, far under request_body_min_rate."""
    extension = make_extension(
        request_body_timeout=timedelta(seconds=2),
        request_body_min_rate=16 * KIB,
        request_memory_budget=3 * MIB,
        http_request_limit=2 * MIB,
    )
    part = b" " * MIB
    async with serving(server_with(extension, weigh)) as (url, read), AsyncExitStack() as held:
        uploads = [
            await held.enter_async_context(stalled_upload(url, part, declared=3 * MIB // 2, source=f"127.0.0.{n}"))
            for n in (2, 3, 4)
        ]
        await eventually(lambda: read.total >= 3 * len(part), what="the three uploads' first MiB")

        answers = []
        async with anyio.create_task_group() as trickling:
            for stream in uploads:
                trickling.start_soon(_answered, answers, stream)

        for status, body in answers:
            assert status == 408
            assert body["error"]["code"] == INVALID_REQUEST
            assert "FASTMCP_TEMPORAL_REQUEST_BODY_MIN_RATE" in body["error"]["message"]
        # Past the 3 MiB budget had the trickling bodies kept their bytes.
        await served_task(url, None, "x" * (3 * MIB // 2))


async def _answered(answers: list[tuple[int, dict[str, Any]]], stream: SocketStream) -> None:
    answers.append(await trickled_until_answered(stream, gap=0.5))
