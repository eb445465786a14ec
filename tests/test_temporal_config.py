"""Temporal's own connection conventions: TEMPORAL_* variables, temporal.toml profiles, TLS.

Precedence is constructor > FASTMCP_TEMPORAL_* > Temporal's env/profile > defaults.
TLS is real: the extension reaches the dev server only through a mutual-TLS proxy
whose CA and certificates the test makes, configured through a profile file, through
Temporal's TEMPORAL_TLS_* variables, or through FASTMCP_TEMPORAL_TLS_*.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from fastmcp import Client
from fastmcp_tasks import call_tool_task
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer, free_port
from helpers.servers import WORKER_SERVER, server_with, square
from helpers.temporal import task_handle
from helpers.tls import CLIENT_NAME, SERVER_NAME, TlsFiles, TlsProxy, make_tls_files

pytestmark = pytest.mark.anyio


def _extension(task_queue: str, **settings: object) -> TemporalTasksExtension:
    return TemporalTasksExtension(
        task_queue=task_queue, heartbeat_timeout=timedelta(seconds=2), shutdown_grace=timedelta(0), **settings
    )


async def _run_task(extension: TemporalTasksExtension) -> str:
    """Run one task over the MCP wire; its task id."""
    async with Client(server_with(extension, square)) as client:
        task = await call_tool_task(client, "square", {"n": 21})
        assert (await task.result()).data == 441
    return task.task_id


async def _completed_in_temporal(address: str, namespace: str, task_id: str) -> None:
    """Read the task's workflow straight from the dev server (no TLS, no extension)."""
    plain = await TemporalClient.connect(address, namespace=namespace)
    handle = task_handle(plain, task_id)
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def tls_proxy(tls_files: TlsFiles, temporal_server: DevServer) -> AsyncIterator[TlsProxy]:
    async with TlsProxy(tls_files, temporal_server.address) as proxy:
        yield proxy


async def test_a_temporal_toml_profile_reaches_temporal_over_mutual_tls(
    tls_proxy: TlsProxy,
    tls_files: TlsFiles,
    temporal_server: DevServer,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.secure]\naddress = "{tls_proxy.address}"\nnamespace = "default"\n'
        f'[profile.secure.tls]\nserver_name = "{SERVER_NAME}"\n'
        f'server_ca_cert_path = "{tls_files.ca_cert}"\n'
        f'client_cert_path = "{tls_files.client_cert}"\nclient_key_path = "{tls_files.client_key}"\n'
    )
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    monkeypatch.setenv("TEMPORAL_PROFILE", "secure")
    task_id = await _run_task(_extension(task_queue))
    assert CLIENT_NAME in tls_proxy.client_subjects
    await _completed_in_temporal(temporal_server.address, "default", task_id)


@pytest.mark.parametrize("prefix", ["TEMPORAL_TLS_", "FASTMCP_TEMPORAL_TLS_"])
async def test_tls_environment_variables_reach_temporal_over_mutual_tls(
    prefix: str,
    tls_proxy: TlsProxy,
    tls_files: TlsFiles,
    temporal_server: DevServer,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", tls_proxy.address)
    names = {
        "TEMPORAL_TLS_": ("SERVER_NAME", "SERVER_CA_CERT_PATH", "CLIENT_CERT_PATH", "CLIENT_KEY_PATH"),
        "FASTMCP_TEMPORAL_TLS_": ("SERVER_NAME", "CA_CERT", "CLIENT_CERT", "CLIENT_KEY"),
    }[prefix]
    values = (SERVER_NAME, tls_files.ca_cert, tls_files.client_cert, tls_files.client_key)
    for name, value in zip(names, values):
        monkeypatch.setenv(prefix + name, str(value))
    task_id = await _run_task(_extension(task_queue))
    assert CLIENT_NAME in tls_proxy.client_subjects
    await _completed_in_temporal(temporal_server.address, "default", task_id)


async def test_a_tls_endpoint_is_refused_without_the_ca_that_signed_it(
    tls_proxy: TlsProxy, tls_files: TlsFiles, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", tls_proxy.address)
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", SERVER_NAME)
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(tls_files.client_cert))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(tls_files.client_key))
    with pytest.raises(Exception, match=f"Cannot reach Temporal namespace 'default' at {tls_proxy.address}"):
        await _run_task(_extension(task_queue, connect_timeout=5))
    assert tls_proxy.client_subjects == []


