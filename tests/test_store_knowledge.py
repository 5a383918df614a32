"""Knowledge's rows on both engines: collections, documents read as leased work, page by page,
and search over passages with the same shape of answer (app/store/knowledge.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from app.store import Scope
from app.store.knowledge import query_words
from app.tables import assistant

LEASE = 30.0



@pytest.fixture
def owner(store) -> int:
    from app.accounts.rules import Accounts
    return Accounts(store).add("Owner", "correct horse battery").id


def a_document(store, owner: int, collection: int, name: str = "manual.pdf", data: bytes = b"%PDF-1.4 x") -> int:
    file = store.add_file(name, data, person=owner)
    return store.add_document(owner, file, name, collection=collection, kind="pdf")


def test_a_document_is_read_page_by_page_under_a_lease_and_searched(store, owner):
    c = store.add_collection(owner, "Manuals", "GNU manuals")
    d = a_document(store, owner, c)
    taken = store.take_document("w1", LEASE)
    assert taken.id == d and taken.state == "reading"
    assert store.take_document("w2", LEASE) is None, "one reader at a time"
    assert store.read_page(d, "w1", 1, 2, [("Intro", "ASN.1 structures are decoded from DER."),
                                          ("Intro", "The library is called Libtasn1.")], LEASE)
    # passages of a document being read are found at once
    found = store.search_passages("how is DER decoded by the library?", Scope(collections=(c,)))
    assert [(f.page, f.heading, f.name) for f in found] == [(1, "Intro", "manual.pdf")] * 2, "any of the words"
    assert "decoded" in found[0].text, "the passage with more of them first"
    assert not store.read_page(d, "w2", 2, 2, [("", "stolen")], LEASE), "another worker writes nothing"
    assert store.read_page(d, "w1", 2, 2, [("Encoding", "Encoding writes DER bytes from a tree.")], LEASE)
    assert store.finish_document(d, "w1", "ready")
    doc = store.document(d)
    assert (doc.state, doc.pages, doc.pages_read, doc.passages) == ("ready", 2, 2, 3)
    assert doc.progress == "ready: 2 pages, 3 passages"
    assert replace(doc, pages=1, passages=1).progress == "ready: 1 page, 1 passage"
    assert replace(doc, pages=8123, passages=40609).progress == "ready: 8,123 pages, 40,609 passages"
    assert replace(doc, state="reading", pages=8123, pages_read=4501).progress == "reading page 4,502 of 8,123"
    # stems: "encodes" finds "Encoding"; the heading counts
    assert [f.page for f in store.search_passages("encodes", Scope(collections=(c,)))] == [2]
    assert store.collection(c).documents == 1 and store.collection(c).ready == 1


def test_a_page_written_again_after_a_lost_lease_adds_no_passage(store, owner):
    c = store.add_collection(owner, "K")
    d = a_document(store, owner, c)
    store.take_document("w1", -1)  # its lease already over: as after a kill -9
    assert store.read_page(d, "w1", 1, 3, [("", "first page text")], -1)
    again = store.take_document("w2", LEASE)
    assert again.id == d and again.pages_read == 1, "taken again from the page after the last one written"
    assert not store.read_page(d, "w1", 2, 3, [("", "late")], LEASE), "the old reader is fenced off"
    assert store.read_page(d, "w2", 1, 3, [("", "first page text")], LEASE)  # written twice: once kept
    assert store.document(d).passages == 1
    assert len(store.page_passages(d, 1)) == 1


def test_stop_deletion_and_reading_again(store, owner):
    c = store.add_collection(owner, "K")
    d = a_document(store, owner, c)
    store.take_document("w1", LEASE)
    store.read_page(d, "w1", 1, 5, [("", "kept after the stop")], LEASE)
    assert store.stop_document(d)
    assert not store.read_page(d, "w1", 2, 5, [("", "after the stop")], LEASE), "a stopped reading writes nothing"
    assert store.document(d).progress == "stopped at page 1 of 5"
    assert [f.text for f in store.search_passages("kept", Scope(collections=(c,)))] == ["kept after the stop"]
    assert store.read_again(d) and store.document(d).state == "queued" and store.document(d).pages_read == 1
    file = store.document(d).file
    store.delete_document(d)
    assert store.document(d) is None and store.file(file) is None, "its file goes with it"
    assert store.search_passages("kept", Scope(collections=(c,))) == []


def test_search_sees_only_its_scope_and_a_deleted_collection_takes_all(store, owner):
    from app.accounts.rules import Accounts
    other = Accounts(store).add("Eve", "another long password").id
    mine, theirs = store.add_collection(owner, "Mine"), store.add_collection(other, "Theirs")
    for c, who in ((mine, owner), (theirs, other)):
        d = a_document(store, who, c, name=f"{c}.pdf")
        store.take_document("w", LEASE)
        store.read_page(d, "w", 1, 1, [("", "the secret word is penguin")], LEASE)
        store.finish_document(d, "w", "ready")
    assert {f.name for f in store.search_passages("penguin", Scope(collections=(mine,)))} == {f"{mine}.pdf"}
    assert store.search_passages("penguin", Scope()) == []
    # an agent's collections: only those its person may use now
    agent = store.add_agent(assistant(name="Reader", person=owner)).id
    store.set_agent_collections(agent, [mine, theirs])
    assert store.searchable_collections(agent, owner) == (mine,)
    store.update_collection(theirs, shared=True)
    assert store.searchable_collections(agent, owner) == (mine, theirs)
    assert [c.name for c in store.collections(owner)] == ["Mine", "Theirs"]
    store.delete_collection(mine)
    assert store.search_passages("penguin", Scope(collections=(mine,))) == []
    assert store.agent_collections(agent) == [theirs]


def test_a_rare_word_outranks_common_ones_on_both_engines(store, owner):
    """BM25's IDF on SQLite, and on PostgreSQL each word's rank times its rarity, the rare words
    deciding what is ranked: a passage holding the one rare word of a question comes first,
    ahead of passages full of its common words ("file", "time": a third of any manual)."""
    c = store.add_collection(owner, "Manual")
    d = a_document(store, owner, c)
    store.take_document("w", LEASE)
    common = [("Files", f"Open the file, then read the file line by line each time, file {n}.") for n in range(60)]
    assert store.read_page(d, "w", 1, 1, [*common, ("Locale", "The keyboard layout is set with localectl.")], LEASE)
    store.finish_document(d, "w", "ready")
    found = store.search_passages("how do I set the file and time for localectl", Scope(collections=(c,)), limit=3)
    assert found and "localectl" in found[0].text, [f.text for f in found]


def test_a_scope_whose_passages_rank_below_the_first_look_is_searched_whole(store, owner):
    """The best FIRST_LOOK of the whole index are looked at first: a scope with none among them
    (another person's collection matches far better, and more often) is searched over every
    match, with the answer it would have had; the other's passages never come."""
    from app.accounts.rules import Accounts
    from app.store.knowledge import FIRST_LOOK

    other = Accounts(store).add("Other", "correct horse battery").id
    mine, theirs = store.add_collection(owner, "Mine"), store.add_collection(other, "Theirs")
    for who, c, passages in ((other, theirs, [("Anchor", "anchor anchor anchor chain")] * (FIRST_LOOK + 10)),
                             (owner, mine, [("", "the old anchor rusts"), ("", "a rope"),
                                            ("", "the anchor's chain is long here")])):
        d = a_document(store, who, c)
        store.take_document("w", LEASE)
        assert store.read_page(d, "w", 1, 1, passages, LEASE)
        store.finish_document(d, "w", "ready")
    found = store.search_passages("anchor chain", Scope(collections=(mine,)), limit=6)
    assert [f.text for f in found] == ["the anchor's chain is long here", "the old anchor rusts"]
    assert len(store.search_passages("anchor chain", Scope(collections=(theirs,)), limit=6)) == 6
    both = store.search_passages("anchor chain", Scope(collections=(mine, theirs)), limit=FIRST_LOOK + 20)
    assert len(both) == FIRST_LOOK + 12, "a limit past the first look: every match in scope"


def written(store, owner: int, collection: int, passages: list[tuple[str, str]]) -> None:
    d = a_document(store, owner, collection)
    store.take_document("w", LEASE)
    assert store.read_page(d, "w", 1, 1, passages, LEASE)
    store.finish_document(d, "w", "ready")


def test_only_passages_holding_a_rare_word_are_ranked_and_every_word_scores_them(store, owner):
    """A query with a rare word (held by at most RARE_SHARE of the passages) ranks only the
    passages holding one, by every word's score; a word held by half of them or more is left
    out, as it changes no order. The same passages on both engines."""
    c = store.add_collection(owner, "Manual")
    written(store, owner, c, [
        ("", "zeta stands alone"), ("", "zeta alpha beta"),  # as long: the frequent words decide
        *[("", f"alpha alpha alpha beta beta omega {n}") for n in range(38)],  # frequent words only, many times
        *[("", f"omega filler {n}") for n in range(60)]])
    scope = Scope(collections=(c,))
    found = store.search_passages("zeta alpha beta", scope, limit=10)
    assert [f.text for f in found] == ["zeta alpha beta", "zeta stands alone"], "ranked: the 2 holding zeta"
    assert [f.text for f in store.search_passages("zeta alpha beta omega", scope, limit=10)] == [f.text for f in found]
    assert len(store.search_passages("alpha beta", scope, limit=50)) == 39, "no rare word: any of them"


def test_a_query_of_frequent_words_ranks_those_holding_its_rarest_words_together(store, owner):
    """Only frequent words: the passages holding all of the most of its rarest words that at
    least `limit` passages hold together are ranked (every word scoring them), else any."""
    c = store.add_collection(owner, "Colours")
    written(store, owner, c, [
        *[("", f"blue green red {n}") for n in range(2)], *[("", f"blue green pale {n}") for n in range(2)],  # as long
        *[("", f"blue blue red red red {n}") for n in range(4)], *[("", f"green {n}") for n in range(4)],
        *[("", f"red {n}") for n in range(11)], *[("", f"filler {n}") for n in range(17)]])
    scope = Scope(collections=(c,))
    # blue 8 of 40, green 8, red 17: blue and green are held together by 4, with red by 2
    found = store.search_passages("red green blue", scope, limit=3)
    assert [f.text for f in found][:2] == ["blue green red 0", "blue green red 1"], "red scores them too"
    assert [f.text for f in found][2] in ("blue green pale 0", "blue green pale 1"), \
        "ranked: the 4 holding blue and green"
    assert {f.text for f in store.search_passages("red green blue", scope, limit=5)} <= {
        *(f"blue green red {n}" for n in range(2)), *(f"blue green pale {n}" for n in range(2)),
        *(f"blue blue red red red {n}" for n in range(4))}, "5: those holding blue (the rarest, by name)"
    assert len(store.search_passages("red green blue", scope, limit=30)) == 23, "30: any of them"


def test_a_query_of_frequent_words_ranks_the_newest_of_the_index_then_its_scope_whole(store, owner):
    """Frequent words only are searched among the FREQUENT_RANKED newest passages of the whole
    index: older passages that would score better are not ranked, unless the scope holds none
    of the newest (it is then searched whole)."""
    from app.store.knowledge import FREQUENT_RANKED

    old, new = store.add_collection(owner, "Old"), store.add_collection(owner, "New")
    written(store, owner, old, [("", f"anchor anchor anchor anchor {n}") for n in range(5)])
    written(store, owner, new, [("", f"the anchor of ship {n}") for n in range(FREQUENT_RANKED)])
    found = store.search_passages("anchor", Scope(collections=(old, new)), limit=5)
    assert len(found) == 5 and all("ship" in f.text for f in found), [f.text for f in found]
    assert len(store.search_passages("anchor", Scope(collections=(old,)), limit=5)) == 5


@pytest.mark.parametrize("query", ["", "   ", "\"*)(", "NEAR AND OR NOT", "' OR 1=1 --", "x" * 10_000,
                                   "a:b c-d e.f", "\x00\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace")])
