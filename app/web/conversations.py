"""Whole conversations: search them, delete one, export one (Markdown or JSON)."""
from __future__ import annotations

import json

from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery

from ..store import db as dbm
from .. import export
from . import search
from ..tables import Conversation
from . import render
from .toolkit import conversation_or_404, go, me, worker


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
    return attachment(text, "text/markdown; charset=utf-8", convo, "md")


@get("/c/{chat:str}/export.json")
async def export_json(request: Request, chat: FromPath[str]) -> Response:
    convo, items = rows(request, chat)
    body = json.dumps(export.to_json(convo, items, exported=dbm.now()), ensure_ascii=False, indent=1)
    return attachment(body, "application/json", convo, "json")


routes = [search_page, confirm_delete, delete, export_markdown, export_json]
