"""Configuration for `TemporalTasksExtension`, from the constructor or `FASTMCP_TEMPORAL_*`.

Constructor arguments win over the environment; anything unset falls back to the
defaults below, so `TemporalTasksExtension()` runs on an embedded dev server.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class TemporalTasksSettings(BaseSettings):
    """Where tasks run and how each leg is scheduled."""

    model_config = SettingsConfigDict(env_prefix="FASTMCP_TEMPORAL_", extra="ignore")

    address: str | None = Field(
        default=None,
        description="host:port of the Temporal frontend; unset starts an embedded dev server.",
    )
    namespace: str = "default"
    task_queue: str = "fastmcp-tasks"
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
        default=timedelta(hours=1),
        description="Longest a single tool leg may run (a tool's own timeout= applies too).",
    )
    maximum_attempts: int = Field(
        default=5, ge=0, description="Attempts per leg after crashes or timeouts; 0 is unlimited."
    )
    max_concurrent_activities: int = Field(default=50, ge=1)
    max_cached_workflows: int = Field(
        default=1_000,
        ge=0,
        description="Task workflows a worker keeps in memory; a parked task past this is evicted, "
        "holds nothing, and is replayed from history when answered (0 disables the cache).",
    )
    shutdown_grace: timedelta = Field(
        default=timedelta(seconds=5),
        description="How long running tool legs may finish when the worker stops; then they are retried elsewhere.",
    )
    history_events_limit: int = Field(
        default=2_000,
        ge=20,
        description="A task whose history passes this many events continues as new (same task id).",
    )
    encryption_key: SecretStr | None = Field(
        default=None,
        description="Encrypt every payload tasks store in Temporal (all servers and workers share it).",
    )
    state_dir: Path | None = Field(
        default=None, description="Where the embedded dev server keeps its sqlite file."
    )
    ui: bool = Field(default=True, description="Serve the Temporal UI from the embedded dev server.")
    connect_timeout: timedelta = timedelta(seconds=10)

    @field_validator("address")
    @classmethod
    def _address_has_port(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(
                f"Temporal address {value!r} must be host:port, for example 127.0.0.1:7233"
            )
        return value

    @field_validator(
        "task_ttl", "heartbeat_timeout", "start_to_close_timeout", "shutdown_grace", "connect_timeout",
        mode="before",
    )
    @classmethod
    def _seconds(cls, value: object) -> object:
        """Let the environment say `900` for 900 seconds, besides ISO 8601 (`PT15M`)."""
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return value
        return value

    @field_validator("task_ttl", "heartbeat_timeout", "start_to_close_timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be a positive duration")
        return value
