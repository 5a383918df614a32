"""The public-address guard under every request a person or a model can aim.

Page fetches and MCP plugin addresses come from people and models, so a request must not
reach this machine, its network or a cloud metadata service. The guard:

- parses the host the way OS resolvers do (`parse_host`: `2130706433`, `0x7f.1`, `0177.0.0.1`,
  `[::ffff:127.0.0.1]`, zone ids, trailing dots, IDNA), and resolves names with an
  injectable resolver;
- refuses unless every address is global unicast (`is_public`);
- connects to the very address it checked: the check lives in an httpcore2 network backend,
  whose `connect_tcp(host, port)` is where httpcore2 opens every connection, so a name is
  resolved once per connection and the socket goes to an address from that answer. There is
  no second lookup for a rebinding DNS server to answer differently. The Host header and TLS
  (SNI, certificate check) keep the name: httpcore2 takes them from the URL, not the socket.
- checks every redirect hop again, because each new origin opens a new connection through the
  same backend; `fetch` follows redirects itself to count hops and say which one was refused.

`allow_private=True` (CHAT_PRIVATE_PLUGINS=1, for plugins only, never for page fetches)
lifts the address check and keeps everything else.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, replace

import anyio
import httpcore2
import httpx2
import idna

from .asyncnet import PooledTransport

__all__ = [
    "Fetched",
    "Guard",
    "GuardedBackend",
    "GuardedTransport",
    "Refused",
    "fetch",
    "guarded_client",
    "is_public",
    "parse_host",
    "system_resolve",
    "why_not_public",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]] | list[str]]


class Refused(Exception):
    """A request the guard will not make; the message is meant for a person."""


# --------------------------------------------------------------------------
# Which addresses are public
# --------------------------------------------------------------------------

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Most specific first: the first match names the reason. Python's `is_global` is consulted
# after this table, but on its own (3.11.7) it calls multicast 224/4, 192.0.0.9, 192.88.99/24,
# ff00::/8, fec0::/10, ::a.b.c.d, 64:ff9b::/96, 2002::/16 and 3fff::/20 global, and it changes
# between patch releases, so the table does not lean on it.
_V4_REFUSED: list[tuple[ipaddress.IPv4Network, str]] = [
    (_V4("0.0.0.0/32"), "the unspecified address"),
    (_V4("0.0.0.0/8"), "a 'this network' address"),
    (_V4("10.0.0.0/8"), "a private address"),
    # Alibaba's metadata service (100.100.100.200) lives here too.
    (_V4("100.64.0.0/10"), "a carrier-grade NAT address"),
    (_V4("127.0.0.0/8"), "a loopback address"),
    (_V4("169.254.169.254/32"), "a link-local address (cloud metadata)"),
    (_V4("169.254.0.0/16"), "a link-local address"),
    (_V4("172.16.0.0/12"), "a private address"),
    # Oracle's metadata service (192.0.0.192) and the anycast 192.0.0.9/10 included.
    (_V4("192.0.0.0/24"), "an IETF protocol address"),
    (_V4("192.0.2.0/24"), "a documentation address"),
    (_V4("192.88.99.0/24"), "a 6to4 relay address"),
    (_V4("192.168.0.0/16"), "a private address"),
    (_V4("198.18.0.0/15"), "a benchmarking address"),
    (_V4("198.51.100.0/24"), "a documentation address"),
    (_V4("203.0.113.0/24"), "a documentation address"),
    (_V4("224.0.0.0/4"), "a multicast address"),
    (_V4("255.255.255.255/32"), "the broadcast address"),
    (_V4("240.0.0.0/4"), "a reserved address"),
]

# Forms that carry an IPv4 address: judged by the address they carry.
_V4_MAPPED = _V6("::ffff:0:0/96")
_NAT64 = _V6("64:ff9b::/96")
_SIX_TO_FOUR = _V6("2002::/16")

_V6_REFUSED: list[tuple[ipaddress.IPv6Network, str]] = [
    (_V6("::/128"), "the unspecified address"),
    (_V6("::1/128"), "a loopback address"),
    # Deprecated since RFC 4291 and never needed to reach a public host.
    (_V6("::/96"), "an IPv4-compatible address (deprecated)"),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_V6("100::/64"), "a discard-only address"),
    # Teredo hides its client address (XORed); refusing the prefix is simpler than trusting it.
    (_V6("2001::/32"), "a Teredo tunnel address"),
    (_V6("2001:db8::/32"), "a documentation address"),
    (_V6("3fff::/20"), "a documentation address"),
    (_V6("2001::/23"), "an IETF protocol address"),
    # AWS's IPv6 metadata service (fd00:ec2::254) lives here.
    (_V6("fc00::/7"), "a private (unique local) address"),
    (_V6("fe80::/10"), "a link-local address"),
    (_V6("fec0::/10"), "a site-local address"),
    (_V6("ff00::/8"), "a multicast address"),
]
# Everything outside 2000::/3 is unallocated or special: only this block is global unicast.
_V6_GLOBAL_UNICAST = _V6("2000::/3")


def why_not_public(ip: IPAddress | str) -> str | None:
    """Why `ip` is not a public address ("a loopback address", ...), or None when it is."""
    ip = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    if isinstance(ip, ipaddress.IPv4Address):
        for network, reason in _V4_REFUSED:
            if ip in network:
                return reason
        return None if ip.is_global else "not a global address"
    ip = ipaddress.IPv6Address(ip.compressed)  # drop any zone id
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        kind, v4 = embedded
        inner = why_not_public(v4)
        return None if inner is None else f"the {kind} form of {v4}, {inner}"
    for network, reason in _V6_REFUSED:
        if ip in network:
            return reason
    if ip not in _V6_GLOBAL_UNICAST:
        return "a reserved address"
    return None if ip.is_global else "not a global address"


def is_public(ip: IPAddress | str) -> bool:
    """True only for global unicast addresses (see `why_not_public` for what is refused)."""
    return why_not_public(ip) is None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if ip in _V4_MAPPED:
        return "IPv4-mapped", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return "6to4", ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    return None


# --------------------------------------------------------------------------
# Hosts: literals in every notation resolvers accept, and names
# --------------------------------------------------------------------------

# inet_aton's parts: hex (0x..., "0x" alone is 0), octal (leading 0) or decimal.
_NUMBER_PART = re.compile(r"0x[0-9a-f]*|[0-9]+")
_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*")


def parse_host(host: str) -> IPAddress | str:
    """The address `host` spells, in any notation an OS resolver accepts, else its name.

    Literals: dotted, short (`127.1`), decimal (`2130706433`), octal (`0177.0.0.1`,
    `017700000001`), hex (`0x7f.1`, `0x7f000001`) and mixes of them, as inet_aton reads them;
    IPv6 with or without brackets, with a zone id (`fe80::1%eth0`, `%25eth0`) dropped. A name
    comes back lower-cased, IDNA-encoded and without its trailing dot; IDNA's mapping runs
    first, so full-width digits and ideographic dots (`１２７。０。０。１`) are literals too.
    Raises Refused for a host that is neither.
    """
    text = host.strip("[]") if host.startswith("[") and host.endswith("]") else host
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            raise Refused(f"refused: {host!r} is not a valid address") from None
    if not text.isascii():
        try:
            text = idna.encode(text, uts46=True).decode("ascii")
        except idna.IDNAError:
            raise Refused(f"refused: {host!r} is not a valid host name") from None
    text = text.lower()
    if text.endswith("."):
        text = text[:-1]
    parts = text.split(".")
    if parts and all(_NUMBER_PART.fullmatch(p) for p in parts):
        address = _inet_aton(parts)
        if address is None:
            raise Refused(f"refused: {host!r} is not a valid address")
        return address
    if not _NAME.fullmatch(text):
        raise Refused(f"refused: {host!r} is not a valid host name")
    return text


def _inet_aton(parts: list[str]) -> ipaddress.IPv4Address | None:
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        if part.startswith("0x"):
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if not set(part) <= set("01234567"):
                return None
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part))
    # a.b.c.d; a.b.c16; a.b24; a32: the last part fills the bytes that are left.
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (4 - len(leading)):
        return None
    value = last
    for i, n in enumerate(leading):
        value |= n << (24 - 8 * i)
    return ipaddress.IPv4Address(value)


def _is_localhost(name: str) -> bool:
    # RFC 6761: localhost and everything under it is loopback, whatever a resolver says.
    return name == "localhost" or name.endswith(".localhost")


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the OS resolver gives for host, in its order, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


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


# --------------------------------------------------------------------------
# Fetching a body with size and time limits
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """What `fetch` got: the final response, its body cut at max_bytes (then `truncated`)."""

    status: int
    headers: httpx2.Headers
    body: bytes
    url: str
    truncated: bool


async def fetch(
    client: httpx2.AsyncClient,
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    max_redirects: int | None = None,
    headers: dict[str, str] | None = None,
) -> Fetched:
    """GET url through `client` (a guarded_client), following up to `max_redirects`
    (default: the client's) redirects, each hop checked; keeps at most `max_bytes` of the
    decoded body and says so with `truncated`. The whole fetch, redirects and body included,
    must finish within `timeout` seconds, else TimeoutError. Raises Refused for a refused
    address, a scheme other than http/https or too many redirects."""
    hops = client.max_redirects if max_redirects is None else max_redirects
    try:
        with anyio.fail_after(timeout):
            return await _follow(client, url, max_bytes, hops, headers)
    except TimeoutError:
        raise TimeoutError(f"gave up on {url} after {timeout:g} s") from None


async def _follow(client, url, max_bytes, hops, headers) -> Fetched:
    try:
        request = client.build_request("GET", url, headers=headers)
    except httpx2.InvalidURL as exc:
        raise Refused(f"refused: {url!r} is not a valid address ({exc})") from None
    came_from = None
    for _ in range(hops + 1):
        try:
            if request.url.scheme not in ("http", "https"):
                raise Refused(f"refused: only http and https addresses can be fetched, not {request.url}")
            response = await client.send(request, stream=True, follow_redirects=False)
        except Refused as exc:
            if came_from is None:
                raise
            raise Refused(f"{exc} (redirected from {came_from})") from None
        try:
            if response.next_request is None:
                body, truncated = await _read(response, max_bytes)
                return Fetched(response.status_code, response.headers, body, str(response.url), truncated)
        finally:
            await response.aclose()
        came_from, request = request.url, response.next_request
    raise Refused(f"refused: more than {hops} redirects, the last to {request.url}")


async def _read(response: httpx2.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            break
    return b"".join(chunks)[:max_bytes], size > max_bytes
