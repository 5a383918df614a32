"""Accounts: people, their passwords, their sessions and the sign-in limit.

The rules are here; the rows of `people`, `sessions` and `signins` are read and written by
the store (app/store/people.py). Passwords are hashed with argon2id (argon2-cffi, its default RFC 9106
parameters); a session is a random token in an HttpOnly cookie, stored only as its sha256.
The first person is the owner: they set the app up (or TABLETALK_PASSWORD did), claim the
rows made before any account existed, and add and remove the others.
"""
from __future__ import annotations

import functools
import hashlib
import ipaddress
import math
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from .store import db as dbm
from .config import Config
from .store import Store
from .store.migrations import name_key
from .store.people import Taken
from .tables import THEMES, Person, check_name

COOKIE = "tabletalk_session"  # the session cookie's name
SESSION_SECONDS = 30 * 24 * 3600
# Wrong passwords are throttled per pair of name and source (the address, or a known
# device): a few are free, then each waits twice as long as the one before, up to a cap. So
# someone guessing at a name from one place slows only their own guesses there; the person
# elsewhere, or on a device they signed in from before, is never held up by them.
PAIR_FREE = 5              # failed checks of one pair before the delays begin
PAIR_MAX_DELAY = 900.0     # seconds, the longest wait between two checks of one pair
PAIR_MEMORY = 3600.0       # a pair's failures are forgotten after this long
# ... and from one address across names: higher, so that behind a reverse proxy (where
# everyone shares its address, unless TABLETALK_TRUSTED_PROXIES names it) one person
# guessing does not lock everyone else out. Known devices are not counted here.
ADDRESS_LIMIT = 50
SIGNIN_WINDOW = 60.0
PASSWORD_MIN = 8
PASSWORD_MAX = 1_000       # argon2 takes any length; a bound keeps a request from costing more

hasher = PasswordHasher()
@functools.cache
def _dummy_hash() -> str:
    """Checked when the name is unknown, so a wrong name costs the same time as a wrong
    password; made on first use (a hash is ~0.1 s of CPU, not to be spent at every start)."""
    return hasher.hash(secrets.token_urlsafe(16))


class AccountError(ValueError):
    """A name or password a person can fix; the message says how."""


def check_password(password: str) -> str:
    if len(password) < PASSWORD_MIN:
        raise AccountError(f"The password needs at least {PASSWORD_MIN} characters.")
    if len(password) > PASSWORD_MAX:
        raise AccountError(f"The password is too long: at most {PASSWORD_MAX:,} characters.")
    if "\x00" in password:
        raise AccountError("The password cannot hold a NUL character.")
    return password


def person_name(raw: str) -> str:
    name = raw.strip()
    try:
        check_name(name)
    except ValueError as e:
        raise AccountError(f"The name: {e}.") from None
    if any(ch.isspace() and ch != " " or not ch.isprintable() for ch in name):
        raise AccountError("The name must be one line of printable characters.")
    return name


def hash_password(password: str) -> str:
    """Slow on purpose (~0.1 s of CPU): call it off the event loop."""
    return hasher.hash(check_password(password))


def password_matches(hashed: str | None, password: str) -> bool:
    """Constant work whether or not the person exists (hashed None)."""
    try:
        return hasher.verify(hashed or _dummy_hash(), password) and hashed is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


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
class People:
    """The accounts of one database: the rules around the rows (store/people.py keeps them).
    `clock` is what the sign-in limit reads the time from (the seconds a pair must wait, an
    address's minute): tests give it one they move."""

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

    def remove(self, person_id: int) -> bool:
        """Someone's account and everything of theirs (conversations, agents, files, sessions).
        The owner's account is never removed. Their conversations go as deleting them does:
        with tombstones, so their ids are never given to anyone else's (a page or run of
        theirs still open in another worker must not reach a new conversation)."""
        return self.store.remove_person(person_id)

    def set_password(self, person_id: int, hashed: str, keep: str = "") -> None:
        """A new password ends every session of that person but the one named `keep`."""
        self.store.set_password(person_id, hashed, keep=token_id(keep))

    def set_theme(self, person_id: int, theme: str) -> None:
        """The theme the person's pages use: "" (the system's), "light" or "dark"."""
        if theme not in THEMES:
            raise AccountError(f"The theme is one of: {', '.join(t or 'system' for t in THEMES)}.")
        self.store.set_theme(person_id, theme)

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


class Throttled(Exception):
    """A password check that must wait `seconds` first."""

    def __init__(self, seconds: float):
        super().__init__(f"wait {seconds:.0f} s")
        self.seconds = max(1, math.ceil(seconds))

    @property
    def words(self) -> str:
        s = self.seconds
        return f"{s} second{'s' if s != 1 else ''}" if s < 90 else f"{math.ceil(s / 60)} minutes"


KEY = "secret.key"  # the secret that signs forms (web/csrf.py), and its file in an older data folder
SETUP = "setup "     # a setup code's name begins so; then the server's own part (server_id)


def secret_key(store: Store, data: Path) -> bytes:
    """The key that signs CSRF tokens (web/csrf.py), kept in the database so that every server
    of it (every worker, every machine) signs and checks alike: made by the first to ask. An
    install that kept it in its data folder (`secret.key`, before migration m028) keeps that
    one, so the forms of pages open across the upgrade stay valid."""
    try:
        seed = (data / KEY).read_text().strip() or None
    except FileNotFoundError:
        seed = None
    return store.kept_secret(KEY, 48, seed).encode()


def server_id(data: Path) -> str:
    """This server among those of one database: its computer and its data folder."""
    return hashlib.sha256(f"{socket.gethostname()}\0{data}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def setup_code(store: Store, data: Path, *, fresh: bool = False) -> str:
    """The code that setting the owner up takes, this server's, kept in the database until the
    owner exists. `tabletalk serve` makes a fresh one at each start and prints the address
    that holds it: who may set the app up is who can read what a computer running it
    printed, not whoever reaches the socket first, however a proxy or tunnel in front of it
    forwards (or does not say it forwards) requests. Each server of one database has its
    own (`server_id`), and any of them is accepted (`setup_codes`): a server starting does
    not void the code another printed."""
    name = SETUP + server_id(data)
    if fresh:
        store.drop_secrets(name)
        (data / "setup.code").unlink(missing_ok=True)  # where a release before m028 kept it: not read now
    return store.kept_secret(name, 18)


def setup_codes(store: Store) -> list[str]:
    """Every server's setup code: what setting up accepts."""
    return store.secrets_named(SETUP)


def setup_done(store: Store) -> None:
    store.drop_secrets(SETUP)


def set_up_from_settings(store: Store, config: Config) -> Person | None:
    """TABLETALK_PASSWORD sets the owner up at start when no account exists (headless)."""
    people = People(store)
    if not config.owner_password or people.count():
        return None
    hashed = hash_password(config.owner_password)
    try:
        return people.add(config.owner_name, hashed, owner=True)
    except AccountError:  # another worker did it first
        return None
