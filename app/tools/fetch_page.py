"""The built-in `fetch_page(url)` tool: a public web page as readable text.

The address comes from a model, so the request always goes through netguard with the
address check on (`allow_private` is forced off, whatever guard is passed in:
CHAT_PRIVATE_PLUGINS lifts the check for plugins, never for page fetches), with a size cap
and an overall deadline.

HTML goes through trafilatura, which finds the main content and drops menus, sidebars,
ads and footers, and renders what is left as Markdown-ish text (headings, lists, links,
tables), plus the page's title. Plain text and JSON pass through. Anything else (images,
PDFs, archives) is refused rather than fed to the model as noise.

Every failure raises `PageError` (or netguard's `Refused`) with a plain message; the agent
loop turns it into a failed call the model reads.
"""

from __future__ import annotations

import asyncio
import codecs
import http
import re
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import httpx2

from .. import netguard
from . import Result, Source, Tool, ToolContext, unless_stopped

__all__ = ["PageError", "fetch_page_tool"]

# Longer than any address a person would paste, short enough that a hostile one is not
# echoed into errors or sent anywhere.
MAX_URL_CHARS = 4096

HEADERS = {
    "User-Agent": "Tabletalk (fetch_page; a chat assistant reading one page for a person)",
    "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5",
}

DESCRIPTION = (
    "Fetch one public web page by its http:// or https:// address and return its main text "
    "as Markdown (headings, lists, links and tables kept; menus, ads and footers left out), "
    "headed by the page's title and final address. Plain-text and JSON addresses are returned "
    "as they are. Long pages are cut off, with a note saying so. It cannot read images, PDFs "
    "or other binary files, pages behind a login, or addresses on private networks."
)

PARAMETERS = {
    "type": "object",
    "properties": {
        "url": {
            "type": "string",
            "description": "The page's full address, starting with http:// or https://",
            "maxLength": MAX_URL_CHARS,
        },
    },
    "required": ["url"],
    "additionalProperties": False,
}


class PageError(Exception):
    """A page that could not be fetched or read; the message is meant for the model."""


def fetch_page_tool(
    guard: netguard.Guard | None = None,
    *,
    max_bytes: int = 2_000_000,
    timeout: float = 15.0,
    max_chars: int = 20_000,
) -> Tool:
    """The fetch_page tool. `guard` replaces the default Guard (tests pass a fake resolver
    and the test-only allow hook); its `allow_private` is ignored. At most `max_bytes` of a
    body are read, the whole fetch (redirects included) must finish within `timeout`
    seconds, and the text returned is cut at `max_chars` characters."""
    guard = replace(guard or netguard.Guard(), allow_private=False)

    async def get(url: str) -> netguard.Fetched:
        shown = _shown(url)
        try:
            async with netguard.guarded_client(guard=guard, timeout=timeout) as client:
                return await netguard.fetch(client, url, max_bytes=max_bytes, timeout=timeout, headers=HEADERS)
        except (TimeoutError, httpx2.TimeoutException):
            raise PageError(f"timed out: {shown} did not finish loading within {timeout:g} s") from None
        except (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError) as exc:
            raise PageError(f"could not fetch {shown}: {str(exc) or type(exc).__name__}") from None

    async def run(args: dict[str, Any], ctx: ToolContext) -> Result:
        url = _checked_url(args)
        host = urlsplit(url).hostname
        if ctx.abort.is_set():
            raise PageError(f"stopped before fetching {host}")
        ctx.progress(f"fetching {host}…")
        page = await unless_stopped(ctx.abort, get(url), PageError(f"stopped while fetching {host}"))
        if not 200 <= page.status < 300:
            raise PageError(f"{_shown(page.url)} answered {page.status} {_phrase(page.status)}".rstrip())
        kind = _kind(page)
        if kind == "html":
            ctx.progress(f"reading {host}…")
            html = _decode(page.body, _declared_charset(page), html=True)
            read = asyncio.to_thread(_readable_html, html, page.url)
            title, text = await unless_stopped(ctx.abort, read, PageError(f"stopped while reading {host}"))
        else:
            title, text = "", _decode(page.body, _declared_charset(page), html=False).strip()
        if not text.strip():
            raise PageError(f"{_shown(page.url)} has no readable text (the page is empty)")
        text = _cut(text, max_chars)
        if page.truncated:
            text += f"\n\n[the page is larger than {max_bytes} bytes; only the first {max_bytes} were read]"
        head = (f"Title: {title}\n" if title else "") + f"URL: {page.url}\n\n"
        return Result(head + text, sources=(Source(page.url, title),))

    return Tool("fetch_page", DESCRIPTION, PARAMETERS, run, idempotent=True,
                summary="Reads a public web page and gives the agent its text (never a page on your network).")


# --------------------------------------------------------------------------
# The address
# --------------------------------------------------------------------------


