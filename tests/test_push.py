"""A 2026-07-28 client that subscribes to its tasks is told their statuses, with no polling.

Proves, on a real Temporal server, with the Python `mcp` client's `subscriptions/listen`
over the in-memory transport and over streamable HTTP: a client that never sends
`tasks/get` is acknowledged the task ids it asked for, gets the task's status at once, a
new ask, a running leg's new progress message, and the result as soon as the tool returns, in `notifications/tasks` stamped with
its subscription id, and the stream then ends gracefully; a caller subscribing to another
caller's task id, or a client that does not declare the tasks extension, is acknowledged
none and told nothing of it. The TypeScript SDK's client
(`push_client.mjs`, npm packages installed once per session; skipped without node and npm)
listens the same way, and every status it is pushed parses with the official tasks
extension's schema (`@modelcontextprotocol/ext-tasks`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import call_tool_task
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    INTERNAL_ERROR,
    InputRequiredResult,
    NotificationParams,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import ConfigDict

from fastmcp_temporal import TemporalTasksExtension
from helpers.npm import npm_installed, placed
from helpers.servers import (
    NoTasksClient,
    gated_tool,
    http_client,
    reporting_once,
    server_with,
    serving_http,
    verifier,
)
from helpers.waits import DEADLINE, eventually
from helpers.wire import accept, ask, tasks_update

pytestmark = pytest.mark.anyio

LISTENER = Path(__file__).with_name("push_client.mjs")
TYPESCRIPT_PACKAGES = ("@modelcontextprotocol/client@2.4.0", "@modelcontextprotocol/ext-tasks@0.2.2")


class StatusParams(NotificationParams):
    model_config = ConfigDict(extra="allow")


class TaskStatuses(ClientExtension):
    """Collects the `notifications/tasks` a client receives, and its listen acknowledgements."""

    identifier = "com.example/task-statuses"

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.acknowledged: list[SubscriptionFilter] = []

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/tasks", params_type=StatusParams, handler=self._status)]

    async def _status(self, params: StatusParams) -> None:
        self.statuses.append(params.model_dump(by_alias=True, exclude_none=True))

    async def message(self, message: Any) -> None:
        if isinstance(message, SubscriptionsAcknowledgedNotification):
            self.acknowledged.append(message.params.notifications)

    def of(self, status: str) -> list[dict[str, Any]]:
        return [pushed for pushed in self.statuses if pushed["status"] == status]


def listening(
    statuses: TaskStatuses, target: FastMCP | str, token: str | None = None, kind: type[Client] = Client
) -> Client:
    """A client (of `kind`) that collects into `statuses`, of `target` in memory or at its streamable-HTTP url."""
    connection = target if isinstance(target, FastMCP) else StreamableHttpTransport(target, auth=token)
    return kind(connection, extensions=[statuses], message_handler=statuses.message)


async def listen(client: Client, task_ids: list[str]) -> SubscriptionsListenResult:
    """One `subscriptions/listen` for `task_ids`; returns when the server ends the stream."""
    notifications = SubscriptionFilter.model_validate({"taskIds": task_ids})
    request = SubscriptionsListenRequest(params=SubscriptionsListenRequestParams(notifications=notifications))
    return await client.session.send_request(request, SubscriptionsListenResult)


async def asks_once(ctx: Context) -> str | InputRequiredResult:
    """Asks "name", then returns a greeting."""
    if ctx.input_responses is None:
        return ask("name", state="asked")
    return f"hello {ctx.input_responses['name'].content['value']}"


@pytest.fixture(params=["memory", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_a_listening_client_is_pushed_its_tasks_ask_and_result_without_polling(
    make_extension: Callable[..., TemporalTasksExtension], transport: str
) -> None:
    started, release = anyio.Event(), anyio.Event()
    server = server_with(make_extension(), gated_tool(started, release), asks_once)
    statuses = TaskStatuses()
    async with _client(server, transport, statuses) as client, anyio.create_task_group() as tasks:
        gated = await call_tool_task(client, "gated")
        asking = await call_tool_task(client, "asks_once")
        ended: list[SubscriptionsListenResult] = []

        async def follow() -> None:
            ended.append(await listen(client, [gated.task_id, asking.task_id]))

        tasks.start_soon(follow)
        with anyio.fail_after(DEADLINE):
            await started.wait()
        await eventually(lambda: bool(statuses.of("input_required")), what="the ask, pushed")
        (asked,) = statuses.of("input_required")
        assert asked["taskId"] == asking.task_id
        (key,) = asked["inputRequests"]
        await tasks_update(client, asking.task_id, {key: accept("Ada")})
        release.set()
        await eventually(lambda: bool(ended), what="the stream's graceful end")

    (acknowledged,) = statuses.acknowledged
    assert set((acknowledged.model_extra or {})["taskIds"]) == {gated.task_id, asking.task_id}
    completed = {pushed["taskId"]: pushed for pushed in statuses.of("completed")}
    assert set(completed) == {gated.task_id, asking.task_id}
    assert completed[gated.task_id]["result"]["content"][0]["text"] == "done"
    assert completed[asking.task_id]["result"]["content"][0]["text"] == "hello Ada"
    subscription = {pushed["_meta"][SUBSCRIPTION_ID_META_KEY] for pushed in statuses.statuses}
    assert subscription == {ended[0].meta[SUBSCRIPTION_ID_META_KEY]}
    assert all("resultType" not in pushed for pushed in statuses.statuses)


async def test_a_listening_client_is_pushed_a_running_legs_new_progress_message(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    # progress adds no history event: the stream hears of it only by re-reading the task
    listened, release = anyio.Event(), anyio.Event()
    reports = reporting_once(listened, release, "halfway")

    server = server_with(make_extension(), reports)
    statuses = TaskStatuses()
    async with listening(statuses, server) as client, anyio.create_task_group() as tasks:
        task = await call_tool_task(client, "reports")
        tasks.start_soon(listen, client, [task.task_id])
        await eventually(lambda: bool(statuses.of("working")), what="the task's first status, pushed")
        listened.set()
        await eventually(
            lambda: any(pushed.get("statusMessage") == "halfway" for pushed in statuses.statuses),
            what="the leg's new message, pushed",
        )
        assert not statuses.of("completed")
        release.set()
        await eventually(lambda: bool(statuses.of("completed")), what="the result, pushed")


async def test_another_caller_or_a_client_without_the_extension_is_told_nothing_of_a_task(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    started, release = anyio.Event(), anyio.Event()
    server = server_with(make_extension(), gated_tool(started, release), auth=verifier())
    other, undeclared = TaskStatuses(), TaskStatuses()
    async with serving_http(server) as url:
        async with http_client(url, "token-a") as owner:
            task = await call_tool_task(owner, "gated")
            listeners = [listening(other, url, "token-b"), listening(undeclared, url, "token-a", NoTasksClient)]
            for listener in listeners:
                async with listener:
                    with anyio.fail_after(DEADLINE):
                        await listen(listener, [task.task_id])  # the stream ends: nothing to follow
            release.set()
            await task.wait(timeout=DEADLINE)

    for statuses in (other, undeclared):
        (acknowledged,) = statuses.acknowledged
        assert (acknowledged.model_extra or {})["taskIds"] == []
        assert statuses.statuses == []


async def test_a_caller_past_its_listen_streams_is_refused_while_another_callers_listen_is_served(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    started, release = anyio.Event(), anyio.Event()
    server = server_with(make_extension(listen_streams_per_caller=2), gated_tool(started, release), auth=verifier())
    greedy, other = TaskStatuses(), TaskStatuses()
    async with (
        serving_http(server) as url,
        listening(greedy, url, "token-a") as greedy_client,
        listening(other, url, "token-b") as other_client,
        anyio.create_task_group() as streams,
    ):
        greedy_task = await call_tool_task(greedy_client, "gated")
        other_task = await call_tool_task(other_client, "gated")
        for _ in range(2):
            streams.start_soon(listen, greedy_client, [greedy_task.task_id])
        await eventually(lambda: len(greedy.acknowledged) == 2, what="the greedy caller's two streams")

        with pytest.raises(MCPError) as refused, anyio.fail_after(DEADLINE):
            await listen(greedy_client, [greedy_task.task_id])
        streams.start_soon(listen, other_client, [other_task.task_id])
        await eventually(lambda: bool(other.acknowledged), what="the other caller's stream")
        release.set()

    assert refused.value.error.code == INTERNAL_ERROR
    assert "FASTMCP_TEMPORAL_LISTEN_STREAMS_PER_CALLER" in refused.value.error.message
    assert (other.acknowledged[0].model_extra or {})["taskIds"] == [other_task.task_id]


@asynccontextmanager
async def _client(server: FastMCP, transport: str, statuses: TaskStatuses) -> AsyncIterator[Client]:
    """The listening client, in memory or over streamable HTTP (served until it closes)."""
    if transport == "memory":
        async with listening(statuses, server) as client:
            yield client
        return
    async with serving_http(server) as url, listening(statuses, url) as client:
        yield client


@pytest.fixture(scope="session")
def typescript_listener(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """`node push_client.mjs` with the TypeScript SDK's client and the tasks extension from npm, once per session."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("the TypeScript client test needs node on PATH")
    folder = npm_installed(tmp_path_factory, "typescript-listener", TYPESCRIPT_PACKAGES, module=True)
    return [node, str(placed(folder, LISTENER))]


