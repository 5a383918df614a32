"""The growing render: the start of a streaming answer, its edge stabilised.

Why a module of its own: ``keyed(text, key, growing=True)`` does not render ``text`` as
it is but a slightly shorter text, closed at its very end, chosen so that each block's
HTML only grows at its end as the answer streams (the feed then sends appends instead
of whole blocks). Choosing that text -- the reveal grid, the rules for the edge, the
replay of earlier grid points so that no close is skipped -- is this module; where the
last block itself stops is ``edge``'s, the inline part of it ``scan``'s. The result goes through the same safe renderer
(``engine``) as a final render.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from markdown_it.rules_core.state_core import StateCore
from markdown_it.token import Token

from . import counting
from .engine import BUDGET_KEY, GROWING_KEY, INLINE_BUDGET, MD, top_level
from .edge import RAW, SYNTAX_LINE, Edge, edge_end
from .scan import INF, closers_of, scan_inline

REVEAL_STEP = 40  # characters a growing render moves on by (the reveal grid, see 1 below)
# While the open (last) block is longer than this many grid steps, the cut moves on by this
# share of it instead (incremental.cadence)
CADENCE = 16
# A stream that grows by fewer grid steps a second than this (2,000 characters: ~500 tokens
# a second) is shown as it comes: each render shows all it can instead of waiting for the
# grid (blocks.Rendering measures the pace, incremental.growing_view cuts). The feed renders
# a growing text at most once per write of its row (20 a second) or per frame (a page in
# the runner's process), so the grid no longer bounds the messages of any stream slower
# than that; past it, each write brings several grid steps, and the grid holds back less
# than one. (At 4, the grid held a page in another worker 84 ms behind the model at 50
# chunks a second, p50; now 28 ms: benchmarks/README.md, "The fast path".)
SLOW = 50


@dataclass(frozen=True)
class Pace:
    """How a growing render moves on, and the shortcuts it takes: the app renders at `PACE`.
    A test or a benchmark gives another: a grid of its own, or a shortcut turned off to
    compare with the render it stands for (the same blocks)."""

    reveal: int = REVEAL_STEP  # the reveal grid; 1 (or less): none, each render shows all it can
    cadence: int = CADENCE  # a big open block moves on by 1/cadence of its length (0: by the grid)
    tips: bool = True  # a paragraph grown by plain text is the last render plus it (incremental)
    cuts: bool = True  # a cut fence or paragraph is made from the first parse's tokens (below)
    slow: float = SLOW  # under this many grid steps a second a stream shows all it can (0: never)

    @property
    def grid(self) -> int:
        """The reveal grid, 0 for none."""
        return self.reveal if self.reveal > 1 else 0


PACE = Pace()

# --------------------------------------------------------------------------- how
#
# keyed(text, key, growing=True) renders the start of an answer that is still streaming.
# The feed sends a changed block as an append (only what was added at its end) when the
# block's new HTML is its old HTML with something inserted before one of its closing
# tags; anything else re-sends the whole block. Each message also costs ~60 bytes of
# wrapper. So the growing render renders a slightly shorter (and at its very end closed)
# text, chosen so that what it shows now is what the longer text will show, plus more:
#
# 1. Reveal grid. Only the first REVEAL_STEP * floor(len / REVEAL_STEP) characters are
#    rendered, so a follower gets one update per REVEAL_STEP characters (40 characters
#    = ~10 tokens, ~200 ms at 50 tokens/s) however often the runner flushes: at ~10
#    characters a flush, the ~60 bytes each append costs would be twice the HTML it
#    carries. REVEAL_STEP <= 1: no grid (and no replay, see 3). A text shorter than one
#    step is rendered whole (incremental.growing_source): an answer's first words show
#    with its first write (a few more messages per answer, once). Nor does a slow stream
#    wait for the grid: while the text grows by fewer than SLOW steps a second (a local
#    model at 5-30 tokens a second, a word every 100 ms), each render shows all it can, so
#    its words reach the page one by one as they are written; a faster one, whose grid
#    step fills in under a quarter second anyway, still moves on by the grid. Whoever
#    renders with a clock measures the pace (blocks.Rendering, given `now`); without one
#    the grid holds. The render after one off the grid replays from that one's cut (3).
# 2. The edge (the end of the last top-level block) is stabilised:
#    - a trailing line made only of block syntax (`-`, `1.`, `##`, `>`, "```",
#      `|---|:-` ...) waits: it may become a list item, heading, hr, fence, table or
#      setext heading; so do the lines of a table being started (`| a | b |` before its
#      delimiter row), a table's body row until it is complete, a reference definition
#      being typed, and a fence's opening line until its newline;
#    - in a fence whose language Pygments knows, the partial last line waits: whole
#      lines are highlighted as they come (highlighting is per line), so the fence grows
#      by appends and its closing changes nothing; in other fences only a partial line
#      of fence characters (a closing fence arriving) waits;
#    - inline, at the end of the last paragraph or heading: unclosed `**`, `*`, `_`,
#      `~~` and inline code are closed (`**bol` renders as `<strong>bol</strong>`, and
#      `**bold**` is then an append inside it); a link or image whose `](url)` has not
#      all arrived waits from its `[` (no link is ever guessed or completed), as do a
#      trailing `<autolink`, a bare URL / email / `www.` word (linkify would give it an
#      href that changes as it grows), a trailing delimiter run, `\`, `!` or `&entity`.
# 3. No close skipped. A render whose change spans the close of an element that the
#    previous render showed open (`**bol` -> `**bold** and`, a list item ending and the
#    next starting) is not an append. The previous render was this function at the
#    previous grid point: replaying the last LOOKBACK grid points (each stops at the
#    first close after the one before, or where its edge held back) gives where it
#    stopped, and this render stops at the first close of an element open there; what
#    follows comes one grid step later, as an append after it. (The replay starts from
#    an assumption and skips the block rules of 2, so it can miss; then that block is
#    re-sent once.)
#
# Only the end of the text changes: it is cut back (nothing before the cut differs) and
# closers are added. The blocks before the region (the last blocks, from the one where
# the replay starts) are the full parse's; those in it are parsed again from its first
# line. The changed text goes through the same safe renderer: cutting text or adding
# `*`, `_`, `~` or "`" cannot produce raw HTML or a link that the text does not have.

# Grid points replayed to find the previous render's edge. It also sets how much is parsed
# again at each render (the region: the blocks holding the last LOOKBACK grid steps),
# the largest part of a followed answer's CPU. 8 (320 characters) sends the same bytes as
# 16 did for the long answer of the tests (benchmarks/markdown_stream.py, seeds 1-3, steps
# 4/10/40: the same appends and re-sent blocks) for a third less parsed; a replay that
# starts too late can only cost a block re-sent once, never a wrong render.
LOOKBACK = 8
# a region longer than this (one huge open block, rendered on a coarse cadence anyway:
# see incremental.cadence) is not replayed: its ~9 scans would cost more than a re-sent block
_REPLAY_MAX = 20_000

NEWLINES = re.compile(r"\r\n?")
_TABLE_INNER = frozenset(("thead_open", "tbody_open", "tr_open", "th_open", "td_open"))

Mark = tuple[int, int, Any]  # (opens at, closes at or INF, how to end there)


def line_starts(text: str) -> list[int]:
    """Where each line starts (after each "\n"; the text's end when it ends with one).
    Lengths summed by C iterators: ~4x faster than a loop over the matches, at every render."""
    return list(accumulate(map(_PLUS_ONE, map(len, text.split("\n")[:-1])), initial=0))


_PLUS_ONE = (1).__add__


def block_tokens(src: str, env: dict[str, Any]) -> list[Token]:
    """markdown-it's block tokens of `src` (counted: a growing answer is parsed a bounded
    number of times, tests/test_markdown_linear.py)."""
    if counting.COUNTING:
        counting.add("parsed", len(src))
    tokens: list[Token] = []
    MD.block.parse(src, MD, env, tokens)
    return tokens


def finish(tokens: list[Token], env: dict[str, Any]) -> list[Token]:
    """The core rules after `block` (inline, cached) on block tokens."""
    state = StateCore("", MD, env, tokens)
    for rule in MD.core.ruler.__rules__:
        if rule.enabled and rule.name not in ("normalize", "block"):
            rule.fn(state)
    return state.tokens


def growing_tokens(src: str, env: dict[str, Any], found: dict[str, Any] | None = None, pace: Pace = PACE,
                   grid: int | None = None, parse: Callable[[str, dict[str, Any]], list[Token]] = block_tokens,
                   ) -> list[Token]:
    """Tokens of `src` (see growing_source) as the growing render shows it. `found`,
    when given, receives what `_advance` needs: the region's first line ("line"), the
    line starts ("starts"), the block tokens before the region ("final": the full
    parse's, inline finished), the references the parse found ("refs"), where the last
    block starts ("open"). `grid`: the previous render's distance (`pace.grid` unless said);
    `parse` makes the block tokens of `src` (incremental's keeps the complete blocks it
    parsed before: settled.py)."""
    if grid is None:
        grid = pace.grid
    limit = len(src)  # this render's grid point
    env[GROWING_KEY] = True
    known = dict(env.get("references") or {})  # defined before `src` (keyed's head)
    budget = env.get(BUDGET_KEY, INLINE_BUDGET)
    tokens = parse(src, env)
    spans = top_level(tokens)
    starts = line_starts(src)
    last_map = tokens[spans[-1][0]].map if spans else None
    end_line = last_map[1] if last_map else 0
    done = False  # the last block is complete: nothing at its end waits
    if src[starts[end_line]:].strip() if end_line < len(starts) else False:
        # After the last block: reference definitions (they make no tokens). The last
        # line of one may still be typed (a partial URL would resolve earlier links to
        # it, a partial title turns it into a paragraph): it waits.
        done = True
        if not src.endswith("\n"):
            src = src[: src.rfind("\n") + 1]
            env.clear()
            env[GROWING_KEY] = True
            env[BUDGET_KEY] = budget
            if known:
                env["references"] = dict(known)
            tokens = block_tokens(src, env)
            spans = top_level(tokens)
            starts = line_starts(src)
    if found is not None:
        found["refs"] = dict(env.get("references") or {})
        found["starts"] = starts
        found["open"] = starts[(tokens[spans[-1][0]].map or [0])[0]] if spans else 0
    if not spans:
        return finish(tokens, env)
    # the region: the top-level blocks from the one holding the look-back window's start
    reach = len(src) - grid * LOOKBACK
    first = len(spans) - 1
    while first > 0 and starts[(tokens[spans[first][0]].map or [0])[0]] > reach:
        first -= 1
    at = spans[first][0]
    line = (tokens[at].map or [0])[0]
    origin = starts[line]
    region = src[origin:]
    toks = tokens[at:]
    for token in toks:
        if token.map:
            token.map = [token.map[0] - line, token.map[1] - line]
    if found is not None:
        found["line"] = line
        found["final"] = tokens[:at]
    stable = _stable_region(region, toks, env, grid, limit - origin, done)
    if found is not None:  # where the shown text ends when it is all of `src` (incremental's tip)
        found["shown"] = origin + len(stable) if stable == region.rstrip() else -1
    if stable != region:
        tokens = tokens[:at] + _reparsed(stable, region, tokens[at:], starts[line:], origin, env, pace.cuts)
    return finish(tokens, env)


def _reparsed(stable: str, region: str, toks: list[Token], starts: list[int], origin: int,
              env: dict[str, Any], cuts: bool) -> list[Token]:
    """The block tokens of `stable` (the region cut back, closers added). When the cut is
    in the region's last block and a blank line is before that block, the blocks before it
    are this parse's (`toks`) and only the last is parsed again: no block rule looks past
    a blank line from above (the same reason the head may move on there), and the cut
    keeps that block's first line or waits whole (`_assemble`: a line of only syntax
    waits, so `1.` or `-` cannot start a list item that joins the list above). `cuts`: a cut
    fence or paragraph at the margin is made without a parse (`_cut_block`)."""
    if not stable.strip():
        return []
    last = top_level(toks)[-1][0]
    line = (toks[last].map or [0])[0]  # counted from the region's first line
    if line < len(starts):
        at = starts[line] - origin
        blank = bool(line) and not region[starts[line - 1] - origin:at].strip()
        if len(stable) > at and stable.startswith(region[:at]):
            cut = _cut_block(stable, region, at, toks[last:], blank) if cuts else None
            if cut is not None:
                return toks[:last] + cut
            if last and blank:
                tail = block_tokens(stable[at:], env)
                for token in tail:
                    if token.map:
                        token.map = [token.map[0] + line, token.map[1] + line]
                return toks[:last] + tail
    return block_tokens(stable, env)



def _cut_block(stable: str, region: str, at: int, block: list[Token], blank: bool) -> list[Token] | None:
    """The tokens of the region's last block (`block`, starting at `at`) cut as `stable`
    cuts it, without a parse, where that is what a parse gives: a fence still open at the
    margin cut at a line (its content is the lines after its opening line, as they are),
    and a paragraph at the margin after a blank line whose last line starts with a
    letter, so that no block rule can start there (its content is its lines, stripped).
    None: parse it."""
    first = block[0]
    if (first.type == "fence" and len(block) == 1 and first.meta.get("streaming")
            and region[at] in "`~" and region.startswith(stable)):
        opened = stable.find("\n", at) + 1
        if not opened or not stable.endswith("\n"):
            return None
        content = stable[opened:]
        start = (first.map or [0])[0]
        return [first.copy(content=content, map=[start, start + 1 + content.count("\n")])]
    if (first.type == "paragraph_open" and first.level == 0 and blank and len(block) == 3
            and block[1].type == "inline"):
        tail = stable[at:]
        lead = tail[tail.rfind("\n") + 1:].lstrip(" ")[:1]
        if "\n\n" in tail or not lead.isalpha():
            return None
        start = (first.map or [0])[0]
        inline = block[1].copy(content=tail.strip(), map=[start, start + 1 + tail.count("\n")])
        return [first, inline, block[2]]
    return None


def _stable_region(
    region: str, toks: list[Token], env: dict[str, Any], grid: int, limit: int, done: bool
) -> str:
    """`region` (whole top-level blocks running to the end of the text, their block
    tokens `toks` with maps counted from its first line) as the growing render shows it.
    `limit` is this render's grid point in the region (its end, or after it when the
    definitions that end the text were cut: then `done`, its last block is complete),
    the previous render's is `grid` characters before."""
    refs = env.get("references") or {}
    starts = line_starts(region)
    spans = top_level(toks)
    first, stop = spans[-1]
    end, how, edge = (
        (len(region.rstrip()), None, None)
        if done
        else edge_end(region, starts, toks[first:stop], refs)
    )
    previous = limit - grid
    if grid and previous > 0 and len(region) <= _REPLAY_MAX:
        marks, edges = _marks(region, starts, toks, refs, edge)
        point, steps = previous, 1
        while point - grid > 0 and steps < LOOKBACK:
            point -= grid
            steps += 1
        # replay: what the renders at the last grid points showed (the oldest one is
        # assumed to have stopped at no close)
        shown = _held_at(region, point, edges, refs)
        while point < previous:
            point += grid
            shown = min(_first_close(marks, shown)[0], _held_at(region, point, edges, refs))
        close, close_how = _first_close(marks, shown)
        if close < end:
            end, how = close, close_how
    return _assemble(region, end, how, refs)


