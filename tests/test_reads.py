"""`tasks/get` of a running task waits for it to change while its client polls it.

Proves, on a real Temporal server over the MCP wire, that a task whose tool asks for a 60 s
poll interval delivers its result long before that interval could pass, to the FastMCP
client's `call_tool` and to a client that sleeps exactly the advertised `pollIntervalMs`
between reads (reads in a poll loop are held until the task changes, and answers advertise
a short interval meanwhile); that a read which is not part of a poll loop (the first on a
server, one long after the last answer) answers at once, and a held read ends by its cap;
that a read sent while a young task runs answers its result once the tool returns, from
the server's own long poll of the result and with no `describe()` of the task; that a held
read answers an ask or progress at its next re-read instead of at the end of the hold, and,
once the task was answered, an ask the moment it comes; that a read right after a `working`
answer waits for the close the same way (`reread_hold`), so the FastMCP client reads a task
that outlasts `read_hold` twice; that a close whose result is too big to cache still answers
the held read with it; that `read_hold=0` answers at once; and that a read after
`tasks/cancel` is not held, so the cancel shows immediately.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks.client import ToolTask, call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult
from mcp_types import InputRequiredResult
from temporalio.client import (
    Client as TemporalClient,
)
from temporalio.client import (
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
)

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server._holds import HELD_POLL_INTERVAL, POLL_LOOP_SLACK
from helpers.servers import gated_tool, http_client, reporting_once, serving_http, verifier
from helpers.waits import DEADLINE, eventually
from helpers.wire import accept, ask, tasks_cancel, tasks_get, tasks_update

pytestmark = pytest.mark.anyio

LONG_HOLD = timedelta(seconds=DEADLINE * 4)
BIG_RESULT_CHARS = 70_000  # past the 64 KiB a server keeps of a closed task's result
RECHECK = timedelta(milliseconds=100)
READ_HOLD = timedelta(milliseconds=250)
A_MINUTE = TaskConfig(mode="optional", poll_interval=timedelta(seconds=60))  # a tool that asks to be polled seldom


class _CountDescribes(Interceptor):
    """Counts `describe()` calls the server makes, by workflow id."""

    def __init__(self) -> None:
        self.described: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.described)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, described: Counter[str]) -> None:
        super().__init__(next)
        self._described = described

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        self._described[input.id] += 1
        return await super().describe_workflow(input)


class _ReadsArrive(Middleware):
    """Sets an event when a `tasks/get` reaches the server, and counts them."""

    def __init__(self) -> None:
        self.arrived = anyio.Event()
        self.count = 0

    async def on_request(self, context: MiddlewareContext[Any], call_next: Callable[..., Any]) -> Any:
        if context.method == "tasks/get":
            self.count += 1
            self.arrived.set()
        return await call_next(context)

    async def reach(self, count: int) -> None:
        """Wait until `count` reads have reached the server."""
        with anyio.fail_after(DEADLINE):
            while self.count < count:
                self.arrived = anyio.Event()
                await self.arrived.wait()


async def _server(
    temporal_server: DevServer,
    task_queue: str,
    tool: Callable[..., Any],
    task: bool | TaskConfig = True,
    **settings: Any,
) -> tuple[FastMCP, _CountDescribes, _ReadsArrive]:
    counter = _CountDescribes()
    client = await TemporalClient.connect(temporal_server.address, interceptors=[counter])
    server = FastMCP("reads")
    server.add_extension(TemporalTasksExtension(client=client, task_queue=task_queue, **settings))
    server.tool(task=task)(tool)
    reads = _ReadsArrive()
    server.add_middleware(reads)
    return server, counter, reads


async def _read_while_running(
    client: Client, tool: str, started: anyio.Event, reads: _ReadsArrive, release: anyio.Event
) -> tuple[ToolTask, Any]:
    """Start `tool` as a task; once it runs, send a `tasks/get` and let the tool go on when the read
    reaches the server. The task and the read's answer."""
    task = await call_tool_task(client, tool)
    with anyio.fail_after(DEADLINE):
        await started.wait()
    return task, await _read_then_release(client, task.task_id, reads, release)


async def _read_then_release(client: Client, task_id: str, reads: _ReadsArrive, release: anyio.Event) -> Any:
    """Send a `tasks/get` and let the tool go on when the read reaches the server; the read's answer."""
    answers: list[Any] = []
    reads.arrived = anyio.Event()

    async def read() -> None:
        answers.append(await tasks_get(client, task_id))

    with anyio.fail_after(DEADLINE / 2):  # the hold is longer and the watch gives up after 30 s
        async with anyio.create_task_group() as group:
            group.start_soon(read)
            await reads.arrived.wait()
            release.set()
    return answers[0]


