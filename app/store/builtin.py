"""The built-in model's one row (app/builtin): its install and its model server."""
from __future__ import annotations

from typing import Any

from . import db as dbm
from ..tables import Builtin
from .rows import Base


class LocalModel(Base):
    def builtin(self) -> Builtin:
        row = self._one("SELECT * FROM builtin_model WHERE id = 1")
        return Builtin.from_row(row) if row else Builtin()

    def builtin_since(self, rev: int, upto: int) -> Builtin | None:
        """The row when it changed after `rev` (up to `upto`), for the live feed."""
        row = self._one("SELECT * FROM builtin_model WHERE id = 1 AND rev > ? AND rev <= ?", [rev, upto])
        return Builtin.from_row(row) if row else None

    def set_builtin(self, **values: Any) -> Builtin:
        """Change some of its columns; a page shows the row, so it takes a new rev."""
        bad = set(values) - set(Builtin.COLUMNS)
        if bad:
            raise ValueError(f"not builtin_model columns: {sorted(bad)}")
        with self.write() as db:
            values = values | {"updated": dbm.now(), "rev": dbm.bump(db)}
            sets = ", ".join(f"{k} = ?" for k in values)
            db.conn.execute(f"UPDATE builtin_model SET {sets} WHERE id = 1", [*values.values()])
        return self.builtin()

    def want_builtin(self) -> bool:
        """The owner chose the built-in model: `tabletalk serve` installs it. False when it is
        already on its way or installed (a second click changes nothing)."""
        with self.write() as db:
            cur = db.conn.execute(
                "UPDATE builtin_model SET state = 'wanted', step = 0, steps = 0, what = '', percent = -1, "
                "line = '', error = '', pid = 0, started = ?, finished = 0, updated = ?, rev = ? "
                "WHERE id = 1 AND state IN ('', 'failed')", [dbm.now(), dbm.now(), dbm.bump(db)])
        return cur.rowcount == 1

    def use_builtin_model(self, file: str) -> bool:
        """The owner chose what the installed runtime serves ('' SmolLM2, else a GGUF under
        data/models/): the supervisor switches to it. False when nothing changed (not
        installed, or chosen already): of two choices at once, the one written last is served."""
        with self.write() as db:
            cur = db.conn.execute(
                "UPDATE builtin_model SET model = ?, error = '', updated = ?, rev = ? "
                "WHERE id = 1 AND state = 'ready' AND model <> ?", [file, dbm.now(), dbm.bump(db), file])
        return cur.rowcount == 1
