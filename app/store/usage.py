"""What people's model requests took, a row a person, model and day, and their daily limits:
the rows behind app/accounts/usage.py (the rules: days, limits, their words) and the pages
that show them (docs/usage.md).

A day is a UTC date as text ('2025-03-07'), which orders and compares as dates do on both
engines. The tokens are added in the write that ends the model step they were spent on
(app/run/turn.py), never in one of their own.
"""
from __future__ import annotations

from dataclasses import dataclass

from .rows import Base

DEFAULT_SETTING = "usage.daily_tokens"  # the owner's default limit for everyone ('' or missing: none)
# One request's count as kept: a server's word is not trusted to be sane (a negative or
# astronomical count would make every total a lie, or overflow PostgreSQL's BIGINT in a sum).
REQUEST_TOKENS_MAX = 100_000_000


@dataclass(frozen=True)
class Used:
    """Tokens in and out, over whatever a read grouped by (`key`: a day, a model, a person's id)."""

    key: str | int
    prompt: int
    completion: int
    cached: int = 0
    requests: int = 0
    estimated: int = 0  # of the requests, those our estimate counted

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def kept(tokens: int) -> int:
    return min(max(int(tokens), 0), REQUEST_TOKENS_MAX)


def span(first: str, last: str, person: int | None) -> tuple[str, list]:
    """The WHERE of a range of days, of one person or everyone."""
    if person is None:
        return "day BETWEEN ? AND ?", [first, last]
    return "day BETWEEN ? AND ? AND person = ?", [first, last, person]


class TokenUsage(Base):
    def add_usage(self, person: int, model: str, day: str, prompt: int, completion: int, cached: int = 0,
                  estimated: bool = False) -> None:
        """One model request of `person`'s more, on `day`. Call it inside the write that
        records what the request brought, so that both are kept or neither."""
        with self.write() as db:
            db.conn.execute(
                """INSERT INTO usage_days (person, day, model, prompt, completion, cached, requests, estimated)
                   VALUES (?, ?, ?, ?, ?, ?, 1, ?)
                   ON CONFLICT (person, day, model) DO UPDATE SET prompt = usage_days.prompt + excluded.prompt,
                   completion = usage_days.completion + excluded.completion,
                   cached = usage_days.cached + excluded.cached, requests = usage_days.requests + 1,
                   estimated = usage_days.estimated + excluded.estimated""",
                [person, day, model[:200], kept(prompt), kept(completion), kept(cached), int(estimated)])

    def used_on(self, person: int, day: str) -> int:
        """The tokens in and out `person`'s requests took on `day`."""
        row = self._one("SELECT coalesce(sum(prompt + completion), 0) FROM usage_days WHERE person = ? AND day = ?",
                        [person, day])
        return int(row[0])

    def usage_by(self, by: str, first: str, last: str, person: int | None = None) -> list[Used]:
        """Tokens from day `first` to `last` (both included), summed by `by` ('day', 'model' or
        'person'), of one person or of everyone: days in order, the others most first."""
        column = {"day": "day", "model": "model", "person": "person"}[by]
        where, args = span(first, last, person)
        order = "day" if by == "day" else "sum(prompt + completion) DESC, " + column
        rows = self._all(f"SELECT {column}, sum(prompt), sum(completion), sum(cached), sum(requests), sum(estimated) "
                         f"FROM usage_days WHERE {where} GROUP BY {column} ORDER BY {order}", args)
        return [Used(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows]

    # --- daily limits ---------------------------------------------------------------------

    def default_token_limit(self) -> int | None:
        row = self._one("SELECT value FROM settings WHERE name = ?", [DEFAULT_SETTING])
        return int(row[0]) if row and row[0].isdigit() else None

    def set_default_token_limit(self, tokens: int | None) -> None:
        self.set_settings({DEFAULT_SETTING: "" if tokens is None else str(tokens)})

    def token_limits(self) -> dict[int, int | None]:
        """The people whose own limit the owner set: {person: tokens, or None for no limit}."""
        return {r[0]: r[1] for r in self._all("SELECT person, tokens FROM token_limits")}

    def set_token_limit(self, person: int, tokens: int | None, *, own: bool = True) -> None:
        """`person`'s own limit (`tokens`, None: no limit), or, not `own`, the default's again."""
        with self.write() as db:
            if not own:
                db.conn.execute("DELETE FROM token_limits WHERE person = ?", [person])
                return
            db.conn.execute("INSERT INTO token_limits (person, tokens) VALUES (?, ?) "
                            "ON CONFLICT (person) DO UPDATE SET tokens = excluded.tokens", [person, tokens])

    def token_limit(self, person: int) -> int | None:
        """The tokens `person` may use a day (None: no limit): their own, else the default."""
        row = self._one("SELECT tokens FROM token_limits WHERE person = ?", [person])
        return row[0] if row is not None else self.default_token_limit()
