"""The work renders do, counted while someone counts it.

Why a module of its own: rendering is proved linear in its input by counts, not times
(tests/test_markdown_linear.py, benchmarks/dispatch_cost.py): the characters given to the
block parser, stepped over by the edge's scanner, given to Pygments, and of HTML made. Each
place that does such work tells this module, which adds it to every `Work` being counted
(`counting()`) and costs one test of an empty list when none is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Work:
    """Characters of work done while it was being counted."""

    parsed: int = 0  # given to markdown-it's block parser, or looked at by a check that stands for a parse
    scanned: int = 0  # stepped over by the growing edge's scanner (scan, labels)
    highlighted: int = 0  # of code given to Pygments
    rendered: int = 0  # of HTML a growing render made (not taken from what it kept)
    renders: int = 0  # growing renders made (not the same grid point's again)
    finals: int = 0  # final renders made (not the one kept)


COUNTING: list[Work] = []  # what is being counted now (most often nothing)


@contextmanager
def counting() -> Iterator[Work]:
    """Count the work of every render until the block ends."""
    work = Work()
    COUNTING.append(work)
    try:
        yield work
    finally:
        COUNTING.remove(work)


def add(field: str, n: int) -> None:
    """`n` characters of `field`'s work (call it behind `if COUNTING:`)."""
    for work in COUNTING:
        setattr(work, field, getattr(work, field) + n)
