"""Configuration: constructor, environment, `.env`, an existing client, the zero-config default,
and the refusal of unknown names and of durations that mean nothing."""

from __future__ import annotations

import json
import logging
import os
from datetime import timedelta
from pathlib import Path

import pytest
from fastmcp import Client
from google.protobuf.duration_pb2 import Duration
from pydantic import ValidationError
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension, TemporalTasksSettings
from fastmcp_temporal._settings import CLI_VARIABLES, DURATIONS_OFF_AT_ZERO, POSITIVE_DURATIONS
from fastmcp_temporal.connection._client import TemporalConnectionError
from fastmcp_temporal.devserver import DevServer, free_port
from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES
from helpers.servers import assert_startup_paragraph, server_with, silent_tcp_server, square

pytestmark = pytest.mark.anyio


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_malformed_address_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="must be host:port"):
        TemporalTasksExtension(address="localhost")


async def test_an_address_nobody_listens_on_fails_startup_with_the_fix() -> None:
    address = f"127.0.0.1:{free_port()}"
    extension = TemporalTasksExtension(address=address, connect_timeout=2)
    # The in-memory client wraps startup failures; the message is what a person reads.
    with pytest.raises(Exception) as raised:
        async with Client(server_with(extension, square)):
            pass
    assert_startup_paragraph(str(_startup_failure(raised.value)), address, "connection refused", 2)


async def test_an_address_that_never_answers_fails_startup_naming_the_timeout() -> None:
    with silent_tcp_server() as address:
        extension = TemporalTasksExtension(address=address, connect_timeout=2)
        with pytest.raises(Exception) as raised:
            async with Client(server_with(extension, square)):
                pass
    assert_startup_paragraph(str(_startup_failure(raised.value)), address, "no answer", 2)


def _startup_failure(raised: BaseException) -> TemporalConnectionError:
    """The connection error under whatever the in-memory client wrapped it in."""
    seen: BaseException | None = raised
    while seen is not None and not isinstance(seen, TemporalConnectionError):
        seen = seen.__cause__ or seen.__context__ or next(iter(getattr(seen, "exceptions", ())), None)
    assert seen is not None, f"no TemporalConnectionError in {raised!r}"
    assert seen.__cause__ is None and seen.__suppress_context__, "its cause is in its message, not chained"
    return seen


async def test_an_unknown_namespace_fails_startup(temporal_server: DevServer) -> None:
    extension = TemporalTasksExtension(address=temporal_server.address, namespace="no-such-namespace")
    mcp = server_with(extension, square)
    with pytest.raises(Exception, match="Cannot reach Temporal namespace 'no-such-namespace'"):
        async with Client(mcp):
            pass


