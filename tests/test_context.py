"""Inside a task: the caller's identity, scope isolation, progress and the full Context.

Proven over the MCP wire against a real Temporal dev server (behaviour doc §3.2,
§3.5, §3.7-§3.14). Identity and scope run over real streamable HTTP (uvicorn on
a loopback port) with FastMCP's `StaticTokenVerifier`:

- the caller's token, claims and headers are restored in the activity, with and
  without a `ctx` parameter (`get_access_token`, `get_http_headers`,
  `CurrentAccessToken`, `CurrentHeaders`); an expired token is not restored; back to
  back tasks on one worker never see each other's identity;
- a task is "not found" (-32602, the unknown-id message) for every other scope on
  `tasks/get|update|cancel` (other client id, same client id with another `sub`, a
  client id holding the `|` that `fastmcp_tasks` joins them with, anonymous vs
  authenticated both ways) and the scope never appears in clear in the workflow id,
  memo or search attributes; the scope tag is keyed by the encryption key; a task
  created under the legacy (unkeyed) tag stays readable and cancellable by its owner
  and by no colliding caller;
- with `FASTMCP_TASKS_ENCRYPTION_KEY` the snapshot is encrypted in Temporal and still
  restored; a worker with another key, or none, fails the task instead of running it
  anonymously;
- the task's `Context` (background flag, task id, no request or session, the
  submitting session's id and state, `UserSession`, lifespan, `elicit` refused),
  logging to the `fastmcp_temporal.task` logger, `Progress`/`report_progress` as
  `statusMessage` and as Temporal heartbeat details;
- components: mounted children (owning server, lifespan, namespaced keys), versions,
  a custom `Tool` subclass, `Depends`/`CallArgument`/context-manager dependencies,
  root middleware wrapping submission, and proxied tools staying synchronous.

Deliberate differences from the reference, asserted as such: `ctx.log` and friends log
instead of raising, and `ctx.client_supports_extension` answers for the extensions the
submitting client declared (the reference's snapshot keeps none). A dependency that
fails to resolve ends the task `failed`, exactly as the reference does.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.dependencies import (
    CallArgument,
    CurrentAccessToken,
    CurrentHeaders,
    Depends,
    Progress,
)
from fastmcp.exceptions import ToolError
from fastmcp.server import create_proxy
from fastmcp.server.auth import AccessToken
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.dependencies import (
    get_access_token,
    get_server,
)
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.server.sessions import UserSession
from fastmcp.tools.base import Tool, ToolResult
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID, TaskConfig
from fastmcp_tasks import settings as tasks_settings_module
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.encryption import clear_codec_cache
from mcp.shared.exceptions import MCPError
from mcp_types import InputRequiredResult
from pydantic import SecretStr
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.server._scope import CallerScope, workflow_id
from helpers.servers import TOKENS, http_client, identity, server_with, serving_http, verifier, whoami
from helpers.temporal import workflow_closed, workflow_of
from helpers.waits import DEADLINE, eventually, finished, polled_until, status_becomes
from helpers.wire import (
    TASK_METHODS,
    accept,
    ask,
    send_task_method,
    tasks_cancel,
    tasks_get,
    tasks_update,
    text_of,
)

pytestmark = pytest.mark.anyio

NOT_FOUND = mcp_types.INVALID_PARAMS
ASK_GO = ask("go")


# --- task helpers -------------------------------------------------------------------


async def task_error(client: Client, method: str, task_id: str, key: str = "k") -> mcp_types.ErrorData:
    """Send one `tasks/*` request that must fail; return its JSON-RPC error."""
    with pytest.raises(MCPError) as raised:
        await send_task_method(client, method, task_id, {key: accept("go")})
    return raised.value.error


# --- tool bodies --------------------------------------------------------------------


async def whoami_injected(
    token: AccessToken = CurrentAccessToken(), headers: dict[str, str] = CurrentHeaders()
) -> dict[str, Any]:
    return {"client_id": token.client_id, "tenant": headers.get("x-tenant")}


async def hold(ctx: Context) -> str | InputRequiredResult:
    """Parks until answered, so other callers can try to reach a live task."""
    return ASK_GO if ctx.input_responses is None else "released"


# --- 1. identity restore ----------------------------------------------------------------


async def test_token_claims_and_headers_are_restored_without_ctx(make_extension) -> None:
    server = server_with(make_extension(), whoami, whoami_injected, auth=verifier())
    async with serving_http(server) as url, http_client(url, "token-a", {"x-tenant": "acme"}) as client:
        plain = await finished(await call_tool_task(client, "whoami"))
        injected = await finished(await call_tool_task(client, "whoami_injected"))
    assert plain.status == injected.status == "completed"
    assert plain.result["structuredContent"] == identity("token-a", "acme")
    assert injected.result["structuredContent"] == {"client_id": "client-a", "tenant": "acme"}


# --- 2. scope isolation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "intruder"),
    [
        ("token-a", "token-b"),
        ("token-u1", "token-u2"),
        ("token-sub", "token-pipe"),
        ("token-pipe", "token-sub"),
    ],
    ids=["other-client-id", "same-client-id-other-sub", "client-id-holding-the-separator", "its-reverse"],
)
async def test_another_scope_cannot_see_update_or_cancel_a_task(make_extension, owner: str, intruder: str) -> None:
    extension = make_extension()
    server = server_with(extension, hold, auth=verifier())
    async with serving_http(server) as url:
        async with http_client(url, owner) as mine, http_client(url, intruder) as theirs:
            task = await call_tool_task(mine, "hold")
            parked = await status_becomes(task, "input_required")
            (key,) = parked.input_requests
            unknown = "no-such-task-id"
            for method in TASK_METHODS:
                foreign = await task_error(theirs, method, task.task_id, key)
                missing = await task_error(theirs, method, unknown, key)
                assert (foreign.code, foreign.message) == (NOT_FOUND, f"Task {task.task_id} not found")
                assert (missing.code, missing.message) == (NOT_FOUND, f"Task {unknown} not found")
                assert foreign.data == missing.data
            # the intruder's update and cancel changed nothing: the owner still sees it parked
            still = await task.status()
            assert still.status == "input_required" and set(still.input_requests) == {key}

            # the scope is never shown in clear where an operator browses tasks
            handle = await workflow_of(extension, task.task_id)
            description = await handle.describe()
            shown = repr((handle.id, await description.memo(), description.typed_search_attributes))
            for secret in {TOKENS[owner]["client_id"], TOKENS[owner].get("sub"), owner} - {None}:
                assert secret not in shown

            await tasks_update(mine, task.task_id, {key: accept("go")})
            assert text_of(await finished(task)) == "released"


async def test_anonymous_and_authenticated_callers_cannot_see_each_others_tasks(make_extension) -> None:
    authed = server_with(make_extension(), hold, auth=verifier())
    anonymous = server_with(make_extension(worker=False), hold)  # same queue, no auth
    async with serving_http(authed) as url, http_client(url, "token-a") as alice, Client(anonymous) as anon:
        alices = await call_tool_task(alice, "hold")
        anons = await call_tool_task(anon, "hold")
        await status_becomes(alices, "input_required")
        await status_becomes(anons, "input_required")
        for method in TASK_METHODS:
            err = await task_error(anon, method, alices.task_id)
            assert (err.code, err.message) == (NOT_FOUND, f"Task {alices.task_id} not found")
            err = await task_error(alice, method, anons.task_id)
            assert (err.code, err.message) == (NOT_FOUND, f"Task {anons.task_id} not found")
        assert (await alices.status()).status == (await anons.status()).status == "input_required"


async def test_the_scope_tag_is_keyed_by_the_encryption_key(make_extension, task_queue: str) -> None:
    """The same caller gets another tag under another key, and does not find its tasks there."""
    first = make_extension(encryption_key="the-first-key-that-keys-scope-tags")
    second = make_extension(
        encryption_key="the-second-key-that-keys-scope-tags", task_queue=f"{task_queue}-2"
    )
    tags: list[str] = []
    task_ids: list[str] = []
    async with AsyncExitStack() as stack:
        for extension in (first, second):
            server = server_with(extension, whoami, auth=verifier())
            url = await stack.enter_async_context(serving_http(server))
            client = await stack.enter_async_context(http_client(url, "token-a"))
            task = await call_tool_task(client, "whoami")
            assert (await finished(task)).status == "completed"
            tags.append((await workflow_of(extension, task.task_id)).id.split("/")[1])
            task_ids.append(task.task_id)
        first_task = task_ids[0]
        err = await task_error(client, "tasks/get", first_task)  # asked of the second server
        assert (err.code, err.message) == (NOT_FOUND, f"Task {first_task} not found")
    assert tags[0] != tags[1]
    assert all(tag.startswith("v2-") and len(tag) == 35 for tag in tags)


LEGACY_SCOPE = "tenant-app|alice-user"  # token-sub's scope string, and token-pipe's


def legacy_tag(scope: str) -> str:
    """The tag `fastmcp_tasks`' scope string got before keyed tags: its unkeyed SHA-256."""
    return hashlib.sha256(scope.encode()).hexdigest()[:32]


