"""`GET /files/{id}`: an attachment's or a tool-made file's bytes, safely.

The type is the one sniffed when the bytes were stored; images (png, jpeg, gif, webp) show
inline, everything else downloads; nosniff always, and no SVG or HTML is ever served inline.
The bytes are streamed as the store reads them (app/store/blobs.py: chunks of 256 KB, from
files/ on SQLite or the database's rows on PostgreSQL), never held whole.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from litestar import Request, Response, get
from litestar.params import FromPath
from litestar.response import Stream

from .. import files as filestore
from .toolkit import file_or_404


@get("/files/{file:str}")
async def serve_file(request: Request, file: FromPath[str]) -> Response | Stream:
    row, chunks = file_or_404(request, file)
    etag = f'"{row["sha256"]}"'
    # Revalidated on every use (the browser keeps the bytes, the server says whether they are
    # still this person's): a shared browser must not show a file from its cache after the
    # person signed out.
    cache = {"Cache-Control": "private, no-cache", "ETag": etag}
    if _revalidated(request.headers.get("if-none-match", ""), row["sha256"]):
        chunks.close()
        return Response(b"", status_code=304, headers=cache)
    kind = row["type"]
    inline = filestore.is_image(kind)
    if not inline and not filestore.is_text(kind) and kind != "application/pdf" and not filestore.is_audio(kind):
        kind = filestore.OCTET
    # the row's type names its charset (files.TEXT), which Litestar adds to a text/* type itself
    return Stream(_in_loop(chunks), media_type=kind.partition(";")[0].strip(), headers={
        "Content-Length": str(row["size"]),
        "Content-Disposition": filestore.disposition(row["name"], inline),
        "X-Content-Type-Options": "nosniff",
        **cache,
        "Content-Security-Policy": "default-src 'none'; sandbox",
    })


def _revalidated(header: str, sha256: str) -> bool:
    """Whether If-None-Match names these bytes: the tag, or the tag of a compressed form of
    them (web/compress.py tags text sent as gzip or br `"sha256-gzip"`)."""
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return bool(tags & {f'"{sha256}"', f'"{sha256}-gzip"', f'"{sha256}-br"'})


async def _in_loop(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Each chunk read on the event loop's thread, between sends (a sync iterator would be
    read in a thread pool, on the store's one connection that the loop uses too)."""
    try:
        for chunk in chunks:
            yield chunk
    finally:
        chunks.close()


routes = [serve_file]
