"""Which addresses are public, and what a host spells: the judging half of the guard, no
network (app/netguard/__init__.py says what the guard is for).

`why_not_public(ip)` names the reason an address is refused (None when it is global
unicast), `parse_host(host)` reads a host the way OS resolvers do, `system_resolve` is the
resolver the guard uses unless it is given another one.
"""
from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable

import idna

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
