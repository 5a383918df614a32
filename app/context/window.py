"""The model's context window: what a request will cost, and what of a long conversation is sent.

Counting. We have no tokenizer for most models (local ones, accounts, any server at AI_URL),
so a request is first counted the cheap way, characters / 4 plus a little per message
(`raw_tokens`), and that raw count is multiplied by a ratio learned per model from the
usage each answer reports (`calibrated`): the estimate converges to the server's own count.

Choosing. A request may fill `share` of the window (the rest is the answer's). When the next
request would pass it, the view is cut back in two stages: first long tool outputs of the
oldest steps are sent shortened, then whole early turns are left out. The system prompt
(instructions, skills, memories, and the plan once its call is out of view) and the latest
turn are always sent. Cuts fall on message groups that hold a call with its result, so the
API never sees an orphaned tool message. A cut goes down to `PRUNE_TO` of the budget, not
just under it, and the view stays put until the budget is passed again: the start of the
request is then the same for many requests in a row, which is what servers that cache
prompt prefixes need (see docs/context.md). Pure: no rows, no I/O.
"""
from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from ..agent import Message
from ..tools import Tool

CHARS_PER_TOKEN = 4     # the usual rule of thumb for English text; calibration corrects it
MESSAGE_TOKENS = 4      # the role and framing around every message
CALL_TOKENS = 8         # the framing of one tool call
IMAGE_TOKENS = 800      # an image part, whatever its bytes (providers charge by size; a middle guess)
PRUNE_TO = 0.6          # a cut goes down to this share of the budget: room for several turns
LONG_OUTPUT = 2_000     # characters: a call output longer than this may be sent shortened ...
KEPT_OUTPUT = 400       # ... as its first characters and a note
RATIO_MIN, RATIO_MAX = 0.25, 4.0  # a usage report outside these is a server's quirk, not a tokenizer
LEARN_FLOOR = 0.2       # the weight of the newest report once many were seen: follows drift


def raw_tokens(m: Message) -> int:
    """One message, counted the cheap way (before calibration)."""
    chars, extra = 0, MESSAGE_TOKENS
    if isinstance(m.content, str):
        chars += len(m.content)
    else:
        for part in m.content:
            if part.get("type") == "text":
                chars += len(part.get("text", ""))
            else:  # an image's data: URL says nothing about what the model is charged
                extra += IMAGE_TOKENS
    for call in m.tool_calls:
        chars += len(call.name) + len(call.arguments)
        extra += CALL_TOKENS
    return chars // CHARS_PER_TOKEN + extra


def tools_tokens(tools: Iterable[Tool]) -> int:
    """The tool schemas a request carries, counted as their JSON."""
    return sum(len(json.dumps(t.schema(), separators=(",", ":"))) for t in tools) // CHARS_PER_TOKEN


def request_tokens(messages: Sequence[Message], tools: Iterable[Tool] = ()) -> int:
    return sum(raw_tokens(m) for m in messages) + tools_tokens(tools)


def shortened(output: str) -> str:
    """A long call output as it is sent once the view is cut: its start and a note."""
    if len(output) <= LONG_OUTPUT:
        return output
    return (f"{output[:KEPT_OUTPUT]}\n[… {len(output) - KEPT_OUTPUT:,} more characters of this output "
            f"were left out to save room; run the tool again if you need them.]")


def fitted(output: str, chars: int) -> str:
    """An output too long for the request being made, as it is sent this time: its start and
    its end, `chars` characters in all, and a note saying how much of the middle was left out."""
    if len(output) <= chars:
        return output
    head = chars * 2 // 3
    tail = chars - head
    return (f"{output[:head]}\n[… {len(output) - chars:,} characters of this output ({len(output):,} in all) "
            f"were left out here: it is longer than the model's window allows. The person sees it whole.]\n"
            f"{output[len(output) - tail:]}")


# --- calibration ----------------------------------------------------------------------------


def calibrated(raw: int, ratio: float) -> int:
    return round(raw * ratio)


