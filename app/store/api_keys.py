"""API keys, the API's requests and the install's settings: the rows behind app/accounts/api_keys.py.

A key is kept as the sha256 of its token (as a session is), never the token itself. Each
request to the API is a row of `api_requests`: counted for its person's limit a minute (by
every worker and server of the database alike) and kept a while for the account page.
`settings` holds what the owner decides for the whole install, a row a name.
"""
from __future__ import annotations

from . import db as dbm
from ..tables import ApiKey, Person
from .people import person_from_row
from .rows import Base

REQUESTS_KEPT_SECONDS = 30 * 24 * 3600  # what the account page counts: the last 30 days


class ApiAccess(Base):
    """The rows of who may use the API: keys, the requests counted, the install's settings."""

    # --- keys -----------------------------------------------------------------------------

    def add_api_key(self, person: int, name: str, hashed: str, shown: str, *, agent: int | None = None,
                    expires: float | None = None) -> int:
        with self.write() as db:
            return db.conn.execute(
                "INSERT INTO api_keys (person, name, hash, shown, agent, created, expires) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "RETURNING id", [person, name, hashed, shown, agent, dbm.now(), expires]).fetchone()[0]

    def api_keys(self, person: int) -> list[ApiKey]:
        """A person's keys, newest first, each with its requests of the last 30 days and the
        tokens their turns took."""
        since = dbm.now() - REQUESTS_KEPT_SECONDS
        rows = self._all(
            """SELECT k.*, count(r.id) AS requests, coalesce(sum(u.prompt + u.completion), 0) AS tokens
               FROM api_keys k
               LEFT JOIN api_requests r ON r.key = k.id AND r.at > ?
               LEFT JOIN turn_usage u ON u.turn = r.turn
               WHERE k.person = ? GROUP BY k.id ORDER BY k.id DESC""", [since, person])
        return [ApiKey.from_row(r) for r in rows]

    def api_key_of(self, hashed: str) -> tuple[ApiKey, Person] | None:
        """The key with this hash and its person (expired or not: the rules decide)."""
        row = self._one("SELECT k.id AS key_id, k.name AS key_name, k.person AS key_person, k.shown, k.created AS "
                        "key_created, k.agent, k.expires, k.used, p.* FROM api_keys k JOIN people p ON p.id = k.person "
                        "WHERE k.hash = ?", [hashed])
        if row is None:
            return None
        key = ApiKey(id=row["key_id"], person=row["key_person"], name=row["key_name"], shown=row["shown"],
                     created=row["key_created"], agent=row["agent"], expires=row["expires"], used=row["used"])
        return key, person_from_row(row)

    def delete_api_key(self, person: int, key: int) -> bool:
        """Revoke: the key is gone at once, for every worker (its requests stay, counted)."""
        with self.write() as db:
            return db.conn.execute("DELETE FROM api_keys WHERE id = ? AND person = ?", [key, person]).rowcount == 1

    # --- requests -------------------------------------------------------------------------

    def api_requests_since(self, person: int, since: float) -> tuple[int, float | None]:
        """(how many requests `person` made since then, when the first of them was)."""
        row = self._one("SELECT count(*), min(at) FROM api_requests WHERE person = ? AND at > ?", [person, since])
        return row[0], row[1]

    def add_api_request(self, person: int, key: int, at: float) -> int:
        """A request counted (before it is answered, so parallel ones count too); the key's
        last use; requests older than the account page shows are forgotten."""
        with self.write() as db:
            db.conn.execute("DELETE FROM api_requests WHERE at < ?", [at - REQUESTS_KEPT_SECONDS])
            db.conn.execute("UPDATE api_keys SET used = ? WHERE id = ?", [at, key])
            return db.conn.execute("INSERT INTO api_requests (person, key, at) VALUES (?, ?, ?) RETURNING id",
                                   [person, key, at]).fetchone()[0]

    def api_request_asked(self, request: int, chat: int, turn: int) -> None:
        """What the request asked: its tokens are its turn's (turn_usage)."""
        with self.write() as db:
            db.conn.execute("UPDATE api_requests SET chat = ?, turn = ? WHERE id = ?", [chat, turn, request])

    # --- the install's settings -----------------------------------------------------------

    def settings(self, prefix: str) -> dict[str, str]:
        """The settings whose names start with `prefix`."""
        return {r[0]: r[1] for r in self._all("SELECT name, value FROM settings WHERE name LIKE ?",
                                              [prefix + "%"]) if r[0].startswith(prefix)}

    def set_settings(self, values: dict[str, str]) -> None:
        with self.write() as db:
            for name, value in values.items():
                db.conn.execute("INSERT INTO settings (name, value) VALUES (?, ?) "
                                "ON CONFLICT (name) DO UPDATE SET value = excluded.value", [name, value])
