"""The public-address guard, against real HTTP servers on loopback.

Nothing here resolves or reaches a real host: names go through a fake resolver that maps
`*.test` names to loopback, and a loopback server stands in for a public one only where a
test says so with the guard's test-only `allow_for_tests` hook.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time

import httpx2
import pytest

from app.netguard import Fetched, Guard, Refused, fetch, guarded_client, is_public, parse_host, why_not_public
from tests.fakes.redirect_server import LoopbackServer, tls_contexts

LOOPBACK = ipaddress.ip_address("127.0.0.1")


class FakeDNS:
    """A resolver from a table; every lookup is recorded, unknown names do not resolve."""

    def __init__(self, table: dict[str, list[str] | list[list[str]]] | None = None):
        self.table = table or {}
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        answer = self.table.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not in the fake table")
        if answer and isinstance(answer[0], list):  # a sequence of answers, one per lookup
            return answer[min(self.asked.count(host), len(answer)) - 1]
        return answer


def only(*ips: str):
    """The test-only allow hook: these loopback addresses play public hosts."""
    allowed = {ipaddress.ip_address(ip) for ip in ips}
    return lambda ip: ip in allowed


@pytest.fixture
def server():
    with LoopbackServer() as s:
        yield s


@pytest.fixture
def other():
    """A second server, on 127.0.0.2: a refused address a redirect or a rebinding aims at."""
    with LoopbackServer("127.0.0.2") as s:
        yield s


# --------------------------------------------------------------------------
# is_public
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ip",
    ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"],
)
def test_public_addresses_are_public(ip):
    assert is_public(ipaddress.ip_address(ip))


@pytest.mark.parametrize(
    "ip, reason",
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.100.100.200", "carrier-grade NAT"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "this network"),
        ("192.0.0.9", "IETF protocol"),
        ("192.0.0.192", "IETF protocol"),
        ("192.0.2.1", "documentation"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.9", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("192.88.99.1", "6to4 relay"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, a loopback"),
        ("::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254, a link-local address (cloud metadata)"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("::8.8.8.8", "IPv4-compatible"),
        ("::ffff:0:7f00:1", "reserved"),
        ("64:ff9b::7f00:1", "NAT64 form of 127.0.0.1"),
        ("64:ff9b::a00:5", "NAT64 form of 10.0.0.5, a private"),
        ("64:ff9b:1::1", "local-use NAT64"),
        ("2002:7f00:1::", "6to4 form of 127.0.0.1"),
        ("2002:a9fe:a9fe::1", "6to4 form of 169.254.169.254"),
        ("2001::1", "Teredo"),
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("2001:2::1", "IETF protocol"),
        ("100::1", "discard-only"),
        ("fc00::1", "private"),
        ("fd00:ec2::254", "private"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("5f00::1", "reserved"),
    ],
)
def test_other_addresses_are_refused_with_a_reason(ip, reason):
    assert not is_public(ipaddress.ip_address(ip))
    assert reason in why_not_public(ipaddress.ip_address(ip))


def test_a_zone_id_does_not_change_the_verdict():
    assert not is_public(ipaddress.ip_address("fe80::1%eth0"))
    assert is_public(ipaddress.ip_address("2606:4700:4700::1111%eth0"))


# --------------------------------------------------------------------------
# parse_host
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host, address",
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F.0x0.0.01", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0xa9.0376.43518", "169.254.169.254"),
        ("１２７.０.０.１", "127.0.0.1"),
        ("127。0。0。1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("::FFFF:7F00:1", "::ffff:7f00:1"),
        ("fe80::1%eth0", "fe80::1"),
        ("fe80::1%25eth0", "fe80::1"),
    ],
)
def test_literals_in_every_notation(host, address):
    assert parse_host(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "host, name",
    [("Example.COM.", "example.com"), ("bücher.de", "xn--bcher-kva.de"), ("1.2.3.example", "1.2.3.example")],
)
def test_names_come_back_normalised(host, name):
    assert parse_host(host) == name


@pytest.mark.parametrize("host", ["256.0.0.1", "1.2.3.4.5", "09.0.0.1", "a%20b", "a b", "[::zz]", "a..b"])
def test_hosts_that_are_neither_are_refused(host):
    with pytest.raises(Refused, match="not a valid"):
        parse_host(host)


# --------------------------------------------------------------------------
# The hostile corpus: refused before any connection or lookup of a literal
# --------------------------------------------------------------------------

HOSTILE = [
    "http://127.0.0.1:{port}/",
    "http://127.1:{port}/",
    "http://0x7f.1:{port}/",
    "http://0x7f000001:{port}/",
    "http://2130706433:{port}/",
    "http://017700000001:{port}/",
    "http://0177.0.0.1:{port}/",
    "http://0x7f.0.0.1:{port}/",
    "http://0177.0x0.0.01:{port}/",
    "http://127.0.0.1.:{port}/",
    "http://0X7F.1:{port}/",
    "http://127。0。0。1:{port}/",
    "http://１２７.０.０.１:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://[0:0:0:0:0:ffff:7f00:1]:{port}/",
    "http://[::ffff:0:7f00:1]:{port}/",
    "http://[::127.0.0.1]:{port}/",
    "http://[::1]:{port}/",
    "http://[::]:{port}/",
    "http://0:{port}/",
    "http://0.0.0.0:{port}/",
    "http://169.254.169.254:{port}/latest/meta-data",
    "http://[::ffff:a9fe:a9fe]:{port}/latest/meta-data",
    "http://[fd00:ec2::254]:{port}/latest/meta-data",
    "http://100.100.100.200:{port}/latest/meta-data",
    "http://[fe80::1%25eth0]:{port}/",
    "http://100.64.0.1:{port}/",
    "http://10.0.0.5:{port}/",
    "http://172.16.0.1:{port}/",
    "http://192.168.0.1:{port}/",
    "http://[fc00::1]:{port}/",
    "http://[fec0::1]:{port}/",
    "http://[ff02::1]:{port}/",
    "http://224.0.0.1:{port}/",
    "http://255.255.255.255:{port}/",
    "http://198.18.0.1:{port}/",
    "http://[2002:7f00:1::]:{port}/",
    "http://[64:ff9b::7f00:1]:{port}/",
    "http://[2001::1]:{port}/",
    "http://localhost:{port}/",
    "http://LOCALHOST.:{port}/",
    "http://api.localhost:{port}/",
    "http://localtest.me:{port}/",
    "http://Bad.Test:{port}/",
    "https://localtest.me:{port}/",
    "file:///etc/passwd",
    "ftp://127.0.0.1:{port}/",
]


async def test_the_hostile_corpus_is_refused_before_any_connection(server):
    dns = FakeDNS({"localtest.me": ["127.0.0.1"], "bad.test": ["::1"]})
    refused = []
    async with guarded_client(guard=Guard(resolve=dns), timeout=2) as client:
        for url in HOSTILE:
            with pytest.raises(Refused) as caught:
                await fetch(client, url.format(port=server.port), max_bytes=1000, timeout=5)
            refused.append(str(caught.value))
    assert len(HOSTILE) >= 30
    assert all(message.startswith("refused: ") for message in refused)
    assert server.connections == 0
    assert sorted(set(dns.asked)) == ["bad.test", "localtest.me"], "literals never reach the resolver"


async def test_refused_messages_say_why(server):
    dns = FakeDNS({"localtest.me": ["127.0.0.1"]})
    async with guarded_client(guard=Guard(resolve=dns)) as client:
        for url, message in [
            ("http://10.0.0.5/", "refused: 10.0.0.5 is a private address"),
            ("http://localtest.me/", "refused: localtest.me resolves to 127.0.0.1, a loopback address"),
            ("http://0x7f.1/", "refused: 0x7f.1 means 127.0.0.1, a loopback address"),
            ("http://169.254.169.254/latest/meta-data", "refused: 169.254.169.254 is a link-local address (cloud metadata)"),
            ("http://localhost/", "refused: localhost is a loopback name"),
        ]:
            with pytest.raises(Refused) as caught:
                await client.get(url)
            assert str(caught.value) == message


async def test_every_resolved_address_must_be_public(server):
    # 127.0.0.1 plays a public address; the name's second address is private.
    dns = FakeDNS({"mixed.test": ["127.0.0.1", "10.0.0.5"]})
    async with guarded_client(guard=Guard(resolve=dns, allow_for_tests=only("127.0.0.1"))) as client:
        with pytest.raises(Refused, match="mixed.test resolves to 10.0.0.5, a private address"):
            await client.get(server.url(host="mixed.test"))
    assert server.connections == 0


async def test_a_name_that_does_not_resolve_is_a_connect_error():
    async with guarded_client(guard=Guard(resolve=FakeDNS())) as client:
        with pytest.raises(httpx2.ConnectError, match="nowhere.test could not be resolved"):
            await client.get("http://nowhere.test/")


# --------------------------------------------------------------------------
# Connecting to the checked address
# --------------------------------------------------------------------------


async def test_the_connection_goes_to_the_checked_address_and_keeps_the_name(server):
    dns = FakeDNS({"public.test": ["127.0.0.1"]})
    async with guarded_client(guard=Guard(resolve=dns, allow_for_tests=only("127.0.0.1"))) as client:
        response = await client.get(server.url("/", host="public.test"))
    assert response.text == f"hello from 127.0.0.1:{server.port}"
    assert server.requests[-1].headers["host"] == f"public.test:{server.port}"


async def test_dns_rebinding_cannot_move_the_connection(server):
    """The name answers a (stand-in) public address first and loopback after. Each
    connection looks the name up once and connects to what it checked."""
    with LoopbackServer("127.0.0.2", port=server.port) as rebound:
        dns = FakeDNS({"rebind.test": [["127.0.0.1"], ["127.0.0.2"]]})
        guard = Guard(resolve=dns, allow_for_tests=only("127.0.0.1"))
        async with guarded_client(guard=guard) as client:
            first = await client.get(server.url("/", host="rebind.test"))
            assert first.text == f"hello from 127.0.0.1:{server.port}"
            # The server closed that connection, so this one looks the name up again.
            with pytest.raises(Refused, match="rebind.test resolves to 127.0.0.2, a loopback address"):
                await client.get(server.url("/", host="rebind.test"))
        assert dns.asked == ["rebind.test", "rebind.test"]
        assert server.connections == 1
        assert rebound.connections == 0


async def test_tls_verifies_and_sends_the_name_not_the_address():
    server_tls, client_tls = tls_contexts("public.test")
    with LoopbackServer(tls=server_tls) as server:
        dns = FakeDNS({"public.test": ["127.0.0.1"]})
        guard = Guard(resolve=dns, allow_for_tests=only("127.0.0.1"))
        async with guarded_client(guard=guard, verify=client_tls) as client:
            response = await client.get(server.url("/", host="public.test"))
        assert response.status_code == 200
        assert server.server_names == ["public.test"]
        assert server.requests[-1].headers["host"] == f"public.test:{server.port}"


async def test_the_usual_tls_context_is_made_once_a_process_and_still_verifies():
    """Making a TLS context reads the CA bundle (~20 ms of CPU), which every plugin connection
    and page fetch paid: the usual one is shared; one a caller gives is used as given."""
    server_tls, client_tls = tls_contexts("public.test")

    def context(client):
        return client._transport._pool._ssl_context

    with LoopbackServer(tls=server_tls) as server:
        guard = Guard(resolve=FakeDNS({"public.test": ["127.0.0.1"]}), allow_for_tests=only("127.0.0.1"))
        async with guarded_client(guard=guard) as one, guarded_client(guard=guard) as other, \
                guarded_client(guard=guard, verify=client_tls) as given:
            assert context(one) is context(other)
            assert context(given) is client_tls
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await one.get(server.url("/", host="public.test"))  # shared, it still trusts only the system's CAs
            assert (await given.get(server.url("/", host="public.test"))).status_code == 200


# --------------------------------------------------------------------------
# Redirects
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, message",
    [
        ("http://127.0.0.2:{port}/", "127.0.0.2 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a link-local address (cloud metadata)"),
        ("http://localtest.me:{port}/", "localtest.me resolves to 127.0.0.2, a loopback address"),
        ("http://[::ffff:127.0.0.2]:{port}/", "the IPv4-mapped form of 127.0.0.2"),
        ("http://0x7f.2:{port}/", "0x7f.2 means 127.0.0.2"),
        ("file:///etc/passwd", "only http and https"),
    ],
)
async def test_a_redirect_to_a_refused_address_is_refused_at_that_hop(server, other, target, message):
    dns = FakeDNS({"public.test": ["127.0.0.1"], "localtest.me": ["127.0.0.2"]})
    guard = Guard(resolve=dns, allow_for_tests=only("127.0.0.1"))
    start = server.url("/redirect", host="public.test", to=target.format(port=other.port))
    async with guarded_client(guard=guard) as client:
        with pytest.raises(Refused, match=re.escape(message)) as caught:
            await fetch(client, start, max_bytes=1000, timeout=5)
    assert "(redirected from http://public.test:" in str(caught.value)
    assert server.connections == 1
    assert other.connections == 0


async def test_redirects_the_client_follows_itself_are_checked_too(server, other):
    """Without fetch: httpx2's own redirect following opens each hop through the guard."""
    guard = Guard(resolve=FakeDNS(), allow_for_tests=only("127.0.0.1"))
    async with guarded_client(guard=guard, follow_redirects=True) as client:
        with pytest.raises(Refused, match="127.0.0.2 is a loopback address"):
            await client.get(server.url("/redirect", to=other.url("/")))
    assert other.connections == 0