def learn(ratio: float, samples: int, raw: int, reported: int) -> tuple[float, int]:
    """The ratio after one more usage report: a running mean over the first reports (so it
    settles fast), then an average that weighs the newest by LEARN_FLOOR (so it follows a
    server that changed). A report that makes no sense leaves it as it was."""
    if raw <= 0 or reported <= 0:
        return ratio, samples
    seen = reported / raw
    if not RATIO_MIN <= seen <= RATIO_MAX:
        return ratio, samples
    weight = max(1 / (samples + 1), LEARN_FLOOR)
    return ratio + weight * (seen - ratio), samples + 1


# --- choosing the view ------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """A run of the history's messages: a whole turn's start (`starts`: the view may begin
    here) or a later model step or message within turn `turn` (turns are user item ids, in
    history order). `full` and `short` are its raw tokens as sent whole and with its long
    outputs shortened."""

    turn: int
    starts: bool
    full: int
    short: int


@dataclass(frozen=True)
class Cut:
    """The model's view: the turns from `start` on (0: all); long outputs shortened in the
    turns before `trim` and, in the latest turn, in its first `inner` spans. `start` and
    `trim` are kept with the conversation; `inner` is chosen afresh for each request."""

    start: int = 0
    trim: int = 0
    inner: int = 0

    def shows(self, span: Span) -> bool:
        return span.turn >= self.start

    def shortens(self, index: int, span: Span) -> bool:
        """Whether spans[index] goes with its long outputs shortened."""
        return span.turn < self.trim or index < self.inner


class TooLong(Exception):
    """Even the latest turn alone does not fit: the tokens it would take."""

    def __init__(self, tokens: int):
        super().__init__(tokens)
        self.tokens = tokens


def cost(spans: Sequence[Span], fixed: int, cut: Cut) -> int:
    """Raw tokens of a request with this view: `fixed` (system prompt, tools) and the spans."""
    return fixed + sum(b.short if cut.shortens(i, b) else b.full for i, b in enumerate(spans) if cut.shows(b))


class _Sums:
    """`cost` in constant time for spans in history order (turns never decrease), so
    choosing among a thousand turns does not cost a thousand passes over them."""

    def __init__(self, spans: Sequence[Span]):
        self.turns = [b.turn for b in spans]
        self.full = list(accumulate((b.full for b in spans), initial=0))
        self.short = list(accumulate((b.short for b in spans), initial=0))

    def cost(self, fixed: int, cut: Cut) -> int:
        n = len(self.turns)
        shown = bisect_left(self.turns, cut.start)
        whole = min(n, max(shown, bisect_left(self.turns, cut.trim), cut.inner))  # shortened before this
        return fixed + self.short[whole] - self.short[shown] + self.full[n] - self.full[whole]


def choose(spans: Sequence[Span], fixed: int, current: Cut, budget: int, ratio: float = 1.0) -> Cut:
    """The view for the next request. The current one while it fits, so the request's start
    stays the same; else the least cut that brings it down to PRUNE_TO of the budget: long
    outputs of earlier turns shortened, oldest turn first; then earlier turns left out,
    oldest first; then, for a latest turn that still does not fit, its own older outputs
    shortened. Raises TooLong when nothing fits."""
    current = Cut(current.start, current.trim)
    if not spans:
        return current
    sums = _Sums(spans)
    limit = budget / ratio  # in raw tokens
    if sums.cost(fixed, current) <= limit:
        return current
    target = limit * PRUNE_TO
    turns = sorted({b.turn for b in spans if b.starts and current.shows(b)})
    latest = max(b.turn for b in spans)  # the turn being answered
    # 1. long outputs of earlier turns
    for trim in (t for t in turns if current.trim < t <= latest):
        if sums.cost(fixed, cut := Cut(current.start, trim)) <= target:
            return cut
    trim = max(current.trim, latest)
    # 2. earlier turns
    for start in (t for t in turns if current.start < t <= latest):
        if sums.cost(fixed, cut := Cut(start, trim)) <= target:
            return cut
    # 3. the latest turn alone: sent if it fits at all, its older outputs shortened if need
    # be, never those of its last span (the model has not read them yet).
    start = max(current.start, latest)
    own = [i for i, b in enumerate(spans) if b.turn >= start]
    for inner in [0, *own[1:]]:
        if sums.cost(fixed, cut := Cut(start, trim, inner)) <= limit:
            return cut
    raise TooLong(calibrated(sums.cost(fixed, cut), ratio))