async def test_a_task_from_before_keyed_tags_stays_its_owners_only(make_extension, monkeypatch) -> None:
    """A task of ("tenant-app", sub "alice-user") started under its legacy tag, as the old code did."""
    extension = make_extension()
    server = server_with(extension, hold, auth=verifier())
    async with serving_http(server) as url:
        async with http_client(url, "token-sub") as owner, http_client(url, "token-pipe") as colliding:
            with monkeypatch.context() as old_code:
                old_code.setattr(Backend, "caller_scope", lambda _: CallerScope(legacy_tag(LEGACY_SCOPE)))
                task = await call_tool_task(owner, "hold")
            handle = extension.client.get_workflow_handle(workflow_id(legacy_tag(LEGACY_SCOPE), task.task_id))
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING

            (key,) = (await status_becomes(task, "input_required")).input_requests
            for method in TASK_METHODS:
                err = await task_error(colliding, method, task.task_id, key)
                assert (err.code, err.message) == (NOT_FOUND, f"Task {task.task_id} not found")
            assert (await task.status()).status == "input_required"
            await tasks_cancel(owner, task.task_id)
            await status_becomes(task, "cancelled")
            await workflow_closed(extension, task.task_id, legacy_tag(LEGACY_SCOPE))
            assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


# --- 3. no leaks between tasks on one worker -----------------------------------------------