async def test_temporal_address_and_profile_namespace_are_used_when_nothing_else_is_set(
    temporal_server: DevServer, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = f"profile-{task_queue}"
    plain = await TemporalClient.connect(temporal_server.address)
    await plain.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.default]\nnamespace = "{namespace}"\naddress = "127.0.0.1:{free_port()}"\n')
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_server.address)  # Temporal's env beats its file
    task_id = await _run_task(_extension(task_queue))
    await _completed_in_temporal(temporal_server.address, namespace, task_id)


async def test_fastmcp_temporal_settings_win_over_temporal_env_and_the_constructor_over_both(
    temporal_server: DevServer, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TEMPORAL_ADDRESS", dead)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "no-such-namespace")
    monkeypatch.setenv("FASTMCP_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("FASTMCP_TEMPORAL_NAMESPACE", "default")
    await _completed_in_temporal(temporal_server.address, "default", await _run_task(_extension(task_queue)))

    monkeypatch.setenv("FASTMCP_TEMPORAL_ADDRESS", dead)
    extension = _extension(task_queue, address=temporal_server.address)
    await _completed_in_temporal(temporal_server.address, "default", await _run_task(extension))


async def test_fastmcp_temporal_tls_false_turns_a_profiles_tls_off(
    tls_proxy: TlsProxy,
    tls_files: TlsFiles,
    temporal_server: DevServer,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", tls_proxy.address)
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(tls_files.ca_cert))
    monkeypatch.setenv("FASTMCP_TEMPORAL_ADDRESS", temporal_server.address)  # plain, no TLS
    monkeypatch.setenv("FASTMCP_TEMPORAL_TLS", "false")
    await _completed_in_temporal(temporal_server.address, "default", await _run_task(_extension(task_queue)))
    assert tls_proxy.client_subjects == []


async def test_temporal_namespace_is_read_from_temporal_env(
    temporal_server: DevServer, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "no-such-namespace")
    with pytest.raises(Exception, match="Cannot reach Temporal namespace 'no-such-namespace'"):
        await _run_task(_extension(task_queue))


async def test_a_missing_config_file_or_profile_fails_startup_with_the_fix(
    task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(Exception, match="config_file names .*missing.toml, which is not a file"):
        await _run_task(_extension(task_queue, config_file=tmp_path / "missing.toml"))
    config = tmp_path / "temporal.toml"
    config.write_text('[profile.default]\naddress = "127.0.0.1:7233"\n')
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    with pytest.raises(Exception, match="profile 'prod'.*Profile 'prod' not found.*TEMPORAL_PROFILE"):
        await _run_task(_extension(task_queue, profile="prod"))


async def test_the_worker_command_connects_with_the_shared_connection_options(
    tls_proxy: TlsProxy, tls_files: TlsFiles, temporal_server: DevServer, task_queue: str, tmp_path: Path
) -> None:
    server_file = tmp_path / "server.py"
    server_file.write_text(WORKER_SERVER)
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.secure]\naddress = "{tls_proxy.address}"\n')
    command = [
        *("fastmcp-temporal", "worker", str(server_file), "--task-queue", task_queue),
        *("--config-file", str(config), "--profile", "secure", "--tls-server-name", SERVER_NAME),
        *("--tls-ca-cert", str(tls_files.ca_cert), "--tls-client-cert", str(tls_files.client_cert)),
        *("--tls-client-key", str(tls_files.client_key)),
    ]
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("fastmcp-temporal")), *command[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        api = _extension(task_queue, address=temporal_server.address, worker=False)
        with anyio.fail_after(60):
            task_id = await _run_task(api)
    finally:
        worker.terminate()  # its graceful stop still talks to Temporal through this loop's proxy
        try:
            output = (await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=60)))[0].decode()
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    assert CLIENT_NAME in tls_proxy.client_subjects, output
    await _completed_in_temporal(temporal_server.address, "default", task_id)