async def test_settings_come_from_the_environment(
    temporal_server: DevServer, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("FASTMCP_TEMPORAL_TASK_QUEUE", task_queue)
    monkeypatch.setenv("FASTMCP_TEMPORAL_TASK_TTL", "120")
    extension = TemporalTasksExtension()
    async with Client(server_with(extension, square)) as client:
        assert (await client.call_tool("square", {"n": 4})).data == 16
    settings = extension.temporal_settings
    assert (settings.address, settings.task_queue) == (temporal_server.address, task_queue)
    assert settings.task_ttl.total_seconds() == 120


async def test_an_existing_temporal_client_is_used(temporal_server: DevServer, task_queue: str) -> None:
    temporal = await TemporalClient.connect(temporal_server.address)
    extension = TemporalTasksExtension(client=temporal, task_queue=task_queue)
    async with Client(server_with(extension, square)) as client:
        assert extension.client is temporal
        assert (await client.call_tool("square", {"n": 5})).data == 25


async def test_a_given_client_is_checked_on_its_own_namespace(
    temporal_server: DevServer, task_queue: str
) -> None:
    namespace = f"given-{task_queue}"
    admin = await TemporalClient.connect(temporal_server.address)
    await admin.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    temporal = await TemporalClient.connect(temporal_server.address, namespace=namespace)
    extension = TemporalTasksExtension(client=temporal, task_queue=task_queue)  # settings say "default"
    async with Client(server_with(extension, square)) as client:
        assert (await client.call_tool("square", {"n": 3})).data == 9
        listed = await admin.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
    assert set(SEARCH_ATTRIBUTES) <= set(listed.custom_attributes)


async def test_an_unreachable_given_client_fails_startup(task_queue: str) -> None:
    unreachable = await TemporalClient.connect(f"127.0.0.1:{free_port()}", lazy=True)
    extension = TemporalTasksExtension(client=unreachable, task_queue=task_queue, connect_timeout=2)
    with pytest.raises(Exception, match="client= cannot reach namespace 'default' at 127.0.0.1"):
        async with Client(server_with(extension, square)):
            pass


async def test_zero_config_starts_a_persistent_dev_server_and_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FASTMCP_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("FASTMCP_TEMPORAL_STATE_DIR", str(tmp_path))
    extension = TemporalTasksExtension(ui=False)
    async with Client(server_with(extension, square)) as client:
        assert (await client.call_tool("square", {"n": 21})).data == 441
        record = (tmp_path / "dev-server.json").read_text()
        assert (tmp_path / "temporal.db").is_file()
    pid = json.loads(record)["pid"]
    assert not _pid_alive(pid)


def test_a_mistyped_argument_is_refused_naming_it_and_the_nearest_setting() -> None:
    with pytest.raises(ValidationError) as refused:
        TemporalTasksExtension(adress="127.0.0.1:7233")
    assert "argument 'adress' is not a setting. Did you mean 'address'? The settings are: address," in str(
        refused.value
    )


def test_a_mistyped_variable_is_refused_naming_it_and_the_nearest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_ADRESS", "127.0.0.1:7233")
    with pytest.raises(ValidationError) as refused:
        TemporalTasksSettings()
    assert (
        "FASTMCP_TEMPORAL_ADRESS, set in the environment, is not a setting. "
        "Did you mean FASTMCP_TEMPORAL_ADDRESS? The settings are: address," in str(refused.value)
    )


def test_a_name_like_no_setting_is_refused_with_the_valid_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_COLOUR", "blue")
    expected = r"FASTMCP_TEMPORAL_COLOUR, set in the environment, is not a setting\. The settings are: "
    with pytest.raises(ValidationError, match=expected):
        TemporalTasksSettings()


def test_the_cli_variables_sharing_the_prefix_are_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLI_VARIABLES:
        monkeypatch.setenv(name, "x" * 40)
    TemporalTasksSettings()


def test_settings_come_from_a_dotenv_file_shared_with_fastmcp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text(
        "FASTMCP_LOG_LEVEL=DEBUG\nDATABASE_URL=postgres://elsewhere\n"
        "FASTMCP_TEMPORAL_TASK_QUEUE=from-dotenv\nFASTMCP_TEMPORAL_TASK_TTL=120\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FASTMCP_TEMPORAL_TASK_TTL", "60")  # the environment wins over .env
    settings = TemporalTasksExtension().temporal_settings
    assert (settings.task_queue, settings.task_ttl) == ("from-dotenv", timedelta(seconds=60))


def test_an_unknown_name_in_the_dotenv_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("FASTMCP_TEMPORAL_TASKQUEUE=typo\n")
    monkeypatch.chdir(tmp_path)
    expected = r"TASKQUEUE, set in \.env, is not a setting\. Did you mean FASTMCP_TEMPORAL_TASK_QUEUE\?"
    with pytest.raises(ValidationError, match=expected):
        TemporalTasksSettings()


@pytest.mark.parametrize("name", [*POSITIVE_DURATIONS, *DURATIONS_OFF_AT_ZERO])
def test_a_negative_duration_is_refused(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"FASTMCP_TEMPORAL_{name.upper()}", "-1")
    with pytest.raises(ValidationError, match=f"{name}\n  Value error, must be"):
        TemporalTasksSettings()


def test_a_duration_that_is_not_one_is_refused_with_the_formats_there_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_TASK_TTL", "15 minutes")
    with pytest.raises(ValidationError) as refused:
        TemporalTasksSettings()
    message = str(refused.value)
    assert "'15 minutes' is not a duration" in message
    assert "seconds (900)" in message and "ISO 8601 (PT15M, P1D)" in message and "HH:MM:SS" in message


@pytest.mark.parametrize("name", POSITIVE_DURATIONS)
def test_a_zero_duration_is_refused_where_zero_means_nothing(name: str) -> None:
    with pytest.raises(ValidationError, match=f"{name}\n  Value error, must be a positive duration"):
        TemporalTasksSettings(**{name: 0})


@pytest.mark.parametrize("name", DURATIONS_OFF_AT_ZERO)
def test_a_zero_duration_turns_off_what_it_times(name: str) -> None:
    assert getattr(TemporalTasksSettings(**{name: 0}), name) == timedelta(0)


async def test_a_namespace_retention_shorter_than_the_ttl_is_warned_about(
    temporal_server: DevServer, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = f"short-{task_queue}"
    temporal = await TemporalClient.connect(temporal_server.address)
    await temporal.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=3600))
    )
    extension = TemporalTasksExtension(
        address=temporal_server.address, namespace=namespace, task_queue=task_queue, task_ttl=7200
    )
    with caplog.at_level(logging.WARNING, logger="fastmcp_temporal"):
        async with Client(server_with(extension, square)) as client:
            assert (await client.call_tool("square", {"n": 2})).data == 4
    assert "keeps closed workflows for 1:00:00, less than the task TTL 2:00:00" in caplog.text


def test_a_clone_keeps_the_configuration_and_is_unbound(temporal_server: DevServer) -> None:
    extension = TemporalTasksExtension(address=temporal_server.address, task_queue="q", maximum_attempts=3)
    server_with(extension, square)
    clone = extension.clone()
    assert clone.temporal_settings == extension.temporal_settings
    with pytest.raises(RuntimeError, match="not bound"):
        clone.server
