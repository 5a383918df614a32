"""What the app sends, compressed as the browser accepts it: pages, the live feed, static files.

- A whole response (a page, a fragment, JSON) of text of at least `MIN_SIZE` bytes is sent
  as br (brotli, quality 5) when `Accept-Encoding` allows it, else gzip.
- A streamed response (the live feed's Server-Sent Events) is gzip with a partial flush
  after every message: each message leaves at once, whole (a partial flush ends the deflate
  block and adds an empty one of 10 bits, where a sync flush adds 5 bytes: a followed answer
  is a message per word or two, and those 5 bytes were a third of its stream), and what the
  stream repeats (the same ids, tags and wrappers message after message) is sent as
  back-references into the last 4 KB.
  Not brotli: its streaming encoder holds ~290 KB per open stream at quality 2 and above
  (this gzip ~24 KB) and, flushed per message, compressed a followed answer's stream
  worse (9.4 KB against 8.7-9.8 KB for gzip).
- Static files are compressed once, when first asked for (and again when the file
  changes), at the best ratio: `static` keeps their identity, br and gzip bytes in memory,
  each with its own ETag.
Every compressible response says `Vary: Accept-Encoding`.
"""
from __future__ import annotations

import hashlib
import mimetypes
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import brotli
from litestar import Request, Response, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

MIN_SIZE = 512  # below this, compression's framing outweighs what it saves
# A stream's compressor lives as long as its page is open (10,000 pages must fit in a
# worker): a 4 KB window and memory level 4 hold ~24 KB idle and ~30 KB busy (zlib's
# defaults, 32 KB and 8: ~90 and ~180 KB) for a followed answer 12% bigger (9.8 KB
# against 8.7 KB for the long answer of the tests).
STREAM_WINDOW_BITS = 12
STREAM_MEMORY_LEVEL = 4
_TEXT = (b"text/", b"application/javascript", b"application/json", b"image/svg+xml", b"application/xml")
_CODINGS = ("br", "gzip")  # what the server offers, in its order of preference


def chosen(accept_encoding: str, offered: tuple[str, ...] = _CODINGS) -> str | None:
    """The offered coding the client accepts with the highest q (ties: the server's order),
    or None. `Accept-Encoding: br;q=0, *` accepts gzip and not br."""
    weights: dict[str, float] = {}
    for part in accept_encoding.split(","):
        name, _, params = part.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name.strip():
            weights[name.strip().lower()] = q
    best, best_q = None, 0.0
    for coding in offered:
        q = weights.get(coding, weights.get("*", 0.0))
        if q > best_q:
            best, best_q = coding, q
    return best


