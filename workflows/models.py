"""Plain data exchanged between the MCP server, the task workflow and the tool activity.

Pure dataclasses, constants and functions with no FastMCP import, so the workflow imports
them deterministically and every field travels through Temporal's default JSON
payload converter unchanged. The task's memo is one of them: every field's name, what
writes it and how every release's memo reads back (`TaskMemo`) live here alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

WORKFLOW_NAME = "McpTaskWorkflow"
RUN_TOOL_LEG = "run_tool_leg"
SUBMIT_INPUT_SIGNAL = "submit_input"
LEG_OUTCOME_SIGNAL = "leg_outcome"
PROGRESSED_SIGNAL = "progressed"
"""A leg's message changed after standing still: readers should re-read the task (`worker._progress`)."""
# The `data` key of a durable call's error that refuses an ask its caller cannot answer: the ask,
# which the waiting server hands FastMCP to refuse with the inline call's own error.
REFUSED_ASK = "refusedAsk"
STORE_WAITING_DETAIL = "payloadStore"
"""The key of a leg's heartbeat details that says why it waits for its payload store, while it does."""

# Search attributes tasks are indexed by, by name and type (a dev server we start is
# launched with them; `connection._search_attributes` registers those a server lacks).
# The keywords list tasks by tool, status and scope; `McpTaskChangedAt` is when a task's
# answer last changed, set in the status's own upsert, so one visibility query finds what changed.
TOOL_SEARCH_ATTRIBUTE = "McpTool"
STATUS_SEARCH_ATTRIBUTE = "McpTaskStatus"
SCOPE_SEARCH_ATTRIBUTE = "McpScope"
CHANGED_AT_SEARCH_ATTRIBUTE = "McpTaskChangedAt"
KEYWORD_SEARCH_ATTRIBUTES: dict[str, str] = {
    name: "Keyword" for name in (TOOL_SEARCH_ATTRIBUTE, STATUS_SEARCH_ATTRIBUTE, SCOPE_SEARCH_ATTRIBUTE)
}
SEARCH_ATTRIBUTES: dict[str, str] = {**KEYWORD_SEARCH_ATTRIBUTES, CHANGED_AT_SEARCH_ATTRIBUTE: "Datetime"}

TaskState = Literal["working", "input_required", "completed", "failed", "cancelled"]

# The memo of a task's workflow, the one contract between the server that creates and reads
# the task, the workflow that keeps it, and the operators' CLI and worker metrics that read it.
# The server writes the first seven at creation (`created_memo`); the workflow adds a round's
# asks under `inputRequests`, written once per round, and one small field per answered key
# (`answered:<surfaced key>`), so a partial answer writes what it answers, not every question
# still open, and the converted bytes of the round's answers so far (`answeredBytes`).
KIND_MEMO = "kind"
CREATED_AT_MEMO = "createdAt"
TTL_MEMO = "ttlMs"
POLL_INTERVAL_MEMO = "pollIntervalMs"
SCOPE_MEMO = "scope"
TOOL_MEMO = "tool"
INPUT_BYTES_MEMO = "inputBytes"
INPUT_REQUESTS_MEMO = "inputRequests"
ANSWERED_MEMO_PREFIX = "answered:"
ANSWERED_BYTES_MEMO = "answeredBytes"

DEFAULT_POLL_INTERVAL_MS = 5000
"""The poll interval a task answers with when its memo (or its tool) names none."""


def surfaced_key(task_id: str, leg: int, nonce: int) -> str:
    """The key a caller answers leg `leg`'s request by: unique to the task, the leg and the ask."""
    return f"{task_id}:{leg}.{nonce:012x}"


def leg_of(key: str) -> str:
    """The leg a surfaced key was asked by, as the key spells it (`str(leg)`)."""
    return key.rpartition(":")[2].partition(".")[0]


