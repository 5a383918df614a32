"""Signing in and out, setting the owner up, and the owner's list of people.

Every request but these pages, /healthz and /static goes through `authenticate`: with no
account yet it leads to /setup, without a session to /signin. The person signed in is
`me(request)`; every route that takes an id checks that the row is theirs and answers 404
when it is not, exactly as for a row that does not exist.
"""
from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect

from ..accounts import (COOKIE, SESSION_SECONDS, AccountError, People, hash_password, loopback, password_matches,
                        person_name)
from ..tables import NAME_MAX, THEMES, Person
from . import csrf, render
from .chats import form_field, me, parse_id
from .models import local_path
from .state import state

PUBLIC = frozenset({"/setup", "/signin", "/healthz"})
FIELD_MAX = 1_000


def owner_only(request: Request) -> Person:
    """The owner's pages do not exist for anyone else."""
    person = me(request)
    if not person.owner:
        raise NotFoundException("Not found.")
    return person


def to_sign_in(request: Request, setup: bool) -> Response:
    where = "/setup" if setup else "/signin"
    if request.method == "GET" and not setup and request.url.path != "/":
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        where += "?next=" + quote(local_path(target), safe="/")
    if render.is_htmx(request) or request.url.path.endswith("/events"):
        return Response("Sign in first.", status_code=401, media_type="text/plain; charset=utf-8",
                        headers={"HX-Redirect": where})
    return Redirect(where, status_code=303)


PUBLIC_BODY_MAX = 16_384  # what the sign-in and setup forms need, with room; read before any parsing


class TooLarge(Exception):
    pass


def limited(receive: Any, most: int) -> Any:
    """`receive`, refusing a body past `most` bytes as it arrives (a chunked body has no length)."""
    seen = 0

    async def wrapped() -> Any:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > most:
                raise TooLarge
        return message

    return wrapped


class Authenticate:
    """ASGI middleware around every route: who is signed in, then, for a form, whether it
    came from this app's own page (csrf.py). A request with no session is answered before
    anything reads its body (a form of 100 MB from anyone would otherwise be read first), and
    the public pages (signing in, setting up) read at most PUBLIC_BODY_MAX bytes."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        public = scope["path"] in PUBLIC
        unsafe = scope["method"] not in csrf.SAFE
        if public and unsafe:
            receive = limited(receive, PUBLIC_BODY_MAX)
        request: Request = Request(scope, receive)
        refused = await authenticate(request)
        if refused is None and unsafe:
            refused = await forged(request, public)
        if refused is not None:
            await render.secured(refused).to_asgi_response(app=None, request=request)(scope, receive, send)
            return
        await self.app(scope, receive, self.pre_session_cookie(request, send))

    @staticmethod
    def pre_session_cookie(request: Request, send: Any) -> Any:
        """`send`, adding the pre-session cookie when this request's page made one."""
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start" and (value := csrf.new_pre_session(request)):
                cookie = Cookie(key=csrf.PRE_COOKIE, value=value, path="/", httponly=True, samesite="lax",
                                secure=secure(request))
                message = {**message, "headers": [*message.get("headers", []), cookie.to_encoded_header()]}
            await send(message)

        return sending


async def forged(request: Request, public: bool) -> Response | None:
    """A 403 for a form that did not come from this app's page (or a 413 for a public
    page's body past its limit), else None."""
    if public and int(request.headers.get("content-length") or 0) > PUBLIC_BODY_MAX:
        return refusal(request, 413, f"What was sent is too long for this page: at most {PUBLIC_BODY_MAX:,} bytes.")
    sent = request.headers.get(csrf.HEADER, "")
    if not sent:
        try:
            field = (await request.form()).get(csrf.FIELD, "")
        except TooLarge:
            return refusal(request, 413, f"What was sent is too long for this page: at most {PUBLIC_BODY_MAX:,} bytes.")
        sent = field if isinstance(field, str) else ""
    why = await csrf.refused(request, sent)
    return refusal(request, 403, why) if why else None


def refusal(request: Request, status: int, detail: str) -> Response:
    if render.is_htmx(request):
        return Response(detail, status_code=status, media_type="text/plain; charset=utf-8")
    return render.page(request, "error.html", status_code=status, status=status, detail=detail)