def _held_at(region: str, at: int, edges: list[Edge], refs: dict[str, Any]) -> int:
    """Where the render of region[:at] stopped, as far as its edge's inline content
    and a trailing syntax line tell (what `edge_end` does, without the block rules)."""
    shown = len(region[:at].rstrip())
    for edge in edges:
        pos = edge.from_text(shown)
        if pos is not None:
            content = edge.content[:pos]
            hold = scan_inline(content, refs, True)[1]
            back = edge.to_text(len(content[:hold].rstrip()))
            if back is not None:
                shown = back
            break
    line = region.rfind("\n", 0, shown) + 1
    if SYNTAX_LINE.fullmatch(region, line, shown):
        shown = len(region[:line].rstrip())
    return shown


def _first_close(marks: list[Mark], at: int) -> tuple[int, Any]:
    """The first close of an element that is open at `at` (shown auto-closed there)."""
    best: tuple[int, Any] = (INF, None)
    for opens, closes, how in marks:
        if opens < at < closes < best[0]:
            best = (closes, how)
    return best


def _assemble(region: str, end: int, how: Any, refs: dict[str, Any]) -> str:
    if how is RAW:
        return region[:end]
    if how is None:
        return region[:end].rstrip()
    edge, pos = how
    body = edge.content[:pos].rstrip()
    at = edge.to_text(len(body))
    if at is None:
        return region[:end].rstrip()
    out = region[:at] + closers_of(body, refs) if body else region[:at].rstrip()
    # a cut inside a line can leave only its syntax (`  -` of a list item whose text
    # waits): that would be a setext underline, an empty item ...; it waits too
    line = out.rfind("\n") + 1
    while SYNTAX_LINE.fullmatch(out, line):
        out = out[:line].rstrip()
        if not out:
            break
        line = out.rfind("\n") + 1
    return out


