"""The edge of a growing answer: where its last top-level block stops showing.

Why a module of its own: ``growing`` decides which text a growing render shows; this is
the part that looks at the last block alone -- a trailing line of block syntax, a table
being typed, a fence still open, and the inline content of a paragraph or heading at its
end (``scan``) -- and says where it ends and how (cut, cut keeping a newline, or cut
inside the inline content and close what is open there). ``Edge`` maps positions in an
inline token's content to positions in the text.
"""

from __future__ import annotations

import re
from typing import Any

from markdown_it.common.utils import unescapeAll
from markdown_it.token import Token

from .engine import lexer_of
from .scan import scan_inline

RAW = "raw"  # an end that keeps its trailing newline (inside a fence)
SYNTAX_LINE = re.compile(r"[ \t>]*[-+*_=#|:`~.)0-9 \t]*")
_DEF_LINE = re.compile(r" {0,3}\[(?:[^\]\\]|\\.)*(?:\](?::.*)?)?")
_FENCE_CHARS = re.compile(r"[ \t>]*(?:`*|~*)[ \t]*")


def edge_end(
    region: str, starts: list[int], toks: list[Token], refs: dict[str, Any]
) -> tuple[int, Any, Edge | None]:
    """Where the last top-level block (`toks`) stops showing: (position in region, how
    to end there: None = cut, RAW = cut keeping the newline, (edge, content position)
    = cut inside the edge's inline content and close what is open, the edge)."""
    leaf_at = -1
    for i in range(len(toks) - 1, -1, -1):
        if toks[i].nesting == 0 and toks[i].map is not None:
            leaf_at = i
            break
    leaf = toks[leaf_at] if leaf_at >= 0 else None
    if leaf is not None and leaf.type == "fence" and leaf.meta.get("streaming"):
        return (*_fence_end(region, starts, leaf), None)
    text = region.rstrip()
    if not text:
        return 0, None, None
    line_done = "\n" in region[len(text):]
    last = text.count("\n")
    covers = leaf is not None and leaf.map is not None and leaf.map[1] > last
    if leaf is not None and covers and leaf.type != "inline":
        return len(text), None, None  # a closed fence, indented code, an hr
    table = next((t for t in toks if t.type == "table_open" and t.map and t.map[1] > last), None)
    if table is not None:
        return _table_end(text, starts, toks, table, line_done), None, None
    opener = toks[leaf_at - 1].type if covers and leaf_at > 0 else ""
    paragraph = opener == "paragraph_open"

    # whole trailing lines that wait
    cut, k = len(text), last
    if SYNTAX_LINE.fullmatch(text[starts[k]:]):
        cut, k = starts[k], k - 1
    if paragraph and leaf is not None and leaf.map and k >= leaf.map[0]:
        if k == leaf.map[0] and _DEF_LINE.fullmatch(text[starts[k]:cut].rstrip("\n")):
            cut = starts[k]  # a reference definition being typed
        # a table's header row (and delimiter row) being typed: the table comes whole
        while k >= max(leaf.map[0], last - 1) and (
            text[starts[k]:cut].lstrip(" \t>").startswith("|")
        ):
            cut, k = starts[k], k - 1

    if leaf is None or not covers or leaf.type != "inline" or not leaf.map:
        return len(text[:cut].rstrip()), None, None
    edge = Edge(region, starts, leaf)
    content = edge.prefix(cut, len(text))
    if not content:
        return len(text[:cut].rstrip()), None, edge
    hold = scan_inline(content, refs, True)[1]
    kept = len(content[:hold].rstrip())
    at = edge.to_text(kept)
    if at is None:
        return len(text[:cut].rstrip()), None, edge
    return at, (edge, kept), edge


class Edge:
    """Positions in an inline token's content <-> positions in the region's text."""

    __slots__ = ("content", "first", "lines", "starts", "token")

    def __init__(self, region: str, starts: list[int], token: Token) -> None:
        self.token = token
        self.content = token.content
        self.first = token.map[0] if token.map else 0
        self.starts = starts
        self.lines: list[tuple[int, int | None, int]] = []  # content start, text start, length
        offset = 0
        for i, part in enumerate(self.content.split("\n")):
            j = self.first + i
            base = None
            if j < len(starts):
                stop = starts[j + 1] - 1 if j + 1 < len(starts) else len(region)
                k = region.rfind(part, starts[j], stop)
                if k >= 0:
                    base = k
            self.lines.append((offset, base, len(part)))
            offset += len(part) + 1

    def to_text(self, pos: int) -> int | None:
        for start, base, length in self.lines:
            if start <= pos <= start + length:
                return None if base is None else base + pos - start
        return None

    def from_text(self, at: int) -> int | None:
        for start, base, length in self.lines:
            if base is not None and base <= at <= base + length:
                return start + at - base
        return None

    def prefix(self, cut: int, size: int) -> str | None:
        """The content before text position `cut` (a line start, or `size`: all)."""
        if cut >= size:
            return self.content
        if cut not in self.starts:
            return None
        i = self.starts.index(cut) - self.first
        if i <= 0:
            return ""
        if i >= len(self.lines):
            return self.content
        return self.content[: self.lines[i][0] - 1]


def _fence_end(region: str, starts: list[int], fence: Token) -> tuple[int, Any]:
    """A fence still open at the end: whole lines only when it is highlighted."""
    opening = starts[fence.map[0]] if fence.map and fence.map[0] < len(starts) else 0
    if "\n" not in region[opening:]:
        return len(region[:opening].rstrip()), None  # its info string is being typed
    last = region.rfind("\n") + 1
    partial = region[last:]
    if not partial:
        return len(region), RAW
    info = unescapeAll(fence.info).strip() if fence.info else ""
    lang = info.split(maxsplit=1)[0] if info else ""
    if (lang and lexer_of(lang.lower()) is not None) or _FENCE_CHARS.fullmatch(partial):
        return last, RAW
    return len(region), RAW


def _table_end(
    text: str, starts: list[int], toks: list[Token], table: Token, line_done: bool
) -> int:
    """A table at the end shows once its delimiter row is done, then row by row."""
    if line_done or table.map is None:
        return len(text)
    last = text.count("\n")
    top = table.map[0]
    if last <= top + 1:
        return len(text[: starts[top]].rstrip())
    columns = 0
    for t in toks[toks.index(table):]:
        if t.type == "th_open":
            columns += 1
        elif t.type == "thead_close":
            break
    row = text[starts[last]:].strip()
    pipes = len(re.findall(r"(?<!\\)\|", row))
    if row.endswith("|") and not row.endswith("\\|") and pipes - row.startswith("|") >= columns:
        return len(text)
    return len(text[: starts[last]].rstrip())
