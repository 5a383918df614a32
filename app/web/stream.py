"""The live feed as Server-Sent Events: `GET /c/{chat}/events` (a conversation and its
person's list, for the sidebar beside it) and `GET /events` (the list alone, on other pages).

A page rendered at rev R connects with `?since=R`; on reconnect htmx sends the
`Last-Event-ID` header, which wins over `since`. The first message brings the page from
its cursor to now (everything, when the cursor is ahead of the database: a full resync);
after that the process's feed hands over what changes. Every message's `id:` is the rev it
reaches, so replaying or resyncing is always correct.
"""
from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable

from litestar import Request, get
from litestar.params import FromPath, FromQuery
from litestar.response import Stream

from ..accounts.rules import Accounts
from ..feed.dispatch import Feed, Follower, encode
from ..store import Store
from ..store.outage import unavailable
from . import live, sidebar
from .toolkit import an_id, conversation_or_404, me, worker
from .builtin import builtin_catch_up
from .knowledge import documents_catch_up

HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def still(request: Request) -> Callable[[], bool]:
    """Whether the session a stream was opened under is still signed in (while the database
    cannot be reached, as far as is known: the stream stays, and shows the feed's banner)."""
    store, token = worker(request).store, request.state.session

    def signed_in() -> bool:
        try:
            return Accounts(store).session(token) is not None
        except Exception as e:
            if unavailable(e):
                return True
            raise

    return signed_in


def cursor_of(request: Request, since: str | None) -> int:
    for raw in (request.headers.get("last-event-id"), since):
        cursor = an_id(raw)
        if cursor is not None:
            return cursor
    return 0


async def follow(feed: Feed, follower: Follower, first: bytes, cursor: int,
                 signed_in: Callable[[], bool]) -> AsyncIterator[bytes]:
    try:
        # which worker serves this stream: lets a test see a page follow a run in another worker
        yield f": worker {os.getpid()}\n\n".encode() + first
        while not feed.closed:
            messages = await follower.take()
            if feed.closed or follower.behind:
                break  # shutdown, or too slow: the browser reconnects and resyncs
            out, ended = [], False
            for rev, data in messages:
                if rev == 0 and not signed_in():
                    ended = True  # signed out (or removed) in another worker: seen at a keep-alive
                    break
                if rev and rev <= cursor:
                    continue  # already covered by the first message
                # `cursor` stays the first message's rev: one dispatch may push several messages
                # with the same rev (a conversation's change, then the built-in model's), all sent
                out.append(data)
            if out:
                yield b"".join(out)
            if ended:
                break
    finally:
        feed.unfollow(follower)


def list_catch_up(store: Store, person: int, cursor: int) -> str:
    """The sidebar's changes after `cursor`: `person`'s conversations changed, and removed."""
    gone = [dom for chat, dom, whose in store.tombstones_since(cursor) if chat is None and whose == person] if cursor else []
    return sidebar.list_changes(store, store.conversations_since(cursor, person=person), gone)


@get("/c/{chat:str}/events")
async def chat_events(request: Request, chat: FromPath[str], since: FromQuery[str | None] = None) -> Stream:
    s = worker(request)
    who = me(request)
    convo = conversation_or_404(request, chat)
    # before reading, so nothing committed after is missed; it carries the sidebar's changes too
    follower = s.feed.follow(convo.id, who.id, request.state.session, lists=True)
    cursor = cursor_of(request, since)
    with s.store.snapshot():
        top = s.store.rev()
        if cursor > top:
            cursor = 0  # a cursor from another database (or a restore): resync everything
        items = s.feed.current(s.store.items_since(cursor, chat=convo.id))  # (texts growing here as read)
        gone = [dom for _, dom, _ in s.store.tombstones_since(cursor, chat=convo.id)] if cursor else []
        # the difference from nothing, rendered from the feed's last renders of the answers
        # (a page reconnecting while a long answer grows does not parse it all again)
        first = live.chat_changes(s.store, convo.id, items, convo if convo.rev > cursor else None, gone,
                                  s.feed.followed[convo.id].nothing())
        first += (list_catch_up(s.store, who.id, cursor) + builtin_catch_up(s.store, who.id, cursor)
                  + documents_catch_up(s.store, who.id, cursor, top, chat=convo.id))
    return Stream(follow(s.feed, follower, encode(top, first), top, still(request)),
                  media_type="text/event-stream", headers=HEADERS)


@get("/events")
async def list_events(request: Request, since: FromQuery[str | None] = None) -> Stream:
    s = worker(request)
    who = me(request)
    follower = s.feed.follow(None, who.id, request.state.session)
    cursor = cursor_of(request, since)
    with s.store.snapshot():
        top = s.store.rev()
        if cursor > top:
            cursor = 0
        first = (list_catch_up(s.store, who.id, cursor) + builtin_catch_up(s.store, who.id, cursor)
                 + documents_catch_up(s.store, who.id, cursor, top))
    return Stream(follow(s.feed, follower, encode(top, first), top, still(request)),
                  media_type="text/event-stream", headers=HEADERS)


routes = [chat_events, list_events]