async def test_back_to_back_tasks_on_one_worker_do_not_share_identity(make_extension) -> None:
    worker_server = server_with(make_extension(max_concurrent_activities=1), whoami, auth=verifier())
    api_only = server_with(make_extension(worker=False), whoami)  # anonymous callers, same queue
    async with serving_http(worker_server) as url:
        async with http_client(url, "token-a", {"x-tenant": "a"}) as alice:
            first = await finished(await call_tool_task(alice, "whoami"))
        async with http_client(url, "token-b") as bob:
            second = await finished(await call_tool_task(bob, "whoami"))
        async with Client(api_only) as anon:
            third = await finished(await call_tool_task(anon, "whoami"))
    assert first.result["structuredContent"] == identity("token-a", "a")
    assert second.result["structuredContent"] == identity("token-b")
    assert third.result["structuredContent"] == identity(None)


# --- 4. expired token -----------------------------------------------------------------------


class ShortLivedTokens(StaticTokenVerifier):
    """The usual callers, plus `token-short`, which expires `lifetime` seconds after each check.

    Each request is verified anew, so the expiry in a task's snapshot counts from the
    `tools/call` that created it, not from when the server started.
    """

    def __init__(self) -> None:
        renewable = {"client_id": "client-e"}  # both tokens: the same client, so the same scope
        super().__init__(tokens={**TOKENS, "token-short": renewable, "token-renewed": renewable})
        self.lifetime = 0
        self.last_expiry = 0

    async def verify_token(self, token: str) -> AccessToken | None:
        verified = await super().verify_token(token)
        if verified is None or token != "token-short":
            return verified
        self.last_expiry = max(self.last_expiry, int(time.time()) + self.lifetime)
        return verified.model_copy(update={"expires_at": self.last_expiry})