def test_any_query_is_words_or_nothing(store, owner, query):
    c = store.add_collection(owner, "K")
    d = a_document(store, owner, c)
    store.take_document("w", LEASE)
    store.read_page(d, "w", 1, 1, [("", "near and or not one")], LEASE)
    found = store.search_passages(query, Scope(collections=(c,)))
    assert isinstance(found, list)
    assert len(query_words(query)) <= 32


def test_query_words():
    assert query_words("How is DER decoded? DER!") == ["der", "decoded"], "the common words left out"
    assert query_words("To be, or not to be") == ["to", "be", "or", "not"], "unless there is nothing else"
    assert query_words("x_y") == ["x", "y"]


def test_a_conversations_scope_is_its_agents_collections_that_its_person_may_use(store, owner):
    from app.accounts.rules import Accounts

    bea = Accounts(store).add("Bea", "correct horse battery").id
    mine = store.add_collection(owner, "Mine")
    hers = store.add_collection(bea, "Hers")
    agent = store.default_agent(owner).id
    chat = store.new_conversation(agent, person=owner).id
    assert store.knowledge_scope(chat, agent) == Scope((), chat)
    assert not store.has_knowledge(store.knowledge_scope(chat, agent)), "nothing to search: no tool"
    store.set_agent_collections(agent, [mine, hers])  # hers given while it was shared, say
    assert store.knowledge_scope(chat, agent) == Scope((mine,), chat), "not hers: she never shared it"
    store.update_collection(hers, shared=True)
    assert store.knowledge_scope(chat, agent) == Scope((mine, hers), chat)
    assert store.has_knowledge(store.knowledge_scope(chat, agent))
    assert store.knowledge_scope(10**9, agent) == Scope(), "no such conversation: nothing"
    other = store.new_conversation(None, person=owner).id
    assert not store.has_knowledge(store.knowledge_scope(other, None))
    file = store.add_file("notes.txt", b"notes", person=owner)
    store.add_document(owner, file, "notes.txt", chat=other, kind="text")
    assert store.has_knowledge(store.knowledge_scope(other, None)), "a document attached to the conversation"


