"""Searching conversations: the same question on both engines, FTS5 on SQLite and full text
(tsvector under a GIN index, app/store/schema/pg_migrations.py) on PostgreSQL.

The terms come as FTS5 strings (app/web/search.py): each a quoted phrase, a trailing `*` for a
prefix. On PostgreSQL a phrase is read by `phraseto_tsquery` (the parser that read the
stored text, its punctuation as spaces), a prefix phrase by `to_tsquery` with `:*` on its
last word. The hits are marked here, in Python, as FTS5's highlight() and snippet() mark them
(PostgreSQL's ts_headline reads `<b>` as a tag, not as text): a title whole, a message as
the 16 words around its most hits.
"""
from __future__ import annotations

import unicodedata
from typing import Any

from . import db as dbm
from .rows import Base

CONFIG = "'tabletalk'"  # PostgreSQL's text search configuration (pg_migrations.py)


def _words(text: str) -> list[str]:
    """The words of a phrase as FTS5's unicode61 splits it: runs of letters, numbers and private use."""
    return [text[a:b] for a, b in _spans(text)]


def tsquery(term: str) -> tuple[str, str]:
    """An FTS5 string as (the SQL that makes its tsquery, its one parameter)."""
    prefix = term.endswith("*")
    phrase = term.rstrip("*")[1:-1].replace('""', '"')
    if not prefix:
        return f"phraseto_tsquery({CONFIG}, search_words(?))", phrase
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
        return self._all(f"SELECT c.id, c.title, c.active, a.name AS agent FROM conversations c "
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
        best = {r["chat"]: r["item"] for r in self._all(
            f"""SELECT chat, item FROM (
                    SELECT chat, rowid AS item, row_number() OVER (PARTITION BY chat ORDER BY rank) AS n
                    FROM search WHERE search MATCH ? AND rowid > 0 AND chat IN ({places}))
                WHERE n = 1""", [anyterm, *(r["id"] for r in found)])}
        hits = []
        for r in found:
            title = self._one("SELECT highlight(search, 1, ?, ?) FROM search WHERE search MATCH ? AND rowid = ?",
                             [*marks, anyterm, -r["id"]])
            item = best.get(r["id"])
            snippet = self._one("SELECT snippet(search, 2, ?, ?, '…', 16) FROM search WHERE search MATCH ? "
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
        places = ",".join("?" * len(found))
        best = {r["chat"]: (r["item"], r["text"]) for r in self._all(
            f"""SELECT chat, item, text FROM (
                    SELECT chat, id AS item, text,
                           row_number() OVER (PARTITION BY chat ORDER BY ts_rank(doc, q) DESC, id) AS n
                    FROM search, (SELECT {anyterm} AS q) AS query
                    WHERE doc @@ q AND id > 0 AND chat IN ({places})) AS ranked
                WHERE n = 1""", [*(p for _, p in queries), *(r["id"] for r in found)])}
        phrases = [phrase(t) for t in terms]
        hits = []
        for r in found:
            item, text = best.get(r["id"], (None, ""))
            title = highlight(r["title"], phrases, marks)
            hits.append(self._hit(r, (title,) if title is not None else None, item,
                                  (snippet(text, phrases, marks),) if item else None))
        return hits


# --- marking the hits on PostgreSQL, as FTS5's highlight() and snippet() do ---------------

Phrase = tuple[list[str], bool]  # its words (folded), and whether the last one is a prefix


def fold(word: str) -> str:
    """A word as the index compares it: without case and accents ("Café" is "cafe")."""
    return "".join(c for c in unicodedata.normalize("NFKD", word.casefold()) if not unicodedata.combining(c))


def phrase(term: str) -> Phrase:
    return [fold(w) for w in _words(term.rstrip("*")[1:-1].replace('""', '"'))], term.endswith("*")


def _spans(text: str) -> list[tuple[int, int]]:
    """Where each word of `text` is (FTS5's unicode61 words: runs of letters and numbers)."""
    spans, start = [], None
    for i, ch in enumerate(text):
        inside = unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Co"
        if inside and start is None:
            start = i
        elif not inside and start is not None:
            spans.append((start, i))
            start = None
    return spans + ([(start, len(text))] if start is not None else [])


def _hits(text: str, spans: list[tuple[int, int]], phrases: list[Phrase]) -> set[int]:
    """The positions of the words that are part of a phrase's match."""
    words = [fold(text[a:b]) for a, b in spans]
    hit: set[int] = set()
    for want, prefix in phrases:
        n = len(want)
        for i in range(len(words) - n + 1):
            if all(words[i + k] == w or (prefix and k == n - 1 and words[i + k].startswith(w))
                   for k, w in enumerate(want)):
                hit.update(range(i, i + n))
    return hit


def _marked(text: str, spans: list[tuple[int, int]], hit: set[int], first: int, last: int,
            marks: tuple[str, str]) -> str:
    out, at = [], spans[first][0]
    for i in range(first, last):
        a, b = spans[i]
        out.append(text[at:a])
        out.append(f"{marks[0]}{text[a:b]}{marks[1]}" if i in hit else text[a:b])
        at = b
    return "".join(out)


def highlight(text: str, phrases: list[Phrase], marks: tuple[str, str]) -> str | None:
    """The whole text, its hits marked; None when nothing in it matches (FTS5: no row)."""
    spans = _spans(text)
    hit = _hits(text, spans, phrases)
    if not hit:
        return None
    return text[:spans[0][0]] + _marked(text, spans, hit, 0, len(spans), marks) + text[spans[-1][1]:]


def snippet(text: str, phrases: list[Phrase], marks: tuple[str, str], size: int = 16) -> str:
    """Up to `size` words around the most hits, marked, with … where the text goes on."""
    spans = _spans(text)
    if not spans:
        return ""
    hit = _hits(text, spans, phrases)
    first = max(range(max(1, len(spans) - size + 1)), key=lambda s: (sum(1 for i in hit if s <= i < s + size), -s))
    last = min(len(spans), first + size)
    head = "…" if first > 0 else text[:spans[0][0]]
    tail = "…" if last < len(spans) else text[spans[-1][1]:]
    return head + _marked(text, spans, hit, first, last, marks) + tail
