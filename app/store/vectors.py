"""Passages' vectors: those still to embed, the vectors written, and the nearest to a question
(docs/knowledge.md).

A vector row is the passage's (deleted with it) and names the model that made it: a
passage whose vector is missing, or was made by another model than AI_EMBEDDINGS now, is
embedded (again) by app/run/embedding.py. The nearest are scored outside SQL, on both engines
alike (app/knowledge/vectors.py: neither sqlite-vec, whose extension most Pythons cannot
load, nor pgvector, which Debian does not package, can be counted on), read a batch at a
time in the order of their passage, within what the question may see.
"""
from __future__ import annotations

from collections.abc import Sequence

from .rows import Base
from ..knowledge.vectors import Nearest

SEARCHABLE = ("reading", "ready", "stopped")  # a document's passages are found as soon as they are written
BATCH = 2048  # vectors read and scored at a time: ~2 MB at 256 dimensions


class Vectors(Base):
    def within(self, collections: Sequence[int], chat: int | None) -> tuple[str, list]:
        """The SQL condition (on `d`, the documents) and its values for a search's scope."""
        marks = ",".join("?" * len(collections)) or "NULL"
        return (f"d.state IN ({','.join('?' * len(SEARCHABLE))}) AND (d.collection IN ({marks}) OR d.chat = ?)",
                [*SEARCHABLE, *collections, chat if chat is not None else -1])

    def passages_to_embed(self, model: str, after: int, limit: int, skip: Sequence[int] = ()) -> list[tuple[int, str]]:
        """Up to `limit` passages after id `after`, in order, with no vector of `model` (and
        not in `skip`): (id, what is embedded: the heading, then the text)."""
        skipped = f"AND p.id NOT IN ({','.join('?' * len(skip))})" if skip else ""
        rows = self._all(
            f"""SELECT p.id, p.heading, p.text FROM passages p JOIN documents d ON d.id = p.document
                WHERE p.id > ? AND d.state IN ({','.join('?' * len(SEARCHABLE))}) {skipped} AND NOT EXISTS
                (SELECT 1 FROM passage_vectors v WHERE v.passage = p.id AND v.model = ?) ORDER BY p.id LIMIT ?""",
            [after, *SEARCHABLE, *skip, model, limit])
        return [(r[0], f"{r[1]}\n{r[2]}" if r[1] else r[2]) for r in rows]

    def last_passage(self) -> int:
        return int(self._one("SELECT coalesce(max(id), 0) FROM passages")[0])

    def write_vectors(self, model: str, vectors: Sequence[tuple[int, bytes]]) -> int:
        """Passages' vectors by `model` (replacing another model's), for the passages still
        kept (one deleted meanwhile is passed over); how many were written."""
        written = 0
        with self.write(notify=False) as db:
            for passage, vector in vectors:
                written += db.conn.execute(
                    "INSERT INTO passage_vectors (passage, model, vector) SELECT ?, ?, ? "
                    "WHERE EXISTS (SELECT 1 FROM passages WHERE id = ?) "
                    "ON CONFLICT (passage) DO UPDATE SET model = excluded.model, vector = excluded.vector",
                    [passage, model, vector, passage]).rowcount
        return written

    def vector_counts(self, model: str) -> tuple[int, int]:
        """Of the passages of documents a search sees, how many have a vector of `model`, and how many there are."""
        row = self._one(
            f"""SELECT count(v.passage), count(*) FROM passages p JOIN documents d ON d.id = p.document
                LEFT JOIN passage_vectors v ON v.passage = p.id AND v.model = ?
                WHERE d.state IN ({','.join('?' * len(SEARCHABLE))})""", [model, *SEARCHABLE])
        return int(row[0]), int(row[1])

    def nearest_passages(self, model: str, query: bytes, collections: Sequence[int], chat: int | None,
                         limit: int) -> list[tuple[int, float]]:
        """The `limit` passages in scope whose vectors by `model` are nearest to `query` (a
        packed vector of the same model): (passage, cosine), nearest first."""
        where, params = self.within(collections, chat)
        nearest, after = Nearest(query, limit), 0
        while True:
            rows = self._all(
                f"""SELECT v.passage, v.vector FROM passage_vectors v JOIN passages p ON p.id = v.passage
                    JOIN documents d ON d.id = p.document
                    WHERE v.model = ? AND v.passage > ? AND {where} ORDER BY v.passage LIMIT ?""",
                [model, after, *params, BATCH])
            if not rows:
                break
            nearest.add([r[0] for r in rows], [r[1] for r in rows])
            if len(rows) < BATCH:
                break
            after = rows[-1][0]
        return nearest.best()