def test_the_documents_whose_reading_moved_since_a_rev(store, owner):
    c = store.add_collection(owner, "K")
    before = store.rev()
    d = a_document(store, owner, c)
    assert [x.id for x in store.documents_since(before, store.rev())] == [d]
    middle = store.rev()
    assert store.documents_since(middle, store.rev()) == []
    store.take_document("w1", LEASE)
    store.read_page(d, "w1", 1, 9, [("", "a page")], LEASE)
    [moved] = store.documents_since(middle, store.rev())
    assert (moved.state, moved.pages_read, moved.pages) == ("reading", 1, 9)
    assert store.changed_since(middle).documents and not store.changed_since(store.rev()).documents


def test_picks_are_searched_only_while_the_person_may_use_them(store):
    from app.accounts.rules import Accounts
    from app.tables import Picks, asked

    people = Accounts(store)
    ann, bea = people.add("Ann", "correct horse battery one").id, people.add("Bea", "correct horse battery two").id
    mine, theirs = store.add_collection(ann, "Mine"), store.add_collection(bea, "Theirs")
    doc = store.add_document(bea, store.add_file("t.md", b"x", person=bea), "t.md", collection=theirs, kind="md")
    chat = store.new_conversation(None, person=ann).id
    wanted = Picks((mine, theirs), (doc,))
    assert store.usable_picks(ann, wanted) == Picks((mine,), ())
    assert store.knowledge_scope(chat, None, wanted) == Scope((mine,), chat, ())
    store.update_collection(theirs, shared=True)
    assert store.usable_picks(ann, wanted) == wanted
    assert store.knowledge_scope(chat, None, wanted) == Scope((mine, theirs), chat, (doc,))
    store.update_collection(theirs, shared=False)  # unshared since it was picked: not searched
    assert store.knowledge_scope(chat, None, wanted) == Scope((mine,), chat, ())
    said = store.add(asked(chat, "Hi", knowledge=str(wanted)))
    assert store.items_picks([said]) == {said.id: [("collection", mine, "Mine", mine), ("collection", theirs, "Theirs", theirs),
                                                   ("document", doc, "t.md", theirs)]}
    store.delete_document(doc)
    assert store.items_picks([said])[said.id][2] == ("document", doc, None, None), "a deleted one kept, unnamed"


