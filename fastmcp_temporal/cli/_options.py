"""The Temporal connection options every `fastmcp-temporal` sub-command shares.

`add_connection_options(parser)` adds them under one help heading and
`setting_overrides(args)` turns the ones given into `TemporalTasksSettings` fields.
An option left out is not a default: the setting still falls back to its
`FASTMCP_TEMPORAL_*` variable, then to Temporal's own `TEMPORAL_*` variables and
`temporal.toml` profile, then to the built-in default.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

CONNECTION_HELP = """\
Each option overrides its FASTMCP_TEMPORAL_* variable (named beside it); anything
not set there comes from Temporal's own configuration: TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*, and the profile
TEMPORAL_PROFILE names in temporal.toml (TEMPORAL_CONFIG_FILE). With no address
anywhere, an embedded dev server is used. Prefer the variables for secrets: the
command line is visible to other users of the machine."""

_PATH: dict[str, Any] = {"type": Path, "metavar": "PATH"}
# (flag, setting, help, argparse keywords)
_OPTIONS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("--address", "address", "Temporal frontend host:port", {"metavar": "HOST:PORT"}),
    ("--namespace", "namespace", "Temporal namespace (default: 'default')", {}),
    ("--profile", "profile", "profile in temporal.toml", {}),
    ("--config-file", "config_file", "Temporal's temporal.toml", _PATH),
    ("--api-key", "api_key", "Temporal Cloud API key; turns TLS on", {"metavar": "KEY"}),
    ("--tls", "tls", "force TLS on (--no-tls: off)", {"action": argparse.BooleanOptionalAction}),
    ("--tls-ca-cert", "tls_ca_cert", "PEM CA of the server certificate", _PATH),
    ("--tls-client-cert", "tls_client_cert", "PEM client certificate (mTLS)", _PATH),
    ("--tls-client-key", "tls_client_key", "PEM key of the client certificate", _PATH),
    ("--tls-server-name", "tls_server_name", "server name to verify (SNI)", {"metavar": "NAME"}),
    (
        "--encryption-key",
        "encryption_key",
        "keys of task payloads, comma-separated: the first encrypts, all decrypt",
        {"metavar": "KEYS"},
    ),
    ("--payload-store", "payload_store", "where payloads of 256 KiB or more go", {"metavar": "STORE"}),
)


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Temporal connection", CONNECTION_HELP)
    for flag, setting, help_text, keywords in _OPTIONS:
        env = f"FASTMCP_TEMPORAL_{setting.upper()}"
        group.add_argument(flag, dest=setting, default=None, help=f"{help_text} [{env}]", **keywords)


def setting_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The connection settings given on the command line, by setting name."""
    given = {setting: getattr(args, setting, None) for _, setting, _, _ in _OPTIONS}
    return {setting: value for setting, value in given.items() if value is not None}
