"""fetch_page against a real HTTP server on loopback.

The server is the netguard tests' LoopbackServer with canned pages added. A resolver from
a table maps `public.test` to 127.0.0.1 and `elsewhere.test` to 127.0.0.2, and only where a
test says so does the guard's test-only hook let 127.0.0.1 play a public host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from app.netguard import Guard, Refused
from app.tools import Source, ToolContext
from app.tools.fetch_page import PageError, fetch_page_tool
from tests.fakes.redirect_server import LoopbackServer

ARTICLE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>How Tides Work | The Daily Example</title>
<meta property="og:title" content="How Tides Work"></head>
<body>
<header><nav><ul>
  <li><a href="/">Home</a></li><li><a href="/news">News</a></li>
  <li><a href="/sport">Sport</a></li><li><a href="/login">Sign in to your account</a></li>
</ul></nav></header>
<div class="ad banner">BUY CHEAP WATCHES NOW, 90% OFF! Click here for deals.</div>
<main><article>
<h1>How Tides Work</h1>
<p>The Moon's gravity pulls on the oceans, raising a bulge of water on the side of the Earth
that faces it. A second bulge forms on the opposite side, where the Earth is pulled away
from the water.</p>
<h2>Spring and neap tides</h2>
<p>When the Sun and the Moon line up, their pulls add together and the tides are larger than
usual: these are <a href="https://example.org/spring">spring tides</a>. When they pull at
right angles, the tides are smaller: <a href="/glossary/neap">neap tides</a>.</p>
<ul><li>Spring tides follow new and full moons.</li><li>Neap tides follow the quarter moons.</li></ul>
<p>Coastlines, the depth of the sea floor and the shape of bays change the height of a tide a
great deal, which is why the Bay of Fundy sees tides of more than fifteen metres.</p>
</article></main>
<aside class="sidebar"><h3>Most read</h3><ul>
  <li><a href="/a">Celebrity gossip roundup</a></li><li><a href="/b">Ten weird tricks</a></li>
</ul></aside>
<div class="advert">Sponsored: win a cruise! Enter the sweepstakes today.</div>
<footer><p>© 2026 The Daily Example. All rights reserved.</p>
<a href="/privacy">Privacy policy</a> · <a href="/cookies">Cookie settings</a></footer>
</body></html>
"""

# Paragraphs that differ: the extractor drops text repeated over and over as boilerplate.
PARAGRAPH = "<p>Paragraph {}: the tide rolls in and the tide rolls out, as it has done for ages.</p>\n"
HUGE = ("<html><head><title>A very long page</title></head><body><article><h1>Long</h1>"
        + "".join(PARAGRAPH.format(i) for i in range(40_000)) + "</article></body></html>").encode()

CAFE_1252 = "Café crème, naïve façade: €5".encode("cp1252")
RUSSIAN = "Приливы и отливы"

PAGES: dict[str, tuple[int, str | None, bytes]] = {
    "/article": (200, "text/html; charset=utf-8", ARTICLE.encode()),
    "/huge": (200, "text/html", HUGE),
    "/missing": (404, "text/html", b"<html><body><h1>Not here</h1></body></html>"),
    "/broken": (500, "text/plain", b"oops"),
    "/image.png": (200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4),
    "/download": (200, "application/octet-stream", b"MZ\x90\x00" + bytes(200)),
    "/mislabelled": (200, "text/plain", b"GIF89a\x00\x00\x01\x00" + bytes(100)),
    "/notes.txt": (200, "text/plain; charset=utf-8", "Plain notes.\n\n- one\n- two\n".encode()),
    "/data.json": (200, "application/json", json.dumps({"name": "tides", "heights": [1.2, 15.6]}).encode()),
    "/latin.txt": (200, "text/plain; charset=windows-1252", CAFE_1252),
    "/latin1-label.txt": (200, "text/plain; charset=ISO-8859-1", CAFE_1252),  # read as windows-1252, as browsers do
    "/undeclared.txt": (200, "text/plain", CAFE_1252),
    "/russian": (200, "text/html",
                 f'<html><head><meta http-equiv="Content-Type" content="text/html; charset=koi8-r">'
                 f"<title>{RUSSIAN}</title></head><body><p>{RUSSIAN}: луна тянет океан.</p></body></html>".encode("koi8-r")),
    "/japanese": (200, "text/html; charset=shift_jis",
                  "<html><head><title>潮汐</title></head><body><p>月が海を引っ張る。</p></body></html>".encode("shift_jis")),
    "/xhtml": (200, "application/xhtml+xml",
               '<?xml version="1.0" encoding="iso-8859-15"?><html xmlns="http://www.w3.org/1999/xhtml">'
               "<head><title>XHTML</title></head><body><p>Prix : 5 €, café compris.</p></body></html>".encode("iso-8859-15")),
    "/untyped": (200, None, b"<!DOCTYPE html><html><head><title>Untyped</title></head><body><p>No type said.</p></body></html>"),
    "/untyped-binary": (200, None, b"\x00\x01\x02\x03" * 64),
    # Labels Python knows but cannot decode text with: UTF-8 it is.
    "/base64": (200, "text/plain; charset=base64", "Bonjour, ça va ?".encode()),
    "/undefined": (200, "text/html; charset=undefined", "<p>Bonjour, ça va ?</p>".encode()),
    "/empty": (200, "text/html", b""),
    "/blank": (200, "text/html", b"<html><head><title>Nothing</title></head><body>  \n </body></html>"),
    "/stub": (200, "text/html", b"<html><head><title>Stub</title></head><body><p>Just one line.</p></body></html>"),
}


