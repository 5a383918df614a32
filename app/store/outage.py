"""The database's outages: a failure told apart from a bug, and said in plain words.

An outage is not the app's fault and loses nothing: what failed is done again once the
database answers (the runner's runs resume from their last complete step, a page is asked
again). So it is said as what it is, in the log every few seconds while it lasts (never a
traceback a write), on /healthz (503 with the reason) and on the page (WORDS).
"""
from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from .db import BUSY_TIMEOUT_MS

T = TypeVar("T")

# What a person is told while the database cannot be reached (pages, the live feed).
WORDS = "The database is unreachable; answers resume when it is back."
SAY_EVERY_SECONDS = 5.0  # a line in the log at most this often while an outage lasts
LOCKED = "the database is locked"
# A start that finds the database unreachable tries again after the first of these, doubling
# up to the second: it serves at most that long after the database answers again.
WAIT_SECONDS = (0.25, 2.0)


def unavailable(e: BaseException | None) -> str:
    """Why the database cannot be used now, in a few words, when `e` (or what it was raised
    from, or a leaf of its group) is such a failure, else "": PostgreSQL unreachable (its
    server stopped, restarting, a network gone: `postgres.unreachable`), or SQLite's file
    locked past the busy timeout (a process holding the write lock is paused). Not a bug, nor
    a refusal (a wrong password, a constraint): what failed may be done again once the
    database answers."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, BaseExceptionGroup):
            return next((why for leaf in e.exceptions if (why := unavailable(leaf))), "")
        if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
            return f"{LOCKED}: another process held its write lock for {BUSY_TIMEOUT_MS // 1000} s"
        if type(e).__module__.split(".")[0] == "psycopg" or type(e).__module__ == f"{__package__}.postgres":
            from . import postgres as pg  # raised by psycopg or over it: both are imported already

            if why := pg.unreachable(e):
                return why
        e = e.__cause__
    return ""


def refusal(e: BaseException) -> str:
    """PostgreSQL's (or libpq's) words when `e` is the database refusing us for a reason of
    ours (no such database or user, a wrong password, a bad setting in the URL), which no
    wait mends: said at once. "" for anything else (an outage, a bug)."""
    if type(e).__module__.split(".")[0] == "psycopg" and not unavailable(e):
        return " ".join(str(e).split())[:500]
    return ""


def public(why: str) -> str:
    """What anyone may be told of the outage `why` (the public /healthz): its kind, without
    the database's address or libpq's words, which are for the log."""
    return LOCKED if why.startswith(LOCKED) else "the database is unreachable"


class Outage:
    """What one part of a worker says of an outage: a line when it begins, one every
    SAY_EVERY_SECONDS while it lasts, one when the database answers again. The caller logs
    the lines it is given (None: nothing to say now)."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.since = 0.0  # when it began (0: the database answers)
        self.reason = ""
        self._said = 0.0

    @property
    def down(self) -> bool:
        return bool(self.since)

    def failed(self, reason: str) -> str | None:
        now = self.clock()
        if not self.since:
            self.since = now
        self.reason = reason
        if self._said and now - self._said < SAY_EVERY_SECONDS:
            return None
        self._said = now
        lasted = now - self.since
        return f"{reason}; answers resume when it is back" + (f" (for {lasted:.0f} s now)" if lasted >= 1 else "")

    def waiting(self, reason: str) -> str | None:
        """`failed`, as a start that waits for the database says it."""
        if self.failed(reason) is None:
            return None
        lasted = self.clock() - self.since
        return f"{reason}; waiting" + (f" (for {lasted:.0f} s now)" if lasted >= 1 else "")

    def answered(self) -> str | None:
        if not self.since:
            return None
        lasted, self.since, self._said, self.reason = self.clock() - self.since, 0.0, 0.0, ""
        return f"the database answers again after {lasted:.1f} s: answers resume"


class Waiting:
    """A start that waits while the database cannot be reached: `attempt()` is tried again
    WAIT_SECONDS later (doubling), with a line to `say` when the wait begins and every
    SAY_EVERY_SECONDS, and one when it answers; any other failure (a refusal: a wrong URL,
    user, password or database; a bug) is raised at once. `tabletalk serve` waits so
    (`waited`), and so does each worker's start (`awaited`): granian's respawn of a worker
    during an outage waits instead of dying again and again."""

    def __init__(self, say: Callable[[str], None], clock=time.monotonic) -> None:
        self.say = say
        self.clock = clock
        self.outage = Outage(clock)
        self.wait = 0.0

    def failed(self, e: Exception) -> float:
        """How long to wait after the attempt failed with `e`; `e` raised again if no wait mends it."""
        why = unavailable(e)
        if not why:
            raise e
        if line := self.outage.waiting(why):
            self.say(line)
        first, most = WAIT_SECONDS
        self.wait = min(max(self.wait * 2, first), most)
        return self.wait

    def done(self) -> None:
        if self.outage.down:
            self.say(f"the database answers after {self.clock() - self.outage.since:.1f} s: starting")


def waited(attempt: Callable[[], T], say: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> T:
    """`attempt()` once the database answers (`Waiting`), on a thread that may sleep."""
    waiting = Waiting(say)
    while True:
        try:
            result = attempt()
        except Exception as e:
            sleep(waiting.failed(e))
            continue
        waiting.done()
        return result


async def awaited(attempt: Callable[[], T], say: Callable[[str], None]) -> T:
    """`waited` on an event loop (a worker's start)."""
    waiting = Waiting(say)
    while True:
        try:
            result = attempt()
        except Exception as e:
            await asyncio.sleep(waiting.failed(e))
            continue
        waiting.done()
        return result
