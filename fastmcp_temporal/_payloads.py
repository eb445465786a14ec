"""Where task payloads live, and which sizes a task refuses before anything runs.

Temporal refuses any payload over its blob limit (2 MiB by default), and a refused
payload either re-runs a tool or leaves a workflow unable to make progress. So every
payload at or over `STORE_THRESHOLD` bytes, measured as encoded (after the payload
converter and the encryption codec), goes to an external store through temporalio's
`ExternalStorage`, and only a small reference enters history. Because the SDK stores
what the codec produced, an encrypted payload is ciphertext in the store too.

The store is chosen by `payload_store`: a folder on this host (the default with the
embedded dev server), S3 through `temporalio.contrib.aws.s3driver`, or none. What a
store cannot take (over `stored_payload_limit`, or over `payload_limit` without a
store) is refused up front: arguments at `tools/call`, answers at `tasks/update`, a
result by ending the task once with an error naming the size.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    PayloadCodec,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from fastmcp_temporal._codec import EncryptionCodec
from fastmcp_temporal._unreadable import LostPayloadsAsUnreadable
from fastmcp_temporal._wire import error_result_json
from fastmcp_temporal.workflows.models import LegOutcome, ToolCall

STORED_PAYLOAD_LIMIT = 50 * 1024 * 1024
"""The largest payload a store takes by default (the SDK's S3 driver default)."""
STORE_THRESHOLD = 256 * 1024
"""Encoded payloads this large or larger go to the store (the SDK's default)."""
_INLINE_MARGIN = 16 * 1024
"""Room a task leaves in an inline payload for what wraps it (ids, answers' framing)."""
_CODEC_SLACK = 64
"""Bytes a codec's block padding may add beyond its measured growth."""

FOLDER_DRIVER_NAME = "fastmcp-temporal.folder"


class PayloadStoreError(ValueError):
    """`payload_store` names no store this package can use."""


@dataclass(frozen=True)
class PayloadLimits:
    """How large one encoded payload of a task may be, and why."""

    limit: int
    stored: bool

    def refusal(self, what: str, size: int) -> str | None:
        """Why `size` encoded bytes of `what` cannot be kept, or None when they can."""
        if size <= self.limit:
            return None
        if self.stored:
            fix = "raise FASTMCP_TEMPORAL_STORED_PAYLOAD_LIMIT, or send less"
        else:
            fix = (
                "set FASTMCP_TEMPORAL_PAYLOAD_STORE to a folder or s3://bucket so large payloads "
                "are stored outside Temporal, or send less"
            )
        return f"{what}: {size:,} bytes encoded, over the limit of {self.limit:,} bytes; {fix}."


class FolderStorageDriver(StorageDriver):
    """Payloads as files named by their SHA-256 in one folder (0700, files 0600), for one host.

    Every process of a task queue must see the same folder; identical payloads (a
    task's arguments, sent to each leg) are written once.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def name(self) -> str:
        return FOLDER_DRIVER_NAME

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(
            lambda: [self._write(payload.SerializeToString()) for payload in payloads]
        )

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(lambda: [self._read(claim) for claim in claims])

    def _write(self, data: bytes) -> StorageDriverClaim:
        digest = hashlib.sha256(data).hexdigest()
        target = self._folder / digest
        if not target.exists():
            self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(dir=self._folder, prefix=".incoming-")  # 0600
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
            os.replace(temporary, target)
        return StorageDriverClaim(claim_data={"sha256": digest})

    def _read(self, claim: StorageDriverClaim) -> Payload:
        digest = claim.claim_data["sha256"]
        path = self._folder / digest
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"Stored payload {path} is missing; every server and worker of the task queue must "
                "share FASTMCP_TEMPORAL_PAYLOAD_STORE's folder, and it must outlive the tasks."
            ) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"Stored payload {path} does not match its SHA-256; it was altered.")
        payload = Payload()
        payload.ParseFromString(data)
        return payload


class _PrefixedS3Client(S3StorageDriverClient):
    """An aioboto3 S3 client opened per operation, under a key prefix.

    Opening per operation keeps the converter a plain value (no lifespan to close);
    only payloads over the threshold pay for it.
    """

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self._prefix}/{key}" if self._prefix else key

    async def _call(self, method: str, **kwargs: Any) -> Any:
        import aioboto3
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client

        async with aioboto3.Session().client("s3") as s3:
            return await getattr(new_aioboto3_client(s3), method)(**kwargs)

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await self._call("put_object", bucket=bucket, key=self._key(key), data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return await self._call("object_exists", bucket=bucket, key=self._key(key))

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return await self._call("get_object", bucket=bucket, key=self._key(key))

    def describe(self) -> dict[str, str]:
        return {"prefix": self._prefix} if self._prefix else {}


def _s3_driver(bucket: str, prefix: str, limit: int) -> StorageDriver:
    try:
        import aioboto3  # noqa: F401
    except ImportError as exc:
        raise PayloadStoreError(
            "An s3:// payload store needs aioboto3: pip install 'fastmcp-temporal[s3]'."
        ) from exc
    # The driver checks the stored payload, a little larger than the value we measured.
    return S3StorageDriver(
        client=_PrefixedS3Client(prefix), bucket=bucket, max_payload_size=limit + 64 * 1024
    )


def payload_storage(
    store: str | None, default_folder: Path | None, stored_limit: int
) -> ExternalStorage | None:
    """The external storage `store` names; `auto` is `default_folder` when there is one."""
    store = (store or "auto").strip()
    if store == "auto":
        return None if default_folder is None else _storage(FolderStorageDriver(default_folder))
    if store == "none":
        return None
    url = urlsplit(store)
    if url.scheme == "s3":
        if not url.netloc:
            raise PayloadStoreError(f"Payload store {store!r} names no bucket; use s3://bucket/prefix.")
        return _storage(_s3_driver(url.netloc, url.path.strip("/"), stored_limit))
    if url.scheme == "file":
        return _storage(FolderStorageDriver(Path(unquote(url.path))))
    if url.scheme == "" and Path(store).is_absolute():
        return _storage(FolderStorageDriver(Path(store)))
    raise PayloadStoreError(
        f"Unknown payload store {store!r}: use 'auto', 'none', an absolute folder path or file:///path, "
        "or s3://bucket/prefix (FASTMCP_TEMPORAL_PAYLOAD_STORE)."
    )


def _storage(driver: StorageDriver) -> ExternalStorage:
    return ExternalStorage(drivers=[LostPayloadsAsUnreadable(driver)], payload_size_threshold=STORE_THRESHOLD)


def limits_of(converter: DataConverter, payload_limit: int, stored_payload_limit: int) -> PayloadLimits:
    """What one payload may weigh with this converter's store (or lack of one)."""
    if converter.external_storage is not None:
        return PayloadLimits(stored_payload_limit, stored=True)
    return PayloadLimits(payload_limit - _INLINE_MARGIN, stored=False)


async def encoded_size(converter: DataConverter, value: Any) -> int:
    """The bytes `value` takes once converted and encoded, before any store."""
    (payload,) = converter.payload_converter.to_payloads([value])
    return await encoded_payload_size(converter, payload)


async def encoded_payload_size(converter: DataConverter, payload: Payload) -> int:
    """The bytes a converted payload takes once encoded, before any store.

    The codec's growth is measured once per codec, so a size check never pays for
    encrypting a large value twice.
    """
    return await encoded_size_of(converter, payload.ByteSize())


async def encoded_size_of(converter: DataConverter, converted_size: int) -> int:
    """The bytes a payload that converted to `converted_size` bytes takes once encoded."""
    if converter.payload_codec is None:
        return converted_size
    fixed, per_byte = await _growth(converter.payload_codec)
    return math.ceil(fixed + per_byte * converted_size) + _CODEC_SLACK


async def converter_budget(converter: DataConverter, encoded_limit: int) -> int:
    """The most bytes a value may convert to and still encode within `encoded_limit`."""
    if converter.payload_codec is None:
        return encoded_limit
    fixed, per_byte = await _growth(converter.payload_codec)
    return int((encoded_limit - fixed) / per_byte)


_codec_growth: weakref.WeakKeyDictionary[PayloadCodec, tuple[int, float]] = weakref.WeakKeyDictionary()


async def _growth(codec: PayloadCodec) -> tuple[int, float]:
    """A codec's fixed overhead and growth per byte, measured once on two probes."""
    if codec not in _codec_growth:
        probe = 64 * 1024
        empty, full = await codec.encode(
            [Payload(metadata={"encoding": b"binary/plain"}, data=b"\0" * n) for n in (0, probe)]
        )
        _codec_growth[codec] = (empty.ByteSize(), (full.ByteSize() - empty.ByteSize()) / probe)
    return _codec_growth[codec]


async def keepable(outcome: LegOutcome, call: ToolCall, converter: DataConverter) -> LegOutcome | RawValue:
    """The leg's outcome as it will be kept, or an error result naming its size.

    Checked while the leg still heartbeats: Temporal would refuse an oversize
    completion and run the tool body again, once per attempt. A large outcome is
    stored here too, and only its reference returned, because the SDK's own store
    runs after the activity stops heartbeating and a slow upload would time it out.
    """
    if call.outcome_limit is None:
        return outcome
    limits = PayloadLimits(call.outcome_limit, stored=call.outcome_stored)
    what = "The tool's result" if outcome.input_requests is None else "The tool's input requests"
    if refusal := limits.refusal(what, await encoded_size(converter, outcome)):
        return LegOutcome(result=error_result_json(refusal))
    codec = converter.payload_codec
    if converter.external_storage is None or not (codec is None or isinstance(codec, EncryptionCodec)):
        return outcome
    (payload,) = await converter.encode([outcome])
    return RawValue(payload) if payload.external_payloads else outcome
