"""A plugin's questions to the person (elicitation) and requests for the model's words
(sampling) while one of its calls runs: `ask` and `sample` items (app/plugins/asks.py)."""
from __future__ import annotations

import json
from typing import Any

from ..tables import Item
from .rows import Base

ASKING = ("ask", "sample")


class Asks(Base):
    def running_call(self, chat: int) -> Item | None:
        """The conversation's call being made now (a run makes one call at a time)."""
        row = self._one("SELECT * FROM items WHERE chat = ? AND kind = 'call' AND state = 'running' "
                       "ORDER BY id DESC LIMIT 1", [chat])
        return Item.from_row(row) if row else None

    def open_asks(self, chat: int, turn: int | None = None) -> list[Item]:
        """The questions and requests of a conversation (of one turn) not answered or ended yet."""
        sql, params = "SELECT * FROM items WHERE chat = ? AND kind IN ('ask', 'sample') AND done = 0", [chat]
        if turn is not None:
            sql, params = sql + " AND turn = ?", [*params, turn]
        return [Item.from_row(r) for r in self._all(sql + " ORDER BY id", params)]

    def turn_asks(self, chat: int, turn: int) -> list[Item]:
        """A turn's questions from plugins, whatever their state."""
        return [Item.from_row(r) for r in self._all("SELECT * FROM items WHERE chat = ? AND turn = ? AND kind = 'ask' "
                                                   "ORDER BY id", [chat, turn])]

    def asked(self, chat: int, call: int, request: int | str) -> Item | None:
        """The question a plugin asked during `call` with the JSON-RPC id `request` (a call
        taken up after a restart reads it again), None when there is none."""
        for r in self._all("SELECT * FROM items WHERE chat = ? AND kind = 'ask' ORDER BY id", [chat]):
            try:
                kept = json.loads(r["input"] or "{}")
            except ValueError:
                continue
            if isinstance(kept, dict) and kept.get("call") == call and kept.get("request") == request:
                return Item.from_row(r)
        return None

    def awaits_person(self, chat: int) -> bool:
        """Whether something in the conversation waits for the person's word: a call for
        approval, a plugin's question or request."""
        return self._one("SELECT 1 FROM items WHERE chat = ? AND ((kind = 'call' AND state = 'approval') OR "
                        "(kind IN ('ask', 'sample') AND done = 0 AND state IN ('waiting', 'approval'))) LIMIT 1",
                        [chat]) is not None

    def settle(self, item_id: int, expected: str, **values: Any) -> bool:
        """Change an ask or sample only if it is still in state `expected` (two tabs, or a
        form sent twice, answer once). Whether it changed."""
        with self.write():
            current = self.item(item_id)
            if current is None or current.state != expected or current.done:
                return False
            self.update(item_id, **values)
            return True
