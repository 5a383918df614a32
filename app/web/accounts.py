"""Signing in and out, setting the owner up, and the owner's list of people.

Every request but these pages, /healthz and /static goes through `guard.authenticate`:
with no account yet it leads to /setup, without a session to /signin. The person signed in is
`me(request)`; every route that takes an id checks that the row is theirs and answers 404
when it is not, exactly as for a row that does not exist.
"""
from __future__ import annotations

import asyncio
import hmac

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect

from ..accounts.rules import COOKIE, RESET_SECONDS, SESSION_SECONDS, Accounts
from ..accounts.passwords import AccountError, hash_password, password_matches, person_name
from ..accounts.limiter import Throttled
from ..accounts.setup import setup_code, setup_codes, setup_done
from ..tables import NAME_MAX
from . import csrf, render
from .account_view import account_view, people_view
from .api_keys import API_SAVED, KEYS_SAVED
from .web_search import SAVED as SEARCH_SAVED
from .authenticate import client_address, device_of, remember_device, secure
from .toolkit import form_field, go, local_path, me, owner_only, person_or_404, worker

FIELD_MAX = 1_000


def signed_in(request: Request, token: str, to: str) -> Response:
    response = go(request, local_path(to))
    response.set_cookie(COOKIE, token, max_age=SESSION_SECONDS, path="/", httponly=True, samesite="lax",
                        secure=secure(request))
    response.delete_cookie(csrf.PRE_COOKIE, path="/")  # its token goes with it: the session's is new
    return response


# --- setting up the owner ------------------------------------------------------------------


def setup_view(request: Request, status_code: int = 200, name: str = "", error: str = "", code: str = "",
               focus: str = "") -> Response:
    """The setup form; after a refusal with the name kept and the field at fault (`focus`:
    "code", "name" or "password") focused. It mentions the conversations the owner claims
    only on an install that has some (made before it had accounts)."""
    return render.page(request, "setup.html", status_code=status_code, name=name[:NAME_MAX], error=error,
                       name_max=NAME_MAX, code=code[:100], focus=focus or ("name" if code else "code"),
                       unclaimed=worker(request).store.unclaimed())


@get("/setup")
async def setup_page(request: Request, code: FromQuery[str] = "") -> Response:
    if Accounts(worker(request).store).count():
        return Redirect("/signin", status_code=303)
    return setup_view(request, code=code)


NOT_THE_CODE = ("That setup code is not right. It is printed where Tabletalk was started (tabletalk serve), "
                "in the address to open; it changes at every start. Or set the owner up at start with "
                "TABLETALK_PASSWORD.")


