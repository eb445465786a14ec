"""`fastmcp-temporal codec-server`: decrypt task payloads for operators, and for no one else.

The Temporal UI and CLI call a codec server's `POST /encode` and `POST /decode` with
Payloads as protobuf JSON. Whoever reaches this endpoint can read every task, so it
guarantees:

- a bearer token (`Authorization: Bearer <token>`, the scheme in any case as RFC 9110
  allows, the token compared in constant time) on every call, unless it was explicitly
  started open on a loopback address;
- a `Host` header naming the bound host, a loopback name or an `--allowed-host`
  (no DNS rebinding), and an `Origin`, when a browser sends one, among the
  `--cors-origin`s (no other web page can call it);
- JSON bodies only (a cross-site form or `text/plain` post is refused, since
  browsers send those without a CORS preflight), at most `max_body` bytes;
- a payload it cannot decrypt or parse (another key, altered or garbage bytes) is a
  400 with the reason (for a payload naming a key it lacks, that key's id and the ids it
  holds), never a 500, and the answer holds no key, token or payload bytes.

It takes the servers' and workers' key list (`FASTMCP_TEMPORAL_ENCRYPTION_KEY`, keys
separated by commas): it decrypts with all of them and encodes with the first.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import sys
from collections.abc import Sequence
from typing import Any

from cryptography.fernet import InvalidToken
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from fastmcp_temporal._settings import CODEC_TOKEN_VARIABLE, MIN_ENCRYPTION_KEY_LENGTH, TemporalTasksSettings
from fastmcp_temporal.connection._codec import EncryptionCodec, UnknownEncryptionKeyError

MAX_BODY = 4 * 1024 * 1024
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers or {}


def codec_app(
    codec: PayloadCodec,
    cors_origins: Sequence[str] = (),
    *,
    token: str | None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
    max_body: int = MAX_BODY,
) -> Starlette:
    """The HTTP endpoint the Temporal UI and CLI call; ``token=None`` serves without auth."""
    allowed_origins = frozenset(cors_origins)
    expected = token.encode() if token is not None else None

    async def checked_payloads(request: Request) -> Payloads:
        origin = request.headers.get("origin")
        if origin is not None and origin not in allowed_origins:
            raise _Refused(403, f"Origin {origin} is not allowed; start the codec server with --cors-origin")
        if expected is not None and not hmac.compare_digest(_bearer_token(request), expected):
            raise _Refused(401, "Send Authorization: Bearer <token>", {"WWW-Authenticate": "Bearer"})
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            raise _Refused(415, "Send the payloads as Content-Type: application/json")
        if int(request.headers.get("content-length") or 0) > max_body:
            raise _Refused(413, f"Bodies are limited to {max_body} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body:
                raise _Refused(413, f"Bodies are limited to {max_body} bytes")
        try:
            return json_format.Parse(bytes(body), Payloads())
        except json_format.ParseError as exc:
            raise _Refused(400, f"The body is not Payloads JSON: {exc}") from None

    async def converted(payloads: Payloads, encode: bool) -> Payloads:
        try:
            return Payloads(payloads=await (codec.encode if encode else codec.decode)(payloads.payloads))
        except UnknownEncryptionKeyError as exc:
            raise _Refused(400, str(exc)) from None
        except InvalidToken:
            raise _Refused(
                400,
                "A payload could not be decrypted: it was encrypted with another key, or altered. "
                "Start the codec server with the FASTMCP_TEMPORAL_ENCRYPTION_KEY key list your workers "
                "use.",
            ) from None
        except DecodeError:
            raise _Refused(
                400,
                "A payload decrypted to bytes that are not a Temporal Payload: "
                "fastmcp-temporal did not write it.",
            ) from None

    def endpoint(encode: bool) -> Any:
        async def convert(request: Request) -> Response:
            try:
                result = await converted(await checked_payloads(request), encode)
            except _Refused as refused:
                return JSONResponse({"error": str(refused)}, refused.status, refused.headers)
            return Response(json_format.MessageToJson(result), media_type="application/json")

        return convert

    return Starlette(
        routes=[
            Route("/encode", endpoint(encode=True), methods=["POST"]),
            Route("/decode", endpoint(encode=False), methods=["POST"]),
        ],
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
            Middleware(
                CORSMiddleware,
                allow_origins=list(allowed_origins),
                allow_methods=["POST"],
                allow_headers=["authorization", "content-type", "x-namespace"],
            ),
        ],
    )


def _bearer_token(request: Request) -> bytes:
    """The credentials of an `Authorization: Bearer` header (any case of the scheme), else empty."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip(" ").encode() if scheme.lower() == "bearer" else b""


