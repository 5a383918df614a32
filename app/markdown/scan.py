"""The inline scanner behind the growing edge: where inline elements open and close.

Why a module of its own: to stabilise the end of a growing answer, ``growing`` must
know, for a paragraph's inline content, which code spans, emphasis, links and autolinks
are still open at its end and where something still being typed starts (a link waiting
for its ``)``, a delimiter run, a bare URL ...). markdown-it gives no such view, so this
is a light re-implementation of its inline rules for that question only (code spans
first, links, autolinks, flanking delimiter runs, the rule of 3). It renders nothing.
Math (``$…$``, ``\\(…\\)`` ...) is atomic, like a code span: where it ends is asked of
the MarkdownIt's own math rules (``mathml``); math whose close has not come yet waits.
"""

from __future__ import annotations

import re
from typing import Any

from markdown_it.common.utils import isPunctChar, isWhiteSpace, normalizeReference
from markdown_it.rules_inline.state_inline import StateInline

from .engine import INLINE_BUDGET, MD, syntax_cost
from .labels import count_scanned, Text
from .mathml import MATH_MAX, bracket_inline, dollar_inline

_LINK_HOLD = 400  # a pending link waits while its `[` is at most this far from the end
_DOLLAR_HOLD = 200  # and `$` (math, or money: `$10 a month`) while this close to it
INF = 1 << 60  # the end of a span still open at the end (growing uses it too)

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_AUTOLINK = re.compile(
    r"<(?:[a-zA-Z][a-zA-Z0-9+.\-]{1,31}:[^<>\x00-\x20]*"
    r"|[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*)>"
)
_AUTOLINK_START = re.compile(r"<[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~:@-]*")
_ENTITY_START = re.compile(r"&(?:#[xX]?[0-9a-fA-F]{0,8}|[A-Za-z][A-Za-z0-9]{0,31})?")
_SPECIAL = re.compile(r"[\\`*_~!\[<&$]")  # the characters `_scan_uncached` looks at
_URL_STARTS = ("http://", "https://", "mailto:", "www.")


def _ws(ch: str | None) -> bool:
    return ch is None or isWhiteSpace(ord(ch))


def _punct(ch: str | None) -> bool:
    return ch is not None and (ch in _ASCII_PUNCT or isPunctChar(ch))


