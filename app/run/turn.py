"""One turn: answering one `user` item (or making its answer again), as rows.

The runner decides *which* turn runs and where; this module runs it: it resumes what a
crash cut off, drives the agent loop with requests built from the rows (request.py) and
turns each event into rows. Completed steps are never repeated: a model step is written whole (its
text, reasoning and tool calls in one transaction) when it ends, so after a restart the
rows say exactly which steps are complete.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .. import agent as loop
from ..agent.pieces import SoFar
from .. import branches
from ..plugins import asks as mcp_asks
from ..store import db as dbm
from ..context.segments import DECLINED, call_id
from ..knowledge.ranking import Meaning
from ..store import Store
from ..tables import CLIENT_WAITING, Assistant, Item, item, picks_of, sources_text
from ..tools import Tool, ToolContext, memory
from .request import Requests
from .writes import Writes

STOPPED = "Stopped by the person before it finished."
STOPPED_SENT = "Stopped by the person after it was sent to its tool, before a result came back: it may have run."

log = logging.getLogger(__name__)

# What a restart leaves of a call, for the page and the model alike. A call not yet sent to
# its tool (not `dispatched`) is simply run; one that was sent and has no result may have run.
MAY_HAVE_RUN = ("Interrupted by a restart after it was sent to its tool, before a result came back: "
                "it may have run. Check before running it again; it was not run again by itself.")


class Stopped(Exception):
    """The person stopped the turn and its running tool ended itself (ToolContext.abort): the
    turn ends as a cancelled one does."""


@dataclass
class Turn(Requests):
    store: Store
    writes: Writes              # the runner's write buffer: growing columns, written once a beat
    chat: int
    user: Item
    agent: Assistant | None
    model: str
    tools: list[Tool] = field(default_factory=list)
    retry: Item | None = None
    items: dict[str, int] = field(default_factory=dict)  # open text/reasoning item ids by kind
    calls: dict[str, int] = field(default_factory=dict)  # call item ids by call id
    written: list[int] = field(default_factory=list)
    notice: int | None = None  # the item telling the person about retries in this step
    approve: set[str] = field(default_factory=set)  # tools that wait for the person's decision
    # Waits until something changed (any row, any process) or the timeout passes.
    changed: Callable[[float], Awaitable[None]] | None = None
    # Hands a text item's growth, as it is read, to the pages following here (Feed.grew:
    # (chat, item id, the text so far)), beside the write buffer's write on the beat.
    grew: Callable[[int, int, SoFar], None] | None = None
    window: int = 0          # the model's context window in tokens (0: unknown, nothing is cut)
    images: bool = True      # whether the model is sent attached images (history.takes_images)
    share: float = 0.75      # of it a request may fill (TABLETALK_CONTEXT_SHARE)
    # (window, images) as learned now (a server's error may teach them mid-turn: limits.py)
    limits: Callable[[], tuple[int, bool]] | None = None
    thinking: str = ""       # the thinking level asked for ('' the server's own)
    raw: int = 0             # the last request's raw token count, for calibration by its usage
    estimate: int = 0        # ... and its calibrated estimate, kept with the usage
    measured: bool = True    # the last request's usage arrived (or none was made)
    held: tuple[int, int, int, bool] | None = None  # its usage, kept until its step is written (spent)
    # A question's vector by the embedding model, for search_knowledge (None: no AI_EMBEDDINGS)
    meaning: Callable[[str], Awaitable[Meaning]] | None = None
    brought: str = ""        # an API client's system messages (docs/api.md), after the agent's instructions
    person: int | None = None  # whose conversation: the tokens spent are theirs (usage_days)
    clock: Callable[[], float] = dbm.now  # what day the tokens are spent on reads the time from
    _prompt: str | None = field(default=None, init=False, repr=False)  # instructions(), once per run
    _documents_sent: int = field(default=0, init=False, repr=False)  # (request.py: Requests._document)
    context: ToolContext | None = field(default=None, init=False, repr=False)  # the tools', while it runs
    # set while no tool is running: a stop waits on it for the running tool to end itself
    idle: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    # calls a restart cut while their server's question waited, taken up again: {call item: resume}
    resuming: dict[int, dict] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.idle.set()

    # --- resuming -------------------------------------------------------------------

    def current_version(self) -> list[Item]:
        # In page order, not id order: a message sent "now" that the model read after the
        # step that finished the answer comes last, so the answer is not finished yet.
        return branches.answered(self.user.id, self.store.turn_items(self.chat, self.user.id, self.user.id))

    def resume(self) -> list[Item]:
        """Make the rows of a cut-off run consistent; returns calls that still have to run."""
        version = self.current_version()
        partial = [it.id for it in version if it.kind in ("text", "reasoning") and not it.done]
        # a reasoning is marked over when its answer begins: with that answer cut off, it goes too
        partial += [before.id for before, it in zip(version, version[1:])
                    if before.kind == "reasoning" and before.done and it.kind == "text" and not it.done]
        if partial:
            self.store.delete_items(partial)  # the cut-off step runs again from the last complete one
        # A plugin's request died with its connection, unless its call can be taken up again
        # (Streamable HTTP, a server keeping its events: app/plugins/resume.py).
        by_name = {t.name: t for t in self.tools}
        waiting = {call: kept for call, kept in mcp_asks.resumable_calls(self.store, self.chat, self.user.id).items()
                   if (t := self._tool_of(version, call, by_name)) is not None and t.plugin}
        mcp_asks.ended(self.store, self.chat, self.user.id, "lost", keep={ask for ask, _ in waiting.values()})
        to_run = []
        with self.store.write():
            for it in version:
                if it.kind != "call":
                    continue
                if it.state == "running":
                    tool = by_name.get(it.name)
                    if it.dispatched and it.id in waiting:  # never sent again: its stream is read again
                        self.resuming[it.id] = waiting[it.id][1]
                        to_run.append(it)
                    elif not it.dispatched or (tool is not None and tool.idempotent):
                        # never reached its tool (or safe to repeat): it runs now
                        self.store.update(it.id, state="", output="", dispatched=False)
                        to_run.append(it)
                    else:
                        self.store.update(it.id, state="failed", output=MAY_HAVE_RUN, interrupted=True, done=True)
                elif it.state in ("", "approved", "approval"):
                    to_run.append(it)  # not started, or waiting for (or given) the person's decision
        self.written.extend(it.id for it in to_run)  # a stop now ends them too
        return to_run

    @staticmethod
    def _tool_of(version: list[Item], call: int, by_name: dict[str, Tool]) -> Tool | None:
        it = next((it for it in version if it.id == call and it.kind == "call"), None)
        return by_name.get(it.name) if it is not None else None

    # --- running --------------------------------------------------------------------

    async def run(self, stream: loop.StreamFn) -> None:
        if branches.finished(self.current_version()):
            return
        pending_calls = self.resume()
        context = self.context = ToolContext(chat=self.chat, agent=self.agent.id if self.agent else None,
                                             store=self.store, meaning=self.meaning, picks=picks_of(self.user))
        by_name = {t.name: t for t in self.tools}
        for call_item in pending_calls:
            if context.abort.is_set():
                break
            call = loop.ToolCall(call_id(call_item), call_item.name, call_item.input or "{}")
            self.calls[call.id] = call_item.id
            context.resume = self.resuming.get(call_item.id)
            try:
                await loop.run_tool(call, by_name, self.emit, context, self.gate)
            finally:
                context.resume = None
            if call_item.id in self.resuming and (after := self.store.item(call_item.id)) and after.state == "failed":
                self.store.update(call_item.id, interrupted=True)  # may have run: offered "Run again"
        if not context.abort.is_set():
            # The loop is given no history: `prepare` builds each request from the rows.
            await loop.run([], self.tools, stream, self.emit, context, gate=self.gate, prepare=self.prepare,
                           steering=self.steering)
        if context.abort.is_set():
            raise Stopped

    async def halt(self, grace: float) -> None:
        """Stop, as the tools hear it: the running tool is told (`ToolContext.abort`: a page
        fetch closes its connection, a plugin's call is cancelled and its server told) and
        given `grace` s to end itself; the loop makes no other call or step."""
        if self.context is None:
            return
        self.context.abort.set()
        if not self.idle.is_set():
            await asyncio.wait([asyncio.ensure_future(self.idle.wait())], timeout=grace)

    async def gate(self, call: loop.ToolCall) -> str | None:
        """A call to a tool in `approve` waits here for the person's decision (rows, so it
        survives a restart); a stop cancels the wait."""
        item_id = self.calls[call.id]
        while True:
            current = self.store.item(item_id)
            state = current.state if current else "declined"
            if state == "declined":  # in the words written on it (an API request's wait ended), else the person's
                return (current.output if current else "") or DECLINED
            if state != "approval":
                return None
            if self.changed is None:
                raise RuntimeError("a call waits for approval but nothing can wake it")
            await self.changed(1.0)

    def emit(self, event: loop.Event) -> None:
        """Turn one agent event into rows. Once a write of the turn found its lease another's
        or the database unreachable (`Fence.fault`), every event raises that again: a tool
        whose write failed so is not written as failed, nor anything after it."""
        fence = self.store.fence
        if fence is not None and fence.fault is not None:
            raise fence.fault
        match event:
            case loop.MessageStart(kind=kind):
                new = self.add(item(kind, self.chat, turn=self.user.id, model=self.model))
                self.items[kind] = new.id
                if kind == "text" and "reasoning" in self.items:
                    self.thought(done=True)  # the answer began: the reasoning is over
            case loop.MessageUpdate(kind=kind, so_far=so_far):
                # (joined when written: agent.SoFar; handed to the pages here from memory too)
                self.writes.grow(self.items[kind], self.chat, handed=self.grew is not None, text=so_far)
                if self.grew is not None:
                    self.grew(self.chat, self.items[kind], so_far)
            case loop.MessageEnd(message=message, reasoning=reasoning):
                self.end_step(message, reasoning)
            case loop.ToolStart(call=call):
                self.idle.clear()
                self.store.update(self.calls[call.id], state="running")
            case loop.ToolDispatched(call=call):
                self.writes.flush()
                self.store.update(self.calls[call.id], dispatched=True)  # committed before the call leaves
            case loop.ToolUpdate(call=call, output=output) if not self.aborted:
                # (after a stop, progress a server still sends would write over the stop's words)
                self.writes.grow(self.calls[call.id], self.chat, output=output)
            case loop.ToolEnd(ok=False) if self.aborted:
                # it ended itself for a stop: the stop's words say so (`stopped`: whether it may have run)
                self.idle.set()
            case loop.ToolEnd(call=call, output=output, ok=ok, result=result):
                self.idle.set()
                self.writes.flush()
                extra = {}
                if result is not None and result.sources:
                    extra["sources"] = sources_text(result.sources)
                if result is not None and result.file is not None:
                    extra["file"] = result.file
                    extra["unsent"] = int(result.unsent)
                if result is not None and result.shown:
                    extra["shown"] = result.shown
                self.store.update(self.calls.pop(call.id), output=output, state="done" if ok else "failed",
                                  done=True, **extra)
            case loop.ToolDeclined(call=call, reason=reason):
                self.idle.set()
                self.store.update(self.calls.pop(call.id), output=reason, done=True)
            case loop.ToolHandedOver(call=call):
                # the client runs it: the call waits for its result, which its next request brings
                self.store.update(self.calls.pop(call.id), state=CLIENT_WAITING)
            case loop.Usage(prompt=prompt, completion=completion, cached=cached, counted=counted):
                self.usage(prompt, completion, cached, counted)
            case loop.Notice(text=text):
                self.writes.flush()
                if self.notice is None:
                    self.notice = self.add(item("error", self.chat, text, turn=self.user.id,
                                                model=self.model, done=True)).id
                else:
                    self.store.update(self.notice, text=text)
            case loop.Failed(message=message):
                self.writes.flush()
                if self.notice is not None:  # "Trying again in 4 s" is over: the error says what happened
                    self.store.delete_items([self.notice])
                    self.notice = None
                with self.store.write():  # a request that failed after its usage came is still paid for
                    self.add(item("error", self.chat, message, turn=self.user.id, model=self.model,
                                  state="failed", done=True))
                    self.spent()
            case loop.StepStart():
                self.notice = None

    @property
    def aborted(self) -> bool:
        return self.context is not None and self.context.abort.is_set()

    def end_step(self, message: loop.Message, reasoning: str) -> None:
        """A model step is over: write its text, reasoning and calls in one transaction, with
        the tokens it took (Requests.spent): a step made again after a crash was never
        written, so its tokens count once, with the step that is."""
        self.writes.flush()
        with self.store.write():
            self.spent(message)
            if "reasoning" in self.items:
                self.thought()
                self.store.update(self.items.pop("reasoning"), text=reasoning, done=True)
            if "text" in self.items:
                self.store.update(self.items.pop("text"), text=message.content or "", done=True)
            # read before this step's calls are written: the model made them without their output
            vetted = (self.agent is not None and self.agent.vet_memories
                      and any(c.name == "remember" for c in message.tool_calls)
                      and self.store.outside_text(self.chat, memory.INSIDE))
            for call in message.tool_calls:
                waits = call.name in self.approve or (vetted and call.name == "remember")
                new = self.add(item("call", self.chat, turn=self.user.id, model=self.model,
                                    name=call.name[:80], input=call.arguments,
                                    state="approval" if waits else ""))
                self.calls[call.id] = new.id

    def thought(self, done: bool = False) -> None:
        """How long the model reasoned, written once: when its answer begins (and the reasoning
        is shown as over, `done`), else at the step's end. Reasoning arriving after the answer
        began still grows the item; the step's end writes it whole."""
        it = self.store.item(self.items["reasoning"])
        if it is None or it.thought:
            return
        self.writes.flush()
        self.store.update(it.id, thought=max(dbm.now() - it.created, 0.001), **({"done": True} if done else {}))
        self.store.saw_thought(self.model)  # the composer offers its Thinking picker for it from now on

    def add(self, new: Item) -> Item:
        stored = self.store.add(new)
        self.written.append(stored.id)
        return stored

    def stopped(self, cut: str = STOPPED) -> None:
        """Stop: what was written stays, marked done; a call cut off says so (`cut`)."""
        if self.context is not None:
            self.context.abort.set()  # a tool still running hears it, and its progress is no longer written
        self.writes.flush()
        mcp_asks.ended(self.store, self.chat, self.user.id, "stopped")
        with self.store.write():
            # a request Stop cut is paid for as far as it went (Stop must not step around a
            # daily limit): the server's count if it came, else our estimate of its prompt and
            # of the words written; none when its step had ended (counted with it)
            self.spent(loop.Message("assistant", "".join(
                it.text for k in ("reasoning", "text") if k in self.items and (it := self.store.item(self.items[k])))))
            for item_id in self.written:
                it = self.store.item(item_id)
                if it is None or it.done:
                    continue
                if it.kind == "call":
                    # What it reported while running was progress, not its result: the page and
                    # the model are told it was stopped, by whom, and whether it may have run.
                    why = ("Stopped by the person while waiting for approval." if it.state == "approval"
                           else STOPPED_SENT if it.dispatched and cut == STOPPED else cut)
                    self.store.update(item_id, state="failed", output=why, done=True)
                else:
                    self.store.update(item_id, done=True)

