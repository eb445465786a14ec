"""A payload store that is away delays a running leg; it never fails it early or runs a body twice.

The store goes away for longer than the tool's whole retry budget (`maximum_attempts` x
(heartbeat timeout + retry interval)): S3 behind a proxy that resets every connection
(the moto server keeps the objects), or a folder moved away like an unmounted share. A
leg that starts during the outage waits for its stored input, heartbeating; a leg whose
3 MB result cannot be stored waits to store it. Temporal shows the same first attempt
still pending, its heartbeats saying it waits for the store (as `tasks/get` does); once the store is back both complete, each body having run once. A leg
whose deadline comes first ends with an error that names the outage.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.api.enums.v1 import PendingActivityState

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from helpers.stores import S3Store
from helpers.temporal import no_workflow_running, task_handle, temporal_client
from helpers.waits import eventually, polled_until
from helpers.wire import tasks_get

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ARGUMENTS = 400 * 1024
RESULT = 3 * 1024 * 1024
# Two attempts a leg, 200 ms apart: without waiting for the store, a leg gives up within two
# heartbeat timeouts and a retry interval of a store that does not answer.
ATTEMPTS, RETRY_INTERVAL = 2, timedelta(milliseconds=200)
RETRY_BUDGET = execution_policy(maximum_attempts=ATTEMPTS, initial_retry_interval=RETRY_INTERVAL)
# Storing a 3 MB result converts it twice, on a busy test machine for a second or two in one go.
SLOW_LEG_HEARTBEAT = timedelta(seconds=5)


class Outage(Protocol):
    setting: str

    def begin(self) -> None: ...
    def end(self) -> None: ...


class ResettingProxy:
    """A TCP proxy in front of the S3 server; during an outage it resets every connection."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._server: asyncio.Server | None = None
        self.down = False
        self.refused = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def __aenter__(self) -> ResettingProxy:
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            self.refused += 1
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        await asyncio.gather(_copy(reader, upstream_writer), _copy(upstream_reader, writer))


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


class S3Outage:
    def __init__(self, proxy: ResettingProxy) -> None:
        self.proxy, self.setting = proxy, "s3://faults/tasks"

    def begin(self) -> None:
        self.proxy.down = True

    def end(self) -> None:
        assert self.proxy.refused, "nothing reached the store during the outage"
        self.proxy.down = False


class FolderOutage:
    def __init__(self, folder: Path) -> None:
        self.folder, self.setting = folder, str(folder)
        self._away = folder.with_name("unmounted")

    def begin(self) -> None:
        self.folder.rename(self._away)

    def end(self) -> None:
        self._away.rename(self.folder)


