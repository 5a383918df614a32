"""The person's answer to a plugin's request (app/plugins/asks.py): an elicitation's form
(Accept, Decline, Cancel) and a sampling request (Approve, Decline). A plain form post
that redirects back to the conversation; a refused answer shows the form again on a page
of its own, with each refusal beside its field and what was typed kept."""
from __future__ import annotations

import json

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath

from ..plugins import forms as mcp_forms
from ..tables import Item
from . import render
from .ask_view import ask_view, prefix
from .toolkit import conversation_or_404, done, parse_id, worker

MAX_FORM_VALUES = 500  # values one answer may post (checkboxes of a long multiple choice)

ACTIONS = {"ask": {"accept": "accepted", "decline": "declined", "cancel": "cancelled"},
           "sample": {"approve": "approved", "decline": "declined"}}
WAITS_IN = {"ask": "waiting", "sample": "approval"}


def _ask_or_404(request: Request, chat: str, ask: str) -> Item:
    s = worker(request)
    convo = conversation_or_404(request, chat)
    it = s.store.item(parse_id(ask, "request"))
    if it is None or it.chat != convo.id or it.kind not in ACTIONS:
        raise NotFoundException("No such request.")
    return it


@get("/c/{chat:str}/asks/{ask:str}")
async def show(request: Request, chat: FromPath[str], ask: FromPath[str]) -> Response:
    """The request on a page of its own (where a refused answer lands)."""
    it = _ask_or_404(request, chat, ask)
    return render.page(request, "ask.html", it=it, v=ask_view(it), current=it.chat)


@post("/c/{chat:str}/asks/{ask:str}")
async def answer(request: Request, chat: FromPath[str], ask: FromPath[str]) -> Response:
    s = worker(request)
    it = _ask_or_404(request, chat, ask)
    form = await request.form()
    action = form.get("action", "")
    state_now = ACTIONS[it.kind].get(action if isinstance(action, str) else "")
    if state_now is None:
        raise HTTPException(status_code=400, detail=f"The answer is one of {', '.join(ACTIONS[it.kind])}.")
    if it.state != WAITS_IN[it.kind] or it.done:
        raise HTTPException(status_code=409, detail="This request is no longer waiting for an answer.")
    values: dict = {"state": state_now, "done": state_now != "approved"}
    if it.kind == "ask" and state_now == "accepted":
        posted = _posted(form, prefix(it))
        spec = mcp_forms.form_of(json.loads(it.input)["schema"])
        content, errors, typed = mcp_forms.answer(spec, posted)
        if errors:
            return render.page(request, "ask.html", status_code=400, it=it, v=ask_view(it, typed, errors),
                               current=it.chat, refused=len(errors))
        values["output"] = json.dumps(content, ensure_ascii=False)
    if not s.store.settle(it.id, WAITS_IN[it.kind], **values):
        raise HTTPException(status_code=409, detail="This request is no longer waiting for an answer.")
    return done(request, f"/c/{it.chat}#i{it.id}")


def _posted(form, start: str) -> dict[str, list[str]]:
    """The form's values under this item's names (`a12-f0` -> `f0`); files and the rest ignored."""
    out: dict[str, list[str]] = {}
    count = 0
    for key, value in form.multi_items():
        if not isinstance(key, str) or not key.startswith(start) or not isinstance(value, str):
            continue
        count += 1
        if count > MAX_FORM_VALUES:
            raise HTTPException(status_code=413, detail=f"The answer sent more than {MAX_FORM_VALUES} values.")
        out.setdefault(key[len(start):], []).append(value)
    return out


routes = [show, answer]
