"""Accounts: people, their sessions and the sign-in limit, the rules around their rows.

The rows of `people`, `sessions` and `signins` are read and written by the store
(app/store/people.py). A session is a random token in an HttpOnly cookie, stored only as its
sha256. The first person is the owner: they set the app up (or TABLETALK_PASSWORD did), claim
the rows made before any account existed, and add and remove the others.
"""
from __future__ import annotations

import hashlib
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store import Store
from ..store.schema.migrations import name_key
from ..store.people import Taken
from ..tables import THEMES, Person
from .limiter import ADDRESS_LIMIT, PAIR_FREE, PAIR_MAX_DELAY, PAIR_MEMORY, SIGNIN_WINDOW, Throttled
from .passwords import AccountError, person_name

COOKIE = "tabletalk_session"  # the session cookie's name
SESSION_SECONDS = 30 * 24 * 3600
RESET_SECONDS = 3 * 24 * 3600  # how long a link that sets a password works (once)


def loopback(host: str) -> bool:
    """Whether an address (to serve on, or a peer's) is this computer's own."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_id(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Accounts:
    """The accounts of one database: the rules around the rows (store/people.py keeps them).
    `clock` is what the sign-in limit and the links read the time from (the seconds a pair
    must wait, an address's minute, whether a link expired): tests give it one they move."""

    store: Store
    clock: Callable[[], float] = time.time

    def count(self) -> int:
        return self.store.people_count()

    def all(self) -> list[Person]:
        return self.store.people()

    def get(self, person_id: int) -> Person | None:
        return self.store.person(person_id)

    def hash_of(self, name: str) -> tuple[Person, str] | None:
        return self.store.person_named(name.strip())

    def add(self, name: str, hashed: str, *, owner: bool = False) -> Person:
        """A new account. The owner's is the first: it claims the rows made before it (and
        fails with AccountError when someone set the app up meanwhile). Anyone else gets an
        agent of their own to talk to."""
        name = person_name(name)
        try:
            person_id = self.store.add_person(name, hashed, owner=owner)
        except Taken as e:
            if e.owner_exists:
                raise AccountError("Tabletalk is already set up: sign in instead.") from None
            known = self.store.person_named(name)
            if known and known[0].name != name:  # the same name in another case, or spelling
                raise AccountError(f"Someone is already called “{known[0].name}”: names differing "
                                   "only in case are one name.") from None
            raise AccountError(f"Someone is already called “{name}”.") from None
        return Person(name=name, owner=owner, id=person_id)

    def remove(self, person_id: int, *, keep: bool = False) -> bool:
        """Someone's account and everything of theirs (agents, files, sessions, API keys); the
        owner's account is never removed. Their conversations go as deleting them does: with
        tombstones, so their ids are never given to anyone else's (a page or run of theirs
        still open in another worker must not reach a new conversation); or, `keep`, they
        become the owner's, marked with the removed person's name (docs/people.md)."""
        return self.store.remove_person(person_id, keep=keep)

    def set_role(self, person_id: int, role: str) -> None:
        """Someone made an admin or a member (the owner's role is never changed)."""
        if role not in ("admin", "member"):
            raise AccountError("The role is Admin or Member.")
        self.store.set_admin(person_id, role == "admin")

    def set_password(self, person_id: int, hashed: str, keep: str = "") -> None:
        """A new password ends every session of that person but the one named `keep`."""
        self.store.set_password(person_id, hashed, keep=token_id(keep))

    def set_theme(self, person_id: int, theme: str) -> None:
        """The theme the person's pages use: "" (the system's), "light" or "dark"."""
        if theme not in THEMES:
            raise AccountError(f"The theme is one of: {', '.join(t or 'system' for t in THEMES)}.")
        self.store.set_theme(person_id, theme)

    # --- links that set a password once --------------------------------------------------

    def reset_link(self, person_id: int, made_by: int | None = None) -> str:
        """A new token for a link that sets the person's password once, within RESET_SECONDS
        (only its hash is stored; it replaces their earlier link). The owner makes it for
        someone who forgot theirs, and passes it on; it lasts while its maker (`made_by`) may make it."""
        token = secrets.token_urlsafe(32)
        self.store.add_reset(token_id(token), person_id, self.clock(), RESET_SECONDS, made_by)
        return token

    def resetting(self, token: str | None) -> Person | None:
        """Whose password the link with this token sets, while it works."""
        if not token or len(token) > 200:
            return None
        return self.store.reset_for(token_id(token), self.clock())

    def reset_password(self, token: str, hashed: str) -> Person | None:
        """Use the link: the person's password is `hashed`, every session of theirs ends, the
        link is gone. None (nothing changed) when it was used, replaced or is expired."""
        if not token or len(token) > 200:
            return None
        return self.store.use_reset(token_id(token), hashed, self.clock())

    # --- sessions ---------------------------------------------------------------------

    def start_session(self, person_id: int) -> str:
        """A new session's token, for the cookie (only its hash is stored)."""
        token = secrets.token_urlsafe(32)
        self.store.add_session(token_id(token), person_id, SESSION_SECONDS)
        return token

    def session(self, token: str | None) -> Person | None:
        """The person signed in with this cookie, if the session is still on."""
        if not token or len(token) > 200:
            return None
        return self.store.session_person(token_id(token))

    def end_session(self, token: str | None) -> None:
        if token:
            self.store.end_session(token_id(token))

    # --- the sign-in limit --------------------------------------------------------------

    def attempt(self, name: str, source: str, *, by_address: bool = True) -> int:
        """Count a password check before it is made (so parallel guesses are counted too):
        the attempt's row. Raises Throttled when the pair (name, `source`: an address, or
        `device:...`) must wait, or, with `by_address`, when the address has used its checks
        this minute. A check that succeeds takes its attempt back (`succeeded`)."""
        t = self.clock()
        key = name_key(name.strip())[:200]  # a pair is the person's, however the name is typed
        with self.store.write():  # one writer at a time, across workers: check and count at once
            self.store.forget_attempts(t - PAIR_MEMORY)
            failed, last = self.store.attempts_of_pair(key, source)
            if failed >= PAIR_FREE:
                wait = min(2.0 ** (failed - PAIR_FREE + 1), PAIR_MAX_DELAY) - (t - last)
                if wait > 0:
                    raise Throttled(wait)
            if by_address:
                recent, oldest = self.store.attempts_from(source, t - SIGNIN_WINDOW)
                if recent >= ADDRESS_LIMIT:
                    raise Throttled(SIGNIN_WINDOW - (t - oldest))
            return self.store.add_attempt(t, key, source)

    def succeeded(self, attempt: int) -> None:
        self.store.take_back_attempt(attempt)
