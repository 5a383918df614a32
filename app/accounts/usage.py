"""Daily token limits, the rules around the usage rows (app/store/usage.py): which day it is,
what a person may still use today, the words that say they used it, and which limits an owner
may type (docs/usage.md).

A day is a UTC date: everyone's resets at 00:00 UTC, whatever their own time zone, so one
person's day is the same rows on every page and server.
"""
from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store import Store
from .passwords import AccountError

LIMIT_MAX = 1_000_000_000_000  # tokens a day: past any real spend, and well inside a BIGINT


def day_of(t: float) -> str:
    """The UTC date of the moment `t` (seconds since the epoch), as the rows keep days."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).date().isoformat()


def today(clock: Callable[[], float] = time.time) -> str:
    return day_of(clock())


def days_before(day: str, n: int) -> str:
    """The day `n` days before `day` (after it, for a negative `n`), held within the calendar's
    first and last days (a range a link asks for may start at year 1)."""
    try:
        return (datetime.date.fromisoformat(day) - datetime.timedelta(days=n)).isoformat()
    except OverflowError:
        return (datetime.date.min if n > 0 else datetime.date.max).isoformat()


def a_day(raw: str) -> str | None:
    """A day a person typed or a link carried ('2025-03-07'), else None."""
    try:
        return datetime.date.fromisoformat(raw.strip()).isoformat() if len(raw.strip()) == 10 else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Allowance:
    """A person's tokens today against their limit (None: no limit)."""

    limit: int | None
    used: int

    @property
    def spent(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    @property
    def left(self) -> int | None:
        return None if self.limit is None else max(self.limit - self.used, 0)

    def words(self) -> str:
        """What the composer says once today's tokens are used, with the person's numbers."""
        return f"You have used today’s {self.limit:,} tokens; it resets at 00:00 UTC."


def allowance(store: Store, person: int, clock: Callable[[], float] = time.time) -> Allowance:
    return Allowance(store.token_limit(person), store.used_on(person, day_of(clock())))


def refusal(store: Store, person: int, clock: Callable[[], float] = time.time) -> str | None:
    """Why `person` may send nothing more today, in their words; None while they may."""
    found = allowance(store, person, clock)
    return f"{found.words()} Nothing was sent." if found.spent else None


def limit_from(raw: str) -> int | None:
    """A daily limit as the owner typed it: a whole number of tokens (spaces, commas and
    underscores between its digits allowed: "200,000"), or None for an empty field. Anything
    else is an AccountError in words."""
    typed = raw.strip()
    if not typed:
        return None
    digits = typed.replace(",", "").replace("_", "").replace(" ", "")
    if not (digits.isascii() and digits.isdigit()):
        raise AccountError(f"A limit is a whole number of tokens, like 200,000: “{typed[:40]}” is not one.")
    if len(digits) > len(str(LIMIT_MAX)) or int(digits) > LIMIT_MAX:
        raise AccountError(f"A limit is at most {LIMIT_MAX:,} tokens a day.")
    if int(digits) < 1:
        raise AccountError("A limit is at least 1 token a day (leave the field empty for none).")
    return int(digits)
