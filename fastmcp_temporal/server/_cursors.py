"""Page cursors a server issued, and only those, for `tasks/list`.

A cursor is Temporal's visibility page token with an HMAC under the scope secret and the
caller's scope tag, so a cursor the server did not issue to this caller (forged, truncated,
another caller's, or oversized) is the caller's invalid parameter, refused at once with
-32602. Passed to Temporal, such a token fails only after its retries, as an internal error
that advises a retry.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

# Temporal's visibility page tokens are a few hundred bytes; anything far longer is not one of ours.
MAX_CURSOR_CHARS = 4096
_SEAL_BYTES = 16
_INVALID_CURSOR = "Invalid cursor for tasks/list: pass a nextCursor it answered, or no cursor for the first page."


def issue_cursor(secret: bytes, scope_tag: str, page_token: bytes) -> str:
    """The `nextCursor` for `page_token`, valid for the caller of `scope_tag` alone."""
    return _b64(_seal(secret, scope_tag, page_token) + page_token)


def page_token(secret: bytes, scope_tag: str, cursor: str | None) -> bytes | None:
    """The page token inside a cursor `issue_cursor` gave this caller; -32602 for any other."""
    if cursor is None:
        return None
    if len(cursor) > MAX_CURSOR_CHARS:
        raise MCPError(INVALID_PARAMS, _INVALID_CURSOR)
    try:
        sealed = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise MCPError(INVALID_PARAMS, _INVALID_CURSOR) from None
    seal, token = sealed[:_SEAL_BYTES], sealed[_SEAL_BYTES:]
    if not token or not hmac.compare_digest(seal, _seal(secret, scope_tag, token)):
        raise MCPError(INVALID_PARAMS, _INVALID_CURSOR)
    return token


def _seal(secret: bytes, scope_tag: str, page_token: bytes) -> bytes:
    return hmac.digest(secret, scope_tag.encode() + b"\0" + page_token, "sha256")[:_SEAL_BYTES]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
