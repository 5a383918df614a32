"""Invitations: a one-time link with which someone makes their own account (docs/people.md).

The owner or an admin makes one (the People page), with an expiry and the role it gives; the
link carries a random token, and only its sha256 is kept (store/invitations.py), as for a
session or a link that sets a password. Opened, it asks for a name and a password; used, it
signs the new person in and works no more. Used, revoked or expired, it says so and nothing
else.
"""
from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store import Store
from ..store.people import Taken
from ..tables import NAME_MAX, Invitation, Person
from .passwords import AccountError, person_name
from .rules import token_id

DAY = 86_400
DAYS_OFFERED = {"1": "1 day", "7": "7 days", "30": "30 days"}  # days -> words; the form's choices
DAYS_DEFAULT = "7"
KEPT_SECONDS = 30 * DAY  # an invitation that ended (used, revoked, expired) stays listed this long
NOTE_MAX = NAME_MAX
TOKEN_MAX = 200  # a token longer than this is no token of ours: refused before it is hashed

# What a link that does not work says, whichever the reason: the person holding it can only
# ask for a new one, and the reason is the maker's to read on the People page.
INVITATION_GONE = ("This invitation does not work any more: it was used, withdrawn, or it expired. "
        "Ask whoever sent it for a new one.")
STATE_WORDS = {"waiting": "Waiting", "used": "Used", "revoked": "Withdrawn", "expired": "Expired"}


@dataclass
class Invitations:
    """The invitations of one database. `clock` says when it is (whether a link expired):
    tests give it one they move."""

    store: Store
    clock: Callable[[], float] = time.time

    def make(self, maker: Person, *, days: str = DAYS_DEFAULT, role: str = "member", note: str = "") -> str:
        """A new link's token (shown once: only its hash is kept). The owner may invite an
        admin; an admin invites members."""
        if days not in DAYS_OFFERED:
            raise AccountError(f"The link works for {', '.join(DAYS_OFFERED.values())}.")
        if role not in ("admin", "member"):
            raise AccountError("The role is Admin or Member.")
        if role == "admin" and not maker.owner:
            raise AccountError("Only the owner makes admins.")
        note = note.strip()
        if len(note) > NOTE_MAX or any(not c.isprintable() for c in note):
            raise AccountError(f"Who it is for: one line, at most {NOTE_MAX} characters.")
        token = secrets.token_urlsafe(32)
        t = self.clock()
        self.store.forget_invitations(t - KEPT_SECONDS)
        self.store.add_invitation(token_id(token), admin=role == "admin", note=note, made_by=maker.id, at=t,
                                  expires=t + int(days) * DAY)
        return token

    def listed(self) -> list[tuple[Invitation, str]]:
        """Every invitation kept, the newest first, with its state now."""
        t = self.clock()
        return [(i, i.state(t)) for i in self.store.invitations()]

    def opened(self, token: str | None) -> Invitation | None:
        """The invitation this link's token is, while it works."""
        if not token or len(token) > TOKEN_MAX:
            return None
        found = self.store.invitation_by_hash(token_id(token))
        return found if found is not None and found.state(self.clock()) == "waiting" else None

    def revoke(self, invitation_id: int) -> bool:
        return self.store.revoke_invitation(invitation_id, self.clock())

    def join(self, token: str, name: str, hashed: str) -> Person | None:
        """The account made with the link (name checked, password `hashed`), the link used.
        None, and nothing made, when it does not work; AccountError for a name to fix."""
        name = person_name(name)
        if not token or len(token) > TOKEN_MAX:
            return None
        try:
            person_id = self.store.join(token_id(token), name, hashed, self.clock())
        except Taken:
            known = self.store.person_named(name)
            shown = known[0].name if known else name
            raise AccountError(f"Someone is already called “{shown}”: choose another name.") from None
        return None if person_id is None else self.store.person(person_id)
