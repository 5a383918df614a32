"""People, their sessions and the sign-in limiter's attempts: the rows behind app/accounts/.

The rules (hashing, which names and passwords are allowed, how long a pair waits) are
accounts.py's; this module only reads and writes their rows. A session is stored by the
sha256 of its token (`token_id`), never the token itself.
"""
from __future__ import annotations

import sqlite3
import unicodedata

from . import db as dbm
from .schema import migrations
from ..tables import Assistant, Person, file_ids
from .rows import Base

# Rows made before the owner's account existed (the Python API, an app older than accounts):
# the owner claims them when they set the app up.
CLAIMED = ("conversations", "assistants", "files", "tombstones")


def reading(name: str) -> str:
    """A name as a list orders it on both engines (their collations order non-ASCII letters
    each its own way): its key (migrations.name_key) without accents."""
    return "".join(c for c in unicodedata.normalize("NFKD", migrations.name_key(name)) if not unicodedata.combining(c))


def person_from_row(row: sqlite3.Row) -> Person:
    return Person(name=row["name"], owner=bool(row["owner"]), id=row["id"], theme=row["theme"], admin=bool(row["admin"]))


class Taken(Exception):
    """Why a new account was not made: `owner_exists` (someone set the app up meanwhile) or
    the name belongs to someone already."""

    def __init__(self, owner_exists: bool = False):
        super().__init__("owner exists" if owner_exists else "name taken")
        self.owner_exists = owner_exists


