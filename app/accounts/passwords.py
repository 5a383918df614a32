"""What a person may choose: a name and a password; passwords hashed with argon2id
(argon2-cffi, its default RFC 9106 parameters), checked in the same time whether or not the
name exists."""
from __future__ import annotations

import functools
import secrets
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from ..tables import check_name

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
