"""Secrets every server of one database agrees on (migration m028): the key that signs forms
and the setup codes, rows of `secrets` rather than files of a data folder, so a form a page
of one server signed is accepted by another, and a setup code any server printed works. The
same key seals the secrets people give (app/store/sealed.py)."""
from __future__ import annotations

import secrets as random

from . import db as dbm
from . import sealed
from .rows import Base
from .sealed import Seal

APP_KEY = "secret.key"  # the app's key: signs forms (web/csrf.py), seals secrets (sealed.py)


class Secrets(Base):
    def kept_secret(self, name: str, size: int, seed: str | None = None) -> str:
        """The secret called `name`: made by the first to ask (`seed` when given, else `size`
        random bytes, URL-safe), read by everyone after, on any server."""
        value = seed or random.token_urlsafe(size)
        with self.write() as db:
            db.conn.execute("INSERT INTO secrets (name, value, created) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
                            [name, value, dbm.now()])
            return db.conn.execute("SELECT value FROM secrets WHERE name = ?", [name]).fetchone()[0]

    def secrets_named(self, prefix: str) -> list[str]:
        """The values of the secrets whose name begins with `prefix`."""
        return [r[0] for r in self._all("SELECT value FROM secrets WHERE substr(name, 1, ?) = ? ORDER BY name",
                                       [len(prefix), prefix])]

    def drop_secrets(self, prefix: str) -> None:
        """Forget the secrets whose name begins with `prefix` (a name whole: that one)."""
        with self.write() as db:
            db.conn.execute("DELETE FROM secrets WHERE substr(name, 1, ?) = ?", [len(prefix), prefix])

    def seal(self, purpose: str) -> Seal:
        """What seals and opens the secrets of `purpose` ("plugins.secret"): with the app's key,
        made by the first to ask if no server has yet (a server's start reads it first, from an
        older data folder's file too: accounts.setup.secret_key). Kept for this store."""
        seals = self.__dict__.setdefault("_seals", {})
        if purpose not in seals:
            row = self._one("SELECT value FROM secrets WHERE name = ?", [APP_KEY])
            seals[purpose] = Seal((row[0] if row else self.kept_secret(APP_KEY, 48)).encode(), purpose)
        return seals[purpose]

    def seal_typed(self, table: str, key: str, columns: tuple[str, ...], purpose: str) -> int:
        """Seal the values of `table`'s `columns` that a release before sealing stored as typed;
        how many rows. Every worker's start calls it (through its table's family) once the app's
        key is read; a sealed value is left as it is. No rev: no page shows a secret."""
        typed = " OR ".join(f"({c} != '' AND substr({c}, 1, ?) != ?)" for c in columns)
        find = f"SELECT {key}, {', '.join(columns)} FROM {table} WHERE {typed}"
        params = [x for _ in columns for x in (len(sealed.PREFIX), sealed.PREFIX)]
        if not self._one(find, params):
            return 0  # (and no key made for nothing)
        seal = self.seal(purpose)
        # SQLite keeps what an update frees in the file until reused unless secure_delete is on
        # (Debian's build has it on; others not): on for this write, the typed secret leaves no
        # copy behind. (PostgreSQL's old row versions go at its next vacuum.)
        wiped = None if dbm.postgres(self.db) else self.db.conn.execute("PRAGMA secure_delete").fetchone()[0]
        if wiped is not None:
            self.db.conn.execute("PRAGMA secure_delete = 1")
        try:
            with self.write() as db:
                plain = db.conn.execute(find, params).fetchall()
                for row in plain:
                    values = [v if not v or sealed.is_sealed(v) else seal.seal(v) for v in row[1:]]
                    db.conn.execute(f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in columns)} WHERE {key} = ?",
                                    [*values, row[0]])
        finally:
            if wiped is not None:
                self.db.conn.execute(f"PRAGMA secure_delete = {int(wiped)}")
        return len(plain)
