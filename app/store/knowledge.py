"""Knowledge: collections, documents, their passages and the search over them (docs/knowledge.md).

A document is read as durable work, as a run is answered: a worker takes it (`owner` until
`leased`), writes each page's passages with its progress in one transaction (`read_page`,
which writes nothing once the document was stopped, deleted or taken by another worker),
and a document whose lease ran out is taken again from the page after the last one written.
Search is FTS5's BM25 on SQLite and each word's ts_rank times its IDF on PostgreSQL, over the
documents a question may see (`Scope`): the same shape of answer on both engines.
"""
from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from . import db as dbm
from .vectors import SEARCHABLE, Vectors
from ..files import TEXT_TO_MODEL_MAX
from ..knowledge.ranking import Meaning, fuse
from ..tables import Attached, Collection, Document, Found, Picks, Scope, cited_passages, picks_of
WORD = re.compile(r"[^\W_]+")  # a query's words: letters and digits (nothing to escape on either engine)
QUERY_WORDS_MAX = 32
FIRST_LOOK = 64  # a search ranks the whole index and looks for its scope among the best of these first
FUSED = 40  # passages of each ranking (words, meaning) merged when a search has both
# A query's words held by at most this share of the passages decide which are ranked (when it
# has any: "make", "file", "time" match a third of a manual), as BM25's IDF all but does
RARE_SHARE = 0.05
FREQUENT_RANKED = 2_000  # a query of frequent words only is searched among the newest passages, first
# Those newest passages on PostgreSQL: read backwards by their key, as many as there are, whatever
# the planner's statistics say (before the table's first ANALYZE, or after a large load, it took
# "id >= ?" for a third of the table, and "w1 & w2" for a few dozen passages when they were most:
# a bitmap of every match, ~100 ms at 100,000, to keep the 2,000 newest)
NEWEST = f"SELECT id, doc FROM search_passages WHERE id >= ? ORDER BY id DESC LIMIT {FREQUENT_RANKED}"
WORD_COUNTS_SECONDS = 60.0  # how long SQLite uses a word's count of passages before it counts it again
WORD_COUNTS_MAX = 10_000  # words counted and kept; past this the counts start over
PAGE_ROWS = 500  # passages written by one statement (5 values each: within either engine's limit)


def idf(total: int, held: int) -> float:
    """BM25's inverse document frequency of a word `held` by that many of `total` passages."""
    return math.log(1 + (total - held + 0.5) / (held + 0.5))
# English words so common that nearly every passage holds them: a query's word among them
# would match (and have BM25 rank) almost every passage, costing time and adding nothing to
# the order. They are left out of a query that has other words; a query of only such words
# keeps them. (The index keeps every word: "to be or not to be" is still found.)
COMMON = frozenset("""a about above after again all also am an and any are as at be because been before being
between both but by can could did do does doing down during each few for from further had has have having he her
here hers him his how i if in into is it its itself just me more most my no nor not now of off on once only or
other our ours out over own same she should so some such than that the their theirs them then there these they
this those through to too under until up very was we were what when where which while who whom why will with
would you your yours""".split())


def query_words(query: str) -> list[str]:
    """The words a search looks for (any of them; the ranking prefers passages with more),
    case-folded, each once, at most QUERY_WORDS_MAX; COMMON ones only when there are no others."""
    seen: dict[str, None] = {}
    for w in WORD.findall(query.casefold()):
        seen.setdefault(w, None)
    words = [w for w in seen if w not in COMMON] or list(seen)
    return words[:QUERY_WORDS_MAX]


