"""Complete blocks between a head and its open last block: their block tokens, kept.

Why a module of its own: ``incremental`` keeps the blocks a growing render found final
(the head); the blocks after it that the render still looks at (the region of
``growing``: those holding the last grid steps, for the replay) were parsed again at
every render, ~10 times each for an answer of ordinary paragraphs. ``Settled`` keeps the
block tokens of those that are complete, so a render parses only from the last of them
on: its open block and what arrived.

A piece is the text from one top-level block's first line to another's, cut where the
head itself may be moved (``incremental._advance``): a blank line before the cut, and
the cut's line and the next one whole. There no block rule looks back past the blank
line, so the parse of the text is the parse of the pieces, one after the other. A piece
is used again only where a later text holds it and those two lines as they were
(`guard`), and never when the parse that made it found a reference definition (a piece
carries no references). Its tokens are the same objects render after render: their
maps are set again from the piece at each use (the render moves them), and what the
later core rules and the renderer do to them (inline children, a task's class) they do
alike to a fresh parse's.
"""

from __future__ import annotations

import re
from typing import Any

from markdown_it.token import Token

from . import counting
from .engine import top_level
from .growing import block_tokens, line_starts


class _Piece:
    __slots__ = ("chars", "lines", "guard", "size", "height", "tokens", "maps")

    def __init__(self, chars: int, lines: int, guard: str, size: int, height: int,
                 tokens: list[Token], maps: list[tuple[int, int] | None]) -> None:
        self.chars, self.lines = chars, lines  # where it starts in the whole text
        self.guard = guard  # its text and the two lines after it
        self.size, self.height = size, height  # its length in characters and in lines
        self.tokens = tokens
        self.maps = maps  # each token's lines, counted from the piece's first line


# A line that could close a fence (a parse decides), and a line of a paragraph that does
# not start with a letter (after spaces): where a block rule might start, or a blank line.
_FENCE_LINE = re.compile(r"^ {0,3}(?:`{3,}|~{3,})[ \t]*$", re.M)
_NOT_PROSE = re.compile(r"^ *(?![^\W\d_])", re.M)


class _Open:
    """The last block of the last parse, open, of a kind whose tokens a longer text gives
    without a parse: a fence at the margin (until a line could close it) and a paragraph
    after a blank line whose lines all start with a letter (no block rule starts there,
    so it only grows). `tokens` are that parse's, copied with the new content."""

    __slots__ = ("chars", "text", "tokens", "checked", "lines")

    def __init__(self, chars: int, text: str, tokens: list[Token]) -> None:
        self.chars, self.text, self.tokens = chars, text, tokens
        self.checked = text.rfind("\n") + 1  # the last line may grow: checked again
        self.lines = text.count("\n", 0, self.checked)  # whole lines before `checked`

    def grown(self, text: str, pos: int) -> list[Token] | None:
        """The block's tokens when `text[pos:]` is this block grown, else None."""
        if not text.startswith(self.text, pos):
            return None
        if counting.COUNTING:  # the characters looked at, instead of a parse
            counting.add("parsed", len(text) - pos - self.checked)
        new = text[pos + self.checked:]
        first = self.tokens[0]
        lines = self.lines + new.count("\n") + (0 if text.endswith("\n") else 1)
        if first.type == "fence":
            if _FENCE_LINE.search(new):
                return None
            content = text[pos + self.text.index("\n") + 1:]
            return [first.copy(content=content, map=[0, lines])]
        if _NOT_PROSE.search(new):
            return None
        opened, inline, closed = self.tokens
        return [opened.copy(map=[0, lines]), inline.copy(content=text[pos:].strip(), map=[0, lines]),
                closed.copy()]


def _open_block(text: str, at: int, tokens: list[Token], blank: bool) -> list[Token] | None:
    """`tokens` (the last block, starting at `at` of `text`) when it is of a kind `_Open`
    grows, else None."""
    first = tokens[0]
    if not blank:
        return None
    if first.type == "fence" and len(tokens) == 1:
        if first.meta.get("streaming") and text[at:at + 1] in ("`", "~") and "\n" in text[at:]:
            return tokens
        return None
    if (first.type == "paragraph_open" and first.level == 0 and len(tokens) == 3
            and text[at:at + 1].isalpha() and not _NOT_PROSE.search(text, at)):
        return tokens
    return None


