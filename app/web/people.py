"""The People page (/people), the owner's and the admins': the people and their roles, adding
someone, invitation links, links that set a forgotten password, removing someone (keeping or
deleting their conversations). docs/people.md says who may do what.

Every form works as a plain form and with script alike; a member, and a crafted form of
theirs, is refused in words (403, toolkit.managers_only).
"""
from __future__ import annotations

import asyncio

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, FromQuery

from ..accounts.invitations import DAYS_OFFERED, DAYS_DEFAULT, Invitations
from ..accounts.passwords import AccountError, hash_password, person_name
from ..accounts.rules import RESET_SECONDS, Accounts
from ..tables import NAME_MAX
from . import render
from .account_view import people_view
from .api_keys import API_SAVED
from .authenticate import secure
from .chats import halt_answers
from .toolkit import form_field, go, managers_only, me, owner_only, parse_id, person_or_404, worker
from .web_search import SAVED as SEARCH_SAVED

FIELD_MAX = 1_000
PEOPLE_SAVED = {"added": "Added: tell them their name and password.", "removed": "Removed.",
                "kept": "Removed: their conversations are yours now, marked with their name.",
                "role": "Saved the role.", "revoked": "Withdrawn: that link works no more."}


@get("/people")
async def people_page(request: Request, saved: FromQuery[str] = "") -> Response:
    managers_only(request)
    return people_view(request, saved=PEOPLE_SAVED.get(saved, ""), api_saved=API_SAVED.get(saved, ""),
                       search_saved=SEARCH_SAVED.get(saved, ""))


@post("/people")
async def add_person(request: Request) -> Response:
    """Someone added with a password the maker tells them (an invitation lets them choose it)."""
    managers_only(request)
    people = Accounts(worker(request).store)
    name = await form_field(request, "name", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    try:
        name = person_name(name)
        people.add(name, await asyncio.to_thread(hash_password, password))
    except AccountError as e:
        return people_view(request, 400, name=name[:NAME_MAX], error=str(e))
    return go(request, "/people?saved=added")


@post("/people/{person_id:str}/role")
async def set_role(request: Request, person_id: FromPath[str]) -> Response:
    """The owner makes someone an admin or a member."""
    owner_only(request)
    found = person_or_404(request, person_id)
    try:
        Accounts(worker(request).store).set_role(found.id, (await form_field(request, "role", 20)).strip())
    except AccountError as e:
        return people_view(request, 400, role_error=str(e))
    return go(request, "/people?saved=role")


# --- removing someone -----------------------------------------------------------------------


@get("/people/{person_id:str}/delete")
async def confirm_remove(request: Request, person_id: FromPath[str]) -> Response:
    found = person_or_404(request, person_id)
    s = worker(request)
    owner = s.store.person(s.store.owner())
    return render.page(request, "person_delete.html", person=found, owner=owner, error="",
                       conversations=s.store.conversations_count(person=found.id))


KEEP = {"keep": True, "delete": False}


@post("/people/{person_id:str}/delete")
async def remove_person(request: Request, person_id: FromPath[str]) -> Response:
    """Their account goes, their sessions and API keys with it; their conversations become the
    owner's (`keep`) or go (`delete`), as the form chose. Their answers being written stop."""
    found = person_or_404(request, person_id)
    s = worker(request)
    choice = (await form_field(request, "conversations", 20)).strip()
    if choice not in KEEP:
        return render.page(request, "person_delete.html", status_code=400, person=found,
                           owner=s.store.person(s.store.owner()),
                           conversations=s.store.conversations_count(person=found.id),
                           error="Choose whether their conversations are kept or deleted.")
    theirs = s.store.conversation_ids(found.id)
    if KEEP[choice]:
        for chat in theirs:  # the owner's from now on: nothing of the removed person's goes on in them
            halt_answers(s.store, chat)
    Accounts(s.store).remove(found.id, keep=KEEP[choice])
    s.feed.drop(person=found.id)
    for chat in theirs if not KEEP[choice] else ():  # as when a conversation is deleted: its run stops at once
        s.runner.drop(chat)
    return go(request, "/people?saved=" + ("kept" if KEEP[choice] else "removed"))


# --- links to pass on: a new password, an invitation ------------------------------------------


def link_url(request: Request, path: str, token: str) -> str:
    """A link as the person opens it: this site's address as the maker's browser used it."""
    scheme = "https" if secure(request) else request.url.scheme
    return f"{scheme}://{request.headers.get('host') or request.url.netloc}{path}?token={token}"


@post("/people/{person_id:str}/reset")
async def make_reset_link(request: Request, person_id: FromPath[str]) -> Response:
    """A link for someone who forgot their password, to pass on: shown this once (only its
    hash is kept), and it replaces the link made for them before."""
    found = person_or_404(request, person_id)
    token = Accounts(worker(request).store).reset_link(found.id, made_by=me(request).id)
    return render.page(request, "reset_link.html", person=found, link=link_url(request, "/reset", token),
                       days=RESET_SECONDS // 86_400)


@post("/people/invitations")
async def invite(request: Request) -> Response:
    """A new invitation link, shown this once (only its hash is kept)."""
    maker = managers_only(request)
    days = (await form_field(request, "days", 10)).strip() or DAYS_DEFAULT
    role = (await form_field(request, "role", 20)).strip() or "member"
    note = await form_field(request, "note", FIELD_MAX)
    try:
        token = Invitations(worker(request).store).make(maker, days=days, role=role, note=note)
    except AccountError as e:
        return people_view(request, 400, invite_error=str(e), invite_typed={"days": days, "role": role,
                                                                            "note": note[:NAME_MAX]})
    return render.page(request, "invitation_link.html", link=link_url(request, "/join", token), days=DAYS_OFFERED[days],
                       role=role, note=note.strip())


@post("/people/invitations/{invitation_id:str}/revoke")
async def revoke(request: Request, invitation_id: FromPath[str]) -> Response:
    """Withdrawn: by the owner, or by an admin when it invites a member (an admin's invitations
    only the owner makes, and only the owner withdraws)."""
    person = managers_only(request)
    store = worker(request).store
    found = store.invitation(parse_id(invitation_id, "invitation"))
    if found is not None and found.admin and not person.owner:
        raise HTTPException(status_code=403, detail="Only the owner withdraws an invitation to be an admin.")
    if found is None or not Invitations(store).revoke(found.id):
        raise NotFoundException("No such invitation waiting: it was used, withdrawn already, or never made.")
    return go(request, "/people?saved=revoked#invitations")


routes = [people_page, add_person, set_role, confirm_remove, remove_person, make_reset_link, invite, revoke]
