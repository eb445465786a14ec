"""The search attributes tasks are indexed by, registered on whichever server they run on.

Tasks are found by tool, status and scope (`fastmcp-temporal tasks`, the Temporal UI)
through the custom search attributes in `SEARCH_ATTRIBUTES`, and servers find the tasks
that changed by `McpTaskChangedAt`. A dev server we start gets them at launch, but
ignores `--search-attribute` on an existing database file, and any other server may
lack them, so they are registered through the operator service wherever the extension
connects. A server that refuses, or already has one with another type, raises
`SearchAttributeSetupError`, whose message names the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES


class SearchAttributeSetupError(RuntimeError):
    """The server refused the search attributes, or has them with another type; the message names the fix."""


@dataclass(frozen=True)
class Indexed:
    """Which of the search attributes tasks are indexed by the namespace has."""

    tasks: bool
    """`McpTool`, `McpTaskStatus` and `McpScope`: tasks are searchable."""
    changes: bool
    """`McpTaskChangedAt` too: tasks stamp their changes, which one visibility query finds."""


async def ensure_search_attributes(
    client: Client, address: str, namespace: str, attributes: Mapping[str, str] = SEARCH_ATTRIBUTES
) -> None:
    """Add the `attributes` (name: type) `namespace` lacks; `address` names the server in errors."""
    wanted = {name: _indexed_value_type(kind) for name, kind in attributes.items()}
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        existing = dict(listed.custom_attributes)
        clashing = sorted(name for name, kind in wanted.items() if existing.get(name, kind) != kind)
        if clashing:
            raise SearchAttributeSetupError(
                f"Search attributes {clashing} exist on {address} with another type than "
                f"{[attributes[name] for name in clashing]}; use a new database file "
                "(db_path / state dir) or a server without them."
            )
        missing = {name: kind for name, kind in wanted.items() if name not in existing}
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            )
    except RPCError as error:
        raise SearchAttributeSetupError(
            f"Could not register search attributes {sorted(wanted)} on {address} "
            f"(namespace {namespace!r}): {error}. "
            "Check the server log, or delete its database file."
        ) from error


def _indexed_value_type(kind: str) -> IndexedValueType.ValueType:
    """``"KeywordList"`` -> ``INDEXED_VALUE_TYPE_KEYWORD_LIST``."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).upper()
    return IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{snake}")
