"""A page's text cut into passages of about 1,000 characters, each with the nearest heading above it.

Passages break at paragraph ends, else at sentence ends, else between words, and inside a
word only when one "word" is longer than a passage. Whitespace in a paragraph becomes one
space; characters that are not text (control characters, lone surrogates: PostgreSQL and
SQLite refuse them) become spaces too. A heading change ends a passage, so every passage has
one heading.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby

PASSAGE = 1000  # characters: the size that retrieved best when measured (docs/knowledge.md)
HEADING = 300  # characters of a heading kept: it is repeated on every passage under it
NOT_TEXT = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff]")
# Coarsest first: paragraphs, sentences, words; each with what joins its parts again.
BOUNDARIES = ((re.compile(r"\n\n"), "\n\n"), (re.compile(r"(?<=[.!?…。！？])\s"), " "), (re.compile(r" "), " "))


@dataclass(frozen=True)
class Passage:
    page: int  # 1-based
    heading: str  # the nearest heading above (may be "")
    text: str


def passages(page: int, blocks: Iterable[tuple[str, str]]) -> list[Passage]:
    """Page `page`'s blocks, (heading, paragraph) in order, as passages: the paragraphs under
    one heading joined up to PASSAGE characters; empty ones dropped."""
    out = []
    for heading, group in groupby(((clean(h)[:HEADING], clean(p)) for h, p in blocks), key=lambda b: b[0]):
        text = "\n\n".join(p for _, p in group if p)
        out += [Passage(page, heading, part) for part in cut(text, PASSAGE) if part]
    return out


def clean(text: str) -> str:
    """`text` on one line: each run of whitespace (and of what is not text) one space."""
    return " ".join(NOT_TEXT.sub(" ", text).split())


def cut(text: str, limit: int, level: int = 0) -> list[str]:
    """`text` in parts of at most `limit` characters, each as long as fits, cut at the coarsest
    boundary that makes them fit (BOUNDARIES), else inside a word."""
    if len(text) <= limit:
        return [text]
    if level == len(BOUNDARIES):
        return [text[i:i + limit] for i in range(0, len(text), limit)]
    boundary, joiner = BOUNDARIES[level]
    return pack([part for piece in boundary.split(text) if piece for part in cut(piece, limit, level + 1)],
                joiner, limit)


def pack(parts: list[str], joiner: str, limit: int) -> list[str]:
    """Neighbouring parts joined while they fit in `limit` (greedily, in order)."""
    out: list[str] = []
    for part in parts:
        if out and len(out[-1]) + len(joiner) + len(part) <= limit:
            out[-1] += joiner + part
        else:
            out.append(part)
    return out
