"""Encrypt everything a task stores in Temporal; decode it for operators who hold the key.

With `FASTMCP_TEMPORAL_ENCRYPTION_KEY` set, every payload the extension and its
workers write — the workflow input (arguments, caller snapshot), answers, results,
memo and heartbeat details — is Fernet-encrypted before it leaves the process, and so
are failure messages and stack traces (moved into an encoded attribute).
Search attributes are never encrypted; they hold only tool names, states and scope
tags. `fastmcp-temporal codec-server` (`cli._codec_server`) serves the Temporal UI's
remote codec endpoint, so an operator who holds the key can read payloads in the UI.

Every server and worker on a task queue must share the key: a process without it
cannot read the tasks, and Temporal keeps retrying their workflow tasks until one can.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec

from fastmcp_temporal._settings import MIN_ENCRYPTION_KEY_LENGTH

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

ENCODING = b"binary/fastmcp-temporal-encrypted"
_KEY_SALT = "fastmcp-temporal-payload-key"


class EncryptionCodec(PayloadCodec):
    """Fernet-encrypts whole payloads; unencrypted payloads decode as they are."""

    def __init__(self, key: str) -> None:
        if len(key) < MIN_ENCRYPTION_KEY_LENGTH:
            raise ValueError(
                f"The encryption key (FASTMCP_TEMPORAL_ENCRYPTION_KEY) must be at least "
                f"{MIN_ENCRYPTION_KEY_LENGTH} characters; unset it to store payloads in clear."
            )
        self._fernet = _fernet(key)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        # A reference to a stored payload (whose stored bytes are already encrypted) holds no
        # content; a leg that stored its own result returns that reference as is.
        return [
            payload
            if payload.external_payloads
            else Payload(metadata={"encoding": ENCODING}, data=self._fernet.encrypt(payload.SerializeToString()))
            for payload in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(payload) for payload in payloads]

    def _decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        decrypted = Payload()
        decrypted.ParseFromString(self._fernet.decrypt(payload.data))
        return decrypted


def _fernet(key: str) -> Fernet:
    from cryptography.fernet import Fernet

    return Fernet(stretched_key(key))


@lru_cache(maxsize=4)
def stretched_key(key: str) -> bytes:
    """The payload key stretched from `key` (PBKDF2, about a second: paid once per key and process).

    Scope tags derive their own secret from it (`_scope.scope_secret`), so guessing a weak
    key from a tag costs as much as from a ciphertext.
    """
    from fastmcp.server.auth.jwt_issuer import derive_jwt_key

    return derive_jwt_key(low_entropy_material=key, salt=_KEY_SALT)


def with_encryption(converter: DataConverter, key: str) -> DataConverter:
    """`converter` encrypting every payload, and failure messages and stack traces, with `key`."""
    return dataclasses.replace(
        converter,
        payload_codec=EncryptionCodec(key),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