class PageServer(LoopbackServer):
    """LoopbackServer (/redirect, /slow, /bytes) plus the canned PAGES."""

    async def _answer(self, target: str, writer: asyncio.StreamWriter) -> None:
        page = PAGES.get(urlsplit(target).path)
        if page is None:
            return await super()._answer(target, writer)
        status, content_type, body = page
        typed = f"Content-Type: {content_type}\r\n" if content_type else ""
        head = f"HTTP/1.1 {status} X\r\nConnection: close\r\n{typed}Content-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode("latin-1") + body)
        await writer.drain()


def resolve(host: str, port: int) -> list[str]:
    table = {"public.test": ["127.0.0.1"], "elsewhere.test": ["127.0.0.2"]}
    if host not in table:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} is not in the test table")
    return table[host]


def public_guard() -> Guard:
    """127.0.0.1 plays a public host; 127.0.0.2 stays what it is, a loopback address."""
    return Guard(resolve=resolve, allow_for_tests=lambda ip: ip == ipaddress.ip_address("127.0.0.1"))


@pytest.fixture
def server():
    with PageServer() as s:
        yield s


@pytest.fixture
def other():
    with PageServer("127.0.0.2") as s:
        yield s


class Context(ToolContext):
    """A tool's context that keeps what the tool reported as its progress."""

    reported: list[str]


def context() -> Context:
    ctx = Context(chat=1, agent=None)
    ctx.reported = []
    ctx.progress = ctx.reported.append
    return ctx


async def fetch_page(url, **options):
    tool = fetch_page_tool(options.pop("guard", None) or public_guard(), **options)
    return await tool.run({"url": url}, context())


# --------------------------------------------------------------------------
# The tool
# --------------------------------------------------------------------------


def test_the_tool_says_what_it_takes():
    tool = fetch_page_tool()
    assert tool.name == "fetch_page"
    assert tool.idempotent
    assert tool.parameters["required"] == ["url"]
    assert tool.parameters["properties"]["url"]["type"] == "string"
    assert "http" in tool.description and "Markdown" in tool.description
    assert tool.schema()["function"]["name"] == "fetch_page"


# --------------------------------------------------------------------------
# Reading pages
# --------------------------------------------------------------------------


async def test_an_article_is_its_main_text_and_the_title_is_the_source(server):
    final = server.url("/article", host="public.test")
    ctx = context()
    result = await fetch_page_tool(public_guard()).run(
        {"url": server.url("/redirect", host="public.test", to=final)}, ctx
    )
    text = result.text
    assert result.sources == (Source(final, "How Tides Work"),), "the source is the page after redirects"
    assert text.startswith(f"Title: How Tides Work\nURL: {final}\n\n")
    assert "The Moon's gravity pulls on the oceans" in text
    assert "Bay of Fundy" in text
    # Headings, lists and links stay readable.
    assert "## Spring and neap tides" in text
    assert "- Spring tides follow new and full moons." in text
    assert "[spring tides](https://example.org/spring)" in text
    assert f"[neap tides](http://public.test:{server.port}/glossary/neap)" in text, "links are made absolute"
    # The boilerplate is gone.
    for boilerplate in ["BUY CHEAP WATCHES", "Sign in to your account", "Celebrity gossip", "win a cruise",
                        "All rights reserved", "Cookie settings", "Most read"]:
        assert boilerplate not in text
    assert ctx.reported[0] == "fetching public.test…"


