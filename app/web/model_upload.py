"""A GGUF model uploaded on the models page (/model), its body read as it comes and handed
to app/builtin/upload.py, which writes it to disk: never the whole file in memory, whatever
its size (a megabyte at a time, written from a thread).

Two ways in, one route:
- the page's script (static/app.js) sends the file itself as the body (`POST
  /model/upload?file=NAME&key=KEY`, `Content-Range: bytes START-END/TOTAL`, the CSRF token in
  its header), with progress from XMLHttpRequest; it asks `GET /model/upload` first (and
  after a cut) how much of the file is here already, and sends the rest;
- without script, the page's plain form (multipart/form-data): its CSRF token is its first
  field, read and checked before a byte of the file is written; the file is its second.

Its body is past the app's general limit (app.py's body_limit): the middleware reads no form
for this route, only the owner reaches it (authenticate.py's STREAMED), and this route counts
its bytes against TABLETALK_MODEL_UPLOAD_MAX itself.
"""
from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from litestar import Request, Response, get, post
from litestar.exceptions import InternalServerException
from litestar.params import FromQuery
from multipart import MultipartError, MultipartSegment, PushMultipartParser

from ..builtin import upload
from . import csrf
from .builtin import models_page
from .toolkit import go, owner_only, worker

BUFFER = 1024 * 1024  # bytes gathered before each write to disk
FIELD_MOST = 1_000  # a form field beside the file (the token) is read up to this
STATUS = {"name": 400, "taken": 409, "busy": 409, "again": 409, "behind": 409, "room": 507, "size": 413,
          "length": 400, "model": 400}
DONE = "/model?saved=uploaded"
_RANGE = re.compile(r"^bytes (\d{1,15})-(\d{1,15})/(\d{1,15})$")


class ClientGone(Exception):
    """The client went away before its body ended."""