@post("/setup")
async def set_up(request: Request) -> Response:
    s = worker(request)
    people = Accounts(s.store)
    if people.count():
        raise HTTPException(status_code=409, detail="Tabletalk is already set up: sign in instead.")
    name = await form_field(request, "name", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    again = await form_field(request, "again", FIELD_MAX)
    code = (await form_field(request, "code", FIELD_MAX)).strip()
    sent = code.encode("utf-8", "surrogatepass")
    # none yet (an app not started by `tabletalk serve`): this server's is made, to be read from the database
    codes = setup_codes(s.store) or [setup_code(s.store, s.config.data)]
    if not code or not any(hmac.compare_digest(sent, c.encode()) for c in codes):
        return setup_view(request, 403, name, NOT_THE_CODE, focus="code")
    try:
        name = person_name(name)
    except AccountError as e:
        return setup_view(request, 400, name, str(e), code, focus="name")
    try:  # (a refused password: the name was fine, the password fields are where to type)
        if password != again:
            raise AccountError("The two passwords differ: type the same one twice.")
        hashed = await asyncio.to_thread(hash_password, password)
        owner = people.add(name, hashed, owner=True)
    except AccountError as e:
        return setup_view(request, 400, name, str(e), code, focus="password")
    setup_done(s.store)
    return signed_in(request, people.start_session(owner.id), "/")


# --- signing in and out -----------------------------------------------------------------


@get("/signin")
async def signin_page(request: Request, next: FromQuery[str | None] = None) -> Response:  # noqa: A002
    people = Accounts(worker(request).store)
    if not people.count():
        return Redirect("/setup", status_code=303)
    if people.session(request.cookies.get(COOKIE)) is not None:
        return Redirect(local_path(next), status_code=303)
    return render.page(request, "signin.html", name="", error="", next=local_path(next))


@post("/signin")
async def sign_in(request: Request) -> Response:
    s = worker(request)
    people = Accounts(s.store)
    name = (await form_field(request, "name", FIELD_MAX)).strip()
    password = await form_field(request, "password", FIELD_MAX)
    to = local_path(await form_field(request, "next", 2_000))
    address = client_address(request)

    def again(status: int, error: str) -> Response:
        return render.page(request, "signin.html", status_code=status, name=name[:NAME_MAX], error=error, next=to)

    found = people.hash_of(name) if name else None
    device = device_of(request, found[0].id) if found else None
    try:
        # from a known device the pair is (name, device): no one else's guesses count there
        attempt = people.attempt(name, f"device:{device}" if device else address, by_address=device is None)
    except Throttled as e:
        return again(429, f"Too many attempts to sign in: wait {e.words}, then try again.")
    ok = await asyncio.to_thread(password_matches, found[1] if found else None, password)
    if not ok or found is None:
        return again(401, "That name and password do not match an account.")
    people.succeeded(attempt)
    people.end_session(request.cookies.get(COOKIE))  # signing in again replaces the session
    response = signed_in(request, people.start_session(found[0].id), to)
    remember_device(request, response, found[0].id)
    return response


@post("/signout")
async def sign_out(request: Request) -> Response:
    s = worker(request)
    token = request.state.session
    Accounts(s.store).end_session(token)
    s.feed.drop(session=token)
    response = go(request, "/signin")
    response.delete_cookie(COOKIE, path="/")
    # the pages and files of this person the browser kept go too (a shared computer)
    response.headers["Clear-Site-Data"] = '"cache"'
    return response


# --- one's own account ----------------------------------------------------------------


@get("/account")
async def account_page(request: Request, saved: FromQuery[str] = "") -> Response:
    return account_view(request, saved="Saved: your pages use this theme now." if saved == "theme" else "",
                        key_saved=KEYS_SAVED.get(saved, ""))


@post("/account/theme")
async def set_theme(request: Request) -> Response:
    """Light, dark or the system's: kept with the person, so it holds on every device."""
    theme = (await form_field(request, "theme", 20)).strip()
    try:
        Accounts(worker(request).store).set_theme(me(request).id, theme)
    except AccountError as e:
        return account_view(request, 400, theme_error=str(e))
    return go(request, "/account?saved=theme")


@post("/account")
async def change_password(request: Request) -> Response:
    s = worker(request)
    people = Accounts(s.store)
    person = me(request)
    current = await form_field(request, "current", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    again = await form_field(request, "again", FIELD_MAX)
    found = people.hash_of(person.name)
    try:  # a stolen session guesses no faster
        attempt = people.attempt(person.name, client_address(request))
    except Throttled as e:
        return account_view(request, 429, error=f"Too many wrong passwords: wait {e.words}, then try again.")
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


PEOPLE_SAVED = {"added": "Added: tell them their name and password.", "removed": "Removed."}


@get("/people")
async def people_page(request: Request, saved: FromQuery[str] = "") -> Response:
    owner_only(request)
    return people_view(request, saved=PEOPLE_SAVED.get(saved, ""), api_saved=API_SAVED.get(saved, ""),
                       search_saved=SEARCH_SAVED.get(saved, ""))


@post("/people")
async def add_person(request: Request) -> Response:
    owner_only(request)
    people = Accounts(worker(request).store)
    name = await form_field(request, "name", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    try:
        name = person_name(name)
        people.add(name, await asyncio.to_thread(hash_password, password))
    except AccountError as e:
        return people_view(request, 400, name=name[:NAME_MAX], error=str(e))
    return go(request, "/people?saved=added")


@get("/people/{person_id:str}/delete")
async def confirm_remove(request: Request, person_id: FromPath[str]) -> Response:
    found = person_or_404(request, person_id)
    s = worker(request)
    count = s.store.conversations_count(person=found.id)
    return render.page(request, "person_delete.html", person=found, conversations=count)


@post("/people/{person_id:str}/delete")
async def remove_person(request: Request, person_id: FromPath[str]) -> Response:
    found = person_or_404(request, person_id)
    s = worker(request)
    theirs = s.store.conversation_ids(found.id)
    Accounts(s.store).remove(found.id)
    s.feed.drop(person=found.id)
    for chat in theirs:  # as when a conversation is deleted: its run here stops at once
        s.runner.drop(chat)
    return go(request, "/people?saved=removed")


# --- a link that sets a forgotten password, once ---------------------------------------------


def reset_url(request: Request, token: str) -> str:
    """The link as the person opens it: this site's address as the owner's browser used it."""
    scheme = "https" if secure(request) else request.url.scheme
    return f"{scheme}://{request.headers.get('host') or request.url.netloc}/reset?token={token}"


@post("/people/{person_id:str}/reset")
async def make_reset_link(request: Request, person_id: FromPath[str]) -> Response:
    """The owner makes a one-time link for someone who forgot their password, to pass on: shown
    this once (only its hash is kept), and it replaces the link made for them before."""
    found = person_or_404(request, person_id)
    token = Accounts(worker(request).store).reset_link(found.id)
    return render.page(request, "reset_link.html", person=found, link=reset_url(request, token),
                       days=RESET_SECONDS // 86_400)


GONE = "This link does not work any more: it was used, replaced by a newer one, or it expired. Ask for a new one."


def reset_view(request: Request, token: str, status_code: int = 200, error: str = "") -> Response:
    person = Accounts(worker(request).store).resetting(token)
    if person is None:
        return render.page(request, "reset.html", status_code=410, person=None, token="", error=GONE)
    return render.page(request, "reset.html", status_code=status_code, person=person, token=token, error=error)


@get("/reset")
async def reset_page(request: Request, token: FromQuery[str] = "") -> Response:
    return reset_view(request, token)


@post("/reset")
async def reset_password(request: Request) -> Response:
    """The link used: the new password is set, every session of the person's ends (their open
    pages here too), and this browser is signed in as them."""
    s = worker(request)
    people = Accounts(s.store)
    token = await form_field(request, "token", 200)
    password = await form_field(request, "password", FIELD_MAX)
    again = await form_field(request, "again", FIELD_MAX)
    if password != again:
        return reset_view(request, token, 400, "The two passwords differ: type the same one twice.")
    try:
        hashed = await asyncio.to_thread(hash_password, password)
    except AccountError as e:
        return reset_view(request, token, 400, str(e))
    person = people.reset_password(token, hashed)
    if person is None:
        return reset_view(request, token)
    s.feed.drop(person=person.id)
    people.end_session(request.cookies.get(COOKIE))  # whoever was signed in on this browser
    return signed_in(request, people.start_session(person.id), "/")


routes = [setup_page, set_up, signin_page, sign_in, sign_out, account_page, set_theme, change_password,
          people_page, add_person, confirm_remove, remove_person, make_reset_link, reset_page, reset_password]
