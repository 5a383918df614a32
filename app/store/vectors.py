"""Passages' vectors: those still to embed, the vectors written, and the nearest to a question
(docs/knowledge.md).

A vector row is the passage's (deleted with it) and names the model that made it: a
passage whose vector is missing, or was made by another model than AI_EMBEDDINGS now, is
embedded (again) by app/run/embedding.py. The nearest are found outside SQL, the same on
both engines (app/knowledge/vectors.py; neither sqlite-vec, which this Python cannot load,
nor pgvector, which Debian does not package, can be counted on): a first look over the
vectors' sign bits held in this process's memory (`Codes`, read again only from the rows new
since), then the few hundred it keeps scored exactly from their rows, within what the
question may see. When those hold fewer than asked (a scope whose codes are gone since), every
vector in scope is read and scored, a batch at a time.
"""
from __future__ import annotations

from collections.abc import Sequence

from . import db as dbm
from .rows import Base
from ..knowledge.vectors import Codes, Nearest, code
from ..tables import Scope

SEARCHABLE = ("reading", "ready", "stopped")  # a document's passages are found as soon as they are written
BATCH = 2048  # vectors read and scored at a time when every one in scope is: ~3 MB at 384 numbers
FIRST_LOOK = 256  # passages the first look keeps to be scored exactly (or 8 times those asked for)
GONE_SHARE = 0.1  # of those, gone since (their document deleted): the codes are read again


class Vectors(Base):
    codes: dict[str, Codes]  # (Store.__init__) one model's codes, this process's first look

    def within(self, scope: Scope) -> tuple[str, list]:
        """The SQL condition (on `d`, the documents) and its values for a search's scope."""
        marks = ",".join("?" * len(scope.collections)) or "NULL"
        picked = f" OR d.id IN ({','.join('?' * len(scope.documents))})" if scope.documents else ""
        return (f"d.state IN ({','.join('?' * len(SEARCHABLE))}) AND (d.collection IN ({marks}) OR d.chat = ?{picked})",
                [*SEARCHABLE, *scope.collections, scope.chat if scope.chat is not None else -1, *scope.documents])

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
        kept (one deleted meanwhile is passed over); how many were written. They take one
        rev, in commit order, so that a worker's codes read what is new since their last."""
        written = 0
        with self.write(notify=False) as db:
            rev = dbm.bump(db, told=False)  # (no page shows a vector: no feed is woken for one)
            for passage, vector in vectors:
                written += db.conn.execute(
                    "INSERT INTO passage_vectors (passage, model, rev, vector, code) SELECT ?, ?, ?, ?, ? "
                    "WHERE EXISTS (SELECT 1 FROM passages WHERE id = ?) ON CONFLICT (passage) DO UPDATE "
                    "SET model = excluded.model, rev = excluded.rev, vector = excluded.vector, code = excluded.code",
                    [passage, model, rev, vector, code(vector), passage]).rowcount
        return written

    def vector_counts(self, model: str, collection: int | None = None) -> tuple[int, int]:
        """Of the passages of documents a search sees (in `collection`, else all), how many
        have a vector of `model`, and how many there are."""
        row = self._one(
            f"""SELECT count(v.passage), count(*) FROM passages p JOIN documents d ON d.id = p.document
                LEFT JOIN passage_vectors v ON v.passage = p.id AND v.model = ?
                WHERE d.state IN ({','.join('?' * len(SEARCHABLE))}){' AND d.collection = ?' if collection else ''}""",
            [model, *SEARCHABLE, *([collection] if collection else [])])
        return int(row[0]), int(row[1])

    def nearest_passages(self, model: str, query: bytes, scope: Scope, limit: int) -> list[tuple[int, float]]:
        """The `limit` passages in `scope` whose vectors by `model` are nearest to `query` (a
        packed vector of the same model): (passage, cosine), nearest first."""
        codes = self._codes(model)
        looked, more = codes.first_look(query, scope.collections, scope.chat, scope.documents, max(FIRST_LOOK, limit * 8))
        nearest = Nearest(query, limit)
        if looked:
            where, params = self.within(scope)
            # by their keys alone, the model checked here: with "v.model = ?" in the WHERE, SQLite
            # (no statistics) walked the model's index, every vector of it, ~16 ms at 100,000
            # (on PostgreSQL the ids as one array: a statement of 320 marks was parsed anew each time)
            keyed, keys = ("= ANY(?)", [looked]) if dbm.postgres(self.db) else \
                (f"IN ({','.join('?' * len(looked))})", looked)
            rows = [r for r in self._vector_rows(
                f"""SELECT v.passage, v.vector, CASE WHEN {where} THEN 1 ELSE 0 END, v.model FROM passage_vectors v
                    JOIN passages p ON p.id = v.passage JOIN documents d ON d.id = p.document
                    WHERE v.passage {keyed}""", [*params, *keys]) if r[3] == model]
            if len(looked) - len(rows) > GONE_SHARE * len(looked):
                codes.stale = True
            kept = [r for r in rows if r[2]]
            nearest.add([r[0] for r in kept], [r[1] for r in kept])
            if len(kept) >= limit or not more and len(rows) == len(looked):
                return nearest.best()
        elif not more:
            return []  # no vector in scope
        return self._scan(model, query, scope, limit)

    def _vector_rows(self, sql: str, params: list) -> list:
        """Rows holding vectors: from PostgreSQL in its binary format (a vector's 1,536 bytes as
        they are, not as 3,074 characters of hex to decode: ~3 ms of the ~8 a search's second
        look at 320 vectors took)."""
        if dbm.postgres(self.db):
            return self.db.conn.execute(sql, params, binary=True).fetchall()
        return self._all(sql, params)

    def _codes(self, model: str) -> Codes:
        """`model`'s codes as the rows have them now: those new since the last look added, or
        all read again (the first look of this process, a rewritten or deleted vector seen)."""
        codes = self.codes.get(model)
        newest = int(self._one("SELECT coalesce(max(rev), 0) FROM passage_vectors WHERE model = ?", [model])[0])
        if codes is None or codes.stale or newest < codes.rev:
            self.codes.clear()  # (one model at a time: AI_EMBEDDINGS's)
            codes = self.codes[model] = Codes()
        if newest > codes.rev:
            new = self._code_rows(model, codes.rev)
            if not codes.add(new):
                codes = self.codes[model] = Codes()
                codes.add(self._code_rows(model, 0))
        return codes

    def _code_rows(self, model: str, after: int) -> list[tuple]:
        return [tuple(r) for r in self._all(
            """SELECT v.passage, v.rev, d.collection, d.chat, d.id, v.code FROM passage_vectors v
               JOIN passages p ON p.id = v.passage JOIN documents d ON d.id = p.document
               WHERE v.model = ? AND v.rev > ? ORDER BY v.rev, v.passage""", [model, after])]

    def _scan(self, model: str, query: bytes, scope: Scope, limit: int) -> list[tuple[int, float]]:
        """Every vector in scope read and scored, a batch at a time in passage order."""
        where, params = self.within(scope)
        nearest, after = Nearest(query, limit), 0
        while True:
            rows = self._vector_rows(
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