class Knowledge(Vectors):
    word_counts: dict[str, tuple[int, float]]  # SQLite's, counted (Store.__init__)

    # --- collections ------------------------------------------------------------------------

    _COUNTS = ("(SELECT count(*) FROM documents d WHERE d.collection = c.id) AS documents, "
               "(SELECT count(*) FROM documents d WHERE d.collection = c.id AND d.state = 'ready') AS ready")

    def add_collection(self, person: int, name: str, description: str = "", shared: bool = False) -> int:
        with self.write() as db:
            t = dbm.now()
            return db.conn.execute(
                "INSERT INTO collections (person, name, description, shared, created, updated, rev) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                [person, name, description, int(shared), t, t, dbm.bump(db)]).fetchone()[0]

    def collection(self, collection: int) -> Collection | None:
        row = self._one(f"SELECT c.*, {self._COUNTS} FROM collections c WHERE c.id = ?", [collection])
        return Collection.from_row(row) if row else None

    def collections(self, person: int) -> list[Collection]:
        """The collections `person` may use: their own, then those shared with everyone, by name."""
        return [Collection.from_row(r) for r in self._all(
            f"SELECT c.*, {self._COUNTS} FROM collections c WHERE c.person = ? OR c.shared = 1 "
            "ORDER BY c.person <> ?, c.name COLLATE NOCASE, c.id", [person, person])]

    def update_collection(self, collection: int, **values) -> None:
        if "shared" in values:
            values["shared"] = int(values["shared"])
        self._update("collections", collection, {"name", "description", "shared"}, values)

    def delete_collection(self, collection: int) -> None:
        """The collection, its documents and their passages; the files no row names any more."""
        with self.write() as db:
            files = {r[0] for r in db.conn.execute("SELECT file FROM documents WHERE collection = ?", [collection])}
            db.conn.execute("DELETE FROM collections WHERE id = ?", [collection])
            dbm.bump(db)
            self._forget_document_files(files)

    # --- an agent's collections ---------------------------------------------------------------

    def agent_collections(self, agent: int) -> list[int]:
        return [r[0] for r in self._all("SELECT collection FROM agent_collections WHERE agent = ? ORDER BY collection",
                                        [agent])]

    def set_agent_collections(self, agent: int, collections: Iterable[int]) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM agent_collections WHERE agent = ?", [agent])
            for c in sorted(set(collections)):
                db.conn.execute("INSERT INTO agent_collections (agent, collection) VALUES (?, ?)", [agent, c])
            db.conn.execute("UPDATE assistants SET rev = ? WHERE id = ?", [dbm.bump(db), agent])

    def searchable_collections(self, agent: int, person: int) -> tuple[int, ...]:
        """The agent's collections that its person may use now (their own, or shared): a
        collection unshared or given away since is not searched."""
        return tuple(r[0] for r in self._all(
            "SELECT c.id FROM agent_collections a JOIN collections c ON c.id = a.collection "
            "WHERE a.agent = ? AND (c.person = ? OR c.shared = 1) ORDER BY c.id", [agent, person]))

    def knowledge_scope(self, chat: int, agent: int | None, picks: Picks = Picks()) -> Scope:
        """What a search in conversation `chat` may see: its agent's collections that the
        conversation's person may use, the documents attached to the conversation, and what
        was picked for the message being answered, of that what the person may use now."""
        convo = self._one("SELECT person FROM conversations WHERE id = ?", [chat])
        if convo is None:
            return Scope()
        collections = self.searchable_collections(agent, convo[0]) if agent is not None else ()
        usable = self.usable_picks(convo[0], picks)
        return Scope(tuple(sorted({*collections, *usable.collections})), chat, usable.documents)

    def has_knowledge(self, scope: Scope) -> bool:
        """Whether `scope` holds any document to search (else no search tool is offered)."""
        if scope.collections or scope.documents:
            return True
        return scope.chat is not None and self._one("SELECT 1 FROM documents WHERE chat = ? LIMIT 1",
                                                    [scope.chat]) is not None

    def usable_picks(self, person: int, picks: Picks) -> Picks:
        """Of `picks`, the collections `person` may use (their own, or shared) and the
        documents in them: what another person keeps is never theirs to pick."""
        if not picks:
            return picks
        usable = "(c.person = ? OR c.shared = 1)"
        collections = tuple(r[0] for r in self._all(
            f"SELECT c.id FROM collections c WHERE c.id IN ({','.join('?' * len(picks.collections)) or 'NULL'}) "
            f"AND {usable} ORDER BY c.id", [*picks.collections, person])) if picks.collections else ()
        documents = tuple(r[0] for r in self._all(
            f"SELECT d.id FROM documents d JOIN collections c ON c.id = d.collection "
            f"WHERE d.id IN ({','.join('?' * len(picks.documents))}) AND {usable} ORDER BY d.id",
            [*picks.documents, person])) if picks.documents else ()
        return Picks(collections, documents)

    def picked_names(self, picks: Picks) -> list[tuple[str, int, str, int]]:
        """What `picks` name, as a message shows them: ("collection" or "document", id, name,
        the collection it is or is in), in the order picked; one deleted since is left out."""
        names = {("collection", r[0]): (r[1], r[0]) for r in self._all(
            f"SELECT id, name FROM collections WHERE id IN ({','.join('?' * len(picks.collections))})",
            list(picks.collections))} if picks.collections else {}
        names |= {("document", r[0]): (r[1], r[2]) for r in self._all(
            f"SELECT id, name, collection FROM documents WHERE id IN ({','.join('?' * len(picks.documents))}) "
            "AND collection IS NOT NULL", list(picks.documents))} if picks.documents else {}
        wanted = [("collection", c) for c in picks.collections] + [("document", d) for d in picks.documents]
        return [(kind, i, *names[kind, i]) for kind, i in wanted if (kind, i) in names]

    def items_picks(self, items: list) -> dict[int, list[tuple[str, int, str, int]]]:
        """The picks of the messages among `items`, named (picked_names), by item id: one read
        for all of them. One deleted since stays, its name and collection None (its chip says so)."""
        picked = {it.id: picks_of(it) for it in items if it.kind == "user" and it.knowledge}
        if not picked:
            return {}
        every = Picks(tuple({c for p in picked.values() for c in p.collections}),
                      tuple({d for p in picked.values() for d in p.documents}))
        named = {(n[0], n[1]): n for n in self.picked_names(every)}
        return {item: [named.get(k, (*k, None, None)) for k in [*(("collection", c) for c in p.collections),
                                                               *(("document", d) for d in p.documents)]]
                for item, p in picked.items()}

    def pickable(self, person: int) -> list[tuple[Collection, list[Document]]]:
        """What `person` may pick for a message: their collections and those shared, each with
        its documents that can be searched (read, or being read)."""
        collections = self.collections(person)
        documents: dict[int, list[Document]] = {c.id: [] for c in collections}
        if collections:
            for r in self._all(
                    f"{self._DOCUMENT} WHERE collection IN ({','.join('?' * len(collections))}) "
                    f"AND state IN ({','.join('?' * len(SEARCHABLE))}) ORDER BY name COLLATE NOCASE, id",
                    [*documents, *SEARCHABLE]):
                documents[r["collection"]].append(Document.from_row(r))
        return [(c, documents[c.id]) for c in collections]

    # --- documents ----------------------------------------------------------------------------

    def add_document(self, person: int, file: int, name: str, *, collection: int | None = None,
                     chat: int | None = None, kind: str = "", state: str = "queued", reason: str = "") -> int:
        """A document to read (queued), or one refused before any work (`failed`, its reason)."""
        with self.write() as db:
            t = dbm.now()
            return db.conn.execute(
                "INSERT INTO documents (person, collection, chat, file, name, kind, state, reason, created, updated, rev) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                [person, collection, chat, file, name, kind, state, reason, t, t, dbm.bump(db)]).fetchone()[0]

    _DOCUMENT = "SELECT " + ", ".join(Document.COLUMNS) + " FROM documents"

    def document(self, document: int) -> Document | None:
        row = self._one(f"{self._DOCUMENT} WHERE id = ?", [document])
        return Document.from_row(row) if row else None

    def file_in_reach(self, file: int, person: int) -> bool:
        """Whether `file` is a document of a collection `person` may see (their own, or shared):
        the document's link (its file) opens for whoever sees the collection, not its owner only."""
        return self._one("SELECT 1 FROM documents d JOIN collections c ON c.id = d.collection "
                         "WHERE d.file = ? AND (c.person = ? OR c.shared = 1) LIMIT 1", [file, person]) is not None

    def documents(self, collection: int) -> list[Document]:
        return [Document.from_row(r) for r in self._all(
            f"{self._DOCUMENT} WHERE collection = ? ORDER BY id DESC", [collection])]

    def documents_of_chat(self, chat: int) -> list[Document]:
        return [Document.from_row(r) for r in self._all(f"{self._DOCUMENT} WHERE chat = ? ORDER BY id", [chat])]

    def documents_attached(self, items: list) -> dict[int, Document]:
        """The documents read from the items' attached files (a message's PDF or Word file), by file id."""
        files = {f for it in items if it.kind == "user" for f in it.file_ids}
        if not files:
            return {}
        chats = {it.chat for it in items}
        found = self._all(f"{self._DOCUMENT} WHERE chat IN ({','.join('?' * len(chats))}) "
                          f"AND file IN ({','.join('?' * len(files))}) ORDER BY id", [*chats, *files])
        return {d.file: d for d in map(Document.from_row, found)}

    def attached_reading(self, chat: int, files: Sequence[int]) -> bool:
        """Whether a document attached to a message (its files) is still to be read: the
        message waits for it (run/runner.py)."""
        if not files:
            return False
        marks = ",".join("?" * len(files))
        return self._one(f"SELECT 1 FROM documents WHERE chat = ? AND file IN ({marks}) "
                         "AND state IN ('queued', 'reading') LIMIT 1", [chat, *files]) is not None

    def attached(self, chat: int, file: int) -> Attached | None:
        """The document a message's file became in conversation `chat`, with its whole text
        (each page marked "[page N]") when it fits what a message may send, else None."""
        row = self._one(f"{self._DOCUMENT} WHERE chat = ? AND file = ? ORDER BY id LIMIT 1", [chat, file])
        if row is None:
            return None
        document = Document.from_row(row)
        size = self._one("SELECT coalesce(sum(length(text)), 0) FROM passages WHERE document = ?", [document.id])[0]
        if not size or size > TEXT_TO_MODEL_MAX:
            return Attached(document, None)
        parts, page, heading = [], 0, ""
        for r in self._all("SELECT page, heading, text FROM passages WHERE document = ? ORDER BY page, n",
                           [document.id]):
            if r[0] != page:
                page = r[0]
                parts.append(f"[page {page}]")
            if r[1] and r[1] != heading:  # the title and headings the passages were read under
                heading = r[1]
                parts.append(f"## {heading}")
            parts.append(r[2])
        text = "\n".join(parts)
        return Attached(document, text if len(text) <= TEXT_TO_MODEL_MAX else None)

    def documents_since(self, rev: int, upto: int) -> list[Document]:
        """The documents whose row changed after `rev` (up to `upto`): what open pages show of them."""
        return [Document.from_row(r) for r in self._all(
            f"{self._DOCUMENT} WHERE rev > ? AND rev <= ? ORDER BY id", [rev, upto])]

    def person_documents(self, person: int) -> tuple[int, int]:
        """How many documents `person` has and the bytes of their files (the limits count them)."""
        row = self._one("SELECT count(*), coalesce(sum(f.size), 0) FROM documents d JOIN files f ON f.id = d.file "
                        "WHERE d.person = ?", [person])
        return int(row[0]), int(row[1])

    def delete_document(self, document: int) -> None:
        """The document and its passages (a reading under way finds it gone and stops), and its file."""
        with self.write() as db:
            files = {r[0] for r in db.conn.execute("SELECT file FROM documents WHERE id = ?", [document])}
            db.conn.execute("DELETE FROM documents WHERE id = ?", [document])
            dbm.bump(db)
            self._forget_document_files(files)

    def _forget_document_files(self, files: set[int]) -> None:
        """Of `files`, those no document and no item names any more (inside the deleting write)."""
        if not files:
            return
        marks = ",".join("?" * len(files))
        kept = {r[0] for r in self._all(f"SELECT file FROM documents WHERE file IN ({marks})", list(files))}
        kept |= {r[0] for r in self._all(f"SELECT file FROM items WHERE file IN ({marks})", list(files))}
        self.forget_files(files - kept)

    def stop_document(self, document: int) -> bool:
        """The person's Stop: a document queued or being read stops where it is (its pages so
        far stay searchable); False when it was not under way."""
        with self.write() as db:
            done = db.conn.execute(
                "UPDATE documents SET state = 'stopped', owner = NULL, leased = NULL, updated = ?, rev = ? "
                "WHERE id = ? AND state IN ('queued', 'reading')", [dbm.now(), dbm.bump(db), document]).rowcount
        return done > 0

    def read_again(self, document: int) -> bool:
        """A stopped or failed document queued again: a stopped one goes on after its last
        page, a failed one starts over."""
        with self.write() as db:
            db.conn.execute("DELETE FROM passages WHERE document = ? AND EXISTS "
                            "(SELECT 1 FROM documents WHERE id = ? AND state = 'failed')", [document, document])
            done = db.conn.execute(
                "UPDATE documents SET pages_read = CASE WHEN state = 'failed' THEN 0 ELSE pages_read END, "
                "passages = CASE WHEN state = 'failed' THEN 0 ELSE passages END, "
                "state = 'queued', reason = '', updated = ?, rev = ? WHERE id = ? AND state IN ('stopped', 'failed')",
                [dbm.now(), dbm.bump(db), document]).rowcount
        return done > 0

    # --- reading, as a worker does it ---------------------------------------------------------

    def take_document(self, owner: str, lease_seconds: float) -> Document | None:
        """The oldest document waiting to be read (or whose reader's lease ran out), now
        `owner`'s for `lease_seconds`."""
        with self.write() as db:
            t = dbm.now()
            row = db.conn.execute(
                "SELECT id FROM documents WHERE state IN ('queued', 'reading') AND (owner IS NULL OR leased < ?) "
                "ORDER BY id LIMIT 1", [t]).fetchone()
            if row is None:
                return None
            db.conn.execute("UPDATE documents SET state = 'reading', owner = ?, leased = ?, updated = ?, rev = ? "
                            "WHERE id = ?", [owner, t + lease_seconds, t, dbm.bump(db), row[0]])
            return Document.from_row(db.conn.execute(f"{self._DOCUMENT} WHERE id = ?", [row[0]]).fetchone())

    def reading_waits(self) -> bool:
        """Whether any document waits for a reader (a cheap look before `take_document`'s write)."""
        return self._one("SELECT 1 FROM documents WHERE state IN ('queued', 'reading') AND "
                         "(owner IS NULL OR leased < ?) LIMIT 1", [dbm.now()]) is not None

    def renew_document(self, document: int, owner: str, lease_seconds: float) -> bool:
        """The lease held on: False when the document is no longer `owner`'s to read."""
        with self.write(notify=False) as db:
            return db.conn.execute("UPDATE documents SET leased = ? WHERE id = ? AND owner = ? AND state = 'reading'",
                                   [dbm.now() + lease_seconds, document, owner]).rowcount > 0

    def read_page(self, document: int, owner: str, page: int, pages: int, passages: Sequence[tuple[str, str]],
                  lease_seconds: float) -> bool:
        """Page `page` of `pages` read: its passages ((heading, text), in order) and the
        progress, in one transaction, only while the document is `owner`'s to read (False:
        stopped, deleted or taken by another; nothing was written)."""
        with self.write() as db:
            t = dbm.now()
            if db.conn.execute("SELECT 1 FROM documents WHERE id = ? AND owner = ? AND state = 'reading'",
                               [document, owner]).fetchone() is None:
                return False
            # one statement for up to PAGE_ROWS passages: PostgreSQL indexes and counts the words
            # of what one statement wrote together (pg_migrations.py's m054)
            rows = [(document, page, n, heading, text) for n, (heading, text) in enumerate(passages) if text]
            added = 0
            for start in range(0, len(rows), PAGE_ROWS):
                part = rows[start:start + PAGE_ROWS]
                added += db.conn.execute(
                    "INSERT INTO passages (document, page, n, heading, text) VALUES "
                    f"{', '.join(['(?, ?, ?, ?, ?)'] * len(part))} ON CONFLICT (document, page, n) DO NOTHING",
                    [x for row in part for x in row]).rowcount
            db.conn.execute(
                "UPDATE documents SET pages = ?, pages_read = ?, passages = passages + ?, leased = ?, updated = ?, "
                "rev = ? WHERE id = ?", [pages, page, added, t + lease_seconds, t, dbm.bump(db), document])
            return True

    def finish_document(self, document: int, owner: str, state: str, reason: str = "", pages: int | None = None) -> bool:
        """The reading's end: `ready`, or `failed` with its reason; only while it is `owner`'s."""
        with self.write() as db:
            return db.conn.execute(
                "UPDATE documents SET state = ?, reason = ?, pages = coalesce(?, pages), owner = NULL, leased = NULL, "
                "updated = ?, rev = ? WHERE id = ? AND owner = ? AND state = 'reading'",
                [state, reason[:500], pages, dbm.now(), dbm.bump(db), document, owner]).rowcount > 0

    def sent_document(self, document: int, how: str) -> None:
        """How a conversation's request had its attached document ("whole" or "searched"), for
        its chip: written (and followed by its pages) only when it changed."""
        with self.write() as db:
            db.conn.execute("UPDATE documents SET sent = ?, rev = ? WHERE id = ? AND sent != ?",
                            [how, dbm.bump(db), document, how])

    def release_documents(self, owner: str) -> None:
        """Shutdown: what `owner` was reading is left for the next worker, from its last page."""
        with self.write(notify=False) as db:
            db.conn.execute("UPDATE documents SET owner = NULL, leased = NULL WHERE owner = ?", [owner])

    # --- search -------------------------------------------------------------------------------

    def search_passages(self, query: str, scope: Scope, limit: int = 8, meaning: Meaning | None = None) -> list[Found]:
        """The passages in `scope` that best match `query`'s words, best first; with its
        `meaning`, merged with those nearest to it by their vectors (reciprocal rank fusion of
        the best FUSED of each: a passage worded otherwise than the question is found too).

        Words are ranked first over the whole index, the best FIRST_LOOK of them, and only
        those are joined to their documents to keep the ones in scope: joining every match (a
        common word's can be half the index) cost more than ranking them
        (benchmarks/knowledge.py). When fewer than asked of those are in scope, the search is
        made again within the scope, over every match: the same answer either way, ties
        broken by id."""
        if not scope.collections and scope.chat is None and not scope.documents:
            return []
        if meaning is None:
            return self._words(query, scope, limit)
        by_words = self._words(query, scope, max(FUSED, limit))
        near = self.nearest_passages(meaning.model, meaning.vector, scope, max(FUSED, limit))
        order = fuse([f.passage for f in by_words], [p for p, _ in near])[:limit]
        found = {f.passage: f for f in by_words}
        found |= {f.passage: f for f in self._passages([p for p, _ in order if p not in found])}
        return [dataclasses.replace(found[p], score=score) for p, score in order if p in found]

    def _words(self, query: str, scope: Scope, limit: int) -> list[Found]:
        words = query_words(query)
        if not words:
            return []
        found = self._search(words, scope, limit, max(FIRST_LOOK, limit * 4))
        return found if found is not None else self._search(words, scope, limit, None) or []

    def _passages(self, ids: list[int]) -> list[Found]:
        if not ids:
            return []
        return [Found(*r) for r in self._all(
            "SELECT p.id, p.document, d.name, p.page, p.heading, p.text, 0.0 FROM passages p "
            f"JOIN documents d ON d.id = p.document WHERE p.id IN ({','.join('?' * len(ids))})", ids)]

    def _search(self, words: list[str], scope: Scope, limit: int, first: int | None) -> list[Found] | None:
        """The best `limit` in scope, from every match (`first` None) or from the best `first`
        of the whole index: None when those held fewer than `limit` in scope.

        Which passages are ranked, alike on both engines (scored with every word either way):
        when the query has rare words (held by at most RARE_SHARE of the passages), those
        holding one of them; else, of the FREQUENT_RANKED newest passages of the index, those
        holding all of its rarest words that at least `limit` of them hold together (the
        rarest one, two, ...: `_frequent`), else any of its words; searched within the scope,
        every passage of it holding those rarest words, else any of the words."""
        total, held = self._word_counts(words)
        words = [w for w in words if held[w]] or words
        # a word held by half the passages or more decides nothing of what is ranked when there
        # are others, as COMMON ones are left out: BM25's IDF of it is nil on SQLite (FTS5's,
        # 1e-6: left out of the expression too, as bm25 would read its every row to count them,
        # ~3 ms at 100,000), small on PostgreSQL (the store's, which still scores it: without
        # it 2 of 69 questions' answers fell from the first five to the sixth)
        deciding = [w for w in words if 2 * held[w] < total] or words
        scored = words if dbm.postgres(self.db) else deciding
        rare = [w for w in deciding if held[w] <= RARE_SHARE * total]
        ranked = lambda matched, every, newest, first: self._ranked(  # noqa: E731
            scored, matched, every, newest, total, held, scope, limit, first)
        if rare:
            return ranked(rare, False, None, first)
        every, newest = self._frequent(deciding, held, limit)
        if first is not None:
            return ranked(every or deciding, bool(every), newest, first)
        found = ranked(every, True, None, None) if every else []
        return found if len(found) >= limit else ranked(deciding, False, None, None)

    def _frequent(self, words: list[str], held: dict[str, int], limit: int) -> tuple[list[str], int | None]:
        """A query of frequent words only, searched among the FREQUENT_RANKED newest passages of
        the index (from the id returned; None: the index is no larger): the most of its rarest
        words that at least `limit` of those hold all of ([]: not even the rarest one alone,
        any of the words then). "read a text file one line at a time" is held whole nowhere,
        its rarest three, "read", "text" and "line", by 54 of Debian's documentation's 54,292
        passages."""
        row = self._one("SELECT id FROM passages ORDER BY id DESC LIMIT 1 OFFSET ?", [FREQUENT_RANKED - 1])
        since = int(row[0]) if row else 0
        rarest = sorted(words, key=lambda w: (held[w], w))
        n = 0
        while n < len(rarest) and self._holding(rarest[:n + 1], since, limit) >= limit:
            n += 1
        return rarest[:n], since or None

    def _holding(self, words: list[str], since: int, limit: int) -> int:
        """How many passages from id `since` on hold all `words`, up to `limit`."""
        if dbm.postgres(self.db):
            matches = f"SELECT 1 FROM ({NEWEST}) AS s WHERE doc @@ to_tsquery('tabletalk_english', ?) LIMIT ?"
            params = [since, " & ".join(words), limit]
        else:
            matches = "SELECT 1 FROM search_passages WHERE search_passages MATCH ? AND rowid >= ? LIMIT ?"
            params = [" AND ".join(f'"{w}"' for w in words), since, limit]
        return int(self._one(f"SELECT count(*) FROM ({matches}) AS m", params)[0])

    def _ranked(self, words: list[str], matched: list[str], every: bool, newest: int | None, total: int,
                held: dict[str, int], scope: Scope, limit: int, first: int | None) -> list[Found] | None:
        """_search's SQL: the passages holding all the `matched` words (`every`) or any of them
        (from id `newest` on), scored with every one of `words`."""
        within, params = self.within(scope)
        if dbm.postgres(self.db):
            # BM25's two halves that PostgreSQL's ranks lack, a word's rarity (IDF, from how many
            # passages hold it) and the rare words deciding what is ranked at all: each word's
            # ts_rank (the heading, weight A, twice the text, D, as on SQLite) times its IDF.
            # With ts_rank_cd alone recall@5 was 0.06 of 69 questions, 0.26 so (SQLite 0.33).
            # Each word's tsquery made once (`q`, kept from being pulled into every row by OFFSET
            # 0): in the scores, to_tsquery (not immutable) was made again for every passage ranked
            score = " + ".join(f"? * ts_rank('{{0.1, 0.2, 0.4, 0.2}}', s.doc, q.w{n}, 0)" for n in range(len(words)))
            queries = ", ".join(f"to_tsquery('tabletalk_english', ?) AS w{n}" for n in range(len(words)))
            asked = [*(idf(total, held[w]) for w in words), *([newest] if newest is not None else []), *words,
                     (" & " if every else " | ").join(matched)]
            matches = (f"SELECT s.id, {score} AS score FROM {f'({NEWEST})' if newest is not None else 'search_passages'} "
                       f"AS s, (SELECT {queries} OFFSET 0) AS q WHERE s.doc @@ to_tsquery('tabletalk_english', ?)")
            best = f"{matches} ORDER BY score DESC, s.id LIMIT ?"
        else:
            # FTS5's bm25 scores the phrases its expression names, each as often as named, and
            # ranks what the expression matches: "(the matched words) AND (the matched words OR
            # the others OR the others)", each word named twice, ranks the passages holding the
            # matched words by every word's BM25 (twice over), as one OR of all would score them
            phrases = lambda ws, op=" OR ": op.join(f'"{w}"' for w in ws)  # noqa: E731
            others = [w for w in words if w not in matched]
            expression = phrases(matched, " AND " if every else " OR ")
            if others:
                expression = f"({expression}) AND ({phrases(matched)} OR {phrases(others)} OR {phrases(others)})"
            asked = [expression, *([newest] if newest is not None else [])]
            since = " AND rowid >= ?" if newest is not None else ""
            matches = (f"SELECT rowid AS id, -rank / {2 if others else 1} AS score FROM search_passages "
                       f"WHERE search_passages MATCH ?{since} AND rank MATCH 'bm25(2.0, 1.0)'")
            # FTS5's own order (by `rank` only) is a third faster over every match; over a range of
            # ids it is slower than ordering them here
            best = f"{matches} ORDER BY rank LIMIT ?" if newest is None else \
                f"SELECT id, score FROM ({matches}) ORDER BY score DESC, id LIMIT ?"
        best = best if first is not None else matches
        rows = self._all(
            f"""SELECT p.id, p.document, d.name, p.page, p.heading, p.text, m.score
                FROM ({best}) AS m JOIN passages p ON p.id = m.id JOIN documents d ON d.id = p.document
                WHERE {within} ORDER BY m.score DESC, p.id LIMIT ?""",
            [*asked, *([first] if first is not None else []), *params, limit])
        if first is not None and len(rows) < limit:
            return None  # (few matches in all: the second search is as cheap)
        return [Found(*r) for r in rows]

    def _word_counts(self, words: list[str]) -> tuple[int, dict[str, int]]:
        """How many passages there are, and how many hold each word. PostgreSQL reads the
        counts the store keeps (`_kept_counts`: each word's IDF is the store's, exact and as
        fresh as the passages). SQLite, whose BM25 knows
        each word's rarity, counts up to half the passages, enough to tell the rare words and
        those its BM25 scores nil without reading a frequent word's every row, at most once a
        WORD_COUNTS_SECONDS for a word (a rarity that lags new documents by a minute ranks as
        well)."""
        if dbm.postgres(self.db):
            return self._kept_counts(words)
        counts = self.word_counts
        now = time.monotonic()
        wanted = [w for w in ["", *words] if w not in counts or now - counts[w][1] > WORD_COUNTS_SECONDS]
        if wanted:
            total = int(self._one("SELECT count(*) FROM passages")[0]) if "" in wanted else counts[""][0]
            found = [total if not w else self._one(
                "SELECT count(*) FROM (SELECT 1 FROM search_passages WHERE search_passages MATCH ? LIMIT ?)",
                [f'"{w}"', (total + 1) // 2])[0] for w in wanted]
            if len(counts) > WORD_COUNTS_MAX:
                counts.clear()
            counts.update({w: (int(n), now) for w, n in zip(wanted, found)})
        return counts[""][0], {w: counts[w][0] for w in words}

    def _kept_counts(self, words: list[str]) -> tuple[int, dict[str, int]]:
        """PostgreSQL's counts, in one read: those kept of the passages counted
        (`search_passage_words`, up to `search_passages_counted.upto`), plus those of the
        newer ones, fewer than a thousand, counted here from their tsvectors. A word that is
        not one lexeme to the passages' configuration (none, or several, which the search
        matches as a phrase; a query's words nearly never are) is counted over the GIN index,
        as it is matched."""
        lexeme = "(tsvector_to_array(to_tsvector('tabletalk_english', ?)))[1]"
        kept = "coalesce((SELECT passages FROM search_passage_words WHERE word = {}), 0)"
        counts = [kept.format("''") + " + newer.n"]
        params: list = []
        for n, w in enumerate(words):
            counts.append(f"CASE WHEN numnode(to_tsquery('tabletalk_english', ?)) = 1 "
                          f"THEN {kept.format(lexeme)} + newer.w{n} ELSE (SELECT count(*) FROM search_passages "
                          "WHERE doc @@ to_tsquery('tabletalk_english', ?)) END")
            params += [w, w, w]
        newer = ", ".join(["count(*) AS n", *(f"count(*) FILTER (WHERE doc @@ to_tsquery('tabletalk_english', ?)) "
                                             f"AS w{n}" for n in range(len(words)))])
        row = self._one(
            f"SELECT {', '.join(counts)} FROM (SELECT {newer} FROM search_passages WHERE id > "
            "coalesce((SELECT upto FROM search_passages_counted), 0)) AS newer", [*params, *words])
        return int(row[0]), {w: int(n) for w, n in zip(words, row[1:])}

    def passages_gone(self, items: list) -> frozenset[int]:
        """The passages the items cite (their sources' chips) that are no longer kept: their
        document was deleted since."""
        cited = cited_passages(items)
        if not cited:
            return frozenset()
        kept = {r[0] for r in self._all(f"SELECT id FROM passages WHERE id IN ({','.join('?' * len(cited))})",
                                        list(cited))}
        return frozenset(cited - kept)

    def passage(self, passage: int) -> tuple[Found, Document] | None:
        """A passage and its document (a chip opens it)."""
        row = self._one("SELECT p.id, p.document, d.name, p.page, p.heading, p.text, 0.0 FROM passages p "
                        "JOIN documents d ON d.id = p.document WHERE p.id = ?", [passage])
        if row is None:
            return None
        found = Found(*row)
        document = self.document(found.document)
        return (found, document) if document else None

    def page_passages(self, document: int, page: int) -> list[Found]:
        """Every passage of one page of a document, in order (the page a chip opens)."""
        return [Found(*r) for r in self._all(
            "SELECT p.id, p.document, d.name, p.page, p.heading, p.text, 0.0 FROM passages p "
            "JOIN documents d ON d.id = p.document WHERE p.document = ? AND p.page = ? ORDER BY p.n", [document, page])]
