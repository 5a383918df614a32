"""Each model step's request, built from the rows: the part of a Turn that knows the window.

The history of the path being answered (history.py) cut to the model's window (window.py),
the system prompt (built once per run, the plan added while it is out of view), what the
person sent "now", and the usage the server reports, which teaches the estimate. A mixin of
Turn (turn.py), whose fields it reads.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from .. import agent as loop
from .. import files as filestore
from ..accounts import usage as usage_rules
from ..context import window
from ..context.segments import segments, system_prompt, user_message, with_plan
from ..store import Store
from ..tables import Assistant, Attached, Item, picks_of
from ..tools import Tool

# Of what the window leaves a request, the share attached documents may fill whole together:
# the rest is the conversation's, the tools' and the instructions'. An 8,192-token window
# (share 0.75) sends ~12,000 characters whole, a 128,000-token one up to the 100,000 any file may.
DOCUMENTS_SHARE = 0.5


class Requests:
    store: Store
    chat: int
    user: Item
    agent: Assistant | None
    model: str
    tools: list[Tool]
    window: int
    images: bool
    share: float
    limits: Callable[[], tuple[int, bool]] | None
    raw: int
    estimate: int
    measured: bool
    held: tuple[int, int, int, bool] | None  # the last request's usage, until its step is written
    person: int | None
    clock: Callable[[], float]
    _prompt: str | None
    brought: str  # an API client's system messages (docs/api.md), after the agent's instructions
    _documents_sent: int  # the tokens of the attached documents this run sends whole

    @functools.cached_property
    def attachment(self) -> Callable[[int], tuple | None]:
        # Every step rebuilds the request: read each attached file once per run.
        return functools.cache(self._attachment)

    def _attachment(self, file: int) -> tuple | None:
        """An attached file's row and what a request needs of its bytes: an image whole, a text
        file's head (what the model is sent of it, and a character more, so a longer one is
        said to be cut), nothing of another (it is named, or read as a document)."""
        row = self.store.file(file)
        if row is None:
            return None
        if filestore.is_image(row["type"]):
            return self.store.file_bytes(file)
        if filestore.is_text(row["type"]):
            return self.store.file_bytes(file, most=(filestore.TEXT_TO_MODEL_MAX + 1) * 4)
        return row, b""

    @functools.cached_property
    def document(self) -> Callable[[int], Attached | None]:
        # the attached documents' text, read and decided once per run (they were read before it began)
        return functools.cache(self._document)

    def picked(self, it: Item) -> list[tuple[str, int, str, int]]:
        """What the person picked for a message with "/", named (those deleted since left out)."""
        return self.store.picked_names(picks_of(it))

    def _document(self, file: int) -> Attached | None:
        """A document attached to a message as this run's requests send it: whole while the
        documents attached so far (in the order the conversation has them) fit DOCUMENTS_SHARE
        of what the window leaves a request, else with its text left out, so that the model
        searches it (search_knowledge) instead of the request being too long. Its chip says
        which (Store.sent_document)."""
        found = self.store.attached(self.chat, file)
        if found is None or found.document.state != "ready":
            return found
        tokens = len(found.text) // window.CHARS_PER_TOKEN if found.text is not None else None
        room = int(self.window * self.share * DOCUMENTS_SHARE) - self._documents_sent if self.window else None
        whole = tokens is not None and (room is None or tokens <= room)
        if whole:
            self._documents_sent += tokens
        if found.document.passages:
            self.store.sent_document(found.document.id, "whole" if whole else "searched")
        return found if whole else Attached(found.document, None)

    def instructions(self) -> str:
        """The system prompt but for the plan: the agent's instructions, what the servers of the
        plugins whose tools it has say about them, the skills it can load and what it remembers. Built once per run, so the start of the request stays the same
        for every step (a memory written now shows next run)."""
        if self._prompt is None:
            # Skills are offered only to an agent that may load them; memories are read every run.
            skills = self.store.skills() if any(t.name == "load_skill" for t in self.tools) else []
            memories = [m["text"] for m in self.store.memories(self.agent.id)] if self.agent and self.agent.id else []
            offered = {t.plugin for t in self.tools if t.plugin}
            plugins = [(p.name, p.instructions) for p in self.store.plugins(self.agent.id, enabled_only=True)
                       if p.instructions and p.name in offered] if offered and self.agent and self.agent.id else []
            self._prompt = system_prompt(self.agent, skills, memories, client=self.brought, plugins=plugins)
        return self._prompt

    def prepare(self) -> list[loop.Message]:
        """The next model step's messages, built from the rows (the loop keeps no list of its
        own: agent.Prepare): by the time a step begins, every earlier step and tool result is a row, and from rows
        the calls carry the ids they keep in every later request (`call_{item}`) and a message
        sent "now" stands where the model read it, so the request's start is the same bytes
        from step to step and run to run. Cut to the model's window (window.py). Only the
        path that leads to this message is sent (branches.Tree.lineage): after an edit, the
        old branch is not in it."""
        if self.limits is not None:
            self.window, self.images = self.limits()
        # Each request, not only each send, keeps to the person's daily limit: messages queued
        # before it was reached, and the steps of one long tool loop, are not sent past it
        if self.person is not None and (over := usage_rules.refusal(self.store, self.person, self.clock)):
            raise loop.ModelError(over)
        self.measured, self.held = False, None  # no usage for this request yet
        context = self.store.context(self.chat)
        path = self.store.tree(self.chat).lineage(self.user.id)
        # another model's window chooses afresh; so does a view that starts on another branch
        kept = context["window"] in (0, self.window) and (not context["start"] or context["start"] in path.heads)
        current = window.Cut(context["start"], context["trim"]) if kept else window.Cut()
        items = self.store.lineage_items(self.chat, path, current.start)
        parts = segments(items, attachments=self.attachment, images=self.images, documents=self.document,
                         picked=self.picked)
        spans = []
        for p in parts:
            full = window.request_tokens(p.messages)
            spans.append(window.Span(p.turn, p.starts, full,
                                       full if p.short is p.messages else window.request_tokens(p.short)))
        instructions = self.instructions()
        plan = self.store.plan(self.chat)
        # Counted whether or not it is sent: an estimate a little high is safe.
        fixed = window.request_tokens([loop.Message("system", with_plan(instructions, plan.text if plan else ""))],
                                      self.tools)
        ratio, _ = self.store.calibration(self.model)
        if self.window:
            budget = int(self.window * self.share)
            try:
                cut = window.choose(spans, fixed, current, budget, ratio)
            except window.TooLong as e:
                cut = self.fit_outputs(parts, spans, fixed, current, budget, ratio)
                if cut is None:
                    raise loop.ModelError(self.too_long(e.tokens, spans, ratio)) from None
        else:
            cut = current
        # The plan rides in the system prompt only once the call that set it is out of view.
        seen_plan = any(it.kind == "call" and it.name == "update_plan" and it.turn >= cut.start for it in items)
        prompt = with_plan(instructions, plan.text if plan and not seen_plan else "")
        messages = [loop.Message("system", prompt)] if prompt else []
        for i, (b, p) in enumerate(zip(spans, parts)):
            if cut.shows(b):
                messages.extend(p.short if cut.shortens(i, b) else p.messages)
        self.raw = window.request_tokens(messages, self.tools)
        self.estimate = window.calibrated(self.raw, ratio)
        if (cut.start, cut.trim, self.window) != (context["start"], context["trim"], context["window"]):
            # a write only when the view moved (rarely): the estimate goes with the usage
            hidden = [b for b in spans if not cut.shows(b)]
            before = context if kept else {"turns_out": 0, "left_out": 0}
            self.store.set_context(self.chat, start=cut.start, trim=cut.trim, window=self.window,
                                   turns_out=before["turns_out"] + sum(1 for b in hidden if b.starts),
                                   left_out=before["left_out"] + window.calibrated(sum(b.full for b in hidden), ratio))
        return messages

    def fit_outputs(self, parts: list, spans: list[window.Span], fixed: int, current: window.Cut,
                    budget: int, ratio: float) -> window.Cut | None:
        """The latest step's tool outputs are too long for any request: send them with their
        middle left out (window.fitted), as long as will fit, so the run goes on; the rows
        keep them whole. None when even that does not fit. Changes `parts` and `spans`."""
        last, span = parts[-1], spans[-1]
        outputs = [len(m.content) for m in last.messages if m.role == "tool" and isinstance(m.content, str)]
        cap = max(outputs, default=0) // 2
        while cap >= window.KEPT_OUTPUT:
            messages = tuple(
                replace(m, content=window.fitted(m.content, cap)) if m.role == "tool" and isinstance(m.content, str)
                else m for m in last.messages)
            parts[-1] = replace(last, messages=messages, short=messages)
            tokens = window.request_tokens(messages)
            spans[-1] = replace(span, full=tokens, short=tokens)
            try:
                return window.choose(spans, fixed, current, budget, ratio)
            except window.TooLong:
                cap //= 2
        parts[-1], spans[-1] = last, span
        return None

    def too_long(self, tokens: int, spans: list[window.Span], ratio: float = 1.0) -> str:
        """Why nothing was sent, in plain words: the tools, when they take most of it."""
        budget = int(self.window * self.share)
        tools = window.calibrated(window.tools_tokens(self.tools), ratio)
        if tools * 2 >= tokens:
            groups: dict[str, list[Tool]] = {}
            for t in self.tools:
                groups.setdefault(t.plugin, []).append(t)
            shares = sorted(((window.calibrated(window.tools_tokens(ts), ratio), name, len(ts))
                             for name, ts in groups.items()), reverse=True)
            listed = "; ".join(f"{name + '’s' if name else 'the built-in'} {n} tool{'s' if n != 1 else ''}, "
                               f"about {size:,}" for size, name, n in shares)
            return (f"The tools this agent offers take about {tools:,} tokens, and {self.model} takes {budget:,} "
                    f"for a request (of its {self.window:,}): {listed}. Nothing was sent. Untick the tools you "
                    f"do not need on the agent’s Tools tab, or choose a model with a larger window.")
        what = ("Your message is too long" if sum(1 for b in spans if b.turn == self.user.id) == 1
                else "This answer has grown too long")
        return (f"{what} for the model’s context window: it needs about {tokens:,} tokens, and "
                f"{self.model} takes {budget:,} for a request (of its {self.window:,}). Nothing was sent. "
                f"Shorten or split the message, or choose a model with a larger window.")

    def steering(self) -> list[loop.Message]:
        """What the person sent "now" since this turn began: the model reads it at this step
        boundary, so it joins this turn, after the turn's last item, for good (rows)."""
        unread = self.store.unread_steers(self.chat, self.user.id)
        if not unread:
            return []
        self.store.read_steers([it.id for it in unread], self.user.id)
        return [user_message(it, self.attachment, self.images, picked=self.picked) for it in unread]

    def usage(self, prompt: int, completion: int, cached: int, counted: bool = False) -> None:
        """The server's count for the last request (or its tokenizer's, `counted`): shown in
        the meter, and it teaches the model's ratio of server tokens to our raw count. The
        tokens themselves are kept (`held`) until the request's step is written (`spent`)."""
        self.measured = True
        self.held = (prompt, completion, cached, counted)
        ratio, samples = self.store.calibration(self.model)
        ratio, samples = window.learn(ratio, samples, self.raw, prompt)
        with self.store.write():
            self.store.set_context(self.chat, used=prompt + completion, window=self.window, cached=cached,
                                   estimate=self.estimate, estimated=int(counted))
            self.store.set_calibration(self.model, ratio, samples)

    def spent(self, reply: loop.Message | None = None) -> None:
        """The last request's tokens, added to its turn's (turn_usage) and to its person's day
        (usage_days): called inside the write that ends the request's step, so both are kept
        or neither, and a step made again after a crash counts once. The server's count,
        else, for a step that ended (`reply`), our estimate, marked so, which the meter shows too."""
        if self.held is not None:
            prompt, completion, cached, counted = self.held
        elif reply is not None and not self.measured:
            ratio, _ = self.store.calibration(self.model)
            prompt, completion, cached, counted = self.estimate, window.calibrated(window.raw_tokens(reply), ratio), 0, True
            if self.window:
                self.store.set_context(self.chat, used=prompt + completion, window=self.window, cached=0,
                                       estimate=self.estimate, estimated=1)
        else:
            return
        self.held, self.measured = None, True
        self.store.add_turn_usage(self.user.id, prompt, completion, cached, estimated=counted)
        if self.person is not None and self.model:
            self.store.add_usage(self.person, self.model, usage_rules.day_of(self.clock()), prompt, completion,
                                 cached, estimated=counted)
