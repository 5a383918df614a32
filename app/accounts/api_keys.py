"""The API's keys and who may use the API: the rules around the rows of store/api_keys.py.

A key is `tt-` and 43 random characters (256 bits), shown once when it is made and stored
only as its sha256 (a random token that long needs no slow hash: nobody guesses it, and a
copy of the database hands out no key). The owner decides, as rows of `settings`, whether
the API is on, for everyone or for chosen people, how many requests a minute a person may
make and how long a call waiting for approval holds an API request.
"""
from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store import Store
from ..tables import NAME_MAX, ApiKey, Person
from .passwords import AccountError

PREFIX = "tt-"
SHOWN = len(PREFIX) + 6  # what a list shows of a key: enough to tell a person's keys apart
EXPIRIES = {"": "never", "7": "in 7 days", "30": "in 30 days", "90": "in 90 days", "365": "in a year"}
MODES = {"everyone": "everyone", "chosen": "the people chosen below", "off": "nobody (switched off)"}
MINUTE = 60.0
PER_MINUTE = 60          # requests a person may make a minute, unless the owner says otherwise
APPROVAL_SECONDS = 300   # how long an API request waits for a call's approval, unless the owner says otherwise
PER_MINUTE_MAX = 100_000
APPROVAL_MAX = 24 * 3600


def key_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ApiSettings:
    """What the owner decided: `mode` one of MODES, `people` those chosen (mode "chosen"),
    requests a minute per person, seconds a call waits for approval in an API request."""

    mode: str = "everyone"
    people: frozenset[int] = frozenset()
    per_minute: int = PER_MINUTE
    approval_seconds: int = APPROVAL_SECONDS

    def allows(self, person: Person) -> bool:
        return self.mode == "everyone" or (self.mode == "chosen" and (person.id in self.people or person.owner))


@dataclass
class ApiKeys:
    """The API's keys and settings of one database. `clock` is what expiry and the limit a
    minute read the time from: tests give one they move."""

    store: Store
    clock: Callable[[], float] = time.time

    # --- keys ---------------------------------------------------------------------------

    def make(self, person: Person, name: str, expiry: str = "", agent: int | None = None) -> tuple[str, int]:
        """A new key of `person`'s: (its token, shown this once; its id)."""
        name = name.strip()
        if not name or len(name) > NAME_MAX:
            raise AccountError(f"Name the key (1 to {NAME_MAX} characters), so you know later where it is used.")
        if expiry not in EXPIRIES:
            raise AccountError("The expiry is one of the choices offered.")
        if agent is not None:
            found = self.store.agent(agent)
            if found is None or found.person != person.id:
                raise AccountError("There is no such agent to limit the key to.")
        token = PREFIX + secrets.token_urlsafe(32)
        expires = self.clock() + int(expiry) * 24 * 3600 if expiry else None
        key = self.store.add_api_key(person.id, name, key_hash(token), token[:SHOWN], agent=agent, expires=expires)
        return token, key

    def of(self, person: Person) -> list[ApiKey]:
        return self.store.api_keys(person.id)

    def revoke(self, person: Person, key: int) -> bool:
        return self.store.delete_api_key(person.id, key)

    def holder(self, token: str | None) -> tuple[ApiKey, Person] | None:
        """The key a request's bearer token is, and its person, while it has not expired."""
        if not token or not token.startswith(PREFIX) or len(token) > 200:
            return None
        found = self.store.api_key_of(key_hash(token))
        if found is None or (found[0].expires is not None and found[0].expires <= self.clock()):
            return None
        return found

    # --- settings -----------------------------------------------------------------------

    def settings(self) -> ApiSettings:
        rows = self.store.settings("api.")
        people = frozenset(int(p) for p in rows.get("api.people", "").split(",") if p.isdigit())
        return ApiSettings(mode=rows.get("api.mode", "everyone") if rows.get("api.mode") in MODES else "everyone",
                           people=people, per_minute=_number(rows.get("api.per_minute"), PER_MINUTE),
                           approval_seconds=_number(rows.get("api.approval_seconds"), APPROVAL_SECONDS))

    def decide(self, mode: str, people: set[int], per_minute: str, approval_seconds: str) -> ApiSettings:
        """The owner's decision, checked, kept as rows."""
        if mode not in MODES:
            raise AccountError("Say who may use the API: everyone, the people chosen, or nobody.")
        minute = _bounded(per_minute, 1, PER_MINUTE_MAX, "Requests a minute")
        wait = _bounded(approval_seconds, 1, APPROVAL_MAX, "The wait for an approval")
        known = {p.id for p in self.store.people()}
        self.store.set_settings({"api.mode": mode, "api.people": ",".join(str(p) for p in sorted(people & known)),
                                 "api.per_minute": str(minute), "api.approval_seconds": str(wait)})
        return self.settings()

    # --- the limit a minute --------------------------------------------------------------

    def count(self, person: Person, key: ApiKey, settings: ApiSettings) -> tuple[int, float]:
        """Count a request before it is answered (parallel ones count too): (its row, 0), or
        (0, seconds to wait) when `person` made their requests of this minute already."""
        t = self.clock()
        with self.store.write():  # one writer at a time, across workers: check and count at once
            made, first = self.store.api_requests_since(person.id, t - MINUTE)
            if made >= settings.per_minute:
                return 0, max(MINUTE - (t - (first or t)), 1.0)
            return self.store.add_api_request(person.id, key.id, t), 0.0


def _number(raw: str | None, default: int) -> int:
    return int(raw) if raw and raw.isdigit() else default


def _bounded(raw: str, least: int, most: int, what: str) -> int:
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or not least <= int(raw) <= most:
        raise AccountError(f"{what}: a whole number from {least:,} to {most:,}.")
    return int(raw)