async def test_a_token_expired_when_a_leg_starts_is_not_restored(make_extension) -> None:
    seen: list[str | None] = []

    async def later(ctx: Context) -> str | InputRequiredResult:
        token = get_access_token()
        seen.append(token.client_id if token else None)
        return ASK_GO if ctx.input_responses is None else "done"

    tokens = ShortLivedTokens()
    server = server_with(make_extension(), later, auth=tokens)
    async with serving_http(server) as url:
        # Leg 1 must start before the token expires, however loaded the machine: a try
        # whose leg 1 came too late proves nothing, so the next gives the token longer.
        for tokens.lifetime in (3, 10, 30):
            seen.clear()
            async with http_client(url, "token-short") as short:
                task = await call_tool_task(short, "later")
                (key,) = (await status_becomes(task, "input_required")).input_requests
            if seen == ["client-e"]:
                break
            async with http_client(url, "token-renewed") as renewed:
                await tasks_cancel(renewed, task.task_id)
        assert seen == ["client-e"], "leg 1 never ran as the caller while the token was valid"

        await eventually(lambda: int(time.time()) > tokens.last_expiry, DEADLINE + tokens.lifetime, "expiry")
        async with http_client(url, "token-renewed") as renewed:
            await tasks_update(renewed, task.task_id, {key: accept("go")})
            done = await polled_until(lambda: tasks_get(renewed, task.task_id), "completed")
    assert text_of(done) == "done"
    assert seen == ["client-e", None]


# --- 5. encryption ------------------------------------------------------------------------


@pytest.fixture
def encryption_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], None]]:
    """Set FASTMCP_TASKS_ENCRYPTION_KEY for this process (restored afterwards).

    `fastmcp_tasks` reads the environment once at import into `tasks_settings`, so the
    setting object is patched alongside the variable.
    """

    def use(key: str | None) -> None:
        if key is None:
            monkeypatch.delenv("FASTMCP_TASKS_ENCRYPTION_KEY", raising=False)
        else:
            monkeypatch.setenv("FASTMCP_TASKS_ENCRYPTION_KEY", key)
        monkeypatch.setattr(
            tasks_settings_module.tasks_settings, "encryption_key", SecretStr(key) if key else None
        )
        clear_codec_cache()

    yield use
    clear_codec_cache()


async def test_with_encryption_the_snapshot_is_sealed_in_temporal_and_restored(
    make_extension, encryption_key
) -> None:
    encryption_key("the-first-key-for-task-snapshots")
    extension = make_extension()
    server = server_with(extension, whoami, auth=verifier())
    async with serving_http(server) as url, http_client(url, "token-a", {"x-tenant": "acme"}) as client:
        task = await call_tool_task(client, "whoami")
        done = await finished(task)
        history = await (await workflow_of(extension, task.task_id)).fetch_history()
    assert done.result["structuredContent"] == identity("token-a", "acme")
    started = history.events[0].workflow_execution_started_event_attributes
    stored = b"".join(payload.data for payload in started.input.payloads)
    assert b'"gAAAAA' in stored  # a Fernet token where the snapshot goes
    assert b"token-a" not in stored and b"acme" not in stored


@pytest.mark.parametrize("worker_key", ["a-different-key-for-snapshots", None], ids=["other-key", "no-key"])
async def test_a_worker_that_cannot_decrypt_the_snapshot_fails_the_task(
    make_extension, encryption_key, worker_key: str | None
) -> None:
    ran: list[str] = []

    async def sensitive() -> str:
        ran.append("ran")
        return "ran anonymously"

    encryption_key("the-first-key-for-task-snapshots")
    async with Client(server_with(make_extension(worker=False), sensitive)) as api:
        task = await call_tool_task(api, "sensitive")
        encryption_key(worker_key)
        async with Client(server_with(make_extension(), sensitive)):  # its lifespan runs the worker
            done = await finished(task)
    assert done.status == "failed"
    assert done.error is not None and done.error["code"] == mcp_types.INTERNAL_ERROR
    assert ran == []


# --- 6. the Context inside a task --------------------------------------------------------


class SubmissionRecorder(Middleware):
    """Root middleware: records each submission's ids and leaves state in its session."""

    def __init__(self) -> None:
        self.session_ids: list[str] = []
        self.request_ids: list[str] = []

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        ctx = context.fastmcp_context
        assert ctx is not None
        self.session_ids.append(ctx.session_id)
        self.request_ids.append(ctx.request_id)
        await ctx.set_state("from_submission", f"set while submitting {context.message.name}")
        return await call_next(context)