def add_codec_server_command(commands: Any) -> None:
    """Register `codec-server` on the CLI's sub-command parsers."""
    parser = commands.add_parser(
        "codec-server",
        help="Let the Temporal UI and CLI decrypt task payloads (needs FASTMCP_TEMPORAL_ENCRYPTION_KEY, "
        "the workers' key list).",
        description=(
            "Serve POST /encode and /decode for the Temporal UI (codec endpoint setting) and CLI "
            "(--codec-endpoint, --codec-auth 'Bearer <token>'). Every call must carry "
            f"'Authorization: Bearer <token>' with the token from ${CODEC_TOKEN_VARIABLE} (or --token)."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8081, help="Port to serve on")
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        help="Origin of the Temporal UI allowed to call it, e.g. http://127.0.0.1:8233 (repeatable)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="Extra Host header value to accept, e.g. the name a proxy serves it under (repeatable)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(CODEC_TOKEN_VARIABLE),
        help=f"Bearer token callers must send (default ${CODEC_TOKEN_VARIABLE}; prefer the variable, "
        "a command line is visible to other users)",
    )
    parser.add_argument(
        "--insecure-open-loopback",
        action="store_true",
        help="Serve without a token; only on a loopback --host, for a local UI without sign-in",
    )
    parser.add_argument("--max-body", type=int, default=MAX_BODY, help="Largest request body in bytes")
    parser.set_defaults(run=run_codec_server)


def run_codec_server(args: argparse.Namespace) -> None:
    import uvicorn

    key = TemporalTasksSettings().encryption_key
    if key is None:
        sys.exit("Set FASTMCP_TEMPORAL_ENCRYPTION_KEY to the key list your servers and workers use.")
    token = _token(args)
    codec = EncryptionCodec(key.get_secret_value())
    print(
        f"Decrypting payloads of key ids {', '.join(codec.key_ids)}; encoding with {codec.key_ids[0]}.",
        file=sys.stderr,
    )
    app = codec_app(
        codec,
        args.cors_origin,
        token=token,
        allowed_hosts=_allowed_hosts(args.host, args.allowed_host),
        max_body=args.max_body,
    )
    uvicorn.run(app, host=args.host, port=args.port)


def _token(args: argparse.Namespace) -> str | None:
    if args.insecure_open_loopback:
        if not _is_loopback(args.host):
            sys.exit(
                "--insecure-open-loopback serves without a token, so only on a loopback --host, "
                f"not {args.host}."
            )
        return None
    if not args.token:
        sys.exit(
            f"The codec server decrypts every task for whoever calls it: set {CODEC_TOKEN_VARIABLE} to a random "
            f"token of at least {MIN_ENCRYPTION_KEY_LENGTH} characters and send 'Authorization: Bearer "
            "<token>' (Temporal CLI: --codec-auth). For a local UI without sign-in, "
            "--insecure-open-loopback serves without a token on 127.0.0.1 only."
        )
    if len(args.token) < MIN_ENCRYPTION_KEY_LENGTH:
        sys.exit(f"{CODEC_TOKEN_VARIABLE} (--token) must be at least {MIN_ENCRYPTION_KEY_LENGTH} characters.")
    return str(args.token)


def _allowed_hosts(host: str, extra: Sequence[str]) -> list[str]:
    bound = [] if host in ("0.0.0.0", "::", "") else [host.strip("[]")]
    return [*bound, *LOOPBACK_NAMES, *extra]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
