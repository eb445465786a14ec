"""In-task input (the guard pattern) over the MCP wire on a real Temporal server.

Proven against the reference behaviour (doc §2.5-2.7, §3.3, §7 items 5-15): a
tool that returns `InputRequiredResult` parks its task; `tasks/get` surfaces the
requests under server-minted keys that are unique over the task's life; `tasks/update`
answers them (validated per method, -32602 on a malformed answer, stale/unknown keys
and non-waiting tasks acknowledged and ignored); the next leg runs exactly once with
the tool's own keys on `ctx.input_responses` and answers/state reset per round;
concurrent and duplicate updates lose nothing and start one leg; cancel while parked
is final; an acknowledged answer survives having no worker online; a parked task holds
no activity in Temporal; a state-only ask ends as `isError`; right after the final ack
`tasks/get` never shows an answered key again; and a parked task expires after its TTL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import ToolTask, call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult, InputRequiredResult, Result
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from helpers.servers import server_with
from helpers.temporal import anonymous_workflow_id, task_handle, workflow_closed
from helpers.waits import DEADLINE, eventually, finished, status_becomes
from helpers.wire import accept, ask, question, tasks_update, text_of

pytestmark = pytest.mark.anyio

Tool = Callable[..., Awaitable[Any]]


# --- helpers -----------------------------------------------------------------


def value_of(answer: Any) -> str:
    assert isinstance(answer, ElicitResult)
    return answer.content["value"]


def pair_asker(legs: list[dict[str, Any] | None]) -> Tool:
    """Asks for "a" and "b" in one leg, then joins the answers; records each leg's answers."""

    async def pair(ctx: Context) -> str | InputRequiredResult:
        answers = ctx.input_responses
        legs.append(None if answers is None else {k: value_of(v) for k, v in answers.items()})
        if answers is None:
            return ask("a", "b")
        return f"{value_of(answers['a'])}+{value_of(answers['b'])}"

    return pair


def greeter(legs: list[int]) -> Tool:
    """A single-round guard tool; counts its legs."""

    async def greet(ctx: Context) -> str | InputRequiredResult:
        legs.append(len(legs) + 1)
        if ctx.input_responses is None:
            return ask("name", state="s1")
        answer = ctx.input_responses["name"]
        return f"hi {value_of(answer)} state={ctx.request_state} typed={type(answer).__name__}"

    return greet


def assert_ack(ack: Result) -> None:
    """An update ack carries no task state, only (at most) the completion marker.

    `_meta` (the SDK stamps the server's info on every modern result) is not task state.
    """
    dumped = ack.model_dump(by_alias=True, exclude_none=True)
    assert {k: v for k, v in dumped.items() if k != "_meta"} in ({}, {"resultType": "complete"})


async def parked(task: ToolTask, *, not_keys: set[str] = frozenset()) -> dict[str, Any]:
    """Wait until the task asks for input (with keys other than `not_keys`); its requests."""
    current = await status_becomes(
        task, "input_required", until=lambda c: not set(c.input_requests or {}) & not_keys
    )
    assert current.input_requests
    return current.input_requests


def by_tool_key(requests: dict[str, Any]) -> dict[str, str]:
    """Map each surfaced request's question (the tool's own key) to its surfaced key."""
    return {request["params"]["message"]: surfaced for surfaced, request in requests.items()}


# --- 1. single round through an elicitation handler ----------------------------


async def test_single_round_is_answered_once_by_the_elicitation_handler(make_extension) -> None:
    legs: list[int] = []
    asked: list[str] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> dict[str, str]:
        asked.append(message)
        return {"value": "Ada"}

    server = server_with(make_extension(), greeter(legs))
    async with Client(server, elicitation_handler=handler) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("greet")

    assert result.data == "hi Ada state=s1 typed=ElicitResult"
    assert asked == ["name"]
    assert legs == [1, 2]


# --- 2. several rounds: fresh keys, per-round answers and state ------------------