async def test_plain_text_and_json_pass_through(server):
    notes = await fetch_page(server.url("/notes.txt", host="public.test"))
    assert notes.text.endswith("Plain notes.\n\n- one\n- two")
    assert notes.sources == (Source(server.url("/notes.txt", host="public.test"), ""),)
    data = await fetch_page(server.url("/data.json", host="public.test"))
    assert json.loads(data.text.split("\n\n", 1)[1]) == {"name": "tides", "heights": [1.2, 15.6]}


async def test_a_page_without_a_content_type_is_sniffed(server):
    result = await fetch_page(server.url("/untyped", host="public.test"))
    assert "No type said." in result.text
    assert result.sources[0].title == "Untyped"


async def test_a_page_with_too_little_for_the_extractor_still_reads(server):
    result = await fetch_page(server.url("/stub", host="public.test"))
    assert "Just one line." in result.text
    assert result.sources[0].title == "Stub"


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/latin.txt", "Café crème, naïve façade: €5"),
        ("/latin1-label.txt", "Café crème, naïve façade: €5"),
        ("/undeclared.txt", "Café crème, naïve façade: €5"),  # not UTF-8: windows-1252
        ("/russian", f"{RUSSIAN}: луна тянет океан."),  # only a <meta> says koi8-r
        ("/japanese", "月が海を引っ張る。"),
        ("/xhtml", "Prix : 5 €, café compris."),  # only the XML declaration says iso-8859-15
        ("/base64", "Bonjour, ça va ?"),
        ("/undefined", "Bonjour, ça va ?"),
    ],
)
async def test_other_charsets_are_decoded(server, path, expected):
    result = await fetch_page(server.url(path, host="public.test"))
    assert expected in result.text
    assert "\ufffd" not in result.text


async def test_the_title_comes_through_in_its_charset(server):
    result = await fetch_page(server.url("/russian", host="public.test"))
    assert result.sources[0].title == RUSSIAN


# --------------------------------------------------------------------------
# Size and time
# --------------------------------------------------------------------------


async def test_a_huge_page_is_cut_and_says_so(server):
    assert len(HUGE) > 3_000_000
    started = time.monotonic()
    result = await fetch_page(server.url("/huge", host="public.test"), max_chars=5_000)
    assert "Paragraph 1: the tide rolls in" in result.text
    assert "[truncated at 5000 characters]" in result.text
    assert "larger than 2000000 bytes" in result.text
    assert len(result.text) < 5_000 + 300
    # Only a guard against a stall: that the page was cut at 2 MB is said above. Reading 2 MB
    # of HTML takes ~3 s, and over 10 s on a loaded 2-core machine (it failed so, twice).
    assert time.monotonic() - started < 60


async def test_long_plain_text_is_cut_at_max_chars(server):
    result = await fetch_page(server.url("/bytes", host="public.test", n=50_000))
    assert result.text.endswith("x" * 100 + "\n\n[truncated at 20000 characters]")
    assert result.text.count("x") == 20_000


async def test_a_slow_page_times_out(server):
    started = time.monotonic()
    with pytest.raises(PageError, match=r"^timed out: .* did not finish loading within 0.5 s$"):
        await fetch_page(server.url("/slow", host="public.test", every=0.05), timeout=0.5)
    assert time.monotonic() - started < 2


async def test_an_abort_stops_a_fetch_promptly(server):
    ctx = context()
    tool = fetch_page_tool(public_guard(), timeout=30)
    run = asyncio.create_task(tool.run({"url": server.url("/slow", host="public.test", every=0.05)}, ctx))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    ctx.abort.set()
    with pytest.raises(PageError, match="stopped while fetching public.test"):
        await run
    assert time.monotonic() - started < 0.5


async def test_an_abort_before_the_start_fetches_nothing(server):
    ctx = context()
    ctx.abort.set()
    with pytest.raises(PageError, match="stopped before fetching public.test"):
        await fetch_page_tool(public_guard()).run({"url": server.url("/article", host="public.test")}, ctx)
    assert server.connections == 0


