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


def code(vector: bytes) -> bytes:
    """A packed vector's signs, one bit a number, padded to whole 64-bit words: what the first
    look compares (`Codes`). Two vectors whose signs differ in few places point the same way."""
    bits = np.packbits(np.frombuffer(vector, dtype=FLOAT) > 0)
    return bits.tobytes() + b"\0" * (-bits.size % 8)


class Codes:
    """One model's vectors as their sign bits (`code`), in this process's memory: a search's
    first look, which keeps the few hundred nearest by Hamming distance for the store to score
    exactly (binary quantization with rescoring). At 384 numbers a vector a code is 48 bytes:
    100,000 passages hold ~8 MB here, and are compared in ~3-4 ms (numpy's popcount over 64-bit
    words), where reading their float vectors from the database took ~0.5 s.

    Each code keeps its document's collection and conversation, so the first look is made
    within a search's scope. What the store scores decides: a code whose vector is gone since
    (its document deleted) drops out there, and `stale` asks for the codes to be read again."""

    def __init__(self) -> None:
        self.ids = np.empty(0, dtype=np.int64)
        self.collections = np.empty(0, dtype=np.int64)  # -1: none (attached to a conversation)
        self.chats = np.empty(0, dtype=np.int64)  # -1: none (in a collection)
        self.documents = np.empty(0, dtype=np.int64)
        self.words = np.empty((0, 0), dtype=np.uint64)
        self.rev = 0  # the newest vector row held (its rev)
        self.stale = False  # read them all again at the next search

    def __len__(self) -> int:
        return int(self.ids.size)

    def add(self, rows: Sequence[tuple[int, int, int | None, int | None, int, bytes]]) -> bool:
        """Rows (passage, rev, collection, chat, document, code), newer than those held, added;
        False when they cannot be (a passage held already, written again, or codes of
        another width): then read them all again."""
        if not rows:
            return True
        width = len(rows[0][5])
        if width % 8 or any(len(r[5]) != width for r in rows) or (len(self) and width != self.words.shape[1] * 8):
            return False
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if len(self) and np.isin(ids, self.ids).any() or np.unique(ids).size != ids.size:
            return False
        words = np.frombuffer(b"".join(bytes(r[5]) for r in rows), dtype=np.uint64).reshape(len(rows), -1)
        self.words = np.concatenate([self.words, words]) if len(self) else words
        self.ids = np.concatenate([self.ids, ids])
        self.collections = np.concatenate([self.collections, np.fromiter(
            (-1 if r[2] is None else r[2] for r in rows), dtype=np.int64, count=len(rows))])
        self.chats = np.concatenate([self.chats, np.fromiter(
            (-1 if r[3] is None else r[3] for r in rows), dtype=np.int64, count=len(rows))])
        self.documents = np.concatenate([self.documents, np.fromiter((r[4] for r in rows), dtype=np.int64,
                                                                     count=len(rows))])
        self.rev = max(self.rev, max(r[1] for r in rows))
        return True

    def first_look(self, query: bytes, collections: Sequence[int], chat: int | None, documents: Sequence[int],
                   n: int) -> tuple[list[int], bool]:
        """The `n` passages in scope (these collections', `chat`'s, these documents') whose
        codes are nearest to `query`'s (a packed vector), nearest first, and whether there
        were more in scope than those."""
        within = np.isin(self.collections, np.asarray(collections, dtype=np.int64))
        if chat is not None:
            within |= self.chats == chat
        if documents:
            within |= np.isin(self.documents, np.asarray(documents, dtype=np.int64))
        where = np.flatnonzero(within)
        if where.size == 0:
            return [], False
        q = np.frombuffer(code(query), dtype=np.uint64)
        if q.size != self.words.shape[1]:
            return [], True  # another width: the store scores them all
        # every code's distance, then those in scope: gathering the scope's codes first copied
        # them all (~5 MB at 100,000), and numpy's sum along a row of 6 words was slower than
        # adding the 6 columns (~7 ms against ~1.5 ms at 100,000, benchmarks/README.md)
        counts = np.bitwise_count(self.words ^ q)  # a byte per 64-bit word
        distance = counts[:, 0].astype(np.int32)
        for column in range(1, counts.shape[1]):
            distance += counts[:, column]
        distance = distance[where]
        if where.size > n:
            keep = np.argpartition(distance, n - 1)[:n]
            where, distance = where[keep], distance[keep]
        order = np.lexsort((self.ids[where], distance))
        return [int(i) for i in self.ids[where][order]], bool(within.sum() > n)