async def test_allowed_redirects_are_followed_to_the_final_url(server):
    dns = FakeDNS({"public.test": ["127.0.0.1"]})
    guard = Guard(resolve=dns, allow_for_tests=only("127.0.0.1"))
    final = server.url("/", host="public.test")
    hop = server.url("/redirect", host="public.test", to=final, status=307)
    async with guarded_client(guard=guard) as client:
        got = await fetch(client, server.url("/redirect", to=hop), max_bytes=1000, timeout=5)
    assert (got.status, got.url, got.body.decode()) == (200, final, f"hello from 127.0.0.1:{server.port}")
    assert [r.path for r in server.requests][-1] == "/"


async def test_at_most_max_redirects_hops(server):
    guard = Guard(resolve=FakeDNS(), allow_for_tests=only("127.0.0.1"))
    url = server.url("/")
    for _ in range(6):
        url = server.url("/redirect", to=url)
    async with guarded_client(guard=guard) as client:
        with pytest.raises(Refused, match="more than 5 redirects"):
            await fetch(client, url, max_bytes=1000, timeout=5)
        assert server.connections == 6
        got = await fetch(client, url, max_bytes=1000, timeout=5, max_redirects=6)
        assert got.status == 200


# --------------------------------------------------------------------------
# Size and time limits
# --------------------------------------------------------------------------