def _marks(
    region: str, starts: list[int], toks: list[Token], refs: dict[str, Any], edge: Edge | None
) -> tuple[list[Mark], list[Edge]]:
    """Every element in the region that can be shown open (auto-closed, or growing at
    the end) and then close: inline elements, list items, lists and paragraphs and
    fences in containers. Top-level blocks are not: each is its own item on the page.
    And the inline contents (table cells aside), as Edge maps."""
    marks: list[Mark] = []
    edges: list[Edge] = []
    for i, token in enumerate(toks):
        if token.map is None:
            continue
        if token.type == "inline":
            if i > 0 and toks[i - 1].type in ("th_open", "td_open"):
                continue  # tables show whole rows
            if edge is not None and edge.token is token:
                this = edge
            else:
                this = Edge(region, starts, token)
            edges.append(this)
            spans = scan_inline(token.content, refs, this is edge)[0]
            for opens, closes in spans:
                o = this.to_text(opens)
                c = this.to_text(closes) if closes < INF else INF
                if o is not None and c is not None:
                    marks.append((o, c, (this, closes) if closes < INF else None))
        elif token.level > 0 and (
            (token.nesting == 1 and token.type not in _TABLE_INNER and not token.hidden)
            or token.type in ("fence", "code_block", "hr")
        ):
            end = token.map[1]
            closes = len(region[: starts[end]].rstrip()) if end < len(starts) else INF
            marks.append((starts[token.map[0]], closes, None))
    return marks, edges