@pytest.fixture
async def s3_outage(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[S3Outage]:
    S3Store(s3_endpoint)  # creates the bucket, directly
    async with ResettingProxy(int(s3_endpoint.rsplit(":", 1)[1])) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        yield S3Outage(proxy)


@pytest.fixture
def folder_outage(tmp_path: Path) -> Iterator[FolderOutage]:
    folder = tmp_path / "payloads"
    folder.mkdir(mode=0o700)
    yield FolderOutage(folder)


@pytest.fixture(params=["folder", "s3"])
def outage(request: pytest.FixtureRequest) -> Outage:
    return request.getfixturevalue(f"{request.param}_outage")


def _server(
    extension: TemporalTasksExtension, runs: list[str], release: anyio.Event, outage: Outage
) -> FastMCP:
    mcp = FastMCP("store-outage")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    @RETRY_BUDGET
    async def hold() -> str:
        """Holds the worker's only activity slot until released."""
        runs.append("hold")
        await release.wait()
        return "released"

    @mcp.tool(task=True)
    @RETRY_BUDGET
    async def measure(blob: str) -> int:
        runs.append("measure")
        return len(blob)

    @mcp.tool(task=True)
    @RETRY_BUDGET
    async def produce() -> str:
        """Its result goes to the store, which goes away as the body finishes."""
        runs.append("produce")
        outage.begin()
        return "r" * RESULT

    return mcp


async def _pending_leg(extension: TemporalTasksExtension, task_id: str) -> Any:
    handle = task_handle(extension, task_id)
    pending = (await handle.describe()).raw_description.pending_activities
    return pending[0] if pending else None


async def _outlast_the_retry_budget(
    client: Client, extension: TemporalTasksExtension, task_id: str, doing: str
) -> None:
    """Keep the store away past the leg's retry budget; the leg is still on its first attempt, and its
    heartbeats say it waits for the store (what only the leg's outage path says: not a client's own retries)."""
    heartbeat_timeout = extension.temporal_settings.heartbeat_timeout
    budget = ATTEMPTS * (heartbeat_timeout + RETRY_INTERVAL).total_seconds()
    await anyio.sleep(budget + 3)  # the outage's length is the fault itself, not a wait for something
    waiting = f"Waiting for the payload store while {doing}"
    await polled_until(lambda: tasks_get(client, task_id), "working", lambda got: waiting in str(got.status_message))
    leg = await _pending_leg(extension, task_id)
    assert leg is not None and leg.attempt == 1
    assert leg.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    (details,) = await temporal_client(extension).data_converter.decode(leg.heartbeat_details.payloads)
    assert waiting in details["payloadStore"]


async def test_a_leg_that_starts_during_a_store_outage_waits_for_its_input(
    make_extension, outage: Outage
) -> None:
    extension = make_extension(payload_store=outage.setting, max_concurrent_activities=1)
    runs: list[str] = []
    release = anyio.Event()
    async with Client(_server(extension, runs, release, outage)) as client:
        holder = await call_tool_task(client, "hold")
        await eventually(lambda: runs == ["hold"])
        task = await call_tool_task(client, "measure", {"blob": "a" * ARGUMENTS})
        with anyio.fail_after(30):
            while await _pending_leg(extension, task.task_id) is None:  # scheduled, its input stored
                await anyio.sleep(0.05)
        outage.begin()
        release.set()  # the leg starts now, with the store away
        assert (await holder.result()).data == "released"
        await _outlast_the_retry_budget(client, extension, task.task_id, "reading its stored input")
        outage.end()
        assert (await task.result()).data == ARGUMENTS
        await no_workflow_running(extension)
    assert runs == ["hold", "measure"]


async def test_a_result_stored_during_an_outage_is_kept_once_the_store_is_back(
    make_extension, s3_outage: S3Outage
) -> None:
    extension = make_extension(payload_store=s3_outage.setting, heartbeat_timeout=SLOW_LEG_HEARTBEAT)
    runs: list[str] = []
    async with Client(_server(extension, runs, anyio.Event(), s3_outage)) as client:
        task = await call_tool_task(client, "produce")
        await eventually(lambda: runs == ["produce"])
        await _outlast_the_retry_budget(client, extension, task.task_id, "storing the tool's result")
        s3_outage.end()
        assert (await task.result()).data == "r" * RESULT
        await no_workflow_running(extension)
    assert runs == ["produce"]


async def test_a_leg_whose_deadline_comes_during_an_outage_says_the_store_was_unreachable(
    make_extension, s3_outage: S3Outage
) -> None:
    extension = make_extension(
        payload_store=s3_outage.setting,
        heartbeat_timeout=SLOW_LEG_HEARTBEAT,
        start_to_close_timeout=timedelta(seconds=12),
    )
    runs: list[str] = []
    async with Client(_server(extension, runs, anyio.Event(), s3_outage)) as client:
        task = await call_tool_task(client, "produce", raise_on_error=False)
        done = await task.wait(timeout=30)
        s3_outage.end()
        await no_workflow_running(extension)
    assert done.status == "failed"
    message = done.status_message or ""
    assert "payload store did not answer" in message and "storing the tool's result" in message
    assert "start_to_close_timeout of 12 s" in message and "FASTMCP_TEMPORAL_PAYLOAD_STORE" in message
    assert runs == ["produce"]
