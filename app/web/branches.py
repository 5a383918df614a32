"""What a person does to one message or answer: copy it, edit it, make it again, pick a version.

Edits and versions are rows (app/branches.py has the rule of which is current): an edit is
a new message beside the one it edits, Again a `retry` item, a pager's choice a write with
a rev, so every open page follows (the feed sends #items again when the path changed).
None of them is taken while an answer is being written: the page hides them then. A plain
form is sent back to the page's newest message (#end), as the composer's are.
"""
from __future__ import annotations

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, FromQuery

from ..store import Store
from ..tables import Conversation, Item
from . import render
from .templating import fragment
from .toolkit import (TEXT_MAX, conversation_or_404, done, form_field, model_field, parse_id, room_to_wait,
                      within_limit, worker)

BUSY = "An answer is being written: wait for it to end (or stop it) first."


def item_in(store: Store, convo: Conversation, raw: str, kinds: tuple[str, ...]) -> Item:
    it = store.item(parse_id(raw, "message"))
    if it is None or it.chat != convo.id or it.kind not in kinds:
        raise NotFoundException("No such message.")
    return it


def idle(store: Store, convo: Conversation) -> None:
    if store.chat_state(convo.id)["running"]:
        raise HTTPException(status_code=409, detail=BUSY)


def raw_text(text: str) -> Response:
    return Response(text, media_type="text/plain", headers={"Cache-Control": "no-store"})


def txt_id(name: str) -> str:
    """"12.txt" -> "12"; anything else is no such text."""
    if not name.endswith(".txt"):
        raise NotFoundException("No such text.")
    return name.removesuffix(".txt")


@get("/c/{chat:str}/items/{name:str}")
async def item_text(request: Request, chat: FromPath[str], name: FromPath[str]) -> Response:
    """A message's (or an answer part's) raw text: what Copy puts on the clipboard."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    return raw_text(item_in(s.store, convo, txt_id(name), ("user", "text")).text)


@get("/c/{chat:str}/answers/{name:str}")
async def answer_text(request: Request, chat: FromPath[str], name: FromPath[str]) -> Response:
    """An answer version's Markdown (its text parts, as written), named by its head."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    head = item_in(s.store, convo, txt_id(name), ("user", "retry"))
    if not head.starts_turn and head.kind == "user":
        raise NotFoundException("No such answer.")
    texts = [it.text for it in s.store.answer_items(head) if it.kind == "text" and it.text.strip()]
    return raw_text("\n\n".join(texts))


@post("/c/{chat:str}/items/{item:str}/edit")
async def edit(request: Request, chat: FromPath[str], item: FromPath[str]) -> Response:
    """"Save and send": the edited message becomes a new branch from where the old one stood."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    original = item_in(s.store, convo, item, ("user",))
    text = (await form_field(request, "text", TEXT_MAX)).strip()
    if not text:
        raise HTTPException(status_code=400, detail="Write a message first: it was empty.")
    if not original.starts_turn:
        raise HTTPException(status_code=400, detail="A message read during an answer cannot be edited.")
    with s.store.write():
        idle(s.store, convo)
        room_to_wait(s.store, convo.person)
        s.store.edit(original, text)
    return done(request, f"/c/{convo.id}#end")


@post("/c/{chat:str}/items/{item:str}/choose")
async def choose_message(request: Request, chat: FromPath[str], item: FromPath[str]) -> Response:
    """The message pager: this version of a message (and what followed it) becomes current."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    it = item_in(s.store, convo, item, ("user",))
    if not it.starts_turn:
        raise NotFoundException("No such message.")
    with s.store.write():
        idle(s.store, convo)
        s.store.choose_message(it)
    return done(request, f"/c/{convo.id}#end")


@post("/c/{chat:str}/answers/{head:str}/choose")
async def choose_answer(request: Request, chat: FromPath[str], head: FromPath[str]) -> Response:
    """The answer pager: this version of an answer (and what followed it) becomes current."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    it, user = answer_head(s.store, convo, head)
    with s.store.write():
        idle(s.store, convo)
        s.store.choose_answer(user, it.id)
    return done(request, f"/c/{convo.id}#end")


def answer_head(store: Store, convo: Conversation, raw: str) -> tuple[Item, Item]:
    """(the head of an answer version named in a URL, the user item of its turn)."""
    it = item_in(store, convo, raw, ("user", "retry"))
    user = store.item(it.turn or it.id)
    if user is None or not user.starts_turn:
        raise NotFoundException("No such answer.")
    return it, user


@get("/c/{chat:str}/answers/{head:str}/again")
async def again_with(request: Request, chat: FromPath[str], head: FromPath[str], menu: FromQuery[str] = "") -> Response:
    """The model to make an answer again with (the ▾ beside Again): a page, or with `?menu=1`
    the small menu app.js shows under the answer."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    it, user = answer_head(s.store, convo, head)
    if menu:
        html = fragment("_again_menu.html", convo=convo, head=it.id, choices=s.store.choices_for(convo.person),
                        csrf=render.csrf_token(request))
        return Response(html, media_type="text/html")
    return render.page(request, "again.html", convo=convo, user=user, head=it.id, choices=s.store.choices_for(convo.person))


@post("/c/{chat:str}/answers/{head:str}/again")
async def again(request: Request, chat: FromPath[str], head: FromPath[str]) -> Response:
    """"Again" under an answer: a new version of that answer, optionally from another model."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    _, user = answer_head(s.store, convo, head)
    model = await model_field(request)
    with s.store.write():
        idle(s.store, convo)
        within_limit(s.store, convo.person)
        s.store.again(user, model)
    return done(request, f"/c/{convo.id}#end")


routes = [item_text, answer_text, edit, choose_message, choose_answer, again_with, again]
