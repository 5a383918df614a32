"""The guard in front of every connection: `Guard` resolves a host once per connection and
refuses unless every address is public, `GuardedBackend` is httpcore2's network backend that
asks it and connects to the very address it checked, `guarded_client` an httpx2 client
whose every connection (each redirect hop's too) goes through it.
"""
from __future__ import annotations

import inspect
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, replace

import anyio
import httpcore2
import httpx2

from .sockets import PooledTransport
from .addresses import IPAddress, Refused, Resolver, _is_localhost, parse_host, system_resolve, why_not_public


# --------------------------------------------------------------------------
# The guard
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Guard:
    """Resolves a host and refuses unless every address is public.

    `resolve(host, port)` returns IP strings (sync or async); tests pass one that maps names
    such as `public.test` to loopback. `allow_for_tests(ip)` is for tests only: it lets a
    loopback test server stand in for a public host. App code never sets it.
    """

    resolve: Resolver = system_resolve
    allow_private: bool = False
    allow_for_tests: Callable[[IPAddress], bool] | None = None

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """Every address to connect to for host, each one checked. Raises Refused, or
        OSError (socket.gaierror) when a name does not resolve."""
        target = parse_host(host)
        if not isinstance(target, str):
            written = host.strip("[]")
            # "refused: 0x7f.1 means 127.0.0.1, a loopback address": odd notations are spelled out.
            plain = isinstance(target, ipaddress.IPv6Address) or written == str(target)
            self._check(target, f"refused: {written} is" if plain else f"refused: {written} means {target},")
            return [target]
        if _is_localhost(target) and not self.allow_private:
            raise Refused(f"refused: {target} is a loopback name")
        answer = self.resolve(target, port)
        if inspect.isawaitable(answer):
            answer = await answer
        found = list(dict.fromkeys(ipaddress.ip_address(a.split("%", 1)[0]) for a in answer))
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, f"{target} has no addresses")
        for ip in found:
            self._check(ip, f"refused: {target} resolves to {ip},")
        return found

    def _check(self, ip: IPAddress, lead: str) -> None:
        reason = why_not_public(ip)
        if reason is None or self.allow_private:
            return
        if self.allow_for_tests is not None and self.allow_for_tests(ip):
            return
        # "refused: 10.0.0.5 is a private address"; "refused: x.test resolves to 127.0.0.1, a loopback address"
        raise Refused(f"{lead} {reason}")


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend with the guard in front of every TCP connection.

    httpcore2 calls `connect_tcp(host, port)` with the URL's host for each new connection and
    afterwards wraps the stream in TLS with `server_hostname` = the URL's host (see
    httpcore2/_async/connection.py, `_connect`), so resolving and checking here, then handing
    the inner backend a checked IP literal, pins the socket without touching Host or SNI.
    """

    def __init__(self, guard: Guard, backend: httpcore2.AsyncNetworkBackend | None = None):
        self.guard = guard
        self._backend = backend or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[tuple] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await self.guard.addresses(host, port)
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"looking up {host} took longer than {timeout} s") from None
        except OSError as exc:
            raise httpcore2.ConnectError(f"{host} could not be resolved ({exc})") from exc
        failed: Exception | None = None
        for ip in addresses:
            try:
                return await self._backend.connect_tcp(
                    str(ip), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failed = exc
        assert failed is not None
        raise failed

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        raise Refused("refused: Unix sockets are not reachable through the guard")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class GuardedTransport(PooledTransport):
    """httpx2's transport over a connection pool that connects through GuardedBackend. No
    proxy: a proxy would make the connection the guard never sees. `max_bytes` caps each
    response body; reading past it raises Refused."""

    def __init__(self, guard: Guard, *, max_bytes: int | None = None, verify: ssl.SSLContext | str | bool = True,
                 cert=None, http1: bool = True, http2: bool = False, limits: httpx2.Limits | None = None) -> None:
        self.max_bytes = max_bytes
        super().__init__(backend=GuardedBackend(guard), limits=limits, verify=verify, cert=cert, trust_env=False,
                         http1=http1, http2=http2)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        if self.max_bytes is None:
            return response
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Capped(response.stream, self.max_bytes, request.url.host),
            extensions=response.extensions,
        )


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, limit: int, host: str):
        self._stream, self._limit, self._host = stream, limit, host

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise Refused(f"refused: the response from {self._host} is larger than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


_NOT_HERE = ("transport", "mounts", "proxy", "trust_env", "uds")


def guarded_client(
    *,
    allow_private: bool = False,
    timeout: float | httpx2.Timeout = 10.0,
    max_bytes: int | None = None,
    max_redirects: int = 5,
    guard: Guard | None = None,
    verify: ssl.SSLContext | str | bool = True,
    cert=None,
    http2: bool = False,
    limits: httpx2.Limits | None = None,
    **kw,
) -> httpx2.AsyncClient:
    """An httpx2.AsyncClient whose every connection goes through the guard.

    Redirects are not followed unless `follow_redirects=True` is passed (the MCP transports
    follow them themselves); either way each hop to a new origin is checked at connect time,
    and at most `max_redirects` are followed. `allow_private` is CHAT_PRIVATE_PLUGINS=1, for
    plugins only. `guard` replaces the default Guard (tests pass a fake resolver).
    Other keywords go to AsyncClient, except those that would route around the guard.
    """
    if bad := [k for k in _NOT_HERE if k in kw]:
        raise TypeError(f"guarded_client does not take {', '.join(bad)}: they would bypass the guard")
    guard = guard or Guard()
    if allow_private:
        guard = replace(guard, allow_private=True)
    transport = GuardedTransport(guard, max_bytes=max_bytes, verify=verify, cert=cert, http2=http2, limits=limits)
    return httpx2.AsyncClient(
        transport=transport, trust_env=False, timeout=timeout, max_redirects=max_redirects, **kw
    )