def test_picks_parse_what_the_composer_sends_and_nothing_else():
    from app.tables import Picks

    assert str(Picks.parse("c3, d7,c3,,")) == "c3,d7"
    assert not Picks.parse("")
    for bad in ["x3", "c", "c-1", "c3;d4", "d1e5", "c" + "9" * 19]:
        with pytest.raises(ValueError):
            Picks.parse(bad)
    with pytest.raises(ValueError, match="at most 20"):
        Picks.parse(",".join(f"d{n}" for n in range(21)))


# --- PostgreSQL's kept counts of words (pg_migrations.py's m054) ----------------------------

def a_document_being_read(db):
    """On PostgreSQL's `db`, migrated: its store, an owner, their collection "Manuals" and a
    document of it taken for reading by worker "w"."""
    from app.accounts.rules import Accounts
    from app.store import Store, schema

    schema.migrate(db)
    store = Store(db)
    owner = Accounts(store).add("Owner", "correct horse battery").id
    manuals = store.add_collection(owner, "Manuals")
    document = a_document(store, owner, manuals)
    store.take_document("w", LEASE)
    return store, owner, manuals, document


def kept_and_fresh(db) -> tuple[dict[str, int], dict[str, int]]:
    """`search_passage_words` as kept, and as counted afresh from the tsvectors of the passages
    it counts, those up to `search_passages_counted.upto` (ts_stat: how many passages hold
    each lexeme; the empty word, every passage)."""
    kept = dict(db.execute("SELECT word, passages FROM search_passage_words").fetchall())
    upto = db.execute("SELECT coalesce(max(upto), 0) FROM search_passages_counted").fetchone()[0]
    fresh = dict(db.execute(f"SELECT word, ndoc FROM ts_stat('SELECT doc FROM search_passages WHERE id <= {upto}')"))
    total = db.execute("SELECT count(*) FROM search_passages WHERE id <= ?", [upto]).fetchone()[0]
    return kept, {**fresh, **({"": total} if total else {})}