async def test_fetch_truncates_at_max_bytes_and_says_so(server):
    guard = Guard(resolve=FakeDNS(), allow_for_tests=only("127.0.0.1"))
    async with guarded_client(guard=guard) as client:
        cut = await fetch(client, server.url("/bytes", n=100_000), max_bytes=1000, timeout=5)
        whole = await fetch(client, server.url("/bytes", n=1000), max_bytes=1000, timeout=5)
    assert isinstance(cut, Fetched)
    assert (len(cut.body), cut.truncated) == (1000, True)
    assert (len(whole.body), whole.truncated) == (1000, False)


async def test_fetch_gives_up_at_the_deadline_of_a_slow_server(server):
    guard = Guard(resolve=FakeDNS(), allow_for_tests=only("127.0.0.1"))
    async with guarded_client(guard=guard, timeout=30) as client:
        started = time.monotonic()
        # Each byte arrives well within the read timeout; only the overall deadline stops it.
        with pytest.raises(TimeoutError, match="after 0.5 s"):
            await fetch(client, server.url("/slow", every=0.05), max_bytes=1_000_000, timeout=0.5)
    assert time.monotonic() - started < 2


async def test_the_client_can_cap_every_body(server):
    guard = Guard(resolve=FakeDNS(), allow_for_tests=only("127.0.0.1"))
    async with guarded_client(guard=guard, max_bytes=500) as client:
        assert (await client.get(server.url("/bytes", n=500))).content == b"x" * 500
        with pytest.raises(Refused, match="larger than 500 bytes"):
            await client.get(server.url("/bytes", n=501))


