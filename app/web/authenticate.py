"""Who sends a request, before any route: the Authenticate middleware (sessions, forms
from this app's own pages, small bodies on the public pages), the client's address behind
trusted proxies, and the signed cookie of a device someone signed in from before.

Every request but the public pages (signing in, setting up), /healthz and /static goes
through `authenticate`: with no account yet it leads to /setup, without a session to
/signin.
"""
from __future__ import annotations

import hmac
import ipaddress
import secrets
from typing import Any
from urllib.parse import quote

from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.response import Redirect

from ..accounts.rules import COOKIE, Accounts
from . import csrf, render, uploads
from .headers import kept_private, secured
from .toolkit import is_htmx, local_path, way_back, worker

PUBLIC = frozenset({"/setup", "/signin", "/healthz", "/reset", "/join"})  # /reset, /join: one-time links' pages (accounts.py)
API = "/v1/"  # the OpenAI-compatible API (openai_api.py): its own key in a header, no cookie, no form token
API_BODY_MAX = 4_000_000  # bytes of one API request's body, read before any parsing


def to_sign_in(request: Request, setup: bool) -> Response:
    where = "/setup" if setup else "/signin"
    if request.method == "GET" and not setup and request.url.path != "/":
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        where += "?next=" + quote(local_path(target), safe="/")
    if is_htmx(request) or request.url.path.endswith("/events"):
        return Response("Sign in first.", status_code=401, media_type="text/plain",
                        headers={"HX-Redirect": where})
    return Redirect(where, status_code=303)


PUBLIC_BODY_MAX = 16_384  # what the sign-in and setup forms need, with room; read before any parsing
# Routes whose body is a file of gigabytes (a GGUF model), the owner's alone: this middleware
# reads no form of theirs (it would be the whole file); the route reads the body as it comes,
# checks its form's token first, and bounds it itself (TABLETALK_MODEL_UPLOAD_MAX, past the
# app's general limit: app/web/model_upload.py).
STREAMED = frozenset({"/model/upload"})


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
    the public pages (signing in, setting up) read at most PUBLIC_BODY_MAX bytes; a STREAMED
    route's body is read by the route, and only the owner's. A form with files is admitted
    before its body is read too (uploads.py: how many at once, the room left)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith(API):
            # a key, not a session, says who asks (openai_api.caller, before the body is
            # read); nothing a browser sends by itself opens it, so no form token is asked
            await self.app(scope, limited(receive, API_BODY_MAX), send)
            return
        public = scope["path"] in PUBLIC
        unsafe = scope["method"] not in csrf.SAFE
        if public and unsafe:
            receive = limited(receive, PUBLIC_BODY_MAX)
        request: Request = Request(scope, receive)
        refused = await authenticate(request)
        if getattr(request.state, "session", None):  # signed in: nothing served to them is cached
            send = kept_private(send)
        person = getattr(request.state, "person", None)
        # files (but a STREAMED route's, which bounds its own): counted and checked against the
        # person's room before the body is read
        sending = (refused is None and unsafe and person is not None and scope["path"] not in STREAMED
                   and uploads.is_upload(request))
        if sending and (too := uploads.admit(worker(request), request, person.id)) is not None:
            refused, sending = refusal(request, *too), False
        try:
            if refused is None and unsafe:
                refused = await (streamed(request) if scope["path"] in STREAMED else forged(request, public))
            if refused is not None:
                await secured(refused).to_asgi_response(app=None, request=request)(scope, receive, send)
                return
            # only the public pages make a pre-session (every other page has a session): the send
            # of a live feed, which carries every message to every follower, is left as it is
            await self.app(scope, receive, self.pre_session_cookie(request, send) if public else send)
        finally:
            if sending:
                uploads.done(worker(request), person.id)

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


async def streamed(request: Request) -> Response | None:
    """A 403, before the body is read, for anyone but the owner, and for a request from
    another site's page or without the right token in its header; else None. A plain form
    (multipart) carries its token in its body instead: the route checks it, as it reads."""
    if not request.state.person.owner:
        return refusal(request, 403, "Only the owner of this Tabletalk adds models to it.")
    if request.content_type[0] == "multipart/form-data" and not request.headers.get(csrf.HEADER):
        why = csrf.CROSS_SITE if csrf.cross_origin(request) else None
    else:
        why = await csrf.refused(request, request.headers.get(csrf.HEADER, ""))
    return refusal(request, 403, why) if why else None


def refusal(request: Request, status: int, detail: str) -> Response:
    if is_htmx(request):
        return Response(detail, status_code=status, media_type="text/plain")

    where, label = way_back(request)
    return render.page(request, "error.html", status_code=status, status=status, detail=detail, back=where,
                       back_label=label)


async def authenticate(request: Request) -> Response | None:
    """Before every route: who is signed in (request.state.person), or where to go to sign in."""
    path = request.url.path
    if path == "/healthz" or path.startswith("/static/"):
        return None
    s = worker(request)
    people = Accounts(s.store)
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


def client_address(request: Request) -> str:
    """Who sent the request: the peer, or, when the peer is a proxy TABLETALK_TRUSTED_PROXIES
    names, the last address in X-Forwarded-For that is not one of those proxies (a client
    can write any X-Forwarded-For it likes; only what trusted proxies appended counts)."""
    peer = request.client.host if request.client else ""
    trusted = worker(request).config.trusted_proxies
    if not trusted or not _among(peer, trusted):
        return peer
    chain = [a.strip() for h in request.headers.getall("x-forwarded-for", []) for a in h.split(",") if a.strip()]
    for address in reversed(chain):
        if not _among(address, trusted):
            return address
    return chain[0] if chain else peer


def _among(address: str, networks) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    return any(ip in n for n in networks)


# --- known devices ---------------------------------------------------------------------
# A device a person signed in from before carries a signed cookie naming them; from it,
# their right password is never held up by someone else's guesses (accounts.attempt).

DEVICE_COOKIE = "tabletalk_device"
DEVICE_SECONDS = 400 * 24 * 3600  # as long as browsers keep a cookie


def device_of(request: Request, person_id: int) -> str | None:
    """The device id of this request's device cookie, when it is this person's and signed."""
    raw = request.cookies.get(DEVICE_COOKIE, "")
    parts = raw.split(".")
    if len(parts) != 3 or len(raw) > 200 or parts[0] != str(person_id):
        return None
    good = csrf.make(csrf.key_of(request), "device", f"{parts[0]}.{parts[1]}")
    return parts[1] if hmac.compare_digest(parts[2].encode("utf-8", "surrogatepass"), good.encode()) else None


def remember_device(request: Request, response: Response, person_id: int) -> None:
    if device_of(request, person_id) is not None:
        return
    nonce = secrets.token_urlsafe(16)
    sig = csrf.make(csrf.key_of(request), "device", f"{person_id}.{nonce}")
    response.set_cookie(DEVICE_COOKIE, f"{person_id}.{nonce}.{sig}", max_age=DEVICE_SECONDS, path="/",
                        httponly=True, samesite="lax", secure=secure(request))
