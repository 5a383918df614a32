"""Signing in and out, setting the owner up, one's account, and the links opened signed out
(one that sets a forgotten password, an invitation). The People page is people.py's.

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
from litestar.params import FromQuery
from litestar.response import Redirect

from ..accounts.invitations import INVITATION_GONE, Invitations
from ..accounts.rules import COOKIE, SESSION_SECONDS, Accounts
from ..accounts.passwords import AccountError, hash_password, password_matches, person_name
from ..accounts.limiter import Throttled
from ..accounts.setup import setup_code, setup_codes, setup_done
from ..tables import NAME_MAX
from . import csrf, render
from .account_view import account_view
from .api_keys import KEYS_SAVED
from .authenticate import client_address, device_of, remember_device, secure
from .toolkit import form_field, go, local_path, me, worker

FIELD_MAX = 1_000
TOKEN_FIELD_MAX = 2_000  # a link's token: a longer one is read, and refused as a link that does not work


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


# --- a link that sets a forgotten password, once (made on the People page: people.py) ----------


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
    token = await form_field(request, "token", TOKEN_FIELD_MAX)
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


# --- an invitation: someone makes their own account (the link made on the People page) ------------


def join_view(request: Request, token: str, status_code: int = 200, name: str = "", error: str = "",
              focus: str = "name") -> Response:
    """The invitation's form, or, when the link does not work, the words that say so and
    nothing else (410)."""
    found = Invitations(worker(request).store).opened(token)
    if found is None:
        return render.page(request, "join.html", status_code=410, invitation=None, token="", name="", error=INVITATION_GONE,
                           name_max=NAME_MAX, focus="")
    return render.page(request, "join.html", status_code=status_code, invitation=found, token=token,
                       name=name[:NAME_MAX], error=error, name_max=NAME_MAX, focus=focus)


@get("/join")
async def join_page(request: Request, token: FromQuery[str] = "") -> Response:
    return join_view(request, token)


@post("/join")
async def join(request: Request) -> Response:
    """The invitation used: the new account is made with the name and password chosen, and
    this browser is signed in as them (whoever was signed in here is signed out)."""
    s = worker(request)
    token = await form_field(request, "token", TOKEN_FIELD_MAX)
    name = await form_field(request, "name", FIELD_MAX)
    password = await form_field(request, "password", FIELD_MAX)
    again = await form_field(request, "again", FIELD_MAX)
    if Invitations(s.store).opened(token) is None:
        return join_view(request, token)
    try:
        person_name(name)
    except AccountError as e:
        return join_view(request, token, 400, name, str(e))
    try:
        if password != again:
            raise AccountError("The two passwords differ: type the same one twice.")
        hashed = await asyncio.to_thread(hash_password, password)
    except AccountError as e:
        return join_view(request, token, 400, name, str(e), focus="password")
    try:
        person = Invitations(s.store).join(token, name, hashed)
    except AccountError as e:
        return join_view(request, token, 400, name, str(e))
    if person is None:  # used meanwhile (another tab), or it expired while the password was hashed
        return join_view(request, token)
    people = Accounts(s.store)
    people.end_session(request.cookies.get(COOKIE))
    return signed_in(request, people.start_session(person.id), "/")


routes = [setup_page, set_up, signin_page, sign_in, sign_out, account_page, set_theme, change_password,
          reset_page, reset_password, join_page, join]
