"""Link labels and backtick runs of one text, each found once: what keeps `scan` linear.

Why a module of its own: the edge scanner (``scan``) asks, from every ``[``, where its
label ends, and from every backtick run, where a run of the same length is next. Asked
naively (a walk to the end each time) a text of n ``[`` costs n^2. ``Text`` answers
both from what one walk of the text learns, and counts the characters it steps over
(``counting``), so that tests can assert the bound as a count.
"""

from __future__ import annotations

import bisect
import re

from . import counting


class Text:
    """One text being scanned, with what the scan of it learns once and reuses.

    Every pass over it is linear: a link label from each `[` is found by one walk that
    remembers, for every position it passed, the bracket that was innermost there (so a
    later `[` never walks the same characters again), and backtick runs come from one
    index of the text's runs (not a search to the end for every unmatched run)."""

    __slots__ = ("s", "runs", "ends", "owner")

    def __init__(self, s: str) -> None:
        self.s = s
        self.runs: dict[int, list[int]] | None = None  # backtick run size -> starts
        # both made at the first `[`: an int per character, for texts with any bracket
        self.ends: list[int] = []  # at a `[`: its label's `]`, -1 none before the end, -2 not known
        self.owner: list[int] = []  # at a position a walk passed: the `[` innermost there, or -1

    def run(self, start: int, size: int) -> int:
        """Start of the first run of exactly `size` backticks at or after `start` (not inside a
        run), or -1: from the index of the runs, made at the first question."""
        runs = self.runs
        if runs is None:
            runs = self.runs = {}
            for m in _BACKTICKS.finditer(self.s):
                runs.setdefault(m.end() - m.start(), []).append(m.start())
            count_scanned(len(self.s))
        starts = runs.get(size)
        if not starts:
            return -1
        at = bisect.bisect_left(starts, start)
        return starts[at] if at < len(starts) else -1

    def label_end(self, i: int) -> int:
        """The `]` that ends the label opened by the `[` at `i`, or -1 (escapes and code
        spans skipped, nested brackets balanced)."""
        s, n = self.s, len(self.s)
        if not self.ends:
            self.ends, self.owner = [-2] * n, [-1] * n
        ends, owner = self.ends, self.owner
        if ends[i] != -2:
            return ends[i]
        stack = [i]
        k = i + 1
        walked = 0
        while k < n:
            known = owner[k]
            if known >= 0 and ends[known] != -2:
                # an earlier walk passed here: from here on, tokens are the same, and the
                # first `]` at depth 0 closes what is innermost now
                close = ends[known]
                if close < 0:
                    break
                ends[stack.pop()] = close
                if not stack:
                    count_scanned(walked)
                    return close
                k = close + 1
                continue
            owner[k] = stack[-1]
            walked += 1
            ch = s[k]
            if ch == "\\":
                k += 2
                continue
            if ch == "`":
                j = k
                while j < n and s[j] == "`":
                    j += 1
                close = self.run(j, j - k)
                k = close + (j - k) if close >= 0 else j
                continue
            if ch == "[":
                stack.append(k)
            elif ch == "]":
                ends[stack.pop()] = k
                if not stack:
                    count_scanned(walked)
                    return k
            k += 1
        for opened in stack:  # no close before the end, for all still open
            ends[opened] = -1
        count_scanned(walked)
        return -1


_BACKTICKS = re.compile("`+")


def count_scanned(steps: int) -> None:
    """Characters the scanner stepped over, for whoever counts (tests/test_markdown_linear.py
    proves each pass linear in its input by them)."""
    if counting.COUNTING:
        counting.add("scanned", steps)