async def test_a_read_of_a_young_task_answers_its_result_once_the_tool_returns(
    temporal_server: DevServer, task_queue: str
) -> None:
    started, release = anyio.Event(), anyio.Event()
    gated = gated_tool(started, release)

    server, counter, reads = await _server(
        temporal_server, task_queue, gated, read_hold=LONG_HOLD, read_recheck=LONG_HOLD
    )
    async with Client(server) as client:
        task, answer = await _read_while_running(client, "gated", started, reads, release)
        assert answer.status == "completed"
        assert answer.result["structuredContent"] == {"result": "done"}
        assert counter.described[f"mcp-task/anon/{task.task_id}"] == 0


async def test_a_quick_reread_of_a_running_task_waits_for_its_close(
    temporal_server: DevServer, task_queue: str
) -> None:
    """A read right after a `working` answer is a client waiting on the task (`reread_hold`):
    it answers the result once the tool returns, where it would have answered `working` again."""
    started, release = anyio.Event(), anyio.Event()
    gated = gated_tool(started, release)

    server, _, reads = await _server(
        temporal_server, task_queue, gated, read_hold=timedelta(0), reread_hold=LONG_HOLD, read_recheck=LONG_HOLD
    )
    async with Client(server) as client:
        task = await call_tool_task(client, "gated")
        with anyio.fail_after(DEADLINE):
            await started.wait()
        assert (await tasks_get(client, task.task_id)).status == "working"
        answer = await _read_then_release(client, task.task_id, reads, release)
        assert answer.status == "completed"
        assert answer.result["structuredContent"] == {"result": "done"}


async def test_the_fastmcp_client_reads_a_task_that_outlasts_read_hold_twice(
    temporal_server: DevServer, task_queue: str
) -> None:
    """The creation answered `working`, so the client's read, sent the moment the task is
    created, waits up to `read_hold` (a status read right after the creation stays quick); its
    next read, right after that answer, waits for the close: two `tasks/get`."""

    async def half_a_second() -> str:
        await anyio.sleep(READ_HOLD.total_seconds() * 2)  # the task's own work, past read_hold
        return "done"

    server, _, reads = await _server(
        temporal_server, task_queue, half_a_second, read_hold=READ_HOLD, reread_hold=LONG_HOLD
    )
    async with Client(server) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("half_a_second")
        assert result.structured_content == {"result": "done"}
        assert reads.count == 2


def _released_after_reads(started: anyio.Event, release: anyio.Event) -> Callable[..., Any]:
    async def waits() -> str:
        started.set()
        await release.wait()
        return "done"

    return waits


async def test_a_tool_polled_every_minute_delivers_its_result_to_call_tool_long_before_a_minute(
    temporal_server: DevServer, task_queue: str
) -> None:
    """With the defaults: the client's reads are held until the close, which answers the held one."""
    started, release = anyio.Event(), anyio.Event()
    server, _, reads = await _server(
        temporal_server, task_queue, _released_after_reads(started, release), task=A_MINUTE
    )
    async with Client(server) as client, anyio.create_task_group() as group:
        results: list[Any] = []

        async def call() -> None:
            results.append(await client.call_tool("waits"))

        group.start_soon(call)
        await reads.reach(2)  # the client is in its poll loop
        release.set()
        with anyio.fail_after(DEADLINE * 2 / 3):  # 20 s: a third of the tool's interval
            while not results:
                await anyio.sleep(0.05)
    assert results[0].structured_content == {"result": "done"}


async def _poll_as_advertised(client: Client, task_id: str) -> ClientGetTaskResult:
    """A client that waits exactly the advertised `pollIntervalMs` between reads, until the task ends."""
    while (read := await tasks_get(client, task_id)).status not in ("completed", "failed", "cancelled"):
        await anyio.sleep((read.poll_interval_ms or 0) / 1000)
    return read


async def test_a_tool_polled_every_minute_reaches_a_client_that_waits_the_advertised_interval_in_time(
    temporal_server: DevServer, task_queue: str
) -> None:
    """Such a client would wait a minute between reads at the tool's own interval: while its reads
    are held, the creation and every answer advertise a short one."""
    started, release = anyio.Event(), anyio.Event()
    server, _, reads = await _server(
        temporal_server, task_queue, _released_after_reads(started, release), task=A_MINUTE
    )
    async with Client(server) as client, anyio.create_task_group() as group:
        task = await call_tool_task(client, "waits")
        own_ms = A_MINUTE.poll_interval.total_seconds() * 1000
        assert task.create_result.poll_interval_ms is not None and task.create_result.poll_interval_ms < own_ms
        finals: list[ClientGetTaskResult] = []

        async def poll() -> None:
            finals.append(await _poll_as_advertised(client, task.task_id))

        group.start_soon(poll)
        await reads.reach(3)
        release.set()
        with anyio.fail_after(DEADLINE * 2 / 3):
            while not finals:
                await anyio.sleep(0.05)
    assert finals[0].result["structuredContent"] == {"result": "done"}


