"""Conversations the API makes and continues (docs/api.md): a client's messages written as
rows, the results of the client's own functions, and what the client brought with them (its
system messages, its functions) in `api_chats`.

A client's history becomes the items a page would have made: each user message a turn
(answered already, but the last), an assistant message its text and calls, a tool message
the output of the call it answers. The last user message is left pending, so the runner
answers it as any message; a history that ends with tool results leaves that turn pending
after its calls, and the run goes on from them.
"""
from __future__ import annotations

import json
from dataclasses import replace

from ..tables import CLIENT_WAITING, ClientMessage, Conversation, Item, asked, item
from .rows import Base


class NotWritten(ValueError):
    """A client's messages that cannot be written as a conversation, in words for the client."""


class ApiChats(Base):
    def api_chat(self, chat: int) -> tuple[str, list[dict]] | None:
        """(the client's system text, its functions as the Chat Completions API lists them)
        of a conversation the API made or continued; None for one it never did."""
        row = self._one("SELECT system, tools FROM api_chats WHERE chat = ?", [chat])
        if row is None:
            return None
        return row["system"], json.loads(row["tools"]) if row["tools"] else []

    def set_api_chat(self, chat: int, system: str, tools: list[dict]) -> None:
        """What the latest request brought: its system messages and its functions."""
        with self.write() as db:
            db.conn.execute("INSERT INTO api_chats (chat, system, tools) VALUES (?, ?, ?) ON CONFLICT (chat) "
                            "DO UPDATE SET system = excluded.system, tools = excluded.tools",
                            [chat, system, json.dumps(tools) if tools else ""])

    def start_api_conversation(self, agent: int, person: int, messages: list[ClientMessage], system: str,
                               tools: list[dict]) -> tuple[Conversation, Item]:
        """A conversation of `agent`, marked as the API's, holding `messages`; its pending
        user item (the turn the runner answers now). One write: all of it, or nothing."""
        with self.write() as db:
            convo = self.new_conversation(agent, person=person)
            db.conn.execute("UPDATE conversations SET origin = 'api' WHERE id = ?", [convo.id])
            self.set_api_chat(convo.id, system, tools)
            pending = self._history(convo.id, messages)
            return self.conversation(convo.id), pending

    def _history(self, chat: int, messages: list[ClientMessage]) -> Item:
        if not messages or messages[0].role != "user":
            raise NotWritten("The messages must begin with a user message (system messages aside).")
        if messages[-1].role not in ("user", "tool"):
            raise NotWritten("The last message must be a user message, or the results of tool calls.")
        last_turn = max(i for i, m in enumerate(messages) if m.role == "user")
        calls: dict[str, int] = {}  # the client's call id -> its call item
        waiting: set[str] = set()
        user: Item | None = None
        for i, m in enumerate(messages):
            if m.role == "user":
                if waiting:
                    raise NotWritten("Every tool call needs its result (a tool message) before the next user message.")
                user = self.add(replace(asked(chat, m.text), done=i != last_turn))
            elif m.role == "assistant":
                if m.text:
                    self.add(item("text", chat, m.text, turn=user.id, done=True))
                for call_id, name, arguments in m.calls:
                    if call_id in calls:
                        raise NotWritten(f"Two tool calls have the id “{call_id[:80]}”.")
                    calls[call_id] = self.add(item("call", chat, turn=user.id, name=name[:80], input=arguments,
                                                   state=CLIENT_WAITING)).id
                    waiting.add(call_id)
            else:
                if m.answers not in waiting:
                    raise NotWritten(f"A tool message answers “{m.answers[:80]}”, which no assistant message called "
                                     "(or which has its result already).")
                waiting.discard(m.answers)
                self.update(calls[m.answers], output=m.text, state="done", done=True)
        if waiting:
            raise NotWritten("Every tool call needs its result (a tool message).")
        return self.item(user.id)

    def client_calls(self, chat: int, turn: int) -> list[Item]:
        """The calls of the client's functions waiting for its results in a turn."""
        return self._items(self._all("SELECT * FROM items WHERE chat = ? AND turn = ? AND kind = 'call' "
                                     "AND state = ? ORDER BY id", [chat, turn, CLIENT_WAITING]))

    def client_results(self, chat: int, turn: int, results: dict[int, str]) -> Item:
        """The client's results of its calls in `turn` (by call item): each call done with its
        output, and the turn pending again, so the runner goes on from them. Every call
        waiting must have its result, and nothing else."""
        with self.write():
            waiting = {c.id for c in self.client_calls(chat, turn)}
            if not waiting:
                raise NotWritten("No tool call of this conversation is waiting for a result.")
            if set(results) != waiting:
                names = ", ".join(f"call_{c}" for c in sorted(waiting))
                raise NotWritten(f"The results must answer the calls waiting, and only them: {names}.")
            for call, output in results.items():
                self.update(call, output=output, state="done", done=True)
            self.update(turn, done=False)
            return self.item(turn)

    def decline_unapproved(self, call: int, why: str) -> bool:
        """A call still waiting for approval declined, `why` written on it (the run tells its
        model so): an API request's wait for it ended (docs/api.md)."""
        with self.write():
            it = self.item(call)
            if it is None or it.kind != "call" or it.state != "approval":
                return False
            self.update(call, state="declined", output=why)
            return True

    def last_turn(self, chat: int) -> Item | None:
        """The conversation's newest message that began a turn."""
        row = self._one("SELECT * FROM items WHERE chat = ? AND kind = 'user' AND turn = id ORDER BY id DESC LIMIT 1",
                        [chat])
        return self._item(row)
