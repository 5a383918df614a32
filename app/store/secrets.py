"""Secrets every server of one database agrees on (migration m028): the key that signs forms
and the setup codes, rows of `secrets` rather than files of a data folder, so a form a page
of one server signed is accepted by another, and a setup code any server printed works."""
from __future__ import annotations

import secrets as random

from . import db as dbm
from .rows import Base


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