async def test_a_read_outside_a_poll_loop_answers_at_once_and_one_in_it_waits_for_the_change(
    temporal_server: DevServer, task_queue: str
) -> None:
    """Holds here are longer than the test: the first read, and one long after the last answer (an
    operator's one-off status), answer at once; a read right after an answer waits for the close."""
    started, release = anyio.Event(), anyio.Event()
    server, _, reads = await _server(
        temporal_server, task_queue, gated_tool(started, release), task=A_MINUTE,
        read_hold=timedelta(0), reread_hold=LONG_HOLD,
    )
    async with Client(server) as client:
        task = await call_tool_task(client, "gated")
        with anyio.fail_after(DEADLINE / 2):
            await started.wait()
            first = await tasks_get(client, task.task_id)
        assert first.status == "working"
        await anyio.sleep((first.poll_interval_ms or 0) / 1000 + POLL_LOOP_SLACK.total_seconds() + 0.2)  # a while later
        with anyio.fail_after(DEADLINE / 2):
            assert (await tasks_get(client, task.task_id)).status == "working"
        answer = await _read_then_release(client, task.task_id, reads, release)
        assert answer.status == "completed"


async def test_a_held_read_ends_by_its_cap_though_nothing_changed(temporal_server: DevServer, task_queue: str) -> None:
    started, release = anyio.Event(), anyio.Event()
    server, _, _ = await _server(
        temporal_server, task_queue, gated_tool(started, release), task=A_MINUTE,
        read_hold=timedelta(0), reread_hold=timedelta(seconds=1),
    )
    async with Client(server) as client:
        task = await call_tool_task(client, "gated")
        with anyio.fail_after(DEADLINE):
            await started.wait()
            assert (await tasks_get(client, task.task_id)).status == "working"
            assert (await tasks_get(client, task.task_id)).status == "working"  # held, then at the cap
        release.set()
        assert (await task.result()).structured_content == {"result": "done"}


async def test_a_young_task_held_read_answers_a_result_too_big_to_cache_at_its_close(
    temporal_server: DevServer, task_queue: str
) -> None:
    """A result past the closed-task cache is read from Temporal when the close ends the hold."""

    async def big() -> str:
        return "x" * BIG_RESULT_CHARS

    server, _, _ = await _server(temporal_server, task_queue, big, read_hold=LONG_HOLD)
    async with Client(server) as client:
        task = await call_tool_task(client, "big")
        with anyio.fail_after(DEADLINE):
            answer = await tasks_get(client, task.task_id)
        assert answer.status == "completed"
        assert answer.result["structuredContent"] == {"result": "x" * BIG_RESULT_CHARS}


async def test_a_held_read_answers_an_ask_the_moment_it_comes_once_the_task_was_answered(
    temporal_server: DevServer, task_queue: str
) -> None:
    """A task answered through this server is followed for every event: a held read ends at its
    next ask, not at the end of the hold (here longer than the test)."""
    release = anyio.Event()

    async def asks_twice(ctx: Context) -> str | InputRequiredResult:
        if ctx.request_state is None:
            return ask("first", state="first")
        await release.wait()
        return ask("second", state="second") if ctx.request_state == "first" else "done"

    server, _, reads = await _server(
        temporal_server, task_queue, asks_twice, read_hold=timedelta(0), reread_hold=LONG_HOLD, read_recheck=LONG_HOLD
    )
    async with Client(server) as client:
        task = await call_tool_task(client, "asks_twice")
        with anyio.fail_after(DEADLINE):
            while (parked := await tasks_get(client, task.task_id)).status != "input_required":
                await anyio.sleep(0.15)  # slower than a client waiting on it: never held
        (key,) = parked.input_requests
        await tasks_update(client, task.task_id, {key: accept("1")})
        assert (await tasks_get(client, task.task_id)).status == "working"
        answer = await _read_then_release(client, task.task_id, reads, release)
        assert answer.status == "input_required"
        assert [r["params"]["message"] for r in answer.input_requests.values()] == ["second"]
        await tasks_cancel(client, task.task_id)