class People(Base):
    # --- people ---------------------------------------------------------------------------

    def people_count(self) -> int:
        return self._one("SELECT count(*) FROM people")[0]

    def people(self) -> list[Person]:
        """The owner first, then by name as a person reads a list (case and accents aside:
        "émile" between "Dan" and "Frank"), in the same order on both engines (their
        collations order non-ASCII letters each its own way)."""
        rows = self._all("SELECT * FROM people")
        return [person_from_row(r) for r in sorted(rows, key=lambda r: (-r["owner"], reading(r["name"]), r["name"], r["id"]))]

    def person(self, person_id: int) -> Person | None:
        row = self._one("SELECT * FROM people WHERE id = ?", [person_id])
        return person_from_row(row) if row else None

    def person_named(self, name: str) -> tuple[Person, str] | None:
        """(the person, their password's hash) by their name, whatever its case
        (migrations.name_key). An account made before m034 whose name shares its key with an
        earlier one's (migrations.key_names) is found by its name exactly as it is."""
        key = migrations.name_key(name)
        rows = self._all("SELECT * FROM people WHERE folded = ? OR name = ?", [key, name])
        row = next((r for r in rows if r["name"] == name), None) or next((r for r in rows if r["folded"] == key), None)
        return (person_from_row(row), row["hash"]) if row else None

    def add_person(self, name: str, hashed: str, *, owner: bool = False, admin: bool = False) -> int:
        """A new account's id (Taken when it cannot be made). The owner's is the first: it
        claims the rows made before it. Everyone gets an agent of their own to talk to."""
        with self.write() as db:
            if owner and self.people_count():
                raise Taken(owner_exists=True)
            try:
                person_id = db.conn.execute("INSERT INTO people (name, hash, owner, admin, created, folded) VALUES (?, ?, ?, ?, ?, ?) "
                                            "RETURNING id", [name, hashed, int(owner), int(admin and not owner),
                                                             dbm.now(), migrations.name_key(name)]).fetchone()[0]
            except sqlite3.IntegrityError:
                raise Taken() from None
            if owner:
                for table in CLAIMED:
                    db.conn.execute(f"UPDATE {table} SET person = ? WHERE person IS NULL", [person_id])
            if not self.agents(person_id):
                self.add_agent(Assistant(name="Assistant", instructions=migrations.DEFAULT_INSTRUCTIONS, person=person_id))
        return person_id

    def unclaimed(self) -> bool:
        """Whether there are conversations made before the owner's account (CLAIMED's rows
        the owner's setup claims): only an install older than accounts, or the Python API's."""
        return self._one("SELECT 1 FROM conversations WHERE person IS NULL LIMIT 1") is not None

    def remove_person(self, person_id: int, *, keep: bool = False) -> bool:
        """Someone's account and everything of theirs (sessions, keys, agents, files); never
        the owner's. Their conversations go as deleting them does (with tombstones, so their
        ids are never anyone else's), or, `keep`, become the owner's, marked with their name,
        with the files and documents they hold (`hand_over`)."""
        with self.write() as db:
            found = self.person(person_id)
            if found is None or found.owner:
                return False
            if keep:
                self.hand_over(found)
            self.drop_links_of(person_id)
            for chat in self.conversation_ids(person_id):
                self.delete_conversation(chat)
            return db.conn.execute("DELETE FROM people WHERE id = ? AND owner = 0", [person_id]).rowcount == 1

    def hand_over(self, person: Person) -> list[int]:
        """Every conversation of `person`'s made the owner's, `kept_from` their name, with the
        files its messages hold and the documents attached to it (what the owner needs to
        read it whole); their ids. Their agents are not kept (what an agent remembered is
        about them): the conversations keep their text, and an answer asked for again is the
        owner's agent's."""
        owner = self.owner()
        chats = self.conversation_ids(person.id)
        if not chats:
            return []
        with self.write() as db:
            marks = ",".join("?" * len(chats))
            held = {f for r in db.conn.execute(f"SELECT file, files FROM items WHERE chat IN ({marks}) AND "
                                               "(file IS NOT NULL OR files != '')", chats)
                    for f in (r["file"], *file_ids(r["files"])) if f}
            held |= {r[0] for r in db.conn.execute(f"SELECT file FROM documents WHERE chat IN ({marks})", chats)}
            db.conn.execute(f"UPDATE documents SET person = ? WHERE chat IN ({marks})", [owner, *chats])
            if held:
                db.conn.execute(f"UPDATE files SET person = ? WHERE person = ? AND id IN ({','.join('?' * len(held))})",
                                [owner, person.id, *held])
            rev = dbm.bump(db, len(chats))
            for i, chat in enumerate(chats):  # a rev each: the owner's open sidebars list them
                db.conn.execute("UPDATE conversations SET person = ?, kept_from = ?, rev = ? WHERE id = ?",
                                [owner, person.name, rev - len(chats) + 1 + i, chat])
        return chats

    def set_admin(self, person_id: int, admin: bool) -> bool:
        """Someone other than the owner made an admin or a member. Links made for them before
        go (one an admin made for a member must not reach an admin), and so do the links an
        admin made who is one no more."""
        with self.write() as db:
            found = self.person(person_id)
            if found is None or found.owner:
                return False
            if found.admin != admin:
                db.conn.execute("UPDATE people SET admin = ? WHERE id = ?", [int(admin), person_id])
                db.conn.execute("DELETE FROM resets WHERE person = ?", [person_id])
                if not admin:
                    self.drop_links_of(person_id)
            return True

    def drop_links_of(self, maker: int) -> None:
        """The links `maker` made that still work, made to work no more: their reset links
        deleted, their waiting invitations withdrawn."""
        with self.write() as db:
            db.conn.execute("DELETE FROM resets WHERE made_by = ?", [maker])
            db.conn.execute("UPDATE invitations SET revoked = ? WHERE made_by = ? AND used IS NULL AND revoked IS NULL",
                            [dbm.now(), maker])

    def conversation_ids(self, person: int) -> list[int]:
        return [r[0] for r in self._all("SELECT id FROM conversations WHERE person = ?", [person])]

    def set_password(self, person_id: int, hashed: str, keep: str = "") -> None:
        """A new hash; every session of that person ends but the one whose id is `keep`."""
        with self.write() as db:
            db.conn.execute("UPDATE people SET hash = ? WHERE id = ?", [hashed, person_id])
            db.conn.execute("DELETE FROM sessions WHERE person = ? AND id != ?", [person_id, keep])

    def set_theme(self, person_id: int, theme: str) -> None:
        with self.write() as db:
            db.conn.execute("UPDATE people SET theme = ? WHERE id = ?", [theme, person_id])

    # --- one-time links that set a password (the owner makes them) -------------------------

    def add_reset(self, reset_id: str, person_id: int, at: float, seconds: float, made_by: int | None = None) -> None:
        """A link (by its token's sha256) that sets the person's password once within
        `seconds` of `at`, made by `made_by` (None: the owner's own, from the command line);
        it replaces their earlier one, and expired ones go."""
        with self.write() as db:
            db.conn.execute("DELETE FROM resets WHERE person = ? OR expires < ?", [person_id, at])
            db.conn.execute("INSERT INTO resets (id, person, created, expires, made_by) VALUES (?, ?, ?, ?, ?)",
                            [reset_id, person_id, at, at + seconds, made_by])

    def reset_for(self, reset_id: str, at: float) -> Person | None:
        """Whose password the link sets, while it lasts (at `at`)."""
        row = self._one("SELECT people.* FROM resets JOIN people ON people.id = resets.person "
                        "WHERE resets.id = ? AND resets.expires > ?", [reset_id, at])
        return person_from_row(row) if row else None

    def use_reset(self, reset_id: str, hashed: str, at: float) -> Person | None:
        """The link's person with their new password `hashed`, every session of theirs ended and
        the link gone (None, and nothing changed, when it is used or expired at `at`): in one
        write, so it is used once."""
        with self.write() as db:
            person = self.reset_for(reset_id, at)
            if person is None:
                return None
            db.conn.execute("DELETE FROM resets WHERE person = ?", [person.id])
            db.conn.execute("UPDATE people SET hash = ? WHERE id = ?", [hashed, person.id])
            db.conn.execute("DELETE FROM sessions WHERE person = ?", [person.id])
        return person

    # --- sessions -------------------------------------------------------------------------

    def add_session(self, session_id: str, person_id: int, seconds: float) -> None:
        """A session that lasts `seconds`; the expired ones go at the same time."""
        t = dbm.now()
        with self.write() as db:
            db.conn.execute("DELETE FROM sessions WHERE expires < ?", [t])
            db.conn.execute("INSERT INTO sessions (id, person, created, expires) VALUES (?, ?, ?, ?)",
                            [session_id, person_id, t, t + seconds])

    def session_person(self, session_id: str) -> Person | None:
        """Whose session this is, while it lasts."""
        row = self._one("SELECT people.* FROM sessions JOIN people ON people.id = sessions.person "
                       "WHERE sessions.id = ? AND sessions.expires > ?", [session_id, dbm.now()])
        return person_from_row(row) if row else None

    def end_session(self, session_id: str) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM sessions WHERE id = ?", [session_id])

    # --- the sign-in limiter's attempts ---------------------------------------------------

    def forget_attempts(self, before: float) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM signins WHERE at < ?", [before])

    def attempts_of_pair(self, name: str, source: str) -> tuple[int, float | None]:
        """(how many failed checks of the pair are remembered, when the last was)."""
        return tuple(self._one("SELECT count(*), max(at) FROM signins WHERE name = ? AND address = ?", [name, source]))

    def attempts_from(self, source: str, since: float) -> tuple[int, float | None]:
        """(how many checks from `source` since then, when the first of them was)."""
        return tuple(self._one("SELECT count(*), min(at) FROM signins WHERE address = ? AND at > ?", [source, since]))

    def add_attempt(self, at: float, name: str, source: str) -> int:
        with self.write() as db:
            return db.conn.execute("INSERT INTO signins (at, name, address) VALUES (?, ?, ?) RETURNING id",
                                   [at, name, source]).fetchone()[0]

    def take_back_attempt(self, attempt: int) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM signins WHERE id = ?", [attempt])