async def authenticate(request: Request) -> Response | None:
    """Before every route: who is signed in (request.state.person), or where to go to sign in."""
    path = request.url.path
    if path == "/healthz" or path.startswith("/static/"):
        return None
    s = state(request)
    people = People(s.store)
    token = request.cookies.get(COOKIE)
    person = people.session(token)
    if path in PUBLIC:
        if person is not None:  # someone signed in: their forms carry their session's token here too
            request.state.session = token
        return None
    if person is None:
        return to_sign_in(request, setup=people.count() == 0)
    request.state.person = person
    request.state.session = token
    return None


def secure(request: Request) -> bool:
    """Behind https (directly or through a proxy that says so) the cookie is Secure."""
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "").lower() == "https"


def signed_in(request: Request, token: str, to: str) -> Response:
    response = Redirect(local_path(to), status_code=303)
    response.set_cookie(COOKIE, token, max_age=SESSION_SECONDS, path="/", httponly=True, samesite="lax",
                        secure=secure(request))
    response.delete_cookie(csrf.PRE_COOKIE, path="/")  # its token goes with it: the session's is new
    return response


def client_address(request: Request) -> str:
    return request.client.host if request.client else ""


# --- setting up the owner ------------------------------------------------------------------


@get("/setup")
async def setup_page(request: Request) -> Response:
    if People(state(request).store).count():
        return Redirect("/signin", status_code=303)
    return render.page(request, "setup.html", name="", error="", name_max=NAME_MAX)


def from_this_computer(request: Request) -> bool:
    """A request straight from this computer, not through a proxy: who may set the owner up
    (behind a public proxy the first visitor from anywhere would own the app)."""
    forwarded = any(h in request.headers for h in ("x-forwarded-for", "forwarded", "x-real-ip"))
    return not forwarded and loopback(client_address(request))