def counted_over_the_index(db, words: list[str]) -> tuple[int, dict[str, int]]:
    """What the search counted before m054, for each word: its rows over the GIN index."""
    return db.execute("SELECT count(*) FROM search_passages").fetchone()[0], {w: db.execute(
        "SELECT count(*) FROM search_passages WHERE doc @@ to_tsquery('tabletalk_english', ?)", [w]).fetchone()[0]
        for w in words}


def test_postgresqls_kept_word_counts_follow_every_write_and_delete_and_rank_as_counting_did(pg_url):
    """Every way passages come and go (pages written, one written again, a failed document read
    again, a document, a collection, a conversation and a person deleted, counted passages and
    newer ones) leaves each word's kept count equal to a fresh count of the passages counted,
    and the counts a search reads equal to those it counted over the index before (so it
    ranks the same); m054 counts what was there."""
    from app.accounts.rules import Accounts
    from app.store import db as dbm, schema
    from app.store.schema import pg_migrations

    db = dbm.connect(pg_url)
    try:
        with pytest.MonkeyPatch.context() as patch:  # a database from before m054, with passages
            patch.setattr(pg_migrations, "MIGRATIONS", [fn for fn in pg_migrations.MIGRATIONS
                                                         if fn.__name__ != "m054_passage_words"])
            store, owner, manuals, before = a_document_being_read(db)
            store.read_page(before, "w", 1, 1, [("Café", "The café's résumé: encoded, encoding x-ray 3.14"),
                                                ("", "Dogs run; the dog ran")], LEASE)
        assert schema.migrate(db) == ["m054_passage_words"]
        kept, fresh = kept_and_fresh(db)
        assert kept == fresh and kept[""] == 2 and kept["cafe"] == 1 and kept["dog"] == 1

        def same(words=("dog", "cafe", "encodes", "the", "x", "3", "14", "anchor", "nowhere", "résumé")):
            kept, fresh = kept_and_fresh(db)
            assert kept == fresh
            assert store._word_counts(list(words)) == counted_over_the_index(db, list(words))

        store.finish_document(before, "w", "ready")
        read = a_document(store, owner, manuals, "read.pdf")
        store.take_document("w", -1)  # its lease already over: taken again, a page written twice
        store.read_page(read, "w", 1, 2, [("Anchor", "The anchor and the dog"), ("", ""), ("", "anchor chain")], -1)
        store.take_document("w2", LEASE)
        store.read_page(read, "w2", 1, 2, [("Anchor", "The anchor and the dog"), ("", ""), ("", "anchor chain")], LEASE)
        # in three statements: the second's passages are counted with all before them
        store.read_page(read, "w2", 2, 2, [("", f"anchor {n} the") for n in range(1200)], LEASE)
        upto = db.execute("SELECT upto FROM search_passages_counted").fetchone()[0]
        assert db.execute("SELECT count(*) FROM search_passages WHERE id > ?", [upto]).fetchone()[0] == 200
        same()
        store.finish_document(read, "w2", "failed", "a reason")
        assert store.read_again(read)  # a failed one starts over: its passages go
        same()
        store.take_document("w", LEASE)
        store.read_page(read, "w", 1, 1, [("", "anchor again")], LEASE)
        store.finish_document(read, "w", "ready")
        chat = store.new_conversation(store.default_agent(owner).id, "Attached", person=owner).id
        attached = store.add_document(owner, store.add_file("a.txt", b"x", person=owner), "a.txt", chat=chat)
        store.take_document("w", LEASE)
        store.read_page(attached, "w", 1, 1, [("", "the dog in the conversation")], LEASE)
        same()
        found = store.search_passages("conversation dogs", Scope(collections=(manuals,), chat=chat), limit=20)
        assert [f.text for f in found] == ["the dog in the conversation"], "the rare word decides what is ranked"
        store.delete_document(before)
        same()
        store.delete_conversation(chat)
        same()
        store.delete_collection(manuals)
        same()
        other = store.add_collection(owner, "Other")
        written(store, owner, other, [("", "the last dog")])
        bea = Accounts(store).add("Bea", "another long password").id
        written(store, bea, store.add_collection(bea, "Bea's"), [("", "Bea's dog"), ("", "her anchor")])
        same()
        assert store.remove_person(bea)
        same()
        store.delete_collection(other)
        assert kept_and_fresh(db) == ({}, {}), "no passage: no word, no total"
        assert store._word_counts(["dog"]) == (0, {"dog": 0})
    finally:
        db.conn.close()


def plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def test_postgresqls_search_reads_what_it_ranks_whatever_the_planner_thinks_of_the_table(pg_url):
    """A query of frequent words reads the FREQUENT_RANKED newest passages by their key, not a
    bitmap of every passage holding its words, and search_passages is never scanned in parallel:
    so even where the planner knows nothing of the table (no ANALYZE yet: it took "w1 & w2" for
    a few dozen passages when they were 98,000 of 100,000, ~100 ms; and two workers started
    for the count of a few newer passages, ~7 ms of a 4 ms search), here with parallel plans
    made free. Each statement a search makes is run again under EXPLAIN ANALYZE: no scan of
    search_passages in it is parallel, nor yields more rows than are ranked."""
    from app.store import db as dbm
    from app.store.knowledge import FREQUENT_RANKED

    db = dbm.connect(pg_url)
    try:
        store, owner, c, d = a_document_being_read(db)
        pages = 10
        for page in range(1, pages + 1):  # 10,000 passages of ~130 words, every one holding both
            store.read_page(d, "w", page, pages, [("", f"anchor chain {page} {n} " + " ".join(
                f"x{(page * 1_000 + n) * 7 + k * 131}" for k in range(120))) for n in range(1_000)], LEASE)
        store.finish_document(d, "w", "ready")
        for setting in ["parallel_setup_cost = 0", "parallel_tuple_cost = 0", "min_parallel_table_scan_size = 0",
                        "min_parallel_index_scan_size = 0"]:
            db.execute(f"SET {setting}")
        made: list[tuple[str, list]] = []
        for name in ("_one", "_all"):
            read = getattr(store, name)
            setattr(store, name, lambda sql, params=(), read=read: made.append((sql, list(params))) or read(sql, params))
        found = store.search_passages("anchor chain", Scope(collections=(c,)), limit=6)
        assert len(found) == 6 and {f.page for f in found} == {pages - 1}, "of the 2,000 newest, ties by id"
        assert len(made) >= 3
        for sql, params in made:
            plan = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0]
            for node in plan_nodes(plan[0]["Plan"]):
                if "search_passages" in (node.get("Relation Name"), (node.get("Index Name") or "")[:15]):
                    assert not node["Parallel Aware"], (sql, node["Node Type"])
                    assert node["Actual Rows"] <= FREQUENT_RANKED, (sql, node["Node Type"], node["Actual Rows"])
    finally:
        db.conn.close()