async def test_multi_round_asks_use_fresh_keys_and_reset_answers_and_state(make_extension) -> None:
    seen: list[tuple[list[str], str | None]] = []

    async def survey(ctx: Context) -> str | InputRequiredResult:
        answers = ctx.input_responses or {}
        seen.append((sorted(answers), ctx.request_state))
        if ctx.input_responses is None:
            return ask("first", state="round1")
        if "first" in answers:
            return ask("second", state=f"first={value_of(answers['first'])}")
        if "second" in answers:  # this round's ask carries no state
            return ask("third")
        return f"state={ctx.request_state} third={value_of(answers['third'])}"

    async with Client(server_with(make_extension(), survey)) as client:
        task = await call_tool_task(client, "survey")
        surfaced: list[str] = []
        for tool_key, value in [("first", "1"), ("second", "2"), ("third", "3")]:
            requests = await parked(task, not_keys=set(surfaced))
            (key,) = requests
            assert by_tool_key(requests) == {tool_key: key}
            assert key.startswith(f"{task.task_id}:")
            if surfaced:  # a stale key from the last round matches nothing
                assert_ack(await tasks_update(client, task.task_id, {surfaced[-1]: accept("stale")}))
                assert (await task.status()).input_requests == requests
            surfaced.append(key)
            assert_ack(await tasks_update(client, task.task_id, {key: accept(value)}))
        done = await status_becomes(task, "completed")

    assert len(set(surfaced)) == 3
    assert seen == [
        ([], None),
        (["first"], "round1"),
        (["second"], "first=1"),
        (["third"], None),  # state cleared: the parking leg carried none
    ]
    assert text_of(done) == "state=None third=3"


# --- 3. two requests in one leg, answered one at a time ---------------------------


async def test_partial_answers_retire_only_their_key(make_extension) -> None:
    legs: list[dict[str, Any] | None] = []
    async with Client(server_with(make_extension(), pair_asker(legs))) as client:
        task = await call_tool_task(client, "pair")
        requests = await parked(task)
        keys = by_tool_key(requests)
        assert set(keys) == {"a", "b"} and keys["a"] != keys["b"]

        assert_ack(await tasks_update(client, task.task_id, {keys["a"]: accept("x")}))
        still = await task.status()
        assert still.status == "input_required"
        assert still.input_requests == {keys["b"]: requests[keys["b"]]}
        assert len(legs) == 1

        assert_ack(await tasks_update(client, task.task_id, {keys["b"]: accept("y")}))
        done = await status_becomes(task, "completed")

    assert text_of(done) == "x+y"
    assert legs == [None, {"a": "x", "b": "y"}]


# --- 4. concurrent updates ----------------------------------------------------------


@pytest.mark.parametrize("split", [False, True], ids=["same-answer-twice", "different-keys"])
async def test_concurrent_updates_start_exactly_one_next_leg(make_extension, split: bool) -> None:
    legs: list[dict[str, Any] | None] = []
    async with Client(server_with(make_extension(), pair_asker(legs))) as client:
        task = await call_tool_task(client, "pair")
        keys = by_tool_key(await parked(task))
        full = {keys["a"]: accept("x"), keys["b"]: accept("y")}
        updates = [{k: v} for k, v in full.items()] if split else [full, full]
        acks: list[dict[str, Any]] = []

        async def send(responses: dict[str, Any]) -> None:
            acks.append(await tasks_update(client, task.task_id, responses))

        async with anyio.create_task_group() as group:
            for responses in updates:
                group.start_soon(send, responses)
        done = await status_becomes(task, "completed")

    for ack in acks:
        assert_ack(ack)
    assert text_of(done) == "x+y"
    assert legs == [None, {"a": "x", "b": "y"}]


# --- 5. malformed, unknown and misdirected updates -------------------------------