@post("/setup")
async def set_up(request: Request) -> Response:
    s = state(request)
    people = People(s.store)
    if people.count():
        raise HTTPException(status_code=409, detail="Tabletalk is already set up: sign in instead.")
    if not from_this_computer(request):
        raise HTTPException(status_code=403, detail=(
            "The owner is set up from the computer Tabletalk runs on (open http://127.0.0.1:PORT/setup "
            "there), or at start with TABLETALK_PASSWORD."))
    name = await form_field(request, "name", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    again = await form_field(request, "again", FIELD_MAX)
    try:
        name = person_name(name)
        if password != again:
            raise AccountError("The two passwords differ: type the same one twice.")
        hashed = await asyncio.to_thread(hash_password, password)
        owner = people.add(name, hashed, owner=True)
    except AccountError as e:
        return render.page(request, "setup.html", status_code=400, name=name[:NAME_MAX], error=str(e),
                           name_max=NAME_MAX)
    return signed_in(request, people.start_session(owner.id), "/")


# --- signing in and out -----------------------------------------------------------------


@get("/signin")
async def signin_page(request: Request, next: FromQuery[str | None] = None) -> Response:  # noqa: A002
    people = People(state(request).store)
    if not people.count():
        return Redirect("/setup", status_code=303)
    if people.session(request.cookies.get(COOKIE)) is not None:
        return Redirect(local_path(next), status_code=303)
    return render.page(request, "signin.html", name="", error="", next=local_path(next))


@post("/signin")
async def sign_in(request: Request) -> Response:
    s = state(request)
    people = People(s.store)
    name = (await form_field(request, "name", FIELD_MAX)).strip()
    password = await form_field(request, "password", FIELD_MAX)
    to = local_path(await form_field(request, "next", 2_000))
    address = client_address(request)

    def again(status: int, error: str) -> Response:
        return render.page(request, "signin.html", status_code=status, name=name[:NAME_MAX], error=error, next=to)

    attempt = people.attempt(name, address)
    if attempt is None:
        return again(429, "Too many attempts to sign in: wait a minute, then try again.")
    found = people.hash_of(name) if name else None
    ok = await asyncio.to_thread(password_matches, found[1] if found else None, password)
    if not ok or found is None:
        return again(401, "That name and password do not match an account.")
    people.succeeded(attempt)
    people.end_session(request.cookies.get(COOKIE))  # signing in again replaces the session
    return signed_in(request, people.start_session(found[0].id), to)


@post("/signout")
async def sign_out(request: Request) -> Response:
    s = state(request)
    token = request.state.session
    People(s.store).end_session(token)
    s.feed.drop(session=token)
    if render.is_htmx(request):
        response: Response = Response(b"", status_code=204, headers={"HX-Redirect": "/signin"})
    else:
        response = Redirect("/signin", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    # the pages and files of this person the browser kept go too (a shared computer)
    response.headers["Clear-Site-Data"] = '"cache"'
    return response


# --- one's own account ----------------------------------------------------------------


def account_view(request: Request, status_code: int = 200, error: str = "", changed: bool = False,
                 saved: str = "", theme_error: str = "") -> Response:
    return render.page(request, "account.html", status_code=status_code, error=error, changed=changed,
                       saved=saved, theme_error=theme_error, themes=THEMES)


@get("/account")
async def account_page(request: Request, saved: FromQuery[str] = "") -> Response:
    return account_view(request, saved="Saved: your pages use this theme now." if saved == "theme" else "")


@post("/account/theme")
async def set_theme(request: Request) -> Response:
    """Light, dark or the system's: kept with the person, so it holds on every device."""
    theme = (await form_field(request, "theme", 20)).strip()
    try:
        People(state(request).store).set_theme(me(request).id, theme)
    except AccountError as e:
        return account_view(request, 400, theme_error=str(e))
    return Redirect("/account?saved=theme", status_code=303)


@post("/account")
async def change_password(request: Request) -> Response:
    s = state(request)
    people = People(s.store)
    person = me(request)
    current = await form_field(request, "current", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    again = await form_field(request, "again", FIELD_MAX)
    found = people.hash_of(person.name)
    attempt = people.attempt(person.name, client_address(request))  # a stolen session guesses no faster
    if attempt is None:
        return account_view(request, 429, error="Too many wrong passwords: wait a minute, then try again.")
    try:
        if not await asyncio.to_thread(password_matches, found[1] if found else None, current):
            raise AccountError("The current password is not right.")
        people.succeeded(attempt)
        if password != again:
            raise AccountError("The two new passwords differ: type the same one twice.")
        hashed = await asyncio.to_thread(hash_password, password)
    except AccountError as e:
        return account_view(request, 400, error=str(e))
    people.set_password(person.id, hashed, keep=request.state.session)
    s.feed.drop(person=person.id, keep=request.state.session)  # the ended sessions' open pages here
    return account_view(request, changed=True)


# --- the owner's list of people ---------------------------------------------------------


def person_or_404(request: Request, raw: str) -> Person:
    owner_only(request)
    found = People(state(request).store).get(parse_id(raw))
    if found is None or found.owner:
        raise NotFoundException("No such person.")
    return found


PEOPLE_SAVED = {"added": "Added: tell them their name and password.", "removed": "Removed."}


@get("/people")
async def people_page(request: Request, saved: FromQuery[str] = "") -> Response:
    owner_only(request)
    return render.page(request, "people.html", people=People(state(request).store).all(), name="", error="",
                       name_max=NAME_MAX, saved=PEOPLE_SAVED.get(saved, ""))


@post("/people")
async def add_person(request: Request) -> Response:
    owner_only(request)
    people = People(state(request).store)
    name = await form_field(request, "name", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    try:
        name = person_name(name)
        people.add(name, await asyncio.to_thread(hash_password, password))
    except AccountError as e:
        return render.page(request, "people.html", status_code=400, people=people.all(), name=name[:NAME_MAX],
                           error=str(e), name_max=NAME_MAX, saved="")
    return Redirect("/people?saved=added", status_code=303)


@get("/people/{person_id:str}/delete")
async def confirm_remove(request: Request, person_id: FromPath[str]) -> Response:
    found = person_or_404(request, person_id)
    s = state(request)
    count = s.store.one("SELECT count(*) FROM conversations WHERE person = ?", [found.id])[0]
    return render.page(request, "person_delete.html", person=found, conversations=count)


@post("/people/{person_id:str}/delete")
async def remove_person(request: Request, person_id: FromPath[str]) -> Response:
    found = person_or_404(request, person_id)
    s = state(request)
    theirs = [r[0] for r in s.store.all("SELECT id FROM conversations WHERE person = ?", [found.id])]
    People(s.store).remove(found.id)
    s.feed.drop(person=found.id)
    for chat in theirs:  # as when a conversation is deleted: its run here stops at once
        run = s.runner.runs.get(chat)
        if run is not None and run.task is not None:
            run.task.cancel()
    return Redirect("/people?saved=removed", status_code=303)


routes = [setup_page, set_up, signin_page, sign_in, sign_out, account_page, set_theme, change_password,
          people_page, add_person, confirm_remove, remove_person]
