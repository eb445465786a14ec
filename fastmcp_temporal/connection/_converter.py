"""The one data converter every client and worker of a task queue must share.

It writes JSON in the key order the tool built (`_ordered_json`), so tasks answer
with an inline call's bytes; it encrypts payloads and failure messages with the key
(`_codec`); and it sends payloads of 256 KiB or more to the payload store
(`_stores`), whose lost payloads come back as stand-ins (`_unreadable`). Servers,
workers, the CLI and a user's own `Client` all get it from here, so they can read
each other's tasks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from temporalio.converter import DataConverter, ExternalStorage

from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._codec import with_encryption
from fastmcp_temporal.connection._ordered_json import keeping_key_order
from fastmcp_temporal.connection._stores import STORED_PAYLOAD_LIMIT, payload_storage


def tasks_data_converter(
    settings: TemporalTasksSettings, base: DataConverter | None = None, payload_folder: Path | None = None
) -> DataConverter:
    """The converter the settings describe, built on `base` (Temporal's default).

    `payload_folder` is where `payload_store='auto'` keeps payloads (the embedded dev
    server's state folder); without one, 'auto' stores nothing outside history.
    """
    key = settings.encryption_key
    storage = payload_storage(settings.payload_store, payload_folder, settings.stored_payload_limit)
    return _converter(base or DataConverter.default, key.get_secret_value() if key else None, storage)


def encrypted_data_converter(key: str | None, payload_store: str = "none") -> DataConverter:
    """The converter tasks use (encryption, payload store), for a `Client` you connect yourself.

    Args:
        key: the `FASTMCP_TEMPORAL_ENCRYPTION_KEY` every server and worker shares, or None
            to store payloads in clear.
        payload_store: the `FASTMCP_TEMPORAL_PAYLOAD_STORE` they use: `none`, a folder or
            `s3://bucket/prefix`.

    Failures carry their message and stack trace in an encoded attribute, so a tool's
    exception text is encrypted too; clients with the key read them back unchanged.
    """
    return _converter(DataConverter.default, key, payload_storage(payload_store, None, STORED_PAYLOAD_LIMIT))


def _converter(base: DataConverter, key: str | None, storage: ExternalStorage | None) -> DataConverter:
    """`base` in key order, encrypting with `key` and storing in `storage` unless it has its own."""
    converter = keeping_key_order(base)
    if key is not None and converter.payload_codec is None:
        converter = with_encryption(converter, key)
    if storage is not None and converter.external_storage is None:
        converter = dataclasses.replace(converter, external_storage=storage)
    return converter