# --------------------------------------------------------------------------
# Pages that cannot be read
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, message",
    [
        ("/missing", r"/missing answered 404 Not Found$"),
        ("/broken", r"/broken answered 500 Internal Server Error$"),
        ("/image.png", r"is image/png, which fetch_page cannot read"),
        ("/download", r"is application/octet-stream, which fetch_page cannot read"),
        ("/mislabelled", r"looks like a binary file"),
        ("/untyped-binary", r"looks like a binary file"),
        ("/empty", r"has no readable text"),
        ("/blank", r"has no readable text"),
    ],
)
async def test_pages_that_cannot_be_read_are_clear_errors(server, path, message):
    with pytest.raises(PageError, match=message):
        await fetch_page(server.url(path, host="public.test"))


async def test_a_name_that_does_not_resolve_is_a_clear_error():
    with pytest.raises(PageError, match=r"could not fetch http://nowhere.test/: nowhere.test could not be resolved"):
        await fetch_page("http://nowhere.test/")


# --------------------------------------------------------------------------
# The guard: always on
# --------------------------------------------------------------------------


async def test_loopback_is_refused_by_default(server):
    """No test hook: the default guard, as the app builds the tool."""
    tool = fetch_page_tool()
    for url, message in [
        (server.url("/article"), "refused: 127.0.0.1 is a loopback address"),
        (f"http://localhost:{server.port}/article", "refused: localhost is a loopback name"),
        (f"http://0x7f.1:{server.port}/article", "refused: 0x7f.1 means 127.0.0.1, a loopback address"),
        ("http://169.254.169.254/latest/meta-data", "refused: 169.254.169.254 is a link-local address (cloud metadata)"),
    ]:
        with pytest.raises(Refused) as caught:
            await tool.run({"url": url}, context())
        assert str(caught.value) == message
    assert server.connections == 0


async def test_a_guard_that_allows_private_addresses_is_not_obeyed(server):
    # CHAT_PRIVATE_PLUGINS=1 lifts the check for plugins only, never for page fetches.
    tool = fetch_page_tool(Guard(resolve=resolve, allow_private=True))
    with pytest.raises(Refused, match="127.0.0.1 is a loopback address"):
        await tool.run({"url": server.url("/article")}, context())
    assert server.connections == 0


@pytest.mark.parametrize(
    "target, message",
    [
        ("http://127.0.0.2:{port}/article", "refused: 127.0.0.2 is a loopback address"),
        ("http://elsewhere.test:{port}/article", "refused: elsewhere.test resolves to 127.0.0.2, a loopback address"),
        ("http://[::ffff:127.0.0.2]:{port}/article", "the IPv4-mapped form of 127.0.0.2"),
        ("file:///etc/passwd", "only http and https"),
    ],
)
async def test_a_redirect_to_a_refused_address_is_refused(server, other, target, message):
    start = server.url("/redirect", host="public.test", to=target.format(port=other.port))
    with pytest.raises(Refused, match=message) as caught:
        await fetch_page(start)
    assert "(redirected from http://public.test:" in str(caught.value)
    assert other.connections == 0


# --------------------------------------------------------------------------
# Hostile arguments
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        ({"url": ""}, "the url is empty"),
        ({"url": "   "}, "the url is empty"),
        ({"url": "javascript:alert(1)"}, "only http and https addresses can be fetched, not javascript:"),
        ({"url": "file:///etc/passwd"}, "only http and https addresses can be fetched, not file:"),
        ({"url": "data:text/html,<script>alert(1)</script>"}, "only http and https addresses can be fetched, not data:"),
        ({"url": "ftp://public.test/"}, "only http and https addresses can be fetched, not ftp:"),
        ({"url": "http://public.test/" + "a" * 100_000}, "the url is 100019 characters long; at most 4096 are accepted"),
        ({"url": 42}, "the url must be a string, not a number"),
        ({"url": None}, "the url must be a string, not null"),
        ({"url": ["http://public.test/"]}, "the url must be a string, not an array"),
        ({}, "fetch_page needs a url"),
        ({"address": "http://public.test/"}, "fetch_page needs a url"),
        ({"url": "public.test/article"}, "the url must start with http:// or https://"),
        ({"url": "public.test:8080/article"}, "the url must start with http:// or https://"),
        ({"url": "http:///etc/passwd"}, "has no host"),
        ({"url": "http://[::1/"}, "is not a valid address"),
        ({"url": "http://public.test/\r\nX-Injected: 1"}, "control characters"),
        ({"url": "http://user:secret@public.test/"}, "must not contain a user name or password"),
    ],
)
async def test_hostile_arguments_are_clear_errors(server, args, message):
    with pytest.raises(PageError) as caught:
        await fetch_page_tool(public_guard()).run(args, context())
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300, "a hostile url is not echoed back whole"
    assert server.connections == 0
