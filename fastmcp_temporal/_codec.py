"""Encrypt everything a task stores in Temporal; decode it for operators who hold the key.

With `FASTMCP_TEMPORAL_ENCRYPTION_KEY` set, every payload the extension and its
workers write — the workflow input (arguments, caller snapshot), answers, results,
memo and heartbeat details — is Fernet-encrypted before it leaves the process.
Search attributes are never encrypted; they hold only tool names, states and scope
hashes. `fastmcp-temporal codec-server` serves the Temporal UI's remote codec
endpoint, so an operator who holds the key can read payloads in the UI.

Every server and worker on a task queue must share the key: a process without it
cannot read the tasks, and Temporal keeps retrying their workflow tasks until one can.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import DataConverter, PayloadCodec

if TYPE_CHECKING:
    from cryptography.fernet import Fernet
    from starlette.applications import Starlette

ENCODING = b"binary/fastmcp-temporal-encrypted"
_KEY_SALT = "fastmcp-temporal-payload-key"


class EncryptionCodec(PayloadCodec):
    """Fernet-encrypts whole payloads; unencrypted payloads decode as they are."""

    def __init__(self, key: str) -> None:
        if not key:
            raise ValueError("The encryption key must not be empty; unset it to store payloads in clear.")
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


@lru_cache(maxsize=4)
def _fernet(key: str) -> Fernet:
    """The key stretch (PBKDF2, about a second) is paid once per key and process."""
    from cryptography.fernet import Fernet
    from fastmcp.server.auth.jwt_issuer import derive_jwt_key

    return Fernet(derive_jwt_key(low_entropy_material=key, salt=_KEY_SALT))


def encrypted_data_converter(key: str | None, payload_store: str = "none") -> DataConverter:
    """The converter tasks use (encryption, payload store), for a `Client` you connect yourself."""
    from fastmcp_temporal._payloads import STORED_PAYLOAD_LIMIT, payload_storage, task_data_converter

    return task_data_converter(key, payload_storage(payload_store, None, STORED_PAYLOAD_LIMIT))


async def _apply(codec: PayloadCodec, body: bytes, *, encode: bool) -> str:
    payloads = json_format.Parse(body, Payloads())
    converted = await (codec.encode if encode else codec.decode)(payloads.payloads)
    return json_format.MessageToJson(Payloads(payloads=converted))


def codec_app(codec: PayloadCodec, cors_origins: Sequence[str] = ()) -> Starlette:
    """The HTTP endpoint the Temporal UI calls (`POST /encode`, `POST /decode`)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def encode(request: Request) -> Response:
        return Response(await _apply(codec, await request.body(), encode=True), media_type="application/json")

    async def decode(request: Request) -> Response:
        return Response(await _apply(codec, await request.body(), encode=False), media_type="application/json")

    return Starlette(
        routes=[Route("/encode", encode, methods=["POST"]), Route("/decode", decode, methods=["POST"])],
        middleware=[
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["POST"],
                allow_headers=["content-type", "x-namespace"],
            )
        ],
    )
