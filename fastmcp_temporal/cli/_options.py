"""The Temporal connection options every `fastmcp-temporal` sub-command shares.

`add_connection_options(parser)` adds them under one help heading and
`setting_overrides(args)` turns the ones given into `TemporalTasksSettings` fields.
`Parser` is the CLI's parser class: its help shows every option's default.
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
TEMPORAL_PROFILE names in temporal.toml (TEMPORAL_CONFIG_FILE). {no_address} Prefer
the variables for secrets: the command line is visible to other users of the machine."""
# What a command does with no address anywhere: a worker starts (or reuses) the embedded dev
# server, as a server does; an operator command reads an existing Temporal and starts none.
EMBEDDED = "With no address anywhere, an embedded dev server is used."
ADDRESS_REQUIRED = (
    "With no address anywhere, the command stops and asks for one: it starts no server of its own "
    "(an embedded dev server logs its address when it starts)."
)

_PATH: dict[str, Any] = {"type": Path, "metavar": "PATH"}
_KEY: dict[str, Any] = {"metavar": "KEY"}
_STORE: dict[str, Any] = {"metavar": "STORE"}
_FROM_TEMPORAL = "Temporal's configuration"
# (flag, setting, help, default when neither the option nor its variable is set, argparse keywords)
_OPTIONS: tuple[tuple[str, str, str, str, dict[str, Any]], ...] = (
    ("--address", "address", "Temporal frontend host:port", f"{_FROM_TEMPORAL}, else {{no_address}}",
     {"metavar": "HOST:PORT"}),
    ("--namespace", "namespace", "Temporal namespace", f"{_FROM_TEMPORAL}, else 'default'", {}),
    ("--profile", "profile", "profile in temporal.toml", "TEMPORAL_PROFILE, else 'default'", {}),
    ("--config-file", "config_file", "Temporal's temporal.toml", "TEMPORAL_CONFIG_FILE, else Temporal's",
     _PATH),
    ("--api-key", "api_key", "Temporal Cloud API key; turns TLS on", f"{_FROM_TEMPORAL}, else none", _KEY),
    ("--tls", "tls", "force TLS on (--no-tls: off)", f"{_FROM_TEMPORAL}, else on only with an API key or a "
     "TLS file", {"action": argparse.BooleanOptionalAction}),
    ("--tls-ca-cert", "tls_ca_cert", "PEM CA of the server certificate", f"{_FROM_TEMPORAL}, else the "
     "system's", _PATH),
    ("--tls-client-cert", "tls_client_cert", "PEM client certificate (mTLS)", f"{_FROM_TEMPORAL}, else none",
     _PATH),
    ("--tls-client-key", "tls_client_key", "PEM key of the client certificate", f"{_FROM_TEMPORAL}, else "
     "none", _PATH),
    ("--tls-server-name", "tls_server_name", "server name to verify (SNI)", "the address's host",
     {"metavar": "NAME"}),
    ("--encryption-key", "encryption_key", "keys of task payloads, comma-separated: the first encrypts, all "
     "decrypt", "none: payloads stored in clear", {"metavar": "KEYS"}),
    ("--payload-store", "payload_store", "where payloads of 256 KiB or more go", "auto", _STORE),
)


class DefaultsShown(argparse.HelpFormatter):
    """Help that ends each option's text with its default, unless the text says it already; a flag's
    is "off" (not given), whatever value it stores (`--no-ui` stores False and is off by default).

    An option whose default is None (not set) must say in its text what not setting it means.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.required or "default" in text:
            return text
        if action.default in (None, argparse.SUPPRESS):
            return text
        switch = action.nargs == 0 and isinstance(action.default, bool)  # a flag: its default is "not given"
        shown = "off" if switch else "none" if action.default == [] else action.default
        return f"{text} (default: {str(shown).replace('%', '%%')})"


class DefaultsShownRawDescription(DefaultsShown, argparse.RawDescriptionHelpFormatter):
    """`DefaultsShown`, with a description laid out as written."""


class Parser(argparse.ArgumentParser):
    """The CLI's parsers: every one, sub-commands' too, shows the defaults in its help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsShown)
        super().__init__(*args, **kwargs)


def add_connection_options(parser: argparse.ArgumentParser, *, embedded: bool = False) -> None:
    """The connection options, under a heading that says what happens with no address:
    ``embedded`` commands start the embedded dev server; the others stop and ask for an address."""
    no_address = EMBEDDED if embedded else ADDRESS_REQUIRED
    group = parser.add_argument_group("Temporal connection", CONNECTION_HELP.format(no_address=no_address))
    for flag, setting, help_text, default, keywords in _OPTIONS:
        env = f"FASTMCP_TEMPORAL_{setting.upper()}"
        shown = default.format(no_address="an embedded dev server" if embedded else "none: the command stops")
        group.add_argument(
            flag, dest=setting, default=None, help=f"{help_text} [{env}] (default: {shown})", **keywords
        )


def setting_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The connection settings given on the command line, by setting name."""
    given = {setting: getattr(args, setting, None) for _, setting, _, _, _ in _OPTIONS}
    return {setting: value for setting, value in given.items() if value is not None}
