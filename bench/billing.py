"""How many Temporal Cloud Actions a task's history bills, by the rules Temporal publishes.

https://docs.temporal.io/cloud/actions: a workflow start (continue-as-new included), each
activity attempt, each timer, signal, search-attribute upsert, and the markers of one
workflow task (side effects, local activities, patches) counted together as one. Memo
upserts are counted too, to be safe: the page does not name them. Workflow tasks,
completions, cancel requests and reads such as `describe()` are free. Recorded heartbeats
are billed but leave no event: add the worker's `RecordActivityTaskHeartbeat` calls.

The benchmarks and the tests that hold the README's figures count with this one function.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

BILLABLE_EVENTS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
        EventType.EVENT_TYPE_TIMER_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
        EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    }
)
"""Events billed one Action each; markers are counted per workflow task instead."""


def billable_actions(events: Iterable[HistoryEvent]) -> int:
    """The Actions a history bills, heartbeats aside.

    Args:
        events: the history's events, in order (one run of a workflow).
    """
    actions, marker_tasks = 0, set()
    for event in events:
        if event.event_type in BILLABLE_EVENTS:
            actions += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:  # its retries
            actions += max(event.activity_task_started_event_attributes.attempt - 1, 0)
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker_tasks.add(event.marker_recorded_event_attributes.workflow_task_completed_event_id)
    return actions + len(marker_tasks)
