"""The ASGI app: routes, CSRF, static files, errors, and the lifespan that starts a worker.

Each worker (granian process) opens its own connection, feed and runner in the lifespan.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException

from .. import config as configuration
from ..run import space
from ..accounts.rules import COOKIE, Accounts
from ..feed.dispatch import Feed
from ..store.outage import WORDS, unavailable
from ..serve.worker import running
from . import (
    accounts,
    agents,
    asks,
    branches,
    chats,
    compress,
    conversations,
    stream,
    files,
    authenticate,
    live,
    builtin,
    knowledge,
    model_upload,
    models,
    oauth,
    openai_api,
    api_keys,
    prompts,
    render,
    shortcuts,
    sidebar,
    skills,
    templating,
    web_search,
    connections,
    people,
    usage,
)
from .authenticate import API, API_BODY_MAX, TooLarge
from .headers import private, secured
from .toolkit import is_htmx, way_back

log = logging.getLogger(__name__)


def end_streams_on_signal(feed: Feed) -> None:
    """Granian waits for open responses before it exits: end the SSE streams when told to stop.

    The handler chains with the one installed before it (granian's own).
    """
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)

        def handler(signum, frame, previous=previous):
            loop.call_soon_threadsafe(feed.close)
            # granian's own stop comes through asyncio's wakeup pipe; calling its handler here
            # as well deadlocked (its event's second set() blocks), so only chain.
            if callable(previous):
                previous(signum, frame)

        try:
            signal.signal(sig, handler)
        except ValueError:  # not the main thread (e.g. an in-process test server)
            return


async def security_headers(response: Response) -> Response:
    return secured(response)


def error_page(request: Request, exc: Exception) -> Response:
    if request.url.path.startswith(API):
        return api_refusal(request, exc)
    if isinstance(exc, HTTPException):
        status, detail = exc.status_code, exc.detail
    elif isinstance(exc, sqlite3.IntegrityError):
        # a row this request refers to went meanwhile (a conversation deleted while a message
        # to it was being read, a person removed ...)
        status, detail = 409, "That changed while you were sending this (it may have been deleted). Reload the page."
    elif space.is_full(exc):
        log.warning("the disk is full: %s %s could not be saved", request.method, request.url.path)
        status, detail = 507, space.NOT_SAVED
    elif unavailable(exc):
        return outage_page(request)
    elif isinstance(exc, UnicodeDecodeError):
        # a form field that is not UTF-8 text (Litestar decodes multipart fields as it parses them)
        status, detail = 400, "The form could not be read: a field was not text (UTF-8). Nothing was saved."
    else:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        status, detail = 500, "Something went wrong on our side. Nothing you wrote was lost."
    if status == 413 and str(detail) == "Request Entity Too Large":  # the body limit, before any form is read
        limit = body_limit(request.app.state.tabletalk.config) if hasattr(request.app.state, "tabletalk") else 0
        detail = (f"What was sent is too large: at most {limit:,} bytes in one request, files included. "
                  "Nothing was saved.")
    if status == 403 and "CSRF" in str(detail):
        detail = "This form has expired. Go back, reload the page and send it again."
    if status == 404 and str(detail) == "Not Found":  # Litestar's own, for an address no route has
        detail = "There is no page at this address."

    if is_htmx(request) or request.url.path.endswith("/events"):
        return secured(Response(str(detail), status_code=status, media_type="text/plain"))
    signed_in(request)
    where, label = way_back(request)
    response = secured(render.page(request, "error.html", status_code=status, status=status, detail=detail,
                                   back=where, back_label=label))
    # an address no route has is answered before the middleware that keeps pages private
    return private(response) if getattr(request.state, "person", None) is not None else response


def api_refusal(request: Request, exc: Exception) -> Response:
    """A failure on the OpenAI-compatible API's paths, in the OpenAI error shape (openai_api.py)."""
    if isinstance(exc, HTTPException):
        status, detail = exc.status_code, str(exc.detail)
        if status == 404 and detail == "Not Found":
            detail = "There is no such path in this API (docs/api.md lists them)."
    elif isinstance(exc, TooLarge):
        status, detail = 413, f"The request is too large: at most {API_BODY_MAX:,} bytes."
    elif isinstance(exc, sqlite3.IntegrityError):
        status, detail = 409, "That changed while the request was written (it may have been deleted)."
    elif space.is_full(exc):
        status, detail = 507, space.NOT_SAVED
    elif unavailable(exc):
        return secured(openai_api.refused(HTTPException(status_code=503, headers={
            "Retry-After": str(OUTAGE_REFRESH_SECONDS)}), 503, WORDS))
    else:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        status, detail = 500, "Something went wrong on our side (the error is in the server's log)."
    return secured(openai_api.refused(exc, status, detail))


OUTAGE_REFRESH_SECONDS = 5  # how often the page of a database that cannot be reached asks again


def outage_page(request: Request) -> Response:
    """The database cannot be reached: said as that (outage.WORDS, 503, no traceback: the
    runner's scan says it in the log every few seconds), never as a bug of ours. Nothing is
    read for it (neither the session nor the sidebar could be); a page asked for loads again
    by itself every OUTAGE_REFRESH_SECONDS until the database answers."""
    if request.method == "GET":
        detail = f"This page loads again by itself every {OUTAGE_REFRESH_SECONDS} s until then."
    else:
        detail = "What you sent was not saved: send it again once the database is back."
    if is_htmx(request) or request.url.path.endswith("/events"):
        return secured(Response(f"{WORDS} {detail}", status_code=503, media_type="text/plain",
                                headers={"Retry-After": str(OUTAGE_REFRESH_SECONDS)}))
    where, label = way_back(request)
    response = render.page(request, "error.html", status_code=503, status=503, detail=detail, back=where,
                           back_label=label, outage=WORDS, refresh=OUTAGE_REFRESH_SECONDS, side=None)
    response.headers["Retry-After"] = str(OUTAGE_REFRESH_SECONDS)
    return secured(response)


def signed_in(request: Request) -> None:
    """The person for the error page's header: an address no route has is answered before the
    authentication middleware runs, so the session is read here."""
    if getattr(request.state, "person", None) is None and hasattr(request.app.state, "tabletalk"):
        person = Accounts(request.app.state.tabletalk.store).session(request.cookies.get(COOKIE))
        if person is not None:
            request.state.person = person


def body_limit(config: configuration.Config) -> int:
    """The largest request body: room for a message's files at their limits (each file is
    checked in request.attachments), or for one document of a collection at its own, and the
    rest of the form."""
    return max(config.upload_max * config.upload_count, config.document_max) + 2_000_000


def create_app(config: configuration.Config | None = None) -> Litestar:
    config = config or configuration.load()
    config.data.mkdir(parents=True, exist_ok=True)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with running(config, render=live.chat_changes, render_list=sidebar.list_changes,
                           render_builtin=builtin.builtin_changes, render_outage=live.outage_banner,
                           render_documents=knowledge.document_changes, render_grown=live.texts_grown) as w:
            app.state.tabletalk = w
            end_streams_on_signal(w.feed)
            yield

    return Litestar(
        route_handlers=[
            *accounts.routes,
            *people.routes,
            *chats.routes,
            *asks.routes,
            *oauth.routes,
            *branches.routes,
            *conversations.routes,
            *agents.routes,
            *prompts.routes,
            *models.routes,
            *builtin.routes,
            *model_upload.routes,
            *skills.routes,
            *knowledge.routes,
            *stream.routes,
            *openai_api.routes,
            *api_keys.routes,
            *web_search.routes,
            *connections.routes,
            *usage.routes,
            *files.routes,
            *shortcuts.routes,
            # compressed once per file version, each form with its own ETag (compress.py)
            *compress.static_routes(templating.STATIC, max_age=3600),
        ],
        lifespan=[lifespan],
        exception_handlers={Exception: error_page},
        # sessions, then CSRF (csrf.py): a request with no session is refused before its body is read
        middleware=[compress.compression, authenticate.Authenticate],
        after_request=security_headers,
        request_max_body_size=body_limit(config),
        openapi_config=None,
        logging_config=None,
    )