def compressed(body: bytes, coding: str, best: bool = False) -> bytes:
    if coding == "br":
        return brotli.compress(body, quality=11 if best else 5)
    z = zlib.compressobj(9 if best else 6, zlib.DEFLATED, 31)
    return z.compress(body) + z.flush()


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _with_vary(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    vary = _header(headers, b"vary")
    if vary is None:
        return [*headers, (b"vary", b"Accept-Encoding")]
    if b"accept-encoding" in vary.lower():
        return headers
    return [(k, v + b", Accept-Encoding" if k.lower() == b"vary" else v) for k, v in headers]


def _encoded(headers: list[tuple[bytes, bytes]], coding: str, length: int | None) -> list[tuple[bytes, bytes]]:
    out = []
    for key, value in headers:
        low = key.lower()
        if low == b"content-length":
            continue
        if low == b"etag":  # another representation: another tag
            value = value[:-1] + b"-" + coding.encode() + b'"' if value.endswith(b'"') else value
        out.append((key, value))
    out.append((b"content-encoding", coding.encode()))
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    return out


def compression(app: Any) -> Any:
    """ASGI middleware: compress responses of text as the request's Accept-Encoding allows."""

    async def middleware(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        accept = ""
        for key, value in scope.get("headers", ()):
            if key == b"accept-encoding":
                accept = value.decode("latin-1")
                break
        coding = chosen(accept) if accept else None
        start: dict | None = None
        stream: Any = None

        async def wrapped(message: dict) -> None:
            nonlocal start, stream
            kind = message["type"]
            if kind == "http.response.start":
                start = message  # sent with the first body, once its size is known
                return
            if kind != "http.response.body":
                await send(message)
                return
            if start is not None:
                first, start = start, None
                headers = list(first.get("headers", ()))
                ctype = (_header(headers, b"content-type") or b"").lower()
                status = first.get("status", 200)
                if (not ctype.startswith(_TEXT) or _header(headers, b"content-encoding") is not None
                        or status < 200 or status in (204, 304)):
                    await send(first)
                    await send(message)
                    return
                headers = _with_vary(headers)
                body = message.get("body", b"")
                more = message.get("more_body", False)
                if more and coding is not None:
                    # a stream: gzip, flushed after every message (see the module docstring)
                    stream = zlib.compressobj(6, zlib.DEFLATED, 16 + STREAM_WINDOW_BITS, STREAM_MEMORY_LEVEL)
                    headers = _encoded(headers, "gzip", None)
                    body = stream.compress(body) + stream.flush(zlib.Z_PARTIAL_FLUSH)
                elif not more and coding is not None and len(body) >= MIN_SIZE:
                    body = compressed(body, coding)
                    headers = _encoded(headers, coding, len(body))
                await send({**first, "headers": headers})
                await send({**message, "body": body})
                return
            if stream is not None:
                more = message.get("more_body", False)
                body = stream.compress(message.get("body", b""))
                body += stream.flush(zlib.Z_PARTIAL_FLUSH if more else zlib.Z_FINISH)
                await send({**message, "body": body})
                return
            await send(message)

        await app(scope, receive, wrapped)

    return middleware


# --------------------------------------------------------------------------- static files


@dataclass(frozen=True)
class _Static:
    stamp: tuple[int, int]  # (mtime_ns, size) the bytes were read at
    media_type: str
    tag: str  # the identity representation's ETag, without quotes
    bodies: dict[str, bytes]  # "" (identity), "br", "gzip": only those smaller than identity


_STATIC: dict[str, _Static] = {}


def static_file(root: Path, name: str) -> tuple[Path, _Static]:
    """The file `name` under `root` with its compressed forms, made once per version of it."""
    if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in name.split("/")):
        raise NotFoundException()
    path = root / name
    try:
        st = path.stat()
    except OSError:
        raise NotFoundException() from None
    if not path.is_file() or not path.resolve().is_relative_to(root.resolve()):
        raise NotFoundException()
    stamp = (st.st_mtime_ns, st.st_size)
    found = _STATIC.get(name)
    if found is None or found.stamp != stamp:
        raw = path.read_bytes()
        media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if media_type in ("application/javascript", "image/svg+xml"):  # Litestar says a text/* type's charset itself
            media_type += "; charset=utf-8"
        bodies = {"": raw}
        if media_type.encode().startswith(_TEXT) and len(raw) >= MIN_SIZE:
            for coding in _CODINGS:
                packed = compressed(raw, coding, best=True)
                if len(packed) < len(raw):
                    bodies[coding] = packed
        found = _Static(stamp, media_type, hashlib.sha256(raw).hexdigest()[:20], bodies)
        _STATIC[name] = found
    return path, found


def static_routes(root: Path, max_age: int = 3600) -> list:
    @get("/static/{name:path}", include_in_schema=False, exclude_from_csrf=True, sync_to_thread=False)
    def static(request: Request, name: FromPath[str]) -> Response:
        _, entry = static_file(root, name.lstrip("/"))
        coding = chosen(request.headers.get("accept-encoding", ""), tuple(c for c in _CODINGS if c in entry.bodies))
        tag = f'"{entry.tag}-{coding}"' if coding else f'"{entry.tag}"'
        headers = {"ETag": tag, "Cache-Control": f"max-age={max_age}"}
        if len(entry.bodies) > 1:
            headers["Vary"] = "Accept-Encoding"
        if coding:
            headers["Content-Encoding"] = coding
        wanted = request.headers.get("if-none-match", "")
        if wanted and (wanted.strip() == "*" or tag in [t.strip().removeprefix("W/") for t in wanted.split(",")]):
            return Response(b"", status_code=304, headers=headers)
        return Response(entry.bodies[coding or ""], media_type=entry.media_type, headers=headers)

    return [static]


__all__ = ["chosen", "compressed", "compression", "static_routes", "static_file"]
