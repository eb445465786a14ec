"""Encrypt everything a task stores in Temporal; decode it for operators who hold the key.

With `FASTMCP_TEMPORAL_ENCRYPTION_KEY` set, every payload the extension and its
workers write — the workflow input (arguments, caller snapshot), answers, results,
memo and heartbeat details — is Fernet-encrypted before it leaves the process, and so
are failure messages and stack traces (moved into an encoded attribute).
Search attributes are never encrypted; they hold only tool names, states and scope
tags. `fastmcp-temporal codec-server` (`cli._codec_server`) serves the Temporal UI's
remote codec endpoint, so an operator who holds the key can read payloads in the UI.

Keys rotate: the setting lists keys separated by commas; the first encrypts, all
decrypt. Each payload names in its metadata the id of the key that encrypted it (an
HMAC of the stretched key under a fixed label, never the key) and the derivation that
stretched it, so decoding picks that key, and a payload whose key this process lacks
fails with an error naming its key id and the ids this process holds. Payloads written
by 0.2.0 carry no key id: they decode with each configured key in turn.

Every server and worker on a task queue must hold the keys its tasks were written
with: a process without one cannot read those tasks, and Temporal keeps retrying
their workflow tasks until one can.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
from collections.abc import Sequence
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec

from fastmcp_temporal._settings import encryption_keys

ENCODING = b"binary/fastmcp-temporal-encrypted"
KEY_ID_METADATA = "fastmcp-temporal-key-id"
DERIVATION_METADATA = "fastmcp-temporal-key-derivation"
DERIVATION = b"v2"
"""PBKDF2-HMAC-SHA256, 1,000,000 iterations, salt `_KEY_SALT`, 32 bytes: what 0.2.0 got from
FastMCP's `derive_jwt_key` outside FastMCP's test mode, now fixed here whatever that mode says."""
_KEY_SALT = b"fastmcp-temporal-payload-key"
_KEY_ITERATIONS = 1_000_000
# FastMCP's derive_jwt_key used 10 iterations under FastMCP's test mode: 0.2.0 payloads written then.
_FASTMCP_TEST_MODE_ITERATIONS = 10
_KEY_ID_LABEL = b"fastmcp-temporal key id"


class UnknownEncryptionKeyError(InvalidToken):
    """A payload names a key or derivation this process does not hold; the message says which."""


@dataclasses.dataclass(frozen=True)
class _PayloadKey:
    id: str
    fernet: Fernet


class EncryptionCodec(PayloadCodec):
    """Fernet-encrypts whole payloads with the first key; decrypts each with the key that made it.

    Args:
        keys: the `FASTMCP_TEMPORAL_ENCRYPTION_KEY` value: one key, or several separated by
            commas, the first encrypting and all decrypting. Each is stretched once per
            process (about a second). Unencrypted payloads decode as they are.
    """

    def __init__(self, keys: str) -> None:
        listed = encryption_keys(keys)
        payload_keys = [_PayloadKey(key_id(key), _fernet(key)) for key in listed]
        self._encrypting = payload_keys[0]
        self._by_id = {payload_key.id: payload_key for payload_key in payload_keys}
        test_mode = [_fernet(key, _FASTMCP_TEST_MODE_ITERATIONS) for key in listed]
        self._legacy = MultiFernet([*(payload_key.fernet for payload_key in payload_keys), *test_mode])

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of this codec's keys, the encrypting key's first."""
        return tuple(self._by_id)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        # A reference to a stored payload (whose stored bytes are already encrypted) holds no
        # content; a leg that stored its own result returns that reference as is.
        return [payload if payload.external_payloads else self._encrypt(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(payload) for payload in payloads]

    def _encrypt(self, payload: Payload) -> Payload:
        metadata = {
            "encoding": ENCODING,
            KEY_ID_METADATA: self._encrypting.id.encode(),
            DERIVATION_METADATA: DERIVATION,
        }
        return Payload(metadata=metadata, data=self._encrypting.fernet.encrypt(payload.SerializeToString()))

    def _decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        decrypted = Payload()
        decrypted.ParseFromString(self._cipher(payload).decrypt(payload.data))
        return decrypted

    def _cipher(self, payload: Payload) -> Fernet | MultiFernet:
        """The key `payload` names; every configured key for a 0.2.0 payload, which names none."""
        if KEY_ID_METADATA not in payload.metadata:
            return self._legacy
        derivation = payload.metadata.get(DERIVATION_METADATA)
        if derivation != DERIVATION:
            raise UnknownEncryptionKeyError(
                f"A payload names key derivation {_shown(derivation)}, which this fastmcp-temporal does "
                "not know: run the fastmcp-temporal release that wrote it, or a later one."
            )
        named = _shown(payload.metadata[KEY_ID_METADATA])
        payload_key = self._by_id.get(named)
        if payload_key is None:
            raise UnknownEncryptionKeyError(
                f"A payload was encrypted with another key, key id {named}, not among this process's keys "
                f"(ids {', '.join(self.key_ids)}): add that key to FASTMCP_TEMPORAL_ENCRYPTION_KEY "
                "after the first (listed keys after the first only decrypt)."
            )
        return payload_key.fernet


def _shown(value: bytes | None) -> str:
    return "none" if value is None else value.decode(errors="replace")[:64]


def _fernet(key: str, iterations: int = _KEY_ITERATIONS) -> Fernet:
    return Fernet(_stretched(key, iterations))


def stretched_key(key: str) -> bytes:
    """The payload key stretched from `key` (PBKDF2, about a second: paid once per key and process).

    Scope tags derive their own secret from it (`_scope.scope_secrets`), so guessing a weak
    key from a tag costs as much as from a ciphertext.

    Args:
        key: one encryption key.
    """
    return _stretched(key, _KEY_ITERATIONS)


@lru_cache(maxsize=16)
def _stretched(key: str, iterations: int) -> bytes:
    kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=_KEY_SALT, iterations=iterations)
    return base64.urlsafe_b64encode(kdf.derive(key.encode()))


def key_id(key: str) -> str:
    """The id payloads encrypted with `key` carry: 8 hex characters, from which the key cannot be got.

    Args:
        key: one encryption key.
    """
    return hmac.new(stretched_key(key), _KEY_ID_LABEL + DERIVATION, "sha256").hexdigest()[:8]


def with_encryption(converter: DataConverter, keys: str) -> DataConverter:
    """`converter` encrypting every payload, and failure messages and stack traces, with `keys`
    (the `FASTMCP_TEMPORAL_ENCRYPTION_KEY` value: the first encrypts, all decrypt)."""
    return dataclasses.replace(
        converter,
        payload_codec=EncryptionCodec(keys),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