async def test_a_malformed_answer_is_rejected_and_stores_nothing(make_extension) -> None:
    legs: list[int] = []
    async with Client(server_with(make_extension(), greeter(legs))) as client:
        task = await call_tool_task(client, "greet")
        requests = await parked(task)
        (key,) = requests

        with pytest.raises(MCPError) as bad:
            await tasks_update(client, task.task_id, {key: {"action": "bogus"}})
        assert bad.value.error.code == -32602
        after = await task.status()
        assert after.status == "input_required"
        assert after.input_requests == requests

        assert_ack(await tasks_update(client, task.task_id, {f"{task.task_id}:nope": accept("?")}))
        assert (await task.status()).input_requests == requests

        assert_ack(await tasks_update(client, task.task_id, {key: accept("Bo")}))
        done = await status_becomes(task, "completed")
    assert text_of(done) == "hi Bo state=s1 typed=ElicitResult"
    assert legs == [1, 2]


async def test_updates_to_working_or_completed_tasks_are_acknowledged_and_ignored(make_extension) -> None:
    gate = asyncio.Event()
    runs: list[Any] = []

    async def slow(ctx: Context) -> str:
        runs.append(ctx.input_responses)
        await gate.wait()
        return "done"

    async with Client(server_with(make_extension(), slow)) as client:
        task = await call_tool_task(client, "slow")
        await eventually(lambda: bool(runs))
        assert (await task.status()).status == "working"
        assert_ack(await tasks_update(client, task.task_id, {f"{task.task_id}:0.x": accept("early")}))
        assert_ack(await tasks_update(client, task.task_id, {}))

        gate.set()
        done = await status_becomes(task, "completed")
        assert_ack(await tasks_update(client, task.task_id, {f"{task.task_id}:0.x": accept("late")}))
        after = await task.status()

    assert after.status == "completed" and after.result == done.result
    assert text_of(done) == "done"
    assert runs == [None]


# --- 6. cancel while parked ---------------------------------------------------------


async def test_cancel_while_parked_is_final(make_extension) -> None:
    legs: list[int] = []
    extension = make_extension()
    async with Client(server_with(extension, greeter(legs))) as client:
        task = await call_tool_task(client, "greet")
        (key,) = await parked(task)

        await task.cancel()
        assert (await task.status()).status == "cancelled"
        assert_ack(await tasks_update(client, task.task_id, {key: accept("late")}))
        await workflow_closed(extension, task.task_id)
        assert (await task.status()).status == "cancelled"
    assert legs == [1]


async def test_an_update_racing_a_cancel_ends_in_one_consistent_state(make_extension) -> None:
    """Either the answer's leg ran before the cancel reached the task, or it never runs."""
    legs: list[int] = []
    extension = make_extension()
    async with Client(server_with(extension, greeter(legs))) as client:
        for _ in range(5):
            task = await call_tool_task(client, "greet")
            (key,) = await parked(task)
            legs.clear()
            async with anyio.create_task_group() as race:
                race.start_soon(tasks_update, client, task.task_id, {key: accept("racer")})
                race.start_soon(task.cancel)
            await workflow_closed(extension, task.task_id)
            final = await task.status()
            assert final.status in ("cancelled", "completed")
            assert len(legs) <= 1  # at most the one next leg, never a second
            if final.status == "completed":
                assert legs == [1] and text_of(final).startswith("hi racer")
        # Once a cancel is acknowledged, a later answer never runs the tool.
        task = await call_tool_task(client, "greet")
        (key,) = await parked(task)
        legs.clear()
        await task.cancel()
        await tasks_update(client, task.task_id, {key: accept("late")})
        await workflow_closed(extension, task.task_id)
        assert legs == []


# --- 7. answers survive having no worker online -------------------------------------


async def test_an_answer_sent_with_no_worker_is_applied_when_one_returns(make_extension) -> None:
    legs: list[int] = []
    tool = greeter(legs)
    async with Client(server_with(make_extension(worker=False), tool)) as api:
        async with Client(server_with(make_extension(), tool)):
            task = await call_tool_task(api, "greet")
            (key,) = await parked(task)
        assert legs == [1]  # the worker is gone

        with anyio.fail_after(DEADLINE):
            assert_ack(await tasks_update(api, task.task_id, {key: accept("Cy")}))
        pending = await task.status()
        assert pending.status == "working"  # the acknowledged answer is not asked again
        assert legs == [1]

        async with Client(server_with(make_extension(), tool)):
            done = await status_becomes(task, "completed")
    assert text_of(done) == "hi Cy state=s1 typed=ElicitResult"
    assert legs == [1, 2]