async def body(request: Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.stream():
            yield chunk
    except InternalServerException as e:  # litestar's word for a client gone mid-body
        raise ClientGone from e


class Writer:
    """Bytes gathered up to BUFFER, then written to the upload from a thread (a disk that
    stalls must not stall the worker's other pages)."""

    def __init__(self, up: upload.Upload):
        self.up, self.held = up, bytearray()

    async def add(self, data: bytes | memoryview) -> None:
        self.held += data
        if len(self.held) >= BUFFER:
            await self.flush()

    async def flush(self) -> None:
        if self.held:
            held, self.held = self.held, bytearray()
            await asyncio.to_thread(self.up.write, held)


def answer(problem: str, status: int, kind: str = "", have: int = 0) -> Response:
    """A refusal the page's script shows (`problem`) or acts on (`kind`: again and behind are
    gone on from, at `have`)."""
    return Response(json.dumps({"problem": problem, "kind": kind, "have": have}), status_code=status,
                    media_type="application/json")


@get("/model/upload")
async def upload_state(request: Request, file: FromQuery[str] = "", key: FromQuery[str] = "",
                       size: FromQuery[int] = 0) -> Response:
    """For the page's script, before it sends a file (and after a cut): the name it is kept
    under and how many of its bytes are here already, or why it would be refused (JSON)."""
    owner_only(request)
    s = worker(request)
    try:
        up = upload.Upload(s.config.data, upload.file_name(file[:1000]), key, max(size, 0), s.config.model_upload_max)
        have = await asyncio.to_thread(up.ask)
    except upload.NotTaken as e:
        return answer(str(e), STATUS[e.kind], e.kind)
    return Response(json.dumps({"file": up.file, "have": have}), media_type="application/json")


@post("/model/upload", request_max_body_size=None)  # bounded here, by TABLETALK_MODEL_UPLOAD_MAX
async def upload_model(request: Request) -> Response:
    owner_only(request)  # the middleware refused anyone else before the body was read
    kind, options = request.content_type
    if kind == "multipart/form-data":
        return await from_form(request, options.get("boundary", ""))
    return await from_script(request)


async def from_script(request: Request) -> Response:
    """The file as the body; `Content-Range` says where it starts and the file's size (none:
    from its start, the request's length)."""
    s = worker(request)
    start, total = 0, request.content_length
    if sent := request.headers.get("content-range"):
        m = _RANGE.match(sent.strip())
        if not m or int(m[2]) != int(m[3]) - 1 or int(m[1]) > int(m[2]):
            return answer("Content-Range must be bytes START-END/SIZE, to the file's end.", 400)
        start, total = int(m[1]), int(m[3])
        if request.content_length is not None and request.content_length != total - start:
            return answer(f"The request's length ({request.content_length:,}) is not what its Content-Range says.", 400)
    key = request.query_params.get("key", "")
    try:
        up = upload.Upload(s.config.data, upload.file_name(request.query_params.get("file", "")[:1000]),
                           key or upload.new_key(), total, s.config.model_upload_max)
        await asyncio.to_thread(up.claim, start)
    except upload.NotTaken as e:
        return answer(str(e), STATUS[e.kind], e.kind, e.have)
    writer, cut = Writer(up), False
    try:
        async for chunk in body(request):
            await writer.add(chunk)
        await writer.flush()
        await asyncio.to_thread(up.finish)
    except upload.NotTaken as e:
        return answer(str(e), STATUS[e.kind], e.kind)
    except ClientGone:
        cut = bool(key)  # its part kept, what came of it, for its page to go on from
        try:
            await writer.flush()
        except upload.NotTaken:
            cut = False  # the disk filled meanwhile: nothing to go on from
        return answer("The upload was cut off.", 400, "behind", up.size)  # nobody reads it: the client is gone
    finally:
        await asyncio.to_thread(up.close, cut)
    return Response(json.dumps({"file": up.file, "go": DONE}), status_code=200, media_type="application/json")


async def from_form(request: Request, boundary: str) -> Response:
    """The plain form: its token first, then the file, written as its bytes come."""
    s = worker(request)
    try:
        parser = PushMultipartParser(boundary, max_segment_count=4)
    except MultipartError:
        return await form_refused(request, "The form could not be read.", 400)
    up: upload.Upload | None = None
    writer: Writer | None = None
    checked = bool(request.headers.get(csrf.HEADER))  # a token in the header: the middleware checked it
    field, segment = bytearray(), None
    try:
        async for chunk in body(request):
            for part in parser.parse(chunk):
                if isinstance(part, MultipartSegment):
                    segment, field = part, bytearray()
                    if segment.filename is None:
                        continue
                    if not checked:  # the form puts its token before the file; anything else is not its
                        return await form_refused(request, "This form has expired. Reload the page and send it again.", 403)
                    if up is not None:
                        return await form_refused(request, "One file at a time.", 400)
                    if not segment.filename:
                        return await form_refused(request, "Choose a .gguf file to upload.", 400)
                    up = upload.Upload(s.config.data, upload.file_name(segment.filename), upload.new_key(), None,
                                       s.config.model_upload_max)
                    await asyncio.to_thread(up.claim, 0, request.content_length or 0)
                    writer = Writer(up)
                elif part:
                    if segment is not None and segment.filename is not None and writer is not None:
                        await writer.add(part)
                    elif len(field) + len(part) <= FIELD_MOST:
                        field += part
                elif segment is not None:  # the end of a part
                    if segment.filename is not None and writer is not None and up is not None:
                        await writer.flush()
                        await asyncio.to_thread(up.finish)
                    elif segment.name == csrf.FIELD:
                        why = await csrf.refused(request, field.decode("utf-8", "replace"))
                        if why:
                            return await form_refused(request, why, 403)
                        checked = True
                    segment = None
        parser.close()
    except upload.NotTaken as e:
        return await form_refused(request, str(e), STATUS[e.kind])
    except MultipartError:
        return await form_refused(request, "The form could not be read: it was cut short, or it is not this page's form.", 400)
    except ClientGone:
        return await form_refused(request, "The upload was cut off.", 400)  # nobody reads it
    finally:
        if up is not None:
            await asyncio.to_thread(up.close)
    if up is None or not up.done:
        return await form_refused(request, "Choose a .gguf file to upload.", 400)
    return go(request, DONE)


async def form_refused(request: Request, problem: str, status: int) -> Response:
    """The models page again, its upload form saying why (the plain form's way)."""
    return await models_page(request, status=status, uploading=problem)


routes = [upload_state, upload_model]
