"""Every memo a release wrote reads back through `TaskMemo`, and the writers' builders round-trip.

Unit tests, no dev server: the memos come from the recorded histories in `tests/histories/`
(as `describe()` shows them after the upserts up to a point), or from the builders themselves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.converter import default

from fastmcp_temporal.server._facts import TaskFacts
from fastmcp_temporal.server._watch import Timing
from fastmcp_temporal.workflows.models import (
    DEFAULT_POLL_INTERVAL_MS,
    LegPolicy,
    TaskMemo,
    answered_bytes_memo,
    answered_marks_memo,
    asks_memo,
    closed_round_memo,
    created_memo,
    is_round_field,
    leg_of,
    surfaced_key,
)

HISTORIES = Path(__file__).parent / "histories"


def _memo_after(release: str, name: str, upserts: int) -> dict[str, Any]:
    """The memo of a recorded run after its first `upserts` memo upserts (a null value removes a field)."""
    path = HISTORIES / release / f"{name}.json"
    events = WorkflowHistory.from_json("recorded", json.loads(path.read_text())).events
    converter = default().payload_converter
    started = events[0].workflow_execution_started_event_attributes.memo.fields
    memo = {key: converter.from_payload(value) for key, value in started.items()}
    modified = [event for event in events if event.HasField("workflow_properties_modified_event_attributes")]
    for event in modified[:upserts]:
        for key, value in event.workflow_properties_modified_event_attributes.upserted_memo.fields.items():
            decoded = converter.from_payload(value)
            if decoded is None:
                memo.pop(key, None)
            else:
                memo[key] = decoded
    return memo


def test_a_parked_memo_as_0_2_0_wrote_it() -> None:
    memo = TaskMemo.parse(_memo_after("0.2.0", "one_round", upserts=1))
    assert (memo.kind, memo.tool, memo.scope) == ("task", "greet", "anon")
    assert (memo.ttl_ms, memo.poll_interval_ms, memo.input_bytes) == (3000, 5000, 716)
    assert memo.created_at == "2026-12-01T20:38:00.672260+00:00"
    (key,) = memo.open_requests()
    assert memo.open_requests()[key]["params"]["message"] == "name"
    assert leg_of(key) == "1"
    assert memo.answered == frozenset()
    assert memo.answered_bytes_in_round([key]) == 0  # 0.2.0 wrote no answeredBytes


def test_a_memo_as_0_3_0_dev_writes_it_at_creation() -> None:
    raw = _memo_after("0.3.0-dev", "completed", upserts=0)
    assert raw == created_memo(
        kind="task",
        created_at="2026-12-02T12:20:26.519071+00:00",
        ttl_ms=3000,
        poll_interval_ms=5000,
        scope="anon",
        tool="square",
        input_bytes=793,
    )
    memo = TaskMemo.parse(raw)
    assert (memo.kind, memo.tool, memo.ttl_ms, memo.input_bytes) == ("task", "square", 3000, 793)
    assert memo.open_requests() == {}


def test_a_partially_answered_round() -> None:
    raw = _memo_after("0.3.0-dev", "five_answers_one_by_one-run1", upserts=3)
    memo = TaskMemo.parse(raw)
    assert len(memo.input_requests) == 5
    assert len(memo.answered) == 2
    still_open = memo.open_requests()
    assert len(still_open) == 3 and not memo.answered & set(still_open)
    assert TaskMemo.parse(raw).open_requests() == still_open
    assert memo.answered_bytes == (1, 218)
    assert memo.answered_bytes_in_round(still_open) == 218
    assert memo.answered_bytes_in_round([surfaced_key("t", 2, 1)]) == 0  # another round's count
    assert memo.answered_bytes_in_round([]) == 0


def test_a_round_the_workflow_closed_has_nothing_open() -> None:
    raw = _memo_after("0.3.0-dev", "five_answers_one_by_one-run2", upserts=3)
    assert TaskMemo.parse(raw).open_requests() == {}
    # where a server keeps a removed field as null, the mark still counts as present
    assert TaskMemo.parse({"inputRequests": None, "answered:k": None}).open_requests() == {}


def test_a_memo_missing_optional_fields() -> None:
    memo = TaskMemo.parse({"ttlMs": 0, "pollIntervalMs": 0})
    assert memo == TaskMemo()
    assert (memo.created_at, memo.ttl_ms, memo.scope, memo.tool, memo.kind) == (None, None, None, None, None)
    assert (memo.poll_interval_ms, memo.input_bytes) == (DEFAULT_POLL_INTERVAL_MS, 0)
    assert memo.open_requests() == {} and memo.answered_bytes == (None, 0)


def test_the_workflow_upserts_read_back() -> None:
    first, second = surfaced_key("task", 1, 0xA), surfaced_key("task", 1, 0xB)
    assert first == "task:1.00000000000a"
    raw = {**created_memo(kind="call", created_at="now", ttl_ms=9, poll_interval_ms=7, scope="s", tool="t",
                          input_bytes=3), **asks_memo({first: {"method": "roots/list"}, second: {}})}
    raw |= answered_marks_memo([first]) | answered_bytes_memo(1, 42)
    memo = TaskMemo.parse(raw)
    assert memo.open_requests() == {second: {}}
    assert memo.answered_bytes_in_round([second]) == 42
    assert closed_round_memo([first]) == {"inputRequests": None, f"answered:{first}": None}
    assert {name for name in raw if is_round_field(name)} == {"inputRequests", f"answered:{first}"}


def test_a_tasks_facts_read_back_from_the_memo_they_write() -> None:
    """A read of the memo times the task as the server did when it created it, a 0 poll interval too."""
    policy = LegPolicy(start_to_close_seconds=1.0, heartbeat_seconds=1.0)
    for poll_interval_ms in (7, 0):
        facts = TaskFacts(kind="call", task_id="id", scope="s", tool="t", version="2", created_at="now",
                          ttl_ms=9, poll_interval_ms=poll_interval_ms, policy=policy)
        memo = TaskMemo.parse(facts.memo(input_bytes=3))
        assert (memo.kind, memo.scope, memo.tool, memo.input_bytes) == ("call", "s", "t", 3)
        assert Timing(memo.created_at or "", memo.ttl_ms or 0, memo.poll_interval_ms) == facts.timing