async def test_a_held_read_answers_an_ask_at_its_next_recheck(temporal_server: DevServer, task_queue: str) -> None:
    started, release = anyio.Event(), anyio.Event()

    async def asks() -> str | InputRequiredResult:
        started.set()
        await release.wait()
        return ask("name")

    server, _, reads = await _server(
        temporal_server, task_queue, asks, read_hold=LONG_HOLD, read_recheck=RECHECK
    )
    async with Client(server) as client:
        _, answer = await _read_while_running(client, "asks", started, reads, release)
        assert answer.status == "input_required"
        (request,) = answer.input_requests.values()
        assert request["params"]["message"] == "name"


async def test_a_held_read_answers_progress_at_its_next_recheck(temporal_server: DevServer, task_queue: str) -> None:
    started, release, finish = anyio.Event(), anyio.Event(), anyio.Event()
    reports = reporting_once(release, finish, "halfway", started)

    server, _, reads = await _server(
        temporal_server, task_queue, reports, read_hold=LONG_HOLD, read_recheck=RECHECK
    )
    async with Client(server) as client:
        task, answer = await _read_while_running(client, "reports", started, reads, release)
        assert (answer.status, answer.status_message) == ("working", "halfway")
        finish.set()
        assert (await task.result()).structured_content == {"result": "done"}


async def test_read_hold_zero_answers_a_running_task_at_once(temporal_server: DevServer, task_queue: str) -> None:
    started, release = anyio.Event(), anyio.Event()
    gated = gated_tool(started, release)

    server, _, _ = await _server(temporal_server, task_queue, gated, read_hold=timedelta(0))
    async with Client(server) as client:
        task = await call_tool_task(client, "gated")
        with anyio.fail_after(DEADLINE):
            await started.wait()
            assert (await tasks_get(client, task.task_id)).status == "working"
        release.set()
        assert (await task.result()).structured_content == {"result": "done"}


async def test_a_read_after_tasks_cancel_is_not_held(temporal_server: DevServer, task_queue: str) -> None:
    """With no worker online the cancelled workflow stays open; the read must not wait for its close."""

    async def never_runs() -> str:
        return "ran"

    server, _, _ = await _server(temporal_server, task_queue, never_runs, read_hold=LONG_HOLD, worker=False)
    async with Client(server) as client:
        task = await call_tool_task(client, "never_runs")
        await tasks_cancel(client, task.task_id)
        with anyio.fail_after(DEADLINE / 2):  # the watch itself gives up after 30 s
            assert (await tasks_get(client, task.task_id)).status == "cancelled"


async def test_a_caller_past_its_held_reads_is_answered_at_once_while_another_callers_read_is_held(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    """Tasks are created on one server and read on another, which follows every event of a task it
    did not create from its first read. A held read advertises the short interval of held reads when
    its hold ends (at a re-read or its cap); one answered at once, past its caller's limit, the tool's own."""
    started, release = anyio.Event(), anyio.Event()
    gated = gated_tool(started, release)
    creator, reader = FastMCP("creates", auth=verifier()), FastMCP("reads", auth=verifier())
    creator.add_extension(make_extension())
    reader.add_extension(make_extension(worker=False, read_hold=timedelta(0), held_reads_per_caller=1))
    for server in (creator, reader):
        server.tool(task=A_MINUTE)(gated)
    answers: dict[str, list[ClientGetTaskResult]] = {"token-a": [], "token-b": []}

    async def read(client: Client, task_id: str, token: str) -> None:
        answers[token].append(await tasks_get(client, task_id))

    async with serving_http(creator) as creating, serving_http(reader) as reading, anyio.create_task_group() as reads:
        for token, polls in (("token-b", 1), ("token-a", 2)):
            async with http_client(creating, token) as client:
                task = await call_tool_task(client, "gated")
            client = await reads.start(_connected, reading, token)
            with anyio.fail_after(DEADLINE / 2):
                assert (await tasks_get(client, task.task_id)).status == "working"  # the first: at once
            for _ in range(polls):  # right after an answer: held
                reads.start_soon(read, client, task.task_id, token)
        await eventually(lambda: len(answers["token-a"]) + len(answers["token-b"]) == 3, what="the three reads")
        release.set()
        reads.cancel_scope.cancel()  # close the readers' clients

    held = int(HELD_POLL_INTERVAL / timedelta(milliseconds=1))
    assert all(answer.status == "working" for answers_of_one in answers.values() for answer in answers_of_one)
    assert sorted(answer.poll_interval_ms for answer in answers["token-a"]) == [held, 60_000]
    assert [answer.poll_interval_ms for answer in answers["token-b"]] == [held]


async def _connected(url: str, token: str, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
    """A client of `url` as `token`'s caller, open until the test's reads end."""
    async with http_client(url, token) as client:
        task_status.started(client)
        await anyio.sleep_forever()
