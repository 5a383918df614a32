"""The growing render, incremental: what a text's last growing render found final is kept.

Why a module of its own: ``growing`` decides how the end of a streaming answer shows;
this module decides how little of it to parse again. A ``Head`` holds the blocks before
the last render's region (their tokens and HTML); the next render parses only the rest
(``growing.growing_tokens`` on the tail), moves the head on when blocks become final, and
sets the cadence at which a big open block is rendered (the cut of ``growing_view``).
Whoever renders the text again keeps its head (``blocks.Rendering``, through
``growing_inner``).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token

from . import counting
from .engine import BUDGET_KEY, GROWING_KEY, INLINE_BUDGET, MD, top_level, spend
from .growing import LOOKBACK, NEWLINES, PACE, Pace, finish, growing_tokens
from .settled import Settled
from .scan import scan_inline


def growing_source(text: str, pace: Pace = PACE) -> str:
    """The text a growing render with no head starts from: normalized (as markdown-it
    does) and cut to the last grid point."""
    view = growing_view(text, None, pace)
    return view.text[:view.cut]


class GrowingView(NamedTuple):
    """What a growing render renders: `text[:cut]`, `text` normalized."""

    text: str  # the text given, or its normalized copy when it has a CR or a NUL
    cut: int  # the grid point (or the cadence's)
    same: bool  # text[:cut] starts with the head's last rendered source (head.last)
    raw: str | None  # the head's last rendered text when `text` starts with it, else None
    clean: bool  # `text` is the text as given: it had nothing to normalize
    free: bool = False  # `cut` is where the text ends, off the grid (a slow stream's render)


def growing_view(text: str, head: Head | None, pace: Pace = PACE, slow: bool = False) -> GrowingView:
    """What to render of `text` after the render `head` ended (None: none), without a
    pass over the whole answer in Python or a copy of it when `text` extends the text
    the head last rendered (a growing answer: every render but the first). Then one
    prefix compare (a memcmp) stands for the checks that need the whole text: the newline
    normalization looks at the added part only, and the head's source and guard hold
    because they are prefixes of that text. After a head, a big open block moves the cut
    on by more than the grid: see `cadence`. `slow`: the text grows slowly (Pace.slow),
    and the render shows all it can while its open block is within the grid's cadence; a
    cut never moves back from the last render's."""
    raw = None
    if head is not None and head.clean and text.startswith(head.raw):
        raw = head.raw
        at = len(raw)
        # a clean prefix and a clean addition: no "\r\n" pair can straddle the two
        clean = text.find("\r", at) < 0 and text.find("\0", at) < 0
        src = text if clean else _normalized(text)
        same = clean or src.startswith(head.last)
    else:
        src = _normalized(text)
        same = head is not None and src.startswith(head.last)
    grid = pace.grid
    if not grid:
        return GrowingView(src, len(src), same, raw, src is text)
    # A text shorter than one step shows what it has: the first words of an answer reach
    # the page with the first write, not ~10 tokens later (benchmarks/first_token.py).
    cut = len(src) - len(src) % grid if len(src) >= grid else len(src)
    if head is not None and head.cut < cut and same:
        step = cadence(cut - head.open_at, pace)
        if step > grid:
            cut = head.cut + step * ((cut - head.cut) // step)
    free = slow and (head is None or not same or cadence(len(src) - head.open_at, pace) <= grid)
    if free:
        cut = len(src)
    elif head is not None and same and cut < head.cut <= len(src):
        cut = head.cut  # the last render was a slow stream's, past this grid point (its free_at)
    # `same` was of the text; of its cut: the last source is no longer than it
    return GrowingView(src, cut, same and head is not None and head.cut <= cut, raw, src is text, free)


def _normalized(text: str) -> str:
    """`text` with line ends and NULs as markdown-it's `normalize` makes them. The tests
    for the characters are memchr-fast; the regular expression runs only on a text that
    has a CR (a growing answer is normalized at every render, the whole of it)."""
    if "\r" in text:
        text = NEWLINES.sub("\n", text)
    return text.replace("\0", "\ufffd") if "\0" in text else text


def cadence(open_size: int, pace: Pace) -> int:
    """How far the cut moves on while the last (open) block is `open_size` long: the
    grid, or a sixteenth of the block (`pace.cadence`) once that is more (a multiple of
    the grid). Each render of the open block parses and scans all of it, so a block of n
    characters would cost n^2 / grid over its growth; with a step of n / 16 it costs
    ~32 n (a paragraph of 10,000 characters shows ~600 at a time, an answer's usual blocks
    of a few hundred are not slowed)."""
    grid = pace.grid
    if not pace.cadence:
        return grid
    step = open_size // pace.cadence
    return max(grid, step - step % grid)


class Head:
    """What a text's last growing render found final: its first top-level blocks.

    Blocks before the last one of a render never change as the text grows (block
    structure is decided line by line, and each block's end by its lines and the one
    after it) -- once the lines that ended them are complete: the head ends at a block's
    first line, and that line and the next are whole in `guard`. Only reference
    definitions reach back: a new one re-renders the head's blocks (their inline parse is
    cached by content)."""

    __slots__ = ("guard", "guard_text", "chars", "lines", "tokens", "blocks", "refs", "shown_refs",
                 "html", "left", "raw", "clean", "cut", "open_at", "pieces", "rendered", "tip", "free_at")

    def __init__(self) -> None:
        # a later text must start with guard_text[:guard] for the head to hold (a length
        # and the text it is of, not a copy of the answer's start at every move)
        self.guard = 0
        self.guard_text = ""
        self.chars = self.lines = 0  # where the head ends (a line start)
        self.tokens: list[Token] = []  # the head's block tokens, inline finished
        self.blocks = 0  # how many top-level blocks they are
        self.refs: dict[str, Any] = {}  # the references defined in the head
        self.shown_refs: dict[str, Any] = {}  # the references `html` was rendered with
        self.html: list[str] = []  # each head block's inner HTML
        self.left = INLINE_BUDGET  # the inline budget (engine.py) the head's blocks left
        self.raw = ""  # the (normalized) text of the last render: it rendered raw[:cut]
        self.clean = False  # raw is the text as given (no CR or NUL to normalize)
        self.cut = 0
        self.free_at = -1  # the cut of the last render off the grid (GrowingView.free)
        self.open_at = 0  # where that render's last block started
        self.pieces = Settled()  # the complete blocks after the head, parsed (settled.py)
        self.rendered: dict[int, tuple] = {}  # the last render's blocks after the head: _rendered
        self.tip: _Tip | None = None  # the last render ended in a paragraph shown whole: _grown_tip

    @property
    def last(self) -> str:
        """The last source rendered (a copy: for the rare checks only)."""
        return self.raw[:self.cut]


def growing_inner(view: GrowingView, head: Head | None, pace: Pace = PACE) -> tuple[list[str], Head]:
    """Each top-level block's inner HTML (no trailing newline) for a growing render, and
    the head the next render starts from: what `growing_tokens(view.text[:view.cut])`
    renders to, re-parsing only from `head` on (`view` is `growing_view`'s after it)."""
    text, cut = view.text, view.cut
    grid = pace.grid
    step = grid
    if head is not None and grid and view.same:
        step = cadence(cut - head.open_at, pace)  # as growing_view cut it
        if view.free or (head.free_at >= 0 and cut - head.free_at <= grid * LOOKBACK):
            # this render or one the replay would go back to is off the grid (a slow
            # stream's): no replay, whose chain of grid points would not be the renders
            # made (growing.py, 3); the render shows all it can, and a close it skips
            # re-sends that block once
            step = 0
    # the guard is a prefix of the last source (head.guard <= head.cut): `same` holds it
    if head is None or not (cut >= head.guard and (
            view.same or text.startswith(head.guard_text[:head.guard]))):
        head = Head()
    elif head.tip is not None and view.same and pace.tips:
        grown = _grown_tip(head, text, cut)
        if grown is not None:
            head.raw, head.clean, head.cut = text, view.clean, cut
            if view.free:
                head.free_at = cut
            return grown, head
    head.tip = None
    if view.free:
        head.free_at = cut
    env: dict[str, Any] = {"references": dict(head.refs)} if head.refs else {}
    env[BUDGET_KEY] = head.left
    found: dict[str, Any] = {}
    base = head.chars
    tokens = growing_tokens(text[head.chars:cut], env, found, pace, step,
                            lambda text, env, p=head.pieces, at=head.chars, line=head.lines: p.parse(text, env, at, line))
    refs = env.get("references") or {}
    if head.html and _defined(head.shown_refs) != _defined(refs):
        # a definition arrived: links in the head's blocks may resolve now
        again = {GROWING_KEY: True, "references": refs}
        finish(head.tokens, again)
        head.html = _rendered(head.tokens, again)
        head.shown_refs = dict(refs)
    tail = _rendered(tokens, env, head.rendered, repr(sorted(_defined(refs).items())) if refs else "")
    inner = head.html + tail
    head.tip = _tip(tokens, inner, text, cut, base + found.get("shown", -1) if found.get("shown", -1) >= 0 else -1, refs)
    _advance(head, text, found, tail, refs)
    head.pieces.keep(head.chars)
    head.raw, head.clean, head.cut = text, view.clean, cut
    return inner, head


class _Tip(NamedTuple):
    """A render that ended in a top-level paragraph shown whole (nothing held back at its
    edge, nothing closed for it, no close cut it short): what its growth by plain text
    needs to be rendered without a parse, a scan of the region or a render."""

    cut: int  # that render's cut
    shown: int  # where its text ends (the paragraph's inline content ends there)
    content: str  # the paragraph's inline content
    parts: list[str]  # that render's blocks' inner HTML, the paragraph's block last
    refs: dict[str, Any]
    closes: int  # the length of the closing tags after the paragraph's text in that block


# What can make plain text more than text when added to a paragraph's last line: inline
# syntax (engine._SYNTAX_CHARS), a scheme's or an email's linkify trigger, a table's pipe;
# a newline (a new line may start a block, end one, or be a setext underline) is tested apart
_NOT_PLAIN = re.compile(r"[\[\]!*_~`<&\\$:@|\n\r\0]")
_WORD_END = frozenset(".,;?'\"")


def _tip(tokens: list[Token], inner: list[str], text: str, cut: int, shown: int,
         refs: dict[str, Any]) -> _Tip | None:
    if shown < 0 or not inner:
        return None
    # the last inline: a paragraph's (top-level, or a list item's or a quote's), only
    # closing tokens after it
    k = len(tokens) - 1
    while k >= 0 and tokens[k].nesting == -1:
        k -= 1
    if k < 1 or tokens[k].type != "inline" or tokens[k - 1].type != "paragraph_open":
        return None
    content = tokens[k].content
    if not content or "\n" in content:
        return None
    # and it ends in a word or a sentence's end, not at the close of an element (`*x*`,
    # a link's `)`): the next render's replay may take that close for one still to come,
    # and stop there again (the render such a tip would give is as good, but not the same)
    if not (content[-1].isalnum() or content[-1] in _WORD_END):
        return None
    # the content is the text's, unchanged, and ends where the render's shown text ends
    if shown < len(content) or not text.startswith(content, shown - len(content)):
        return None
    closes = MD.renderer.render(tokens[k + 1:], MD.options, {})
    closes = closes[:-1] if closes.endswith("\n") else closes  # (as the block's inner HTML)
    if not closes or not inner[-1].endswith(closes):
        return None
    return _Tip(cut, shown, content, inner, refs, len(closes))
def _grown_tip(head: Head, text: str, cut: int) -> list[str] | None:
    """The render of `text[:cut]` when it is the tip's with plain text added to its
    paragraph's one line: the same blocks, the last with the escaped text added before its
    `</p>` -- what a parse, the edge and a render give there (no block rule starts inside a
    line; the added characters open, close and link nothing, and the edge holds nothing
    back, as `scan_inline` says of the new content). Else None."""
    tip = head.tip
    if tip is None or cut <= tip.cut:
        return None
    added = text[tip.shown:cut]
    if _NOT_PLAIN.search(added) or "www." in (tip.content[-3:] + added).lower():
        return None
    added = added.rstrip()  # (markdown-it strips a paragraph's content)
    if not added:
        head.tip = tip._replace(cut=cut)
        return list(tip.parts)
    content = tip.content + added
    _, hold, openers, code = scan_inline(content, tip.refs, True)
    if hold != len(content) or openers or code:
        return None
    last = tip.parts[-1]
    at = len(last) - tip.closes
    parts = [*tip.parts[:-1], last[:at] + escapeHtml(added) + last[at:]]
    head.tip = _Tip(cut, tip.shown + len(added), content, parts, tip.refs, tip.closes)
    return list(parts)


def _defined(refs: dict[str, Any]) -> dict[str, tuple]:
    """What references resolve to (their `map` says where a parse found them: no matter)."""
    return {label: (ref.get("href"), ref.get("title")) for label, ref in refs.items()}


def _rendered(tokens: list[Token], env: dict[str, Any], memo: dict[int, tuple] | None = None,
              refs: str = "") -> list[str]:
    """Each top-level block's inner HTML. With `memo` (a head's): a block made of the same
    token objects as at the last render (a piece's, settled.py), with the same references,
    is not rendered again; `memo` is left holding this render's blocks."""
    out = []
    kept = {}
    for start, end in top_level(tokens):
        first, last = tokens[start], tokens[end - 1]
        hit = memo.get(id(first)) if memo is not None else None
        if hit is not None and hit[0] is first and hit[1] is last and hit[2] == end - start and hit[3] == refs:
            inner = hit[4]
        else:
            inner = MD.renderer.render(tokens[start:end], MD.options, env)
            inner = inner[:-1] if inner.endswith("\n") else inner
            if counting.COUNTING:
                counting.add("rendered", len(inner))
        kept[id(first)] = (first, last, end - start, refs, inner)  # (the tokens kept alive: ids stay theirs)
        out.append(inner)
    if memo is not None:
        memo.clear()
        memo.update(kept)
    return out


def _advance(head: Head, src: str, found: dict[str, Any], tail: list[str],
             refs: dict[str, Any]) -> None:
    """Move the head on over the blocks this render found final (those before its region,
    from the full parse), up to the last block start where that is safe: the line before
    it blank (no rule looks past a blank line from above it: math blocks stop there,
    a table's lookahead is one line) and it and the next line whole (a list ends there
    by that line's first characters: `1` may still become `1.`)."""
    final: list[Token] = found.get("final") or []
    starts = found.get("starts") or [0]
    head.open_at = head.chars + found.get("open", 0)
    if not final:
        return
    spans = top_level(final)
    cuts = [(found.get("line", 0), len(spans))]  # (block start line, blocks before it)
    cuts += [((final[spans[k][0]].map or [0])[0], k) for k in range(len(spans) - 1, 0, -1)]
    base = head.chars
    for line, count in cuts:
        if line + 2 >= len(starts):
            continue  # the line after this block's first is not whole yet
        if line and src[base + starts[line - 1]: base + starts[line]].strip():
            continue
        break
    else:
        return
    if not count:
        return
    taken = final[: spans[count - 1][1]]
    head.guard_text, head.guard = src, base + starts[line + 2]
    head.tokens.extend(taken)
    head.blocks += count
    parsed = found.get("refs") or {}
    for label, ref in parsed.items():
        if label not in head.refs and (ref.get("map") or [0])[0] < line:
            head.refs[label] = ref
    head.html.extend(tail[:count])  # rendered just now, from the same tokens
    head.left = spend(taken, head.left)
    head.shown_refs = dict(refs)
    head.chars, head.lines = base + starts[line], head.lines + line


