"""Rankings merged: the passages found by their words and those found by their meaning, as one
ranking (docs/knowledge.md).

Full text and meaning are merged by reciprocal rank fusion: a passage's score is the sum
over the rankings of 1 / (K + its rank there), which needs no common scale between BM25's
scores and cosines.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

K = 60  # reciprocal rank fusion's constant, as its authors (Cormack et al., 2009) and most engines use


@dataclass(frozen=True)
class Meaning:
    """A question's vector, by the embedding model whose passages' vectors it is compared with."""

    model: str
    vector: bytes  # packed (app/knowledge/vectors.py)


def fuse(*rankings: Sequence[int]) -> list[tuple[int, float]]:
    """The rankings (ids, best first) as one: (id, fused score), best first, ties by id."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, found in enumerate(ranking, 1):
            scores[found] = scores.get(found, 0.0) + 1.0 / (K + rank)
    return sorted(scores.items(), key=lambda p: (-p[1], p[0]))
