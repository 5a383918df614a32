"""Searching conversations: the same question on both engines, FTS5 on SQLite and full text
(tsvector under a GIN index, app/store/pg_schema.py) on PostgreSQL.

The terms come as FTS5 strings (app/search.py): each a quoted phrase, a trailing `*` for a
prefix. On PostgreSQL a phrase is read by `phraseto_tsquery` (the parser that read the
stored text), a prefix phrase by `to_tsquery` with `:*` on its last word; a title is marked
whole by ts_headline, a message around its best hits (16 words, as FTS5's snippet).
"""
from __future__ import annotations

import unicodedata
from typing import Any

from .. import db as dbm
from .base import Base

CONFIG = "'tabletalk'"  # PostgreSQL's text search configuration (pg_schema.py)


def _words(text: str) -> list[str]:
    """The words of a phrase as FTS5's unicode61 splits it: runs of letters, numbers and private use."""
    words, word = [], []
    for ch in text:
        if unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Co":
            word.append(ch)
        elif word:
            words.append("".join(word))
            word = []
    return words + (["".join(word)] if word else [])


def tsquery(term: str) -> tuple[str, str]:
    """An FTS5 string as (the SQL that makes its tsquery, its one parameter)."""
    prefix = term.endswith("*")
    phrase = term.rstrip("*")[1:-1].replace('""', '"')
    if not prefix:
        return f"phraseto_tsquery({CONFIG}, ?)", phrase
    words = [f"'{w}'" for w in _words(phrase)]  # letters and numbers only: nothing to escape
    return f"to_tsquery({CONFIG}, ?)", " <-> ".join(words) + ":*"


class Search(Base):
    def search(self, terms: list[str], marks: tuple[str, str], person: int | None,
               limit: int = 50) -> list[dict[str, Any]]:
        """`person`'s conversations holding every term (FTS5 strings, already safe) in their title or in
        any message or answer, newest first. Each comes with its title highlighted where it
        matched and a snippet of its best matching item, `marks` around the hits."""
        if not terms:
            return []
        with self.snapshot():  # the matches, their titles and snippets as of one moment
            if dbm.postgres(self.db):
                return self._search_pg(terms, marks, person, limit)
            return self._search_fts5(terms, marks, person, limit)

    def _found(self, every: str, params: list[Any], person: int | None, limit: int) -> list[Any]:
        whose, owned = self._is("c.person", person)
        return self.all(f"SELECT c.id, c.title, c.active, a.name AS agent FROM conversations c "
                        f"LEFT JOIN assistants a ON a.id = c.agent WHERE {whose} AND c.id IN ({every}) "
                        "ORDER BY c.active DESC, c.id DESC LIMIT ?", [*owned, *params, limit])

    @staticmethod
    def _hit(r: Any, title: Any, item: int | None, snippet: Any) -> dict[str, Any]:
        return {"chat": r["id"], "title": r["title"], "title_marked": title[0] if title else None,
                "item": item, "snippet": snippet[0] if snippet else "", "active": r["active"], "agent": r["agent"] or ""}

    def _search_fts5(self, terms: list[str], marks: tuple[str, str], person: int | None,
                     limit: int) -> list[dict[str, Any]]:
        every = " INTERSECT ".join("SELECT chat FROM search WHERE search MATCH ?" for _ in terms)
        found = self._found(every, terms, person, limit)
        if not found:
            return []
        anyterm = " OR ".join(terms)
        places = ",".join("?" * len(found))
        best = {r["chat"]: r["item"] for r in self.all(
            f"""SELECT chat, item FROM (
                    SELECT chat, rowid AS item, row_number() OVER (PARTITION BY chat ORDER BY rank) AS n
                    FROM search WHERE search MATCH ? AND rowid > 0 AND chat IN ({places}))
                WHERE n = 1""", [anyterm, *(r["id"] for r in found)])}
        hits = []
        for r in found:
            title = self.one("SELECT highlight(search, 1, ?, ?) FROM search WHERE search MATCH ? AND rowid = ?",
                             [*marks, anyterm, -r["id"]])
            item = best.get(r["id"])
            snippet = self.one("SELECT snippet(search, 2, ?, ?, '…', 16) FROM search WHERE search MATCH ? "
                               "AND rowid = ?", [*marks, anyterm, item]) if item else None
            hits.append(self._hit(r, title, item, snippet))
        return hits

    def _search_pg(self, terms: list[str], marks: tuple[str, str], person: int | None,
                   limit: int) -> list[dict[str, Any]]:
        queries = [tsquery(t) for t in terms]
        every = " INTERSECT ".join(f"SELECT chat FROM search WHERE doc @@ {sql}" for sql, _ in queries)
        found = self._found(every, [p for _, p in queries], person, limit)
        if not found:
            return []
        anyterm = "(" + " || ".join(sql for sql, _ in queries) + ")"
        words = [p for _, p in queries]
        places = ",".join("?" * len(found))
        best = {r["chat"]: r["item"] for r in self.all(
            f"""SELECT chat, item FROM (
                    SELECT chat, id AS item, row_number() OVER (PARTITION BY chat ORDER BY ts_rank(doc, q) DESC, id) AS n
                    FROM search, {anyterm} AS q WHERE doc @@ q AND id > 0 AND chat IN ({places})) AS ranked
                WHERE n = 1""", [*words, *(r["id"] for r in found)])}
        start, stop = (m.replace('"', "") for m in marks)
        whole = f'StartSel="{start}", StopSel="{stop}", HighlightAll=true'
        around = f'StartSel="{start}", StopSel="{stop}", MaxWords=16, MinWords=4, ShortWord=0'
        hits = []
        for r in found:
            title = self.one(f"SELECT ts_headline({CONFIG}, title, q, ?) FROM search, {anyterm} AS q "
                             "WHERE doc @@ q AND id = ?", [whole, *words, -r["id"]])
            item = best.get(r["id"])
            snippet = self.one(f"SELECT ts_headline({CONFIG}, text, q, ?) FROM search, {anyterm} AS q WHERE id = ?",
                               [around, *words, item]) if item else None
            hits.append(self._hit(r, title, item, snippet))
        return hits