def _skip_space(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in " \t\n":
        pos += 1
    return pos


_OK, _PENDING, _NO = 0, 1, 2


def _inline_link(s: str, pos: int) -> tuple[int, int]:
    """At `(` after `]`: (_OK, end) for a whole valid `(dest "title")`, (_PENDING, 0)
    while it may still become one, (_NO, 0) when it cannot."""
    n = len(s)
    pos = _skip_space(s, pos + 1)
    if pos >= n:
        return _PENDING, 0
    if s[pos] == ")":
        return _OK, pos + 1
    dest = MD.helpers.parseLinkDestination(s, pos, n)
    if not dest.ok:
        if s[pos] == "<":
            return (_NO, 0) if re.search(r"[\n<>]", s[pos + 1 :]) else (_PENDING, 0)
        return _PENDING, 0
    if dest.pos >= n:
        return _PENDING, 0
    if not MD.validateLink(MD.normalizeLink(dest.str)):
        return _NO, 0
    after = _skip_space(s, dest.pos)
    if after >= n:
        return _PENDING, 0
    if s[after] == ")":
        return _OK, after + 1
    if after == dest.pos or s[after] not in "\"'(":
        return _NO, 0
    title = MD.helpers.parseLinkTitle(s, after, n)
    if not title.ok:
        return (_PENDING, 0) if title.can_continue else (_NO, 0)
    after = _skip_space(s, title.pos)
    if after >= n:
        return _PENDING, 0
    return (_OK, after + 1) if s[after] == ")" else (_NO, 0)


def _link(text: Text, i: int, refs: dict[str, Any]) -> tuple[int, int]:
    """At `[`: (_OK, end) for a whole link, (_PENDING, 0) or (_NO, 0)."""
    s = text.s
    n = len(s)
    k = text.label_end(i)
    if k < 0:
        k = n
    if k >= n:
        return _PENDING, 0
    label_end, after = k, k + 1
    if after >= n:
        return _PENDING, 0
    if s[after] == "(":
        state, end = _inline_link(s, after)
        if state != _NO:
            return state, end
    if refs:
        if s[after] == "[":
            close = s.find("]", after + 1)
            if close < 0:
                return _PENDING, 0
            label = s[after + 1 : close] or s[i + 1 : label_end]
            if normalizeReference(label) in refs:
                return _OK, close + 1
            return _NO, 0
        if normalizeReference(s[i + 1 : label_end]) in refs:
            return _OK, label_end + 1
    return _NO, 0


def _math(s: str, i: int) -> tuple[int, int]:
    """At `$`, `\\(` or `\\[`: (_OK, end) for whole math (asking the MarkdownIt's own
    rules), (_PENDING, 0) while its close may still come, (_NO, 0) when it cannot."""
    state = StateInline(s, MD, {}, [])
    state.pos = i
    dollar = s[i] == "$"
    if (dollar_inline if dollar else bracket_inline)(state, True):
        return _OK, state.pos
    if dollar:
        back = i
        while back > 0 and s[back - 1] == "\\":
            back -= 1
        if (i - back) % 2 or (i > 0 and s[i - 1].isdigit()):
            return _NO, 0
        double = s.startswith("$$", i)
        after = i + (2 if double else 1)
        if not double and after < len(s) and _ws(s[after]):
            return _NO, 0
        return (_NO, 0) if (_DOUBLE if double else _SINGLE).search(s, after) else (_PENDING, 0)
    closer = "\\]" if s[i + 1] == "[" else "\\)"
    reach = i + 2 + MATH_MAX + len(closer)  # the rule looks no further
    if s.find(closer, i + 2, reach) >= 0 or len(s) > reach:
        return _NO, 0
    return _PENDING, 0


# an unescaped `$` (`$$`): what may close math opened before it
_SINGLE = re.compile(r"(?<!\\)(?:\\\\)*\$")
_DOUBLE = re.compile(r"(?<!\\)(?:\\\\)*\$\$")


class _Delim:
    __slots__ = ("char", "count", "size", "pos", "opens", "closes")

    def __init__(self, char: str, count: int, pos: int, opens: bool, closes: bool) -> None:
        self.char, self.count, self.size, self.pos = char, count, count, pos
        self.opens, self.closes = opens, closes


_SCAN_CACHE: dict[tuple[str, bool, tuple[str, ...]], tuple] = {}
_SCAN_CACHE_CHARS = [0]  # the texts it holds, in characters: bounded, not only counted
_SCAN_CACHE_MAX_CHARS = 4_000_000


def scan_inline(
    s: str, refs: dict[str, Any], edge: bool
) -> tuple[list[tuple[int, int]], int, list[_Delim], int]:
    """A light pass over inline Markdown after markdown-it's rules (code spans first,
    links, autolinks, flanking delimiter runs, the rule of 3).

    Returns (spans: (start, end) of each inline element, end INF when still open at
    the end; hold: where a construct still being typed at the end starts, len(s) if
    none; the emphasis openers open at the end; the backtick count of a code span open
    at the end, or 0). With `edge` False the end of `s` is its end (nothing pending)."""
    if syntax_cost(s) > INLINE_BUDGET:
        return [], len(s), [], 0  # shown as text (engine.py): nothing opens, nothing waits
    key = (s, edge, tuple(refs) if refs else ())
    found = _SCAN_CACHE.get(key)
    if found is None:
        found = _scan_uncached(s, refs, edge)
        if len(_SCAN_CACHE) > 2048 or _SCAN_CACHE_CHARS[0] + len(s) > _SCAN_CACHE_MAX_CHARS:
            _SCAN_CACHE.clear()
            _SCAN_CACHE_CHARS[0] = 0
        _SCAN_CACHE[key] = found
        _SCAN_CACHE_CHARS[0] += len(s)
    return found


def _scan_uncached(
    s: str, refs: dict[str, Any], edge: bool
) -> tuple[list[tuple[int, int]], int, list[_Delim], int]:
    n = len(s)
    text = Text(s)
    spans: list[tuple[int, int]] = []
    stack: list[_Delim] = []
    hold, code = n, 0
    # (char, closer size % 3, closer opens) -> stack depth below which no opener fits it
    # (as markdown-it's openers_bottom): a closer never searches the same openers twice
    bottom: dict[tuple[str, int, bool], int] = {}
    i = steps = 0
    while i < n:
        steps += 1
        c = s[i]
        if c == "$" or (c == "\\" and s.startswith(("\\(", "\\["), i)):
            state, end = _math(s, i)
            if state == _OK:
                spans.append((i, end))
                i = end
                continue
            if state == _PENDING and edge:
                single = c == "$" and not s.startswith("$$", i)
                if n - i <= (_DOLLAR_HOLD if single else MATH_MAX):
                    hold = i  # math waits for its close (like a link for its `)`)
                    spans.append((i, INF))
                    break
            if c == "$":
                i += 1
                continue
        if c == "\\":
            if i + 1 >= n:
                if edge:
                    hold = i
                break
            i += 2 if s[i + 1] in _ASCII_PUNCT else 1
            continue
        if c == "`":
            j = i
            while j < n and s[j] == "`":
                j += 1
            close = text.run(j, j - i)
            if close >= 0:
                spans.append((i, close + j - i))
                i = close + j - i
                continue
            if edge and j >= n:
                hold = i  # the run may grow
                break
            code = j - i
            spans.append((i, INF))
            if edge:  # backticks at the end may be the closing run, arriving
                t = n
                while t > j and s[t - 1] == "`":
                    t -= 1
                if t < n:
                    hold = t
            break
        if c in "*_~":
            j = i
            while j < n and s[j] == c:
                j += 1
            if edge and j >= n:
                hold = i  # opener or closer: the next character tells
                break
            count = j - i
            start = i
            if c == "~":
                start += count % 2
                count -= count % 2
                if not count:
                    i = j
                    continue
            prev = s[i - 1] if i > 0 else None
            nxt = s[j] if j < n else None
            left = not _ws(nxt) and (not _punct(nxt) or _ws(prev) or _punct(prev))
            right = not _ws(prev) and (not _punct(prev) or _ws(nxt) or _punct(nxt))
            if c == "_":
                opens = left and (not right or _punct(prev))
                closes = right and (not left or _punct(nxt))
            else:
                opens, closes = left, right
            if closes:
                used = 0
                fits = (c, (j - i) % 3, opens)
                while count > 0:
                    at = _opener(stack, c, j - i, opens, bottom.get(fits, 0))
                    if at < 0:
                        steps += len(stack) - bottom.get(fits, 0)
                        bottom[fits] = len(stack)
                        break
                    steps += len(stack) - at
                    op = stack[at]
                    use = 2 if c == "~" or (op.count >= 2 and count >= 2) else 1
                    op.count -= use
                    count -= use
                    used += use
                    spans.append((op.pos + op.count, start + used))
                    del stack[at + 1 :]
                    if op.count <= 0:
                        del stack[at]
                    for other, depth in bottom.items():
                        if depth > len(stack):
                            bottom[other] = len(stack)
                start += used
            if count > 0 and opens:
                stack.append(_Delim(c, count, start, opens, closes))
            i = j
            continue
        if c == "!" and edge and i + 1 >= n:
            hold = i
            break
        if c == "[":
            state, end = _link(text, i, refs)
            if state == _OK:
                spans.append((i, end))
                i = end
                continue
            if state == _PENDING and edge:
                begin = i - 1 if i > 0 and s[i - 1] == "!" else i
                if n - begin <= _LINK_HOLD:
                    hold = begin
                    spans.append((begin, INF))
                    break
            i += 1
            continue
        if c == "<":
            m = _AUTOLINK.match(s, i)
            if m:
                spans.append((i, m.end()))
                i = m.end()
                continue
            if edge and _AUTOLINK_START.fullmatch(s, i):
                hold = i
                break
            i += 1
            continue
        if c == "&" and edge and _ENTITY_START.fullmatch(s, i):
            hold = i
            break
        # nothing else means anything here: on to the next character that may
        m = _SPECIAL.search(s, i + 1)
        i = m.start() if m else n
    if edge and hold == n and not code:
        k = n
        while k > 0 and not s[k - 1].isspace():
            k -= 1
        k = max(k, max((e for _, e in spans if e < INF), default=0))
        word = s[k:].lstrip("([{*_~\"'<").lower()
        if word and (
            "://" in word
            or "www." in word
            or "@" in word
            or any(start.startswith(word) for start in _URL_STARTS)
        ):
            hold = k  # linkify would give it an href that changes as it grows
    spans.extend((op.pos, INF) for op in stack)
    count_scanned(steps)
    return spans, hold, stack, code


def _opener(stack: list[_Delim], char: str, size: int, closer_opens: bool, bottom: int = 0) -> int:
    for at in range(len(stack) - 1, bottom - 1, -1):
        op = stack[at]
        if op.char != char:
            continue
        if (
            char != "~"
            and (op.closes or closer_opens)
            and (op.size + size) % 3 == 0
            and (op.size % 3 or size % 3)
        ):
            continue
        return at
    return -1


def closers_of(s: str, refs: dict[str, Any]) -> str:
    """What closes the inline code and emphasis left open at the end of `s`."""
    _, _, stack, code = scan_inline(s, refs, False)
    out = "`" * code
    for op in reversed(stack):
        if op.count > 0:
            out += op.char * op.count
    return out
