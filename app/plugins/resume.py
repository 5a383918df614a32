"""Taking up a plugin's call again after a restart, while its server's question (an
elicitation) waits for the person.

Over Streamable HTTP a server with an event store keeps what it sent on a call's response
stream, and a client that lost the stream may read it again from an event id (Last-Event-ID)
in the same session, without sending the call again. So when a server asks the person
something during a call, the ask item keeps what taking the call up needs (`resume` in its
input): the session id (Mcp-Session-Id) and the id of the first event of the call's stream
(the server's priming event), with the server's JSON-RPC id of its question (`request`).

After a restart the turn finds the call `running` and sent, with such an ask still waiting:
instead of ending the call as one that may have run, it takes it up here. The call is never
sent again (no POST of `tools/call`: a tool must never run twice); the stream is read again
from its first event, so the server's question arrives again with the same id and is matched
to the ask item, which goes on waiting; the person's answer goes to the server as the answer
to that id, and the call's result arrives and is written as usual.

A server's event store may keep the result without delivering it on the stream that was
taken up (server-everything's in-memory store answers a replay with an event id where the
SDK expects a stream id, so the SDK files the resumed stream under the wrong id): once the
person answered, the stream is read again from its latest event, which then holds the result.

What cannot be taken up ends as before ("lost", the call "may have run"): SSE and stdio
(the question lived in the connection), a server without an event store (no event ids), a
session the server no longer knows.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from app.plugins.errors import PluginError

log = logging.getLogger(__name__)

REREAD_AFTER = 3.0   # seconds after an answer before the stream is read again for the result
MAX_REREADS = 5

LOST = ("Tabletalk restarted while the plugin's question waited, and the call could not be taken up "
        "again ({why}): it may have run. Check before running it again; it was not run again by itself.")


def resumable(resume: Any) -> bool:
    """Whether an ask item's `resume` holds what taking its call up needs."""
    return (isinstance(resume, dict) and isinstance(resume.get("session"), str) and bool(resume["session"])
            and isinstance(resume.get("token"), str) and bool(resume["token"]))


async def take_up(client: Any, name: str, args: dict[str, Any], resume: Mapping[str, str], progress: Any,
                  asker: Any) -> Any:
    """The call's result, read again from its stream in the same session (see above)."""
    if client.session_id != resume["session"]:
        raise PluginError(LOST.format(why="the server no longer knows the session"))
    latest = resume["token"]

    def seen(event_id: str) -> None:
        nonlocal latest
        latest = event_id

    for _ in range(MAX_REREADS):
        answered = asyncio.Event()
        if asker is not None:
            asker.answered = answered.set
        reading = asyncio.ensure_future(client.resume_call(name, args, latest, progress, seen))
        told = asyncio.ensure_future(answered.wait())
        try:
            await asyncio.wait({reading, told}, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                await asyncio.wait({reading}, timeout=REREAD_AFTER)
            if reading.done():
                return reading.result()
            log.info("plugin call %s: no result on the resumed stream after the answer; reading it again", name)
        finally:
            told.cancel()
            if not reading.done():
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
    raise PluginError(LOST.format(why="the server did not send the result"))
