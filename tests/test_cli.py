"""`fastmcp-temporal` as a person meets it: start-up failures, `--version`, and `--help`.

A worker pointed at an address nobody listens on, or at one that accepts TCP and never
answers, exits non-zero with one paragraph on stderr (what failed, after how long, the
command that starts a server) and no traceback. `--version` names the installed release,
and the help of every command shows each option's default.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib import metadata
from pathlib import Path

import pytest

from fastmcp_temporal.cli._main import _parser
from fastmcp_temporal.devserver import free_port
from helpers.servers import WORKER_SERVER, assert_startup_paragraph, silent_tcp_server


def fastmcp_temporal(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fastmcp_temporal.cli", *args]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)


@contextmanager
def refusing_address() -> Iterator[str]:
    yield f"127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    ("unreachable", "reason"),
    [(refusing_address, "connection refused"), (silent_tcp_server, "no answer")],
    ids=["nobody-listens", "never-answers"],
)
def test_a_worker_that_cannot_reach_temporal_exits_with_one_paragraph(
    tmp_path: Path, unreachable: type[nullcontext[str]], reason: str
) -> None:
    spec = tmp_path / "server.py"
    spec.write_text(WORKER_SERVER)
    with unreachable() as address:
        connection = {"FASTMCP_TEMPORAL_ADDRESS": address, "FASTMCP_TEMPORAL_CONNECT_TIMEOUT": "2"}
        done = fastmcp_temporal("worker", str(spec), env=connection)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "direct cause" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fastmcp-temporal: Cannot reach Temporal"), done.stderr
    assert_startup_paragraph(last.removeprefix("fastmcp-temporal: "), address, reason, 2)


def test_version_names_the_installed_release() -> None:
    done = fastmcp_temporal("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"fastmcp-temporal {metadata.version('fastmcp-temporal')}"


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {verb}")


def test_every_option_shows_its_default_in_help() -> None:
    missing = []
    for command, parser in _parsers(_parser(), "fastmcp-temporal"):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.required or action.default is argparse.SUPPRESS:
                continue  # positionals, required options, --help and --version have none
            shown = formatter._expand_help(action) if action.help else ""
            if "default" not in shown:
                missing.append(f"{command} {'/'.join(action.option_strings)}: {shown!r}")
    assert not missing, "\n".join(missing)


def test_codec_server_help_shows_port_and_body_limit_defaults() -> None:
    done = fastmcp_temporal("codec-server", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--port PORT Port to serve on (default: 8081)" in text
    assert "--max-body MAX_BODY Largest request body in bytes (default: " in text


def test_a_flag_shows_off_by_default_not_the_value_it_stores() -> None:
    text = " ".join(fastmcp_temporal("dev-server", "--help").stdout.split())
    assert "--no-ui Do not serve the Web UI (default: off)" in text
    assert "(default: True)" not in text


@pytest.mark.parametrize("command", [("tasks", "list"), ("payloads", "gc")], ids=" ".join)
def test_an_operator_command_says_and_does_the_same_with_no_address(command: tuple[str, ...]) -> None:
    help_text = " ".join(fastmcp_temporal(*command, "--help").stdout.split())
    assert "an embedded dev server is used" not in help_text
    assert "With no address anywhere, the command stops and asks for one" in help_text
    no_address = {name: value for name, value in os.environ.items() if not name.endswith("TEMPORAL_ADDRESS")}
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_temporal.cli", *command],
        env={**no_address, "TEMPORAL_CONFIG_FILE": os.devnull, "FASTMCP_TEMPORAL_PAYLOAD_STORE": "auto"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "No Temporal address: pass --address host:port" in done.stderr
