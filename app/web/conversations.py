"""Whole conversations: the list's "More" pages, search them, rename or pin one, delete one,
export one (Markdown or JSON)."""
from __future__ import annotations

import json

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath, FromQuery

from ..store import db as dbm
from .. import export
from . import search
from ..tables import Conversation
from ..titles import TITLE_MAX
from . import render
from .sidebar import PAGE, more_html, parse_key, rows_html
from .toolkit import came_from, conversation_or_404, done, form_field, go, is_htmx, local_path, me, worker


def back_to(raw: str) -> str:
    """Where a sidebar form returns: a path of this site, else the home page."""
    return local_path(raw.strip())


@get("/conversations")
async def more(request: Request, after: FromQuery[str | None] = None) -> Response:
    """The rows after `after`: for htmx, appended to the sidebar; without script, a page."""
    s = worker(request)
    start = parse_key(after)
    if after and start is None:
        raise HTTPException(status_code=400, detail="That “More” link is not one this site made.")
    convos = s.store.conversations(me(request).id, limit=PAGE, after=start)
    if is_htmx(request):
        html = ('<hx-partial hx-target="#conversations" hx-swap="upsert key:data-key sort:desc">'
                + str(rows_html(convos)) + "</hx-partial>" + str(more_html(convos, oob=True)))
        return Response(html, media_type="text/html")
    return render.page(request, "conversations.html", rows=rows_html(convos, prefix="all-"), more_link=more_html(convos),
                       first=start is None)


@get("/c/{chat:str}/rename")
async def rename_page(request: Request, chat: FromPath[str], back: FromQuery[str | None] = None) -> Response:
    convo = conversation_or_404(request, chat)
    return render.page(request, "rename.html", convo=convo, back=back_to(back or f"/c/{convo.id}"),
                       title_max=TITLE_MAX, current=convo.id)


@post("/c/{chat:str}/rename")
async def rename(request: Request, chat: FromPath[str]) -> Response:
    s = worker(request)
    convo = conversation_or_404(request, chat)
    title = " ".join((await form_field(request, "title", TITLE_MAX * 4)).split())
    if not title:
        raise HTTPException(status_code=400, detail="A title cannot be empty.")
    if len(title) > TITLE_MAX:
        raise HTTPException(status_code=400, detail=f"A title is at most {TITLE_MAX} characters.")
    s.store.set_title(convo.id, title)
    return done(request, back_to(await form_field(request, "back", 2000) or f"/c/{convo.id}"))


@post("/c/{chat:str}/pin")
async def pin(request: Request, chat: FromPath[str]) -> Response:
    s = worker(request)
    convo = conversation_or_404(request, chat)
    pinned = (await form_field(request, "pinned", 20)).strip()
    if pinned not in ("0", "1"):
        raise HTTPException(status_code=400, detail="“pinned” is 0 or 1.")
    s.store.pin(convo.id, pinned == "1")
    return done(request, came_from(request, f"/c/{convo.id}"))  # the list stream brings the change


@get("/search")
async def search_page(request: Request, q: FromQuery[str | None] = None) -> Response:
    s = worker(request)
    query = search.clean(q or "")
    hits = search.find(s.store, query, me(request).id) if query else []
    return render.page(request, "search.html", q=query, hits=hits, searched=bool(query),
                       words=bool(search.terms(query)), limit=search.RESULTS_MAX, query_max=search.QUERY_MAX)


@get("/c/{chat:str}/delete")
async def confirm_delete(request: Request, chat: FromPath[str]) -> Response:
    s = worker(request)
    convo = conversation_or_404(request, chat)
    count = s.store.messages_count(convo.id)
    running = s.store.chat_state(convo.id)["running"]
    return render.page(request, "chat_delete.html", convo=convo, messages=count, running=running,
                       current=convo.id)


@post("/c/{chat:str}/delete")
async def delete(request: Request, chat: FromPath[str]) -> Response:
    """Rows go, so the work goes. A run of it in this worker is cancelled at once, before
    anything else can happen on this event loop: its in-flight step must not write into a
    conversation made next (SQLite may give that one the same id)."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    s.store.delete_conversation(convo.id)
    s.runner.drop(convo.id)
    return go(request, "/")


def rows(request: Request, raw: str) -> tuple[Conversation, list]:
    store = worker(request).store
    with store.snapshot():  # the conversation and its items as of one moment
        convo = conversation_or_404(request, raw)
        return convo, store.items(convo.id)


def attachment(body: str, media_type: str, convo: Conversation, ext: str) -> Response:
    return Response(body, media_type=media_type, headers={
        "Content-Disposition": export.content_disposition(convo, ext), "Cache-Control": "no-store"})


@get("/c/{chat:str}/export.md")
async def export_markdown(request: Request, chat: FromPath[str]) -> Response:
    s = worker(request)
    convo, items = rows(request, chat)
    agent = s.store.agent(convo.agent) if convo.agent else None
    text = export.to_markdown(convo, items, agent.name if agent else "Assistant")
    return attachment(text, "text/markdown", convo, "md")


@get("/c/{chat:str}/export.json")
async def export_json(request: Request, chat: FromPath[str]) -> Response:
    convo, items = rows(request, chat)
    body = json.dumps(export.to_json(convo, items, exported=dbm.now()), ensure_ascii=False, indent=1)
    return attachment(body, "application/json", convo, "json")


routes = [more, rename_page, rename, pin, search_page, confirm_delete, delete, export_markdown, export_json]