def _checked_url(args: dict[str, Any]) -> str:
    """The url argument, or PageError saying what is wrong with it."""
    if not isinstance(args, dict) or "url" not in args:
        raise PageError("fetch_page needs a url, e.g. {\"url\": \"https://example.org/\"}")
    url = args["url"]
    if not isinstance(url, str):
        raise PageError(f"the url must be a string, not {_JSON_TYPES.get(type(url), type(url).__name__)}")
    url = url.strip()
    if not url:
        raise PageError("the url is empty")
    if len(url) > MAX_URL_CHARS:
        raise PageError(f"the url is {len(url)} characters long; at most {MAX_URL_CHARS} are accepted")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise PageError("the url contains control characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise PageError(f"the url {_shown(url, 80)} is not a valid address") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        # "example.org/a" and "localhost:8000" have no scheme, or one that is really a host.
        if not scheme or "." in scheme or (not parts.netloc and parts.path[:1].isdigit()):
            raise PageError(f"the url must start with http:// or https:// (got {_shown(url, 80)})")
        raise PageError(f"only http and https addresses can be fetched, not {_shown(scheme, 40)}:")
    if not host:
        raise PageError(f"the url {_shown(url, 80)} has no host")
    if "@" in parts.netloc:
        # A page fetch has no business sending credentials, and user@host hides the host.
        raise PageError("the url must not contain a user name or password")
    return url


_JSON_TYPES = {
    type(None): "null", bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object",
}


def _shown(url: str, limit: int = 200) -> str:
    return url if len(url) <= limit else url[: limit - 1] + "…"


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


# --------------------------------------------------------------------------
# What the body is, and its characters
# --------------------------------------------------------------------------

_TEXT_TYPES = {
    "application/json", "application/xml", "application/javascript", "application/x-javascript",
    "application/ecmascript", "application/yaml", "application/x-yaml", "application/toml",
    "application/x-ndjson", "application/csv",
}


def _kind(page: netguard.Fetched) -> str:
    """"html" or "text", else PageError: binary bodies are refused, not decoded into noise."""
    mime = page.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    head = page.body[:1024]
    if mime in ("text/html", "application/xhtml+xml"):
        kind = "html"
    elif mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        kind = "text"
    elif not mime:
        kind = "html" if re.match(rb"\s*(<!doctype html|<html|<head|<body)", head[:200], re.I) else "text"
    else:
        raise PageError(
            f"{_shown(page.url)} is {mime}, which fetch_page cannot read (it reads web pages, plain text and JSON)"
        )
    if b"\0" in head and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise PageError(f"{_shown(page.url)} looks like a binary file, which fetch_page cannot read")
    return kind


_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
# <meta charset=x>, <meta http-equiv=Content-Type content="text/html; charset=x">, and the
# XML declaration of an XHTML page.
_META_CHARSET = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)"""
    rb"""|<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""",
    re.I,
)
# The WHATWG Encoding standard reads these labels as windows-1252, and so do browsers.
_AS_1252 = {"ascii", "latin_1", "iso8859-1", "us-ascii"}


def _declared_charset(page: netguard.Fetched) -> str | None:
    found = _CHARSET.search(page.headers.get("content-type", ""))
    return found.group(1) if found else None


def _codec(label: str | None) -> str | None:
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip()).name
    except LookupError:
        return None
    return "cp1252" if name in _AS_1252 else name


def _decoded(body: bytes, codec: str | None) -> str | None:
    """body in codec, or None for a label Python knows but cannot decode text with
    (base64, rot13, undefined, ...): a server can name any of them."""
    if codec is None:
        return None
    try:
        return body.decode(codec, errors="replace")
    except (LookupError, UnicodeError):
        return None


_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _decode(body: bytes, declared: str | None, *, html: bool) -> str:
    """The body's text: a byte-order mark first, then the declared charset, then (HTML) a
    <meta> charset or XML declaration near the top, then UTF-8 when it fits, else windows-1252."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body.decode(name, errors="replace")
    if (text := _decoded(body, _codec(declared))) is not None:
        return text
    meta = _META_CHARSET.search(body[:4096]) if html else None
    codec = _codec((meta.group(1) or meta.group(2)).decode("ascii")) if meta else None
    # Bytes that spell an ASCII <meta> are not UTF-16, whatever the tag says (WHATWG).
    if (text := _decoded(body, "utf-8" if codec and codec.startswith("utf-16") else codec)) is not None:
        return text
    try:
        # Incremental, so a character cut in half by max_bytes does not make it "not UTF-8".
        return codecs.getincrementaldecoder("utf-8")().decode(body, final=False)
    except UnicodeDecodeError:
        return body.decode("cp1252", errors="replace")


# --------------------------------------------------------------------------
# HTML to readable text
# --------------------------------------------------------------------------


def _readable_html(html: str, url: str) -> tuple[str, str]:
    """(title, main text as Markdown) of an HTML page; CPU-bound, run in a thread."""
    import trafilatura  # on the first page read, not at start (~0.2 s of every restart)

    # trafilatura takes a page that never says "html" near its start and parses to a single
    # block ("<p>hi</p>", as some servers send) for not-HTML; as a document it is read.
    tree = trafilatura.load_html(html)
    if tree is None:
        tree = trafilatura.load_html(f"<html><body>{html}</body></html>")
    if tree is None:
        return "", ""
    document = trafilatura.bare_extraction(
        tree,
        url=url,
        with_metadata=True,  # for the title; the other fields are not used
        include_comments=False,
        include_formatting=True,
        include_links=True,
        include_tables=True,
    )
    if document is not None and (document.text or "").strip():
        return (document.title or "").strip(), document.text.strip()
    # Too little for trafilatura to call it content (a stub, a list of links): the page's
    # whole text is better than nothing.
    title = (trafilatura.extract_metadata(tree, default_url=url).title or "").strip()
    return title, (trafilatura.html2txt(tree) or "").strip()


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + f"\n\n[truncated at {max_chars} characters]"
