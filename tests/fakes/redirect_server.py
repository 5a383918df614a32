"""A real HTTP server on a loopback address, for tests of outgoing requests (netguard, fetch).

    with LoopbackServer() as server:                 # 127.0.0.1, a free port
        url = server.url("/redirect", to="http://127.0.0.2/")
        ...
        assert server.connections == 0               # no TCP connection ever reached it

Paths it answers (GET; every response closes the connection):

    /redirect?to=URL[&status=302]   a redirect to URL
    /bytes?n=N                      N bytes of b"x" with a Content-Length
    /slow?every=S[&chunks=N]        a chunked body, one byte every S seconds (N chunks, default 1000)
    anything else                   200 "hello from HOST:PORT"

It counts accepted TCP connections, keeps every request's path and headers, and, when given
a TLS context, the server name (SNI) each handshake asked for. `tls_contexts(name)` makes a
self-signed certificate for `name` and returns the server and client contexts.

Like the fake model server, it runs its own asyncio loop in a daemon thread, so sync and async
tests can share it. It binds only the address it is given, which must be loopback.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

__all__ = ["LoopbackServer", "Seen", "tls_contexts"]


@dataclass
class Seen:
    """One request as the server read it."""

    path: str
    headers: dict[str, str] = field(default_factory=dict)


class LoopbackServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None):
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"{host} is not a loopback address")
        self.host = host
        self.port = port
        self.tls = tls
        self.connections = 0
        self.requests: list[Seen] = []
        self.server_names: list[str | None] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def origin(self) -> str:
        scheme = "https" if self.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    def url(self, path: str = "/", *, host: str | None = None, **query: object) -> str:
        """A URL on this server; `host` replaces the address (a name a fake resolver maps here)."""
        origin = self.origin if host is None else f"{'https' if self.tls else 'http'}://{host}:{self.port}"
        return origin + path + (f"?{urlencode(query)}" if query else "")

    def __enter__(self) -> "LoopbackServer":
        if self.tls is not None:
            self.tls.sni_callback = self._sni
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, self.host, self.port, ssl=self.tls), self._loop
        )
        self._server = future.result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _sni(self, sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        self.server_names.append(name)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            request_line, *lines = head.decode("latin-1").split("\r\n")
            target = request_line.split(" ")[1]
            headers = {}
            for line in lines:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            self.requests.append(Seen(target, headers))
            await self._answer(target, writer)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def _answer(self, target: str, writer: asyncio.StreamWriter) -> None:
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if parts.path == "/redirect":
            status = int(query.get("status", 302))
            writer.write(_head(status, {"Location": query["to"], "Content-Length": "0"}))
        elif parts.path == "/bytes":
            n = int(query["n"])
            writer.write(_head(200, {"Content-Length": str(n)}) + b"x" * n)
        elif parts.path == "/slow":
            every = float(query["every"])
            writer.write(_head(200, {"Transfer-Encoding": "chunked"}))
            for _ in range(int(query.get("chunks", 1000))):
                writer.write(b"1\r\nx\r\n")
                await writer.drain()
                await asyncio.sleep(every)
            writer.write(b"0\r\n\r\n")
        else:
            body = f"hello from {self.host}:{self.port}".encode()
            writer.write(_head(200, {"Content-Length": str(len(body))}) + body)
        await writer.drain()


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Connection: close", "Content-Type: text/plain; charset=utf-8"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def tls_contexts(name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for `name`: (server context, client context that trusts it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with tempfile.TemporaryDirectory() as tmp:
        cert_file, key_file = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cadata=cert_pem.decode("ascii"))
    return server, client
