"""What pages ask of a conversation beyond its rows: whether a run is going and how far it
is (the status around the items), and the counts a confirmation page states."""
from __future__ import annotations

from typing import Any

from .rows import Base


class Pages(Base):
    def chat_state(self, chat: int) -> dict[str, Any]:
        """Whether a run is going and what the page should show for it (derived from rows)."""
        pending = self.answering(chat)
        turn = pending.turn if pending else None
        waiting = False  # the model has not sent its first token yet, or is still reasoning
        if pending:
            last = self._one("SELECT kind, done FROM items WHERE chat = ? AND turn = ? AND id > ? "
                            "AND kind NOT IN ('user','retry','stop') ORDER BY id DESC LIMIT 1", [chat, turn, pending.id])
            waiting = last is None or (last["kind"] == "reasoning" and not last["done"])
        context = self.context(chat)
        asked = self._one("SELECT 1 FROM items WHERE chat = ? AND kind = 'user' LIMIT 1", [chat]) is not None
        deciding = pending is not None and self.awaits_person(chat)  # an approval, a plugin's question (asks.py)
        return {"running": pending is not None, "waiting": waiting, "turn": turn, "asked": asked, "deciding": deciding,
                **{k: context[k] for k in ("used", "window", "cached", "start", "turns_out", "left_out", "estimated")}}

    def messages_count(self, chat: int) -> int:
        """The person's messages in a conversation (its versions and steering ones included)."""
        return self._one("SELECT count(*) FROM items WHERE chat = ? AND kind = 'user'", [chat])[0]

    def conversations_count(self, *, person: int | None = None, agent: int | None = None) -> int:
        """A person's conversations, or an agent's."""
        if (person is None) == (agent is None):
            raise ValueError("count the conversations of a person or of an agent")
        column, value = ("person", person) if person is not None else ("agent", agent)
        return self._one(f"SELECT count(*) FROM conversations WHERE {column} = ?", [value])[0]
