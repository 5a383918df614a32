"""Setting the app up: the setup codes each server prints, the key that signs forms, the
owner from TABLETALK_PASSWORD."""
from __future__ import annotations

import hashlib
import socket
from pathlib import Path

from ..config import Config
from ..store import Store
from ..store.secrets import APP_KEY
from ..tables import Person
from .passwords import AccountError, hash_password
from .rules import Accounts

KEY = APP_KEY  # the secret that signs forms (web/csrf.py) and seals secrets, and its file in an older data folder
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
    people = Accounts(store)
    if not config.owner_password or people.count():
        return None
    hashed = hash_password(config.owner_password)
    try:
        return people.add(config.owner_name, hashed, owner=True)
    except AccountError:  # another worker did it first
        return None
