"""A plugin that asks something of the person during one of its calls: MCP elicitation (a
form) and sampling (words from the agent's model, once the person approves).

Each request becomes an item of the conversation that waits for the person, like a call
waiting for approval: an `ask` (state `waiting`, then `accepted`, `declined` or
`cancelled`) or a `sample` (`approval`, then `approved` -> `running` -> `done`, or
`declined`). The wait is on rows (the feed's wake-ups), so the answer may come from any
tab, any worker, with or without JavaScript (a plain form post, app/web/asks.py).

A restart: over Streamable HTTP with a server that keeps its events, the item keeps what
taking the call up needs and the call is taken up again after the restart, the question
still waiting (app/plugins/resume.py). Otherwise the server's request lived in the connection
that carried the call, which the restart ended: the item then says so ("lost"), and the
call, which was sent, ends as one that may have run (docs/architecture.md, Call states
after a restart). A Stop ends the wait ("stopped"); a server that stops waiting
(its own timeout) ends it too.

Declared capabilities: exactly these two, elicitation in form mode only (the SDK would
also declare URL mode for any elicitation callback) and sampling without context or tools.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.plugins import forms as mcp_forms, resume as mcp_resume
from app.tables import item
from app.agent import Message, ModelError

if TYPE_CHECKING:
    import mcp_types as types

log = logging.getLogger(__name__)

MAX_REQUEST = 64 * 1024      # bytes of one elicitation or sampling request we take
MAX_MESSAGE = 2_000          # characters of an elicitation's message shown
MAX_SAMPLE_TOKENS = 4_096    # the most a sampling request may have the model write
REJECTED = -1                # the spec's error code for a request the person declined

# How an unanswered request ended, for the page (and the server's error).
ENDED = {
    "stopped": "Stopped by the person before it was answered.",
    "lost": ("Tabletalk restarted while this waited: the plugin's request was lost with the connection that "
             "carried the call, so it cannot be answered, and the call ended."),
    "withdrawn": "The plugin stopped waiting for an answer (the call ended).",
}

Complete = Callable[[list, int], Awaitable[str]]  # (messages, max_tokens) -> the model's text


@dataclass
class Asker:
    """What a plugin's request to the person needs from the run its call is part of; held by
    the conversation's session with the plugin for the length of one call."""

    store: Any                # app.store.Store
    chat: int
    plugin: str
    changed: Callable[[float], Awaitable[None]] | None  # wakes when any row changed (the feed)
    complete: Complete | None = None  # the agent's model, for sampling
    model: str = ""
    abort: asyncio.Event | None = None
    # Told when a request starts and stops waiting for the person: the call's silence limit
    # does not count that time (the server waits for us, not we for it).
    waiting: Callable[[bool], None] = lambda on: None
    # What taking the call up after a restart needs, as the ask item keeps it (None: it
    # cannot be; app/plugins/resume.py), and who is told once a question was answered.
    resumable: Callable[[], dict | None] = lambda: None
    answered: Callable[[], None] = lambda: None

    # --- elicitation --------------------------------------------------------------

    async def elicit(self, params: types.ElicitRequestParams, request: Any = None
                     ) -> types.ElicitResult | types.ErrorData:
        """`request`: the server's JSON-RPC id of its question (a question read again from
        a call taken up after a restart is the ask item already there)."""
        import mcp_types as types

        if getattr(params, "mode", "form") != "form":
            return types.ErrorData(code=types.INVALID_PARAMS,
                                   message="Tabletalk answers elicitations in form mode only")
        call = self.store.running_call(self.chat)
        if call is None:
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message="Tabletalk asks the person only during one of the plugin's calls")
        message = (params.message or "").strip()[:MAX_MESSAGE]
        schema = params.requested_schema
        try:
            if len(json.dumps(schema)) > MAX_REQUEST:
                raise mcp_forms.Unshowable(f"the form is larger than {MAX_REQUEST // 1024} KB")
            mcp_forms.form_of(schema)
        except mcp_forms.Unshowable as e:
            why = f"{self.plugin} asked for information in a form Tabletalk cannot show: {e}."
            self.store.add(item("ask", self.chat, message, turn=call.turn, name=self.plugin[:80], state="failed",
                                output=why, input=json.dumps({"call": call.id}), done=True))
            return types.ErrorData(code=types.INVALID_PARAMS, message=why)
        asked = self.store.asked(self.chat, call.id, request) if isinstance(request, int | str) else None
        if asked is None:
            kept = {"call": call.id, "schema": schema}
            if isinstance(request, int | str):
                kept["request"] = request
                if resume := self.resumable():
                    kept["resume"] = resume
            asked = self.store.add(item("ask", self.chat, message, turn=call.turn, name=self.plugin[:80],
                                        state="waiting", input=json.dumps(kept)))
        answered = await self._wait(asked.id, "waiting")
        self.answered()
        if answered is None:
            return types.ElicitResult(action="cancel")
        if answered.state == "accepted":
            return types.ElicitResult(action="accept", content=json.loads(answered.output or "{}"))
        return types.ElicitResult(action="decline" if answered.state == "declined" else "cancel")

    # --- sampling -----------------------------------------------------------------

    async def sample(self, params: types.CreateMessageRequestParams
                     ) -> types.CreateMessageResult | types.ErrorData:
        import mcp_types as types


        call = self.store.running_call(self.chat)
        if call is None:
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message="Tabletalk samples the model only during one of the plugin's calls")
        refused = _unanswerable(params, self.complete is not None)
        wanted = [{"role": m.role, "text": "\n".join(getattr(b, "text", "") for b in m.content_as_list)}
                  for m in params.messages]
        max_tokens = min(max(params.max_tokens, 1), MAX_SAMPLE_TOKENS)
        request = {"call": call.id, "system": (params.system_prompt or "")[:MAX_REQUEST],
                   "messages": wanted, "max_tokens": params.max_tokens}
        if refused:
            why = f"{self.plugin}’s request for the model’s words was refused: {refused}."
            self.store.add(item("sample", self.chat, turn=call.turn, name=self.plugin[:80], model=self.model,
                                state="failed", output=why, input=json.dumps(request), done=True))
            return types.ErrorData(code=types.INVALID_PARAMS, message=why)
        row = self.store.add(item("sample", self.chat, turn=call.turn, name=self.plugin[:80], model=self.model,
                                  state="approval", input=json.dumps(request)))
        decided = await self._wait(row.id, "approval")
        if decided is None or decided.state != "approved":
            return types.ErrorData(code=REJECTED, message="The person declined the request for the model’s words")
        self.store.update(row.id, state="running")
        messages = ([Message("system", request["system"])] if request["system"] else []) + [
            Message(m["role"], m["text"]) for m in wanted]
        assert self.complete is not None
        try:
            text = await self.complete(messages, max_tokens)
        except ModelError as e:
            self.store.update(row.id, state="failed", output=str(e), done=True)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"The model failed: {e}")
        self.store.update(row.id, state="done", output=text, done=True)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text=text), model=self.model)

    # --- waiting ------------------------------------------------------------------

    async def _wait(self, item_id: int, state: str):
        """The item once it left `state` (None: it is gone, its conversation deleted). A
        cancellation (Stop, shutdown, the server's cancel) leaves the row to `ended`."""
        if self.changed is None:
            raise RuntimeError("a plugin's request waits for the person but nothing can wake it")
        self.waiting(True)
        try:
            while True:
                current = self.store.item(item_id)
                if current is None or current.state != state or current.done:
                    return current
                await self.changed(1.0)
        finally:
            self.waiting(False)

    def call_ended(self) -> None:
        """The call is over (a result, an error, a Stop that ended it): whatever of its
        requests still waits can no longer be answered."""
        ended(self.store, self.chat, None, "stopped" if self.abort is not None and self.abort.is_set()
              else "withdrawn")


