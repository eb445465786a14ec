"""`fastmcp-temporal codec-server` over real HTTP: it decrypts for the operator holding its token
(the `Bearer` scheme in any case), and for no one else — no token, wrong token, foreign Host (DNS
rebinding), foreign Origin, a cross-site `text/plain` post or an oversize body are refused; a payload
it cannot decrypt or parse is a 400 that says why; it does not start without a token unless told
to run open on loopback. It takes the workers' key list: decrypts with every key, encodes with the
first, and names the key id of a payload under a key it was not given.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from fastmcp_temporal import EncryptionCodec, encrypted_data_converter
from fastmcp_temporal.connection._codec import ENCODING, KEY_ID_METADATA, _fernet, key_id
from fastmcp_temporal.devserver import free_port

KEY = "a-test-key-that-is-long-enough-for-fernet"
NEW_KEY = "the-key-the-workers-rotated-to-long-enough"
TOKEN = "a-codec-token-that-is-long-enough-to-guess-never"
SECRET = "correct horse battery staple"
UI = "http://127.0.0.1:8233"
DEADLINE = 30.0


def codec_server(
    tmp_path: Path, *flags: str, token: str | None = TOKEN, keys: str = KEY
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, FASTMCP_TEMPORAL_ENCRYPTION_KEY=keys)
    env.pop("FASTMCP_TEMPORAL_CODEC_TOKEN", None)
    if token is not None:
        env["FASTMCP_TEMPORAL_CODEC_TOKEN"] = token
    command = [sys.executable, "-m", "fastmcp_temporal.cli", "codec-server", *flags]
    with (tmp_path / "codec.out").open("ab") as sink:
        return subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start a codec server on a free port; return its base URL once it answers."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str, token: str | None = TOKEN, keys: str = KEY) -> str:
        port = free_port()
        flags = ("--port", str(port), "--cors-origin", UI, *flags)
        started.append(codec_server(tmp_path, *flags, token=token, keys=keys))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + DEADLINE
        while True:
            assert started[-1].poll() is None, (tmp_path / "codec.out").read_text()
            try:
                httpx.get(url, timeout=1)
                return url
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the codec server did not answer"
                time.sleep(0.1)

    yield start
    for process in started:
        process.terminate()
        process.wait(DEADLINE)


def encrypted_body() -> str:
    plain = encrypted_data_converter(KEY).payload_converter.to_payloads([{"secret": SECRET}])
    body = json_format.MessageToJson(Payloads(payloads=asyncio.run(EncryptionCodec(KEY).encode(plain))))
    assert SECRET not in body
    return body


def decoded(response: httpx.Response) -> list[object]:
    payloads = json_format.Parse(response.text, Payloads()).payloads
    return encrypted_data_converter(KEY).payload_converter.from_payloads(payloads)


JSON = {"content-type": "application/json", "x-namespace": "default"}
AUTH = {**JSON, "authorization": f"Bearer {TOKEN}"}


def test_it_decrypts_only_for_a_caller_with_the_token(serving) -> None:
    url = serving()
    body = encrypted_body()
    ok = httpx.post(f"{url}/decode", content=body, headers=AUTH)
    assert ok.status_code == 200 and decoded(ok) == [{"secret": SECRET}]

    missing = httpx.post(f"{url}/decode", content=body, headers=JSON)
    wrong = httpx.post(f"{url}/decode", content=body, headers={**JSON, "authorization": "Bearer guess"})
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.headers["www-authenticate"] == "Bearer"
    assert SECRET not in missing.text + wrong.text
    encode = httpx.post(f"{url}/encode", content=body, headers=JSON)
    assert encode.status_code == 401


def test_the_bearer_scheme_is_case_insensitive_the_token_is_not(serving) -> None:
    url = serving()
    body = encrypted_body()
    for scheme in ("bearer", "BEARER", "bEaReR"):
        ok = httpx.post(f"{url}/decode", content=body, headers={**JSON, "authorization": f"{scheme} {TOKEN}"})
        assert ok.status_code == 200 and decoded(ok) == [{"secret": SECRET}], scheme
    for credentials in (f"Bearer {TOKEN.upper()}", f"Basic {TOKEN}", f"Bearer{TOKEN}", TOKEN):
        refused = httpx.post(f"{url}/decode", content=body, headers={**JSON, "authorization": credentials})
        assert refused.status_code == 401, credentials


def test_a_payload_it_cannot_decrypt_or_parse_is_a_400_that_says_why(serving) -> None:
    url = serving()
    garbage = b"garbage-ciphertext-bytes"
    cases = {
        "not a Fernet token": garbage,
        "another key's": _fernet("another-key-that-is-long-enough-for-fernet").encrypt(garbage),
        "ours, but not a Payload": _fernet(KEY).encrypt(b"\xff" + garbage),
    }
    reasons = []
    for case, data in cases.items():
        payload = Payload(metadata={"encoding": ENCODING}, data=data)
        body = json_format.MessageToJson(Payloads(payloads=[payload]))
        response = httpx.post(f"{url}/decode", content=body, headers=AUTH)
        assert response.status_code == 400, (case, response.text)
        reasons.append(response.json()["error"])
        for leaked in (KEY, TOKEN, garbage.decode(), json_format.MessageToDict(payload)["data"]):
            assert leaked not in response.text, case
    assert reasons[0] == reasons[1]
    assert "another key" in reasons[0] and "FASTMCP_TEMPORAL_ENCRYPTION_KEY" in reasons[0]
    assert "not a Temporal Payload" in reasons[2]


def test_it_refuses_foreign_hosts_origins_content_types_and_big_bodies(serving) -> None:
    url = serving()
    body = encrypted_body()
    rebound = httpx.post(f"{url}/decode", content=body, headers={**AUTH, "host": "attacker.example:8081"})
    foreign = httpx.post(f"{url}/decode", content=body, headers={**AUTH, "origin": "http://attacker.example"})
    plain_text = httpx.post(f"{url}/decode", content=body, headers={**AUTH, "content-type": "text/plain"})
    too_big = httpx.post(f"{url}/decode", content=b" " * (4 * 1024 * 1024 + 1), headers=AUTH)
    statuses = [r.status_code for r in (rebound, foreign, plain_text, too_big)]
    assert statuses == [400, 403, 415, 413]
    assert all(SECRET not in r.text for r in (rebound, foreign, plain_text, too_big))

    from_ui = httpx.post(f"{url}/decode", content=body, headers={**AUTH, "origin": UI, "host": "localhost"})
    assert from_ui.status_code == 200 and from_ui.headers["access-control-allow-origin"] == UI
    preflight = httpx.options(
        f"{url}/decode",
        headers={
            "origin": UI,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization,content-type,x-namespace",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == UI
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()


def test_it_does_not_start_without_a_token_unless_open_on_loopback(tmp_path: Path, serving) -> None:
    refused = codec_server(tmp_path, "--port", str(free_port()), token=None)
    assert refused.wait(DEADLINE) != 0
    assert "FASTMCP_TEMPORAL_CODEC_TOKEN" in (tmp_path / "codec.out").read_text()
    public = codec_server(tmp_path, "--insecure-open-loopback", "--host", "0.0.0.0", token=None)
    assert public.wait(DEADLINE) != 0
    assert "only on a loopback --host" in (tmp_path / "codec.out").read_text()

    url = serving("--insecure-open-loopback", token=None)
    assert httpx.post(f"{url}/decode", content=encrypted_body(), headers=JSON).status_code == 200
    rebound = httpx.post(f"{url}/decode", content=encrypted_body(), headers={**JSON, "host": "evil.example"})
    assert rebound.status_code == 400


def test_it_takes_the_workers_key_list(serving) -> None:
    written_under_key = encrypted_body()
    rotated = serving(keys=f"{NEW_KEY},{KEY}")
    ok = httpx.post(f"{rotated}/decode", content=written_under_key, headers=AUTH)
    assert ok.status_code == 200 and decoded(ok) == [{"secret": SECRET}]
    plain = encrypted_data_converter(None).payload_converter.to_payloads([{"secret": SECRET}])
    body = json_format.MessageToJson(Payloads(payloads=plain))
    encoded = httpx.post(f"{rotated}/encode", content=body, headers=AUTH)
    (payload,) = json_format.Parse(encoded.text, Payloads()).payloads
    assert payload.metadata[KEY_ID_METADATA] == key_id(NEW_KEY).encode()

    dropped = serving(keys=NEW_KEY)
    refused = httpx.post(f"{dropped}/decode", content=written_under_key, headers=AUTH)
    assert refused.status_code == 400
    reason = refused.json()["error"]
    assert f"key id {key_id(KEY)}" in reason and f"ids {key_id(NEW_KEY)}" in reason
    for leaked in (KEY, NEW_KEY, TOKEN, SECRET):
        assert leaked not in refused.text