def lifespan_of(value: str) -> Callable[[FastMCP], Any]:
    @asynccontextmanager
    async def lifespan(server: FastMCP) -> AsyncIterator[dict[str, str]]:
        yield {"resource": value}

    return lifespan


async def test_the_task_context_is_a_background_context_of_the_submitting_session(make_extension) -> None:
    async def introspect(ctx: Context) -> dict[str, Any]:
        try:
            ctx.session
            session = "available"
        except RuntimeError:
            session = "raises"
        await ctx.set_state("written_in_task", "w")
        return {
            "background": ctx.is_background_task,
            "task_id": ctx.task_id,
            "request_context": ctx.request_context,
            "session": session,
            "session_id": ctx.session_id,
            "origin_request_id": ctx.origin_request_id,
            "state_from_submission": await ctx.get_state("from_submission"),
            "state_from_task": await ctx.get_state("written_in_task"),
            "lifespan": ctx.lifespan_context.get("resource"),
            "server": ctx.fastmcp.name,
            # False in the reference, whose snapshot keeps no client capabilities
            "supports_tasks": ctx.client_supports_extension(TASKS_EXTENSION_ID),
        }

    recorder = SubmissionRecorder()
    server = server_with(make_extension(), introspect, name="ctx-root", lifespan=lifespan_of("db-handle"))
    server.add_middleware(recorder)
    async with Client(server) as client:
        task = await call_tool_task(client, "introspect")
        done = await finished(task)
    assert done.status == "completed"
    assert done.result["structuredContent"] == {
        "background": True,
        "task_id": task.task_id,
        "request_context": None,
        "session": "raises",
        "session_id": recorder.session_ids[0],
        "origin_request_id": recorder.request_ids[0],
        "state_from_submission": "set while submitting introspect",
        "state_from_task": "w",
        "lifespan": "db-handle",
        "server": "ctx-root",
        "supports_tasks": True,  # the submitting client declared the tasks extension
    }


async def test_user_session_state_persists_across_tasks_of_one_user(make_extension) -> None:
    async def remember(fact: str, session: UserSession) -> str:
        await session.set("fact", fact)
        return "noted"

    async def recall(session: UserSession) -> str:
        return str(await session.get("fact"))

    server = server_with(make_extension(), remember, recall, auth=verifier())
    async with serving_http(server) as url:
        async with http_client(url, "token-a") as alice:
            assert text_of(await finished(await call_tool_task(alice, "remember", {"fact": "42"}))) == "noted"
            assert text_of(await finished(await call_tool_task(alice, "recall"))) == "42"
        async with http_client(url, "token-b") as bob:
            assert text_of(await finished(await call_tool_task(bob, "recall"))) == "None"