def _unanswerable(params: types.CreateMessageRequestParams, can_sample: bool) -> str:
    """Why a sampling request cannot be answered honestly ('' when it can)."""
    if not can_sample:
        return "this run has no model to answer it"
    if params.include_context not in (None, "none"):
        return ("it asks for the conversation to be included, and Tabletalk does not share a conversation "
                "with its plugins")
    if params.tools:
        return "it offers the model tools, which Tabletalk does not run for a plugin"
    for m in params.messages:
        if m.role not in ("user", "assistant"):
            return f"it holds a message of an unknown role ({str(m.role)[:20]})"
        for block in m.content_as_list:
            if getattr(block, "type", "") != "text":
                return f"it holds {getattr(block, 'type', 'unknown')} content, and Tabletalk sends the model only text here"
    if not params.messages:
        return "it holds no message"
    if len(json.dumps([m.model_dump(mode="json") for m in params.messages])) > MAX_REQUEST:
        return f"it is larger than {MAX_REQUEST // 1024} KB"
    if params.max_tokens < 1:
        return "it allows the model no tokens"
    return ""


def ended(store: Any, chat: int, turn: int | None, how: str, keep: set[int] = frozenset()) -> None:
    """End every unanswered request of the conversation (of one turn) but those in `keep`:
    `how` is a key of ENDED."""
    for it in store.open_asks(chat, turn):
        if it.id not in keep:
            store.settle(it.id, it.state, state=how, output=ENDED[how], done=True)


