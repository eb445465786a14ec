"""A task tool's first questions answered on the `tools/call` itself: SEP-2663's MRTR → task.

A tool with `execution_policy(ask_before_task=True)`, called by a client that opted in to
tasks, starts its task as any task does, and the call waits for the task's first read as a
client's quick first `tasks/get` would (held up to `read_hold`). If that read shows the
tool asking, the call answers SEP-2322's `InputRequiredResult`: the task's own questions,
under the keys `tasks/update` takes, and a `requestState` naming the task. The task is
durable from that first round: its workflow waits for the answers, and its first leg's
body ran once. The client's next `tools/call`, carrying the answers and that state, has
them delivered exactly as `tasks/update` delivers them (validated, sized, one signal,
applied before the answer) and gets the task's `CreateTaskResult`; a retried round
delivers nothing twice. A tool that has not asked by then answers `CreateTaskResult` at
once, and asks later on `tasks/get`, as every task does.

The `requestState` is a name, not a credential: the task it names is looked up in the
caller's own scope, as a `tasks/*` request's is, so another caller's state finds nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types

from fastmcp_temporal._fastmcp_private import CreateTaskResult
from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.server._creation import start_task
from fastmcp_temporal.server._plan import CallPlan
from fastmcp_temporal.server._wire import created_from

if TYPE_CHECKING:
    from fastmcp.server.context import Context

    from fastmcp_temporal.server._handlers import TaskMethods

_STATE_PREFIX = "fastmcp-temporal/task/"


async def task_asking_first(
    backend: Backend, methods: TaskMethods, plan: CallPlan, arguments: dict[str, Any] | None, context: Context
) -> CreateTaskResult | mcp_types.InputRequiredResult:
    """The call's task, or its first questions while the task waits for them."""
    if (task_id := _task_of(context.request_state)) is not None:
        await methods.update(task_id, context.input_responses or {})
        return created_from(await methods.get(task_id))
    created, started = await start_task(backend, plan, arguments, context)
    created = methods.watch(created, started)
    first = await methods.get(created.task_id)
    if first.status != "input_required" or not first.input_requests:
        return created
    return mcp_types.InputRequiredResult(
        input_requests=first.input_requests, request_state=_STATE_PREFIX + created.task_id
    )


def _task_of(request_state: str | None) -> str | None:
    """The task a round's `requestState` names; None for any other state (a first round)."""
    if request_state is None or not request_state.startswith(_STATE_PREFIX):
        return None
    return request_state.removeprefix(_STATE_PREFIX)