async def test_ctx_elicit_in_a_task_completes_with_guidance_to_input_required_result(make_extension) -> None:
    async def imperative(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", str)
        return f"hi {answer}"

    async with Client(server_with(make_extension(), imperative)) as client:
        done = await finished(await call_tool_task(client, "imperative"))
    assert done.status == "completed"
    assert done.result["isError"] is True
    assert "InputRequiredResult" in text_of(done)


# --- 7. logging -----------------------------------------------------------------------------


async def test_ctx_logging_in_a_task_reaches_the_task_logger(make_extension, caplog) -> None:
    async def chatty(ctx: Context) -> str:
        await ctx.debug("d-msg")
        await ctx.info("i-msg")
        await ctx.warning("w-msg")
        await ctx.error("e-msg")
        await ctx.log("l-msg", level="critical")
        return "still fine"

    caplog.set_level(logging.DEBUG, logger="fastmcp_temporal.task")
    async with Client(server_with(make_extension(), chatty)) as client:
        task = await call_tool_task(client, "chatty")
        done = await finished(task)
    assert done.status == "completed" and done.result["isError"] is False
    assert text_of(done) == "still fine"
    logged = {
        r.getMessage().rsplit(" ", 1)[-1]: r.levelno
        for r in caplog.records
        if r.name == "fastmcp_temporal.task" and task.task_id in r.getMessage()
    }
    assert logged == {
        "d-msg": logging.DEBUG,
        "i-msg": logging.INFO,
        "w-msg": logging.WARNING,
        "e-msg": logging.ERROR,
        "l-msg": logging.CRITICAL,
    }


# --- 8. progress -----------------------------------------------------------------------------


async def test_progress_and_report_progress_surface_as_status_message_and_heartbeats(make_extension) -> None:
    first, second, finish = anyio.Event(), anyio.Event(), anyio.Event()

    async def phased(ctx: Context, progress: Progress = Progress()) -> str:
        await progress.set_total(3)
        await progress.increment()
        await progress.set_message("step one")
        await first.wait()
        await ctx.report_progress(2, 4, "ctx-msg")
        await second.wait()
        await finish.wait()
        return "done"

    extension = make_extension()
    async with Client(server_with(extension, phased)) as client:
        task = await call_tool_task(client, "phased")
        await status_becomes(task, "working", until=lambda r: r.status_message == "step one")
        first.set()
        await status_becomes(task, "working", until=lambda r: r.status_message == "ctx-msg")
        second.set()

        handle = await workflow_of(extension, task.task_id)
        converter = extension.client.data_converter
        (pending,) = (await handle.describe()).raw_description.pending_activities
        (details,) = await converter.decode(pending.heartbeat_details.payloads)
        finish.set()
        assert text_of(await finished(task)) == "done"
    assert details["statusMessage"] == "ctx-msg"
    assert details["total"] == 4 and details["current"] >= 2


# --- 9. components ---------------------------------------------------------------------------


def server_reporter() -> Callable[..., Awaitable[dict[str, Any]]]:
    """A tool that reports which server owns it and that server's lifespan value."""

    async def compute(ctx: Context) -> dict[str, Any]:
        return {
            "server": ctx.fastmcp.name,
            "resolved": get_server().name,
            "lifespan": ctx.lifespan_context.get("resource"),
        }

    return compute


async def test_mounted_tasks_run_on_their_own_child_server(make_extension) -> None:
    parent = server_with(make_extension(), name="parent", lifespan=lifespan_of("parent-db"))
    for label in ("c", "d"):
        child = FastMCP(f"child-{label}", lifespan=lifespan_of(f"{label}-db"))
        child.tool(server_reporter(), task=True)  # the same function name on both mounts
        parent.mount(child, namespace=label)
    async with Client(parent) as client:
        c = await finished(await call_tool_task(client, "c_compute"))
        d = await finished(await call_tool_task(client, "d_compute"))
    assert c.result["structuredContent"] == {"server": "child-c", "resolved": "child-c", "lifespan": "c-db"}
    assert d.result["structuredContent"] == {"server": "child-d", "resolved": "child-d", "lifespan": "d-db"}


async def test_the_targeted_version_runs_on_the_server_that_owns_it(make_extension) -> None:
    parent = server_with(make_extension(), name="parent")

    @parent.tool(name="calc", version="1", task=True)
    async def calc_v1() -> str:
        return "root v1"

    @parent.tool(name="calc", version="2", task=True)
    async def calc_v2() -> str:
        return "root v2"

    for version in ("3", "4"):  # two versions of one mounted name, on different children
        child = FastMCP(f"child-v{version}")
        child.tool(server_reporter(), name="mounted", version=version, task=True)
        parent.mount(child)

    async with Client(parent) as client:
        results = {
            version: await finished(await call_tool_task(client, "calc", version=version))
            for version in (None, "1", "2")
        }
        mounted = await finished(await call_tool_task(client, "mounted", version="3"))
    assert {v: text_of(r) for v, r in results.items()} == {None: "root v2", "1": "root v1", "2": "root v2"}
    assert mounted.result["structuredContent"]["server"] == "child-v3"


class Shout(Tool):
    """A hand-written `Tool` subclass that opts into tasks."""

    task_config: TaskConfig = TaskConfig(mode="optional")

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        if arguments.get("fail"):
            raise RuntimeError("shout failed")
        return ToolResult(content=f"{arguments['text'].upper()} from {get_server().name}")


async def test_a_custom_tool_subclass_with_a_task_config_runs_as_a_task(make_extension) -> None:
    server = server_with(make_extension(), name="shouter")
    server.add_tool(
        Shout(
            name="shout",
            parameters={"type": "object", "properties": {"text": {"type": "string"}, "fail": {"type": "boolean"}}},
        )
    )
    async with Client(server) as client:
        ok = await finished(await call_tool_task(client, "shout", {"text": "hello"}))
        bad = await finished(await call_tool_task(client, "shout", {"text": "x", "fail": True}))
    assert (ok.status, ok.result["isError"], text_of(ok)) == ("completed", False, "HELLO from shouter")
    assert (bad.status, bad.result["isError"]) == ("completed", True)
    assert text_of(bad) == "Error calling tool 'shout': shout failed"


async def test_dependencies_resolve_in_the_leg_and_are_cleaned_up_after_it(make_extension) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def connection() -> AsyncIterator[str]:
        events.append("open")
        try:
            yield "conn"
        finally:
            events.append("close")

    def account_for(owner: str) -> str:
        return f"acct:{owner}"

    async def uses_deps(
        owner: str,
        conn: str = Depends(connection),
        account: str = Depends(account_for, owner=CallArgument("owner")),
    ) -> str:
        events.append("body")
        return f"{conn}/{account}"

    async with Client(server_with(make_extension(), uses_deps)) as client:
        done = await finished(await call_tool_task(client, "uses_deps", {"owner": "ann"}))
    assert text_of(done) == "conn/acct:ann"
    assert events == ["open", "body", "close"]


async def test_a_failing_dependency_fails_the_task_as_the_reference_does(make_extension) -> None:
    # Upstream `test_dependency_errors_propagate_to_task_failure`: Docket's exception group
    # becomes the task's protocol error, where a synchronous call returns a masked isError.
    bodies: list[str] = []

    def broken() -> str:
        raise RuntimeError("no database")

    async def needs_db(db: str = Depends(broken)) -> str:
        bodies.append(db)
        return db

    async with Client(server_with(make_extension(), needs_db)) as client:
        done = await finished(await call_tool_task(client, "needs_db", raise_on_error=False))
    message = "Failed to resolve dependencies for parameter(s): db (1 sub-exception)"
    assert (done.status, done.status_message) == ("failed", message)
    assert done.error == {"code": mcp_types.INTERNAL_ERROR, "message": message}
    assert bodies == []


async def test_root_middleware_wraps_submission_not_the_mounted_leg(make_extension) -> None:
    calls: list[str] = []

    class Tag(Middleware):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
            calls.append(f"{self.tag}:before")
            try:
                return await call_next(context)
            finally:
                calls.append(f"{self.tag}:after")

    async def work(ctx: Context) -> str:
        calls.append("grandchild:tool")
        return ctx.fastmcp.name

    grandchild = FastMCP("grandchild")
    grandchild.tool(work, task=True)
    child = FastMCP("child", middleware=[Tag("child")])
    child.mount(grandchild, namespace="g")
    parent = server_with(make_extension(), name="parent", middleware=[Tag("parent")])
    parent.mount(child, namespace="c")
    async with Client(parent) as client:
        done = await finished(await call_tool_task(client, "c_g_work"))
    # reference: a nested mount resolves to the outermost mounted child (single level)
    assert text_of(done) == "child"
    assert sorted(calls) == sorted(["parent:before", "parent:after", "grandchild:tool"])
    assert calls.index("parent:before") < calls.index("parent:after")


async def test_a_proxied_tool_stays_synchronous(make_extension) -> None:
    backend = FastMCP("backend")

    @backend.tool
    async def remote(n: int) -> int:
        return n + 1

    proxy = create_proxy(backend, name="proxy")
    proxy.add_extension(make_extension())

    @proxy.tool(task=True)
    async def local() -> str:  # keeps the task engine live on the proxy
        return "local"

    async with Client(proxy) as client:
        assert (await client.call_tool("remote", {"n": 1})).data == 2
        with pytest.raises(ToolError):
            await call_tool_task(client, "remote", {"n": 1})
        assert text_of(await finished(await call_tool_task(client, "local"))) == "local"
