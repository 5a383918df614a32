"""Vectors as search by meaning keeps them: a passage's vector packed, and the nearest of many
found batch by batch (docs/knowledge.md).

A vector is kept as float32s at unit length, so that its dot product with a question's is
their cosine. The nearest are scored with numpy in batches of the store's size: memory
stays bounded however many passages a search may see, and both engines, handing over the
same bytes, rank them the same.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DIMS_MAX = 8192  # the longest vector kept (OpenAI's largest is 3,072)
FLOAT = np.dtype("<f4")


def pack(vector: Sequence[float]) -> bytes:
    """`vector` as kept: little-endian float32s, scaled to unit length. ValueError for what
    is not a vector a model could mean (empty, too long, not numbers, all zeros)."""
    try:
        a = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("the embedding is not a list of numbers") from None
    if a.ndim != 1 or not 1 <= a.size <= DIMS_MAX:
        raise ValueError(f"the embedding has {a.size:,} numbers (1 to {DIMS_MAX:,} make one)")
    if not np.isfinite(a).all():
        raise ValueError("the embedding holds a number that is not finite")
    norm = float(np.linalg.norm(a))
    if norm == 0.0 or not math.isfinite(norm):
        raise ValueError("the embedding is all zeros")
    return (a / norm).astype(FLOAT).tobytes()


class Nearest:
    """The `limit` vectors nearest to `query` of those `add`ed, batch by batch."""

    def __init__(self, query: bytes, limit: int):
        self.query = np.frombuffer(query, dtype=FLOAT)
        self.limit = max(1, limit)
        self.ids = np.empty(0, dtype=np.int64)
        self.scores = np.empty(0, dtype=np.float32)

    def add(self, ids: Sequence[int], vectors: Sequence[bytes]) -> None:
        """One batch of passages' ids and vectors. A vector of another size than the query's
        (a model's dimensions changed under the same name) is passed over."""
        size = self.query.nbytes
        kept = [i for i, v in enumerate(vectors) if len(v) == size]
        if not kept:
            return
        matrix = np.frombuffer(b"".join(bytes(vectors[i]) for i in kept), dtype=FLOAT).reshape(len(kept), -1)
        ids_now = np.concatenate([self.ids, np.asarray([ids[i] for i in kept], dtype=np.int64)])
        scores = np.concatenate([self.scores, matrix @ self.query])
        if scores.size > self.limit:
            top = np.argpartition(-scores, self.limit - 1)[:self.limit]
            ids_now, scores = ids_now[top], scores[top]
        self.ids, self.scores = ids_now, scores

    def best(self) -> list[tuple[int, float]]:
        """(passage, cosine), nearest first; ties by id, so both engines agree."""
        return sorted(((int(i), float(s)) for i, s in zip(self.ids, self.scores)), key=lambda p: (-p[1], p[0]))
