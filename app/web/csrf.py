"""Forms that only this app's own pages can send: CSRF tokens bound to the session, and
the browser's word on where a request comes from.

A page on another port of the same host is another origin but the same *site*: SameSite
cookies go along with its requests, and it can set cookies for this host (cookies do not
know ports). So a double-submit token in a cookie proves nothing there: the page plants
a cookie of its own and sends the token that goes with it. Two things do hold:

- The token is an HMAC of the session it is for, with the app's secret key: a signed-in
  person's is bound to their session (a new session at sign-in, none after sign-out: it
  rotates with them), and the pages of signing in and setting up, before any session, use
  a pre-session cookie (HttpOnly, Secure behind https) in the same way; signing in ends it.
  A token works only with the cookie it was made for, and no page can read another's.
- The browser says where a request comes from: `Sec-Fetch-Site` (sent by every current
  browser) must be `same-origin` (or `none`, typed by the person); without it, an `Origin`
  must be this host. That refuses a page on another port even when it has a token, and it
  is what stops login CSRF (a form signing the person in as someone else), where the
  pre-session cookie could be planted along with its token.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from litestar import Request

FIELD = "_csrf_token"
HEADER = "x-csrftoken"
PRE_COOKIE = "tabletalk_pre"  # the pre-session cookie of the sign-in and setup pages
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_SITE = "This form was sent from another site's page, so it was refused."


def make(key: bytes, purpose: str, value: str) -> str:
    return hmac.new(key, f"{purpose}:{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()}".encode(),
                    hashlib.sha256).hexdigest()


def key_of(request: Request) -> bytes:
    """The app's secret key: kept in the database (accounts.secret_key), so a token a page of
    one server put in its form is accepted by any server of the same database."""
    return request.app.state.tabletalk.key


def pre_session(request: Request) -> str:
    """The pre-session value of this request: its cookie's, or a new one the response sets."""
    value = request.cookies.get(PRE_COOKIE, "")
    if 20 <= len(value) <= 100:
        return value
    fresh = request.scope.setdefault("state", {}).setdefault("tabletalk_pre", secrets.token_urlsafe(32))
    return fresh


def token(request: Request) -> str:
    """The token this request's page puts in its forms."""
    session = request.scope.get("state", {}).get("session")
    if session:
        return make(key_of(request), "session", session)
    return make(key_of(request), "pre", pre_session(request))


def new_pre_session(request: Request) -> str | None:
    """The pre-session value a response must set as a cookie, if this request made one."""
    return request.scope.get("state", {}).get("tabletalk_pre")


def cross_origin(request: Request) -> bool:
    """Whether the browser says the request comes from a page of another origin."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False  # no browser word either way (an old browser, a script): the token decides
    hosts = {request.headers.get("host", "").lower(), request.headers.get("x-forwarded-host", "").lower()}
    try:
        return urlsplit(origin).netloc.lower() not in hosts - {""}
    except ValueError:
        return True


async def refused(request: Request, sent: str) -> str | None:
    """Why this unsafe request must not be served, or None; `sent` is the token it carries."""
    if cross_origin(request):
        return CROSS_SITE
    if not sent or not hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), token(request).encode()):
        return "This form has expired. Go back, reload the page and send it again."
    return None