def resumable_calls(store: Any, chat: int, turn: int) -> dict[int, tuple[int, dict]]:
    """The turn's calls whose server's question waits, or was answered (perhaps after the
    restart, before the turn was taken up: the server may not have the answer yet), that can
    be taken up after a restart (app/plugins/resume.py): {call id: (ask id, what taking it up needs)}."""
    found = {}
    for it in store.turn_asks(chat, turn):
        if it.state not in ("waiting", "accepted", "declined", "cancelled"):
            continue
        try:
            kept = json.loads(it.input or "{}")
        except ValueError:
            continue
        if isinstance(kept, dict) and isinstance(kept.get("call"), int) and mcp_resume.resumable(kept.get("resume")):
            found[kept["call"]] = (it.id, kept["resume"])
    return found


# --------------------------------------------------------------------------
# The client's side of the protocol
# --------------------------------------------------------------------------


def callbacks(asker: Callable[[], Asker | None]) -> dict[str, Any]:
    """The Client's elicitation and sampling callbacks; `asker` gives the request's run (None
    outside a call: a listing's connection, a request between calls), which is refused.
    mcp_types is imported when one is called (app/plugins/link.py makes its defaults at import,
    and a worker that never reaches a plugin never needs it)."""

    async def elicitation(context: Any, params: types.ElicitRequestParams):
        import mcp_types as types

        current = asker()
        if current is None:
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message="Tabletalk asks the person only during one of the plugin's calls")
        return await current.elicit(params, getattr(context, "request_id", None))

    async def sampling(_context: Any, params: types.CreateMessageRequestParams):
        import mcp_types as types

        current = asker()
        if current is None:
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message="Tabletalk samples the model only during one of the plugin's calls")
        return await current.sample(params)

    return {"elicitation_callback": elicitation, "sampling_callback": sampling}


def declared(capabilities: Any) -> Any:
    """The client's capabilities with elicitation in form mode only: the SDK declares URL
    mode too for any elicitation callback, and Tabletalk does not open a server's URLs for
    the person."""
    import mcp_types as types

    if capabilities.elicitation is None:
        return capabilities
    return capabilities.model_copy(
        update={"elicitation": types.ElicitationCapability(form=types.FormElicitationCapability())})
