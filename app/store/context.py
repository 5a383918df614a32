"""What of a conversation the model is sent (window.py): the view, calibrations, steering."""
from __future__ import annotations


from . import db as dbm
from ..tables import Item, order
from .rows import Base


class Context(Base):
    # --- what the model is sent (window.py) -----------------------------------------

    def turn_items(self, chat: int, first: int, last: int) -> list[Item]:
        """The items of turns `first`..`last` (user item ids), in page order: a request's
        history from the model's view start, without reading what it leaves out."""
        rows = self._all("SELECT * FROM items WHERE chat = ? AND turn BETWEEN ? AND ?", [chat, first, last])
        return sorted(self._items(rows), key=order)

    def context(self, chat: int) -> dict[str, int]:
        """The conversation's `contexts` row (zeros before its first request)."""
        row = self._one("SELECT * FROM contexts WHERE id = ?", [chat])
        if row is None:
            return {"used": 0, "window": 0, "start": 0, "trim": 0, "turns_out": 0, "left_out": 0, "estimate": 0,
                    "cached": 0, "estimated": 0}
        return {k: row[k] for k in row.keys() if k not in ("id", "rev")}

    def set_context(self, chat: int, **values: int) -> None:
        """Change some columns of the conversation's `contexts` row (made when missing); the
        status fragment shows it, so it takes a rev."""
        allowed = {"used", "window", "start", "trim", "turns_out", "left_out", "estimate", "cached", "estimated"}
        if bad := set(values) - allowed:
            raise ValueError(f"not contexts columns: {sorted(bad)}")
        with self.write() as db:
            values = values | {"rev": dbm.bump(db)}
            cols = ", ".join(f'"{k}"' for k in values)  # quoted: `window` is a keyword to PostgreSQL
            marks = ", ".join("?" for _ in values)
            sets = ", ".join(f'"{k}" = excluded."{k}"' for k in values)
            db.conn.execute(f"INSERT INTO contexts (id, {cols}) VALUES (?, {marks}) ON CONFLICT (id) DO UPDATE SET {sets}",
                            [chat, *values.values()])

    def contexts_since(self, rev: int, upto: int, chats: list[int]) -> list[int]:
        """Conversations among `chats` whose context changed after `rev` (up to `upto`)."""
        if not chats:
            return []
        marks = ",".join("?" * len(chats))
        return [r[0] for r in self._all(f"SELECT id FROM contexts WHERE rev > ? AND rev <= ? AND id IN ({marks})",
                                       [rev, upto, *chats])]

    def calibration(self, model: str) -> tuple[float, int]:
        """(the server's tokens per token of our raw estimate, how many answers taught it);
        (1.0, 0) for a model not seen yet."""
        row = self._one("SELECT ratio, samples FROM calibrations WHERE model = ?", [model])
        return (row[0], row[1]) if row else (1.0, 0)

    def set_calibration(self, model: str, ratio: float, samples: int) -> None:
        with self.write() as db:
            db.conn.execute(
                """INSERT INTO calibrations (model, ratio, samples, updated) VALUES (?, ?, ?, ?)
                   ON CONFLICT (model) DO UPDATE SET ratio = excluded.ratio, samples = excluded.samples,
                   updated = excluded.updated""", [model, ratio, samples, dbm.now()])

    def unread_steers(self, chat: int, after: int) -> list[Item]:
        """Messages sent "now" after item `after` that no run has read yet, oldest first."""
        rows = self._all("SELECT * FROM items WHERE chat = ? AND kind = 'user' AND steer = 1 AND done = 0 "
                        "AND id > ? ORDER BY id", [chat, after])
        return [Item.from_row(r) for r in rows]

    def read_steers(self, ids: list[int], turn: int) -> None:
        """The model reads these messages now: they join `turn`, placed after its last item.
        No longer a turn of its own, such a message is no head (app/branches.py): a message
        queued after it follows what it followed."""
        with self.write() as db:
            last = db.conn.execute("SELECT max(id) FROM items WHERE chat = (SELECT chat FROM items WHERE id = ?) "
                                   "AND turn = ?", [turn, turn]).fetchone()[0] or turn
            for item_id in ids:
                chat, parent = db.conn.execute("SELECT chat, parent FROM items WHERE id = ?", [item_id]).fetchone()
                for (child,) in db.conn.execute("SELECT id FROM items WHERE chat = ? AND parent = ? AND kind = 'user' "
                                                "AND turn = id", [chat, item_id]).fetchall():
                    self.update(child, parent=parent)
                self.update(item_id, turn=turn, read_after=last, done=True)

    # --- what a turn's model requests took ------------------------------------------

    def add_turn_usage(self, turn: int, prompt: int, completion: int, cached: int = 0, estimated: bool = False) -> None:
        """One model request of `turn` more: its tokens added to the turn's (`estimated` once
        any of them was our estimate, not the server's count)."""
        with self.write() as db:
            db.conn.execute(
                """INSERT INTO turn_usage (turn, prompt, completion, cached, requests, estimated) VALUES (?, ?, ?, ?, 1, ?)
                   ON CONFLICT (turn) DO UPDATE SET prompt = turn_usage.prompt + excluded.prompt,
                   completion = turn_usage.completion + excluded.completion, cached = turn_usage.cached + excluded.cached,
                   requests = turn_usage.requests + 1,
                   estimated = CASE WHEN excluded.estimated = 1 THEN 1 ELSE turn_usage.estimated END""",
                [turn, prompt, completion, cached, int(estimated)])

    def turn_usage(self, turn: int) -> dict[str, int]:
        """The tokens `turn`'s model requests took so far (zeros before its first)."""
        row = self._one("SELECT prompt, completion, cached, requests, estimated FROM turn_usage WHERE turn = ?", [turn])
        if row is None:
            return {"prompt": 0, "completion": 0, "cached": 0, "requests": 0, "estimated": 0}
        return {k: row[k] for k in ("prompt", "completion", "cached", "requests", "estimated")}