def answered_memo_key(key: str) -> str:
    """The memo field saying the round's request `key` (a surfaced key) has its answer."""
    return ANSWERED_MEMO_PREFIX + key


def is_round_field(name: str) -> bool:
    """Whether a memo field belongs to the open round's asks (the asks, or an answer's mark)."""
    return name == INPUT_REQUESTS_MEMO or _is_mark(name)


def _is_mark(name: str) -> bool:
    return name.startswith(ANSWERED_MEMO_PREFIX)


def created_memo(
    *, kind: str, created_at: str, ttl_ms: int, poll_interval_ms: int, scope: str, tool: str, input_bytes: int
) -> dict[str, Any]:
    """The memo a task's workflow starts with: what reads answer with no worker online."""
    return {
        KIND_MEMO: kind,
        CREATED_AT_MEMO: created_at,
        TTL_MEMO: ttl_ms,
        POLL_INTERVAL_MEMO: poll_interval_ms,
        SCOPE_MEMO: scope,
        TOOL_MEMO: tool,
        INPUT_BYTES_MEMO: input_bytes,
    }


def asks_memo(requests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The memo update that publishes a round's open asks, by surfaced key."""
    return {INPUT_REQUESTS_MEMO: requests}


def answered_marks_memo(keys: Iterable[str]) -> dict[str, Any]:
    """The memo update that marks the round's requests `keys` answered (asks written once)."""
    return {answered_memo_key(key): True for key in keys}


def answered_bytes_memo(leg: int, size: int) -> dict[str, Any]:
    """The memo update recording that leg `leg`'s round has `size` converted bytes of answers
    applied, for `tasks/update`'s size check of the next leg."""
    return {ANSWERED_BYTES_MEMO: [leg, size]}


def closed_round_memo(answered_keys: Iterable[str]) -> dict[str, Any]:
    """The memo update that ends a round: no open asks, nor the marks of its answers."""
    memo: dict[str, Any] = {INPUT_REQUESTS_MEMO: None}
    memo.update((answered_memo_key(key), None) for key in answered_keys)
    return memo


@dataclass(frozen=True)
class TaskMemo:
    """A task's memo as read back, whichever release wrote it.

    Every release so far writes the creation fields; 0.2.0 rewrote a round's open asks at each
    answer (no marks, and no `answeredBytes` before its patch), later ones mark each answer.
    A field no release wrote reads as None (or 0), and the reader supplies its own fallback.
    """

    kind: str | None = None
    created_at: str | None = None
    ttl_ms: int | None = None
    """None when the memo holds none (or 0)."""
    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS
    scope: str | None = None
    tool: str | None = None
    input_bytes: int = 0
    """The encoded bytes of the task's input (the call's arguments) when it was created."""
    input_requests: dict[str, Any] = field(default_factory=dict)
    """The round's asks as last written, by surfaced key, answered or not."""
    answered: frozenset[str] = frozenset()
    """The surfaced keys marked answered."""
    answered_bytes: tuple[int | None, int] = (None, 0)
    """The leg whose round has answers applied, and their converted bytes."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> TaskMemo:
        """The memo decoded from a workflow's (`description.memo()`)."""
        leg, size = raw.get(ANSWERED_BYTES_MEMO) or (None, 0)
        return cls(
            kind=raw.get(KIND_MEMO),
            created_at=raw.get(CREATED_AT_MEMO) or None,
            ttl_ms=int(raw[TTL_MEMO]) if raw.get(TTL_MEMO) else None,
            poll_interval_ms=int(raw.get(POLL_INTERVAL_MEMO) or DEFAULT_POLL_INTERVAL_MS),
            scope=raw.get(SCOPE_MEMO),
            tool=raw.get(TOOL_MEMO),
            input_bytes=int(raw.get(INPUT_BYTES_MEMO) or 0),
            input_requests=dict(raw.get(INPUT_REQUESTS_MEMO) or {}),
            answered=frozenset(name.removeprefix(ANSWERED_MEMO_PREFIX) for name in raw if _is_mark(name)),
            answered_bytes=(leg, int(size)),
        )

    def open_requests(self) -> dict[str, Any]:
        """The input requests still unanswered, by surfaced key."""
        return {key: request for key, request in self.input_requests.items() if key not in self.answered}

    def answered_bytes_in_round(self, parked_keys: Iterable[str]) -> int:
        """The converted bytes of the answers already applied in the round whose open keys are
        `parked_keys`; 0 when the memo counts another round's, or none."""
        leg, size = self.answered_bytes
        return size if {leg_of(key) for key in parked_keys} == {str(leg)} else 0


@dataclass
class LegPolicy:
    """How each leg's activity is scheduled, fixed when the task is created."""

    start_to_close_seconds: float
    heartbeat_seconds: float
    maximum_attempts: int = 0
    initial_retry_seconds: float = 0.5
    local: bool = False
    """Run each leg as a local activity, inside the workflow task (`execution_policy(leg="local")`)."""


@dataclass
class ToolCall:
    """What the caller asked for, captured once at `tools/call` and given to every leg."""

    task_id: str
    component_key: str
    arguments: dict[str, Any]
    snapshot: str
    client_extensions: list[str] = field(default_factory=list)
    synchronous: bool = False
    """A plain `tools/call` waiting for its answer: an ask ends the run and goes back to the caller."""
    outcome_limit: int | None = None
    """The most bytes a leg's outcome may encode to; a larger one ends the task with an error."""
    outcome_stored: bool = False
    """Whether outcomes over the threshold go to a payload store (for the error's advice)."""
    relay_logs: bool = False
    """A durable synchronous call: the body's `ctx.log` messages are relayed to the waiting caller."""
    relay_progress: bool = False
    """The waiting caller sent a `progressToken`: the body's `ctx.report_progress` is relayed to it."""
    relay_asks: bool = False
    """The waiting caller's connection carries server-to-client requests: an ask parks the workflow,
    as a task's does, and the server relays it to the caller, instead of ending the run."""
    carried_asks: list[str] | None = None
    """The ask methods a 2025-11-25-era caller's connection carries (none on stateless HTTP or
    without the capability); None on a 2026-07-28 one, where any ask goes back as the result.
    An ask it cannot carry fails the call's workflow (`REFUSED_ASK`), as an inline call refuses it."""


@dataclass
class NextLeg:
    """Which leg runs next and the answers it needs: only this round's, never the arguments."""

    leg: int = 1
    input_responses: dict[str, dict[str, Any]] | None = None
    request_state: str | None = None

    def input_of(self, call: ToolCall) -> LegInput:
        """The input of this leg of `call`."""
        return LegInput(call, self.leg, self.input_responses, self.request_state)


@dataclass
class OpenRound:
    """A round of input whose run continued as new before every answer came: the next run
    waits for the rest. Its open asks travel in the memo, written once, not here."""

    leg: int
    """The leg that asked."""
    deadline_ms: int
    """When the round expires unanswered (the task's TTL from the ask), in epoch milliseconds."""
    outstanding: dict[str, str] = field(default_factory=dict)
    """The open requests: the tool's own key by surfaced key."""
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The answers accepted so far, by the tool's own key."""
    request_state: str | None = None

    def next_leg(self, answers: dict[str, dict[str, Any]]) -> NextLeg:
        """The leg that runs once the round is answered with `answers`, with the tool's state."""
        return NextLeg(self.leg + 1, answers, self.request_state)


@dataclass
class LegInput:
    """One execution of the tool body: the call plus this round's answers."""

    call: ToolCall
    leg: int = 1
    input_responses: dict[str, dict[str, Any]] | None = None
    request_state: str | None = None

    def with_arguments(self, arguments: dict[str, Any]) -> LegInput:
        """This input with the call's arguments put back (they came as the workflow's second input:
        `workflows/arguments`)."""
        return replace(self, call=replace(self.call, arguments=arguments))


@dataclass
class TaskInput:
    """Everything a task needs to run every leg, captured at `tools/call`."""

    call: ToolCall
    ttl_ms: int
    policy: LegPolicy
    search_attributes: bool = True
    """Read by 0.2.0 workers during a rolling deploy; this release reads its own search attributes."""
    history_events_limit: int = 2_000
    """Continue as new past this many events, far below Temporal's 51,200 limit."""
    resume: NextLeg | None = None
    """The next leg, when this run continues an earlier one (the call above is not repeated)."""
    leg_input_budget: int | None = None
    """The most bytes a leg's input may convert to and still be kept once encoded: under
    Temporal's payload limit, or the store's. None in tasks 0.2.0 started with a store."""
    publish_completion: bool = True
    """Upsert `McpTaskStatus=completed` when the task succeeds, a billed Action the closed
    execution's own status already says. Tasks this release creates say False; the default
    is 0.2.0's behaviour, so its histories replay (versioning by input, CONTRIBUTING.md)."""
    asks_written_once: bool = False
    """Write a round's asks to the memo once and mark each answer with a field of its own,
    and continue as new inside a round when the history needs it. 0.2.0 rewrote every open
    ask at each partial answer (a history quadratic in the round's asks); tasks this release
    creates say True, and the default keeps 0.2.0's behaviour for its histories."""
    open_round: OpenRound | None = None
    """The round this run waits on, when the previous run continued as new inside it."""
    arguments_apart: bool = False
    """The call's arguments are the workflow's second input, a payload the workflow hands each
    leg undecoded (`workflows/arguments`), and `call.arguments` is empty: no workflow task
    decodes or re-encodes them. Tasks this release creates say True; the default reads the
    inputs of 0.2.0 and 0.3.0-dev, which carry them in `call`. ("Apart" means as that second
    input; the name is in every history since, so it stays.)"""
    stamps_changes: bool = False
    """Set `McpTaskChangedAt` to the workflow's time in every `McpTaskStatus` upsert (the same
    event, no extra Action), so a server's change feed finds the task by one visibility query.
    The server says True when the namespace has the attribute; the default keeps the histories
    of tasks created before it (or on a namespace without it) unchanged."""


@dataclass
class LegOutcome:
    """What one leg produced.

    ``result`` is a serialized ``CallToolResult``; ``error`` a JSON-RPC error
    (``code``, ``message``, ``data``) for a protocol fault; ``input_requests`` the
    serialized requests keyed by the tool's own keys when the leg asked for input.
    """

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, dict[str, Any]] | None = None
    request_state: str | None = None
    notices: dict[str, Any] | None = None
    """A durable call's leg: its latest relayed notices, which its last heartbeat may not have carried."""


@dataclass
class TaskOutcome:
    """The workflow's result: the final leg's outcome, or that the task expired."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    expired: bool = False


@dataclass
class InputAnswers:
    """A ``tasks/update`` signal: validated answers keyed by the surfaced key."""

    answers: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class LateLegOutcome:
    """A ``leg_outcome`` signal: the outcome of a leg whose attempt Temporal gave up on.

    Sent by a leg that blocked its event loop past the heartbeat timeout and finished
    anyway, so the workflow takes its outcome instead of waiting for a retry to run
    the body again.
    """

    leg: int
    outcome: LegOutcome


@dataclass
class UnreadablePayload:
    """Where the workflow expected a value, a payload the store lost for good, and why.

    The workflow gets it in place of its input, a leg's outcome or an answer, and ends
    the task with the reason rather than failing its workflow tasks forever.
    """

    reason: str


class LostOnReplay(Exception):
    """A lost payload met on replay, where the workflow cannot take another path: the
    worker terminates the task's run with this reason (`_lost_payloads`)."""