# --- 8. a parked task holds no activity -----------------------------------------------


async def test_a_parked_task_has_no_pending_activity(make_extension) -> None:
    gate = asyncio.Event()

    async def gated(ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            await gate.wait()
            return ask("name")
        return "ok"

    extension = make_extension()
    async with Client(server_with(extension, gated)) as client:
        task = await call_tool_task(client, "gated")
        handle = task_handle(extension, task.task_id)

        async def pending_activities() -> int:
            return len((await handle.describe()).raw_description.pending_activities)

        with anyio.fail_after(DEADLINE):  # control: a running leg is a pending activity
            while await pending_activities() == 0:
                await anyio.sleep(0.05)
        gate.set()
        await parked(task)
        description = await handle.describe()
        assert description.status == WorkflowExecutionStatus.RUNNING
        assert list(description.raw_description.pending_activities) == []
        await task.cancel()


# --- 9. a state-only ask ---------------------------------------------------------------


async def test_a_state_only_ask_completes_with_is_error(make_extension) -> None:
    async def stateful() -> InputRequiredResult:
        return InputRequiredResult(result_type="input_required", request_state="x")

    async with Client(server_with(make_extension(), stateful)) as client:
        task = await call_tool_task(client, "stateful")
        done = await status_becomes(task, "completed")
    assert done.result is not None and done.result["isError"] is True
    assert "state-only" in text_of(done)


# --- 10. read-your-writes ----------------------------------------------------------------


async def test_a_get_right_after_the_final_ack_never_shows_an_answered_key(make_extension) -> None:
    async def rounds(ctx: Context) -> str | InputRequiredResult:
        done = int(ctx.request_state or 0)
        if done < 5:
            return ask(f"q{done}", state=str(done + 1))
        return "all answered"

    async with Client(server_with(make_extension(), rounds)) as client:
        task = await call_tool_task(client, "rounds")
        answered: set[str] = set()
        for _ in range(5):
            (key,) = await parked(task, not_keys=answered)
            assert_ack(await tasks_update(client, task.task_id, {key: accept("y")}))
            answered.add(key)
            right_after = await task.status()
            assert right_after.status in ("working", "input_required", "completed")
            assert not set(right_after.input_requests or {}) & answered
        done = await status_becomes(task, "completed")
    assert text_of(done) == "all answered"


# --- 11. waiting has a limit -----------------------------------------------------------


async def test_a_task_parked_longer_than_its_ttl_is_not_found(make_extension) -> None:
    legs: list[int] = []
    async with Client(server_with(make_extension(task_ttl=timedelta(seconds=2)), greeter(legs))) as client:
        task = await call_tool_task(client, "greet")
        assert task.create_result.ttl_ms == 2000
        assert (await status_becomes(task, "input_required")).ttl_ms == 2000
        with anyio.fail_after(DEADLINE):
            while True:
                try:
                    await task.status()
                except MCPError as exc:
                    error = exc.error
                    break
                await anyio.sleep(0.2)
    assert error.code == -32602
    assert error.message == f"Task {task.task_id} not found"
    assert legs == [1]


# --- 12. history stays bounded ------------------------------------------------------


async def test_many_rounds_continue_as_new_under_the_same_task_id(make_extension) -> None:
    rounds = 8
    extension = make_extension(history_events_limit=20)
    mcp = FastMCP("rounds")

    @mcp.tool(task=True)
    async def count(ctx: Context) -> str | InputRequiredResult:
        done = int(ctx.request_state or 0) + (ctx.input_responses is not None)
        if done < rounds:
            return ask(f"q{done}", state=str(done))
        return f"answered {done}"

    mcp.add_extension(extension)
    seen: list[str] = []
    async with Client(mcp) as client:
        task = await call_tool_task(client, "count")
        for _ in range(rounds):
            requests = await parked(task, not_keys=set(seen))
            seen.extend(requests)
            assert_ack(await tasks_update(client, task.task_id, {k: accept("x") for k in requests}))
        done = await status_becomes(task, "completed")
        handle = task_handle(extension, task.task_id)
        description = await handle.describe()
    assert text_of(done) == f"answered {rounds}"
    assert len(seen) == len(set(seen)) == rounds
    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    assert description.history_length < 40


# --- 13. history grows with what a task does, never quadratically ---------------------


def form(count: int, message_chars: int) -> dict[str, Any]:
    """`count` form questions, `q00`, `q01`, ..., each with a message of `message_chars`."""
    return {f"q{i:02d}": question(f"q{i:02d} " + "x" * message_chars) for i in range(count)}


def surveyor(legs: list[dict[str, str] | None], count: int, message_chars: int) -> Tool:
    """Asks `form(count, message_chars)` in one round, then counts the answers; records each leg's answers."""

    async def survey(ctx: Context) -> str | InputRequiredResult:
        answers = ctx.input_responses
        legs.append(None if answers is None else {k: value_of(v) for k, v in answers.items()})
        if answers is None:
            return InputRequiredResult(result_type="input_required", input_requests=form(count, message_chars))
        return f"answered {len(answers)}"

    return survey


async def history_bytes(extension: Any, task_id: str) -> tuple[int, int]:
    """The bytes of the task's history over all its runs, as Temporal counts them, and its runs."""
    temporal = extension.client
    wid = anonymous_workflow_id(task_id)
    runs = [run async for run in temporal.list_workflows(f"WorkflowId='{wid}'")]
    total = 0
    for run in runs:
        described = await temporal.get_workflow_handle(wid, run_id=run.run_id).describe()
        total += described.raw_description.workflow_execution_info.history_size_bytes
    return total, len(runs)


async def answer_one_by_one(client: Client, task: ToolTask, asked: set[str]) -> tuple[dict[str, Any], int]:
    """Answer a round's questions with one `tasks/update` each, checking what stays open after
    each; the round's requests and the bytes of what the client sent."""
    requests = await parked(task, not_keys=asked)
    asked |= set(requests)
    sent = 0
    remaining = dict(requests)
    for key in sorted(requests, key=lambda surfaced: requests[surfaced]["params"]["message"]):
        answer = {key: accept(requests[key]["params"]["message"][:3])}
        sent += len(json.dumps(answer))
        assert_ack(await tasks_update(client, task.task_id, answer))
        del remaining[key]
        if remaining:
            assert (await task.status()).input_requests == remaining
    return requests, sent


@pytest.mark.slow
async def test_sixty_questions_answered_one_by_one_complete_with_linear_history(make_extension) -> None:
    """60 questions of about 2 MB in all, no payload store, answered one by one: a partial
    answer that rewrote every open question into the memo would pass Temporal's 50 MB
    history limit at the 36th answer. History stays within twice what the
    task received (the asks are kept by the leg's outcome and by the memo, once each),
    plus at most 2 KiB of events per update."""
    legs: list[dict[str, str] | None] = []
    survey = surveyor(legs, 60, 33_000)

    extension = make_extension()
    async with Client(server_with(extension, survey)) as client:
        task = await call_tool_task(client, "survey")
        requests, sent = await answer_one_by_one(client, task, set())
        done = await status_becomes(task, "completed")
        total, _ = await history_bytes(extension, task.task_id)
    received = len(json.dumps(requests)) + sent
    assert received > 1_900_000
    assert text_of(done) == "answered 60"
    assert legs == [None, {f"q{i:02d}": f"q{i:02d}" for i in range(60)}]
    assert total <= 2 * received + 60 * 2048, (total, received)  # measured: 4.05 MB for 2.0 MB


@pytest.mark.slow
async def test_two_hundred_partial_updates_of_a_twenty_question_form_stay_linear(make_extension) -> None:
    """Ten rounds of a 20-question form answered one question per update, with a history
    event limit that makes the task continue as new inside rounds: every leg gets its
    round's answers once, `tasks/get` shows exactly the open questions throughout, and
    the history over all runs stays within 4x what the task received (twice, plus the
    open asks each continue-as-new inside a round carries, in its two events)."""
    rounds = 10
    legs: list[dict[str, str] | None] = []

    async def forms(ctx: Context) -> str | InputRequiredResult:
        answers = ctx.input_responses
        legs.append(None if answers is None else {k: value_of(v) for k, v in answers.items()})
        done = int(ctx.request_state or 0) + (answers is not None)
        if done < rounds:
            return InputRequiredResult(
                result_type="input_required", input_requests=form(20, 10_000), request_state=str(done)
            )
        return f"rounds {done}"

    extension = make_extension(history_events_limit=100)
    asked: set[str] = set()
    received = 0
    async with Client(server_with(extension, forms)) as client:
        task = await call_tool_task(client, "forms")
        for _ in range(rounds):
            requests, sent = await answer_one_by_one(client, task, asked)
            received += len(json.dumps(requests)) + sent
        done = await status_becomes(task, "completed")
        total, runs = await history_bytes(extension, task.task_id)
        continued_in_rounds = await runs_started_in_a_round(extension, task.task_id)
    assert text_of(done) == f"rounds {rounds}"
    assert legs == [None] + [{f"q{i:02d}": f"q{i:02d}" for i in range(20)}] * rounds
    assert total <= 4 * received, (total, received)  # measured: 6.6 MB for 2.1 MB, 11 runs
    assert continued_in_rounds >= rounds // 2  # the event limit is reached inside rounds
    assert runs > continued_in_rounds


async def runs_started_in_a_round(extension: Any, task_id: str) -> int:
    """How many of the task's runs started with a round of input still open (continued as new inside it)."""
    temporal = extension.client
    wid = anonymous_workflow_id(task_id)
    count = 0
    async for run in temporal.list_workflows(f"WorkflowId='{wid}'"):
        history = await temporal.get_workflow_handle(wid, run_id=run.run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        (task_input,) = await temporal.data_converter.decode(started.input.payloads[:1])  # not the arguments
        count += bool(task_input.get("open_round"))
    return count


async def test_an_ask_over_the_round_limit_ends_the_task_at_once_and_parks_nothing(make_extension) -> None:
    legs: list[int] = []

    async def census(ctx: Context) -> str | InputRequiredResult:
        legs.append(len(legs) + 1)
        return InputRequiredResult(result_type="input_required", input_requests=form(101, 10))

    extension = make_extension()
    async with Client(server_with(extension, census)) as client:
        task = await call_tool_task(client, "census")
        done = await finished(task)
        await workflow_closed(extension, task.task_id)
        handle = task_handle(extension, task.task_id)
        history = await handle.fetch_history()
    assert done.status == "completed" and done.result is not None and done.result["isError"] is True
    assert "101 input requests" in text_of(done) and "at most 100" in text_of(done)
    assert legs == [1]
    modified = EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
    assert not [event for event in history.events if event.event_type == modified]  # nothing was parked


async def test_answers_sent_while_the_task_continues_as_new_inside_a_round_are_all_applied(
    make_extension,
) -> None:
    """One-key updates past a 20-event history, each sent once the last shows applied (by the
    new run's memo): answers Temporal delivers to a new run before it starts are applied to the
    round it takes over, none is lost."""
    legs: list[dict[str, str] | None] = []
    survey = surveyor(legs, 12, 10)

    extension = make_extension(history_events_limit=20)
    async with Client(server_with(extension, survey)) as client:
        task = await call_tool_task(client, "survey")
        requests = await parked(task)
        for key, request in requests.items():  # each as soon as the last one shows applied
            answer = {key: accept(request["params"]["message"][:3])}
            assert_ack(await tasks_update(client, task.task_id, answer))
        done = await status_becomes(task, "completed")
        _, runs = await history_bytes(extension, task.task_id)
    assert text_of(done) == "answered 12"
    assert legs == [None, {f"q{i:02d}": f"q{i:02d}" for i in range(12)}]
    assert runs > 1