class Settled:
    """The complete blocks after a head, and what the last parse through them made."""

    __slots__ = ("kept", "open", "_parsed")

    def __init__(self) -> None:
        self.kept: list[_Piece] = []
        self.open: _Open | None = None  # the last block, when it grows without a parse
        self._parsed: tuple | None = None  # (text, its start: chars, lines; tokens, maps, refs)

    def parse(self, text: str, env: dict[str, Any], chars: int, lines: int) -> list[Token]:
        """The block tokens of `text`, which starts at (`chars`, `lines`) of the whole
        text: the kept pieces that start it, then a parse of the rest."""
        pos = line = 0
        tokens: list[Token] = []
        for piece in self.kept:
            if piece.chars != chars + pos or not text.startswith(piece.guard, pos):
                break
            for token, span in zip(piece.tokens, piece.maps):
                token.map = None if span is None else [span[0] + line, span[1] + line]
            tokens.extend(piece.tokens)
            pos, line = pos + piece.size, line + piece.height
        known = len(env.get("references") or ())
        rest = None
        if self.open is not None and self.open.chars == chars + pos:
            rest = self.open.grown(text, pos)
        if rest is None:
            rest = block_tokens(text[pos:], env) if pos < len(text) else []
        if line:
            for token in rest:
                if token.map:
                    token.map = [token.map[0] + line, token.map[1] + line]
        tokens += rest
        defined = len(env.get("references") or ()) != known
        self._parsed = (text, chars, lines, tokens, [t.map for t in tokens], defined)
        return tokens

    def keep(self, head_chars: int) -> None:
        """After the render: the complete blocks of the last parse past `head_chars` (where
        the head is now), cut where the head could be."""
        parsed, self._parsed = self._parsed, None
        self.kept, self.open = [], None
        if parsed is None:
            return
        text, chars, lines, tokens, maps, defined = parsed
        if defined or not tokens:
            return  # a reference definition: it would have to be carried (rare)
        starts = line_starts(text)
        spans = top_level(tokens)
        cuts = [0]  # block start lines where a piece may end (the last block is open)
        for start, _ in spans[1:]:
            first = (maps[start] or (0, 0))[0]
            if (first > cuts[-1] and first + 2 < len(starts)
                    and not text[starts[first - 1]:starts[first]].strip()):
                cuts.append(first)
        # the last block: a cut before it too when it grows without a parse (_Open), its
        # first line already decided (a fence's whole, or a letter at the margin)
        last = spans[-1][0]
        line = (maps[last] or (0, 0))[0]
        block = None
        if line >= cuts[-1] and chars + starts[line] >= head_chars:
            blank = not line or not text[starts[line - 1]:starts[line]].strip()
            block = _open_block(text, starts[line], tokens[last:], blank)
            if block is not None and line > cuts[-1]:
                cuts.append(line)
        k = 0
        for top, bottom in zip(cuts, cuts[1:]):
            begin = k
            while k < len(tokens) and (maps[k] is None or maps[k][0] < bottom):
                k += 1
            if chars + starts[top] < head_chars:
                continue  # in the head now
            spans_of = [None if m is None else (m[0] - top, m[1] - top) for m in maps[begin:k]]
            # the piece holds where the two lines after it are as they were (the open
            # block's first: its first character, with the rest of it in _Open's text)
            guard = starts[bottom + 2] if bottom + 2 < len(starts) else starts[bottom] + 1
            self.kept.append(_Piece(chars + starts[top], lines + top, text[starts[top]:guard],
                                    starts[bottom] - starts[top], bottom - top, tokens[begin:k], spans_of))
        if block is not None:
            self.open = _Open(chars + starts[line], text[starts[line]:], block)
