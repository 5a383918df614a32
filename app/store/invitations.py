"""Invitation links: the rows behind app/accounts/invitations.py.

An invitation is kept by the sha256 of its token (`hash`), never the token itself: a copy of
the database hands out no link that works. Its rows stay after it is used or revoked, so
the People page says what became of each; only the rules' `now` says whether one expired.
"""
from __future__ import annotations

from ..tables import Invitation
from .rows import Base

INVITATION = """SELECT i.*, maker.name AS maker_name, joined.name AS joined_name FROM invitations i
                LEFT JOIN people maker ON maker.id = i.made_by
                LEFT JOIN people joined ON joined.id = i.person"""


def invitation_from_row(row) -> Invitation:
    return Invitation(id=row["id"], admin=bool(row["admin"]), note=row["note"], made_by=row["maker_name"] or "",
                      created=row["created"], expires=row["expires"], used=row["used"],
                      person=row["joined_name"] or "", revoked=row["revoked"])


class InvitationRows(Base):
    def add_invitation(self, hashed: str, *, admin: bool, note: str, made_by: int, at: float, expires: float) -> int:
        with self.write() as db:
            return db.conn.execute(
                "INSERT INTO invitations (hash, admin, note, made_by, created, expires) VALUES (?, ?, ?, ?, ?, ?) "
                "RETURNING id", [hashed, int(admin), note, made_by, at, expires]).fetchone()[0]

    def invitations(self) -> list[Invitation]:
        """Every invitation, the newest first."""
        return [invitation_from_row(r) for r in self._all(f"{INVITATION} ORDER BY i.id DESC")]

    def invitation(self, invitation_id: int) -> Invitation | None:
        row = self._one(f"{INVITATION} WHERE i.id = ?", [invitation_id])
        return invitation_from_row(row) if row else None

    def invitation_by_hash(self, hashed: str) -> Invitation | None:
        row = self._one(f"{INVITATION} WHERE i.hash = ?", [hashed])
        return invitation_from_row(row) if row else None

    def revoke_invitation(self, invitation_id: int, at: float) -> bool:
        """Revoked, when it was neither used nor revoked yet."""
        with self.write() as db:
            return db.conn.execute("UPDATE invitations SET revoked = ? WHERE id = ? AND used IS NULL AND revoked IS NULL",
                                   [at, invitation_id]).rowcount == 1

    def join(self, hashed: str, name: str, password_hash: str, at: float) -> int | None:
        """The account made with the invitation (its id), the invitation used: in one write, so
        a link is used once however many tabs send it. None, and nothing made, when the link
        was used, revoked or is expired at `at`; Taken (people.py) when the name is someone's."""
        with self.write() as db:
            row = db.conn.execute("SELECT id, admin FROM invitations WHERE hash = ? AND used IS NULL AND revoked IS NULL "
                                  "AND expires > ?", [hashed, at]).fetchone()
            if row is None:
                return None
            person = self.add_person(name, password_hash, admin=bool(row["admin"]))  # Taken: all rolled back
            db.conn.execute("UPDATE invitations SET used = ?, person = ? WHERE id = ?", [at, person, row["id"]])
            return person

    def forget_invitations(self, before: float) -> None:
        """Invitations that ended (used, revoked or expired) before `before`: the list keeps
        the recent ones only."""
        with self.write() as db:
            db.conn.execute("DELETE FROM invitations WHERE coalesce(used, revoked, expires) < ?", [before])