# --------------------------------------------------------------------------
# allow_private (CHAT_PRIVATE_PLUGINS=1) and what the client refuses to take
# --------------------------------------------------------------------------


async def test_allow_private_lets_a_loopback_plugin_through(server):
    async with guarded_client(guard=Guard(resolve=FakeDNS())) as client:
        with pytest.raises(Refused):
            await client.get(server.url("/"))
    async with guarded_client(allow_private=True, guard=Guard(resolve=FakeDNS())) as client:
        assert (await client.get(server.url("/"))).status_code == 200
    assert server.connections == 1


async def test_allow_private_still_connects_to_the_address_it_looked_up(server):
    with LoopbackServer("127.0.0.2", port=server.port) as rebound:
        dns = FakeDNS({"plugin.test": [["127.0.0.1"], ["127.0.0.2"]]})
        async with guarded_client(allow_private=True, guard=Guard(resolve=dns)) as client:
            assert (await client.get(server.url("/", host="plugin.test"))).status_code == 200
        assert (server.connections, rebound.connections) == (1, 0)


async def test_allow_private_keeps_the_redirect_limit(server):
    url = server.url("/")
    for _ in range(3):
        url = server.url("/redirect", to=url)
    async with guarded_client(allow_private=True, max_redirects=2, follow_redirects=True) as client:
        with pytest.raises(httpx2.TooManyRedirects):
            await client.get(url)


@pytest.mark.parametrize("option", [{"proxy": "http://127.0.0.1:1"}, {"transport": None}, {"mounts": {}}, {"trust_env": True}])
def test_options_that_would_route_around_the_guard_are_refused(option):
    with pytest.raises(TypeError, match="bypass the guard"):
        guarded_client(**option)


async def test_environment_proxies_are_ignored(server, monkeypatch):
    # A proxy from the environment would make the connection the guard never sees.
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{server.port}")
    async with guarded_client(guard=Guard(resolve=FakeDNS())) as client:
        with pytest.raises(Refused):
            await client.get("http://10.0.0.5/")
    assert server.connections == 0
