"""A TLS endpoint in front of the dev server, with a CA and certificates made for the test.

`TlsProxy` terminates TLS (mutual: it requires a client certificate signed by the
test CA, as Temporal Cloud's mTLS does) and pipes the bytes to the plain dev server,
recording the subject of every verified client certificate. A client that reaches
Temporal through it has really spoken TLS with the configured CA and certificates.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SERVER_NAME = "temporal.test"
CLIENT_NAME = "mcp-worker"


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A CA, a server certificate for SERVER_NAME and a client certificate, as PEM files."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fastmcp-temporal test CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(
        *(folder / name for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key"))
    )
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name, cert_path, key_path, san in (
        (
            SERVER_NAME,
            files.server_cert,
            files.server_key,
            x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]),
        ),
        (CLIENT_NAME, files.client_cert, files.client_key, None),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), ca_name, key.public_key()
        )
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return files


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


@dataclass
class TlsProxy:
    """Mutual-TLS on 127.0.0.1:<port>, forwarding to a plain Temporal frontend."""

    files: TlsFiles
    upstream: str
    client_subjects: list[str] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _streams: set[asyncio.StreamWriter] = field(default_factory=set)
    _pipes: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def address(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> TlsProxy:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.files.server_cert, self.files.server_key)
        context.load_verify_locations(self.files.ca_cert)
        context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["h2"])
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", 0, ssl=context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._streams:
            writer.close()
        if self._pipes:
            await asyncio.wait(self._pipes, timeout=10)
        await self._server.wait_closed()

    async def _pipe(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._pipes.add(asyncio.current_task())  # type: ignore[arg-type]
        peer = client_writer.get_extra_info("peercert") or {}
        self.client_subjects += [
            value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"
        ]
        host, port = self.upstream.rsplit(":", 1)
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        self._streams |= {client_writer, upstream_writer}
        await asyncio.gather(
            _copy(client_reader, upstream_writer),
            _copy(upstream_reader, client_writer),
            return_exceptions=True,
        )


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