async def test_the_typescript_clients_listen_gets_statuses_the_official_tasks_schema_reads(
    make_extension: Callable[..., TemporalTasksExtension], typescript_listener: list[str], tmp_path: Path
) -> None:
    started, release = anyio.Event(), anyio.Event()
    server = server_with(make_extension(), gated_tool(started, release))
    report, errors = tmp_path / "report.json", tmp_path / "stderr.txt"
    async with serving_http(server) as url, http_client(url) as creator:
        task = await call_tool_task(creator, "gated")
        command = [*typescript_listener, url, str(report), json.dumps([task.task_id])]
        with errors.open("w") as stderr:
            listener = await anyio.open_process(command, stderr=stderr)
            async with listener:
                with anyio.fail_after(DEADLINE):
                    await started.wait()
                    await eventually(report.with_suffix(".subscribed").exists, what="the listener's subscription")
                release.set()
                with anyio.fail_after(DEADLINE):
                    assert await listener.wait() == 0, errors.read_text()

    seen = json.loads(report.read_text())
    assert seen["statuses"] and all(status["parses"] for status in seen["statuses"]), seen["statuses"]
    first, last = seen["statuses"][0]["params"], seen["statuses"][-1]["params"]
    assert (first["taskId"], first["status"]) == (task.task_id, "working")
    assert (last["taskId"], last["status"]) == (task.task_id, "completed")
    assert last["result"]["content"][0]["text"] == "done"
    assert seen["closed"] == "graceful"
