"""Knowledge searched by meaning as well as by words: passages' vectors from a model server's
/v1/embeddings, written in the background, and merged with full text (docs/knowledge.md)."""
from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest

from app.config import Config, load
from app.knowledge.ranking import K, Meaning, fuse
from app.knowledge.vectors import Codes, Nearest, code, pack
from app.providers.client import Providers
from app.run.embedding import Embedding
from app.store import Scope
from app.tables import Assistant
from tests.conftest import idle, rows, soup, start_chat, wait_for, store_of
from tests.fakes.openai_server import FakeModelServer, error, tool_call
from tests.test_knowledge import give, made, ready, upload

LEASE = 30.0
# what the person asks shares no word with the passage that answers it, only a meaning
CONCEPTS = {"automobile": "car", "vehicle": "car", "car": "car", "repair": "fix", "mending": "fix", "fix": "fix"}
ANSWER = "Mending an automobile: loosen the wheel nuts before you lift it."
OTHERS = [f"Passage {n} about gardens, roses and the weather of spring number {n}." for n in range(30)]


# --- vectors and rankings ---------------------------------------------------------------


def test_a_vector_is_kept_at_unit_length_and_what_is_no_vector_is_refused():
    kept = np.frombuffer(pack([3, 4]), dtype="<f4")
    assert kept.tolist() == pytest.approx([0.6, 0.8])
    for bad, says in [([], "0 numbers"), ([0.0, 0.0], "all zeros"), ([1.0, float("nan")], "not finite"),
                      ("abc", "not a list of numbers"), ([[1.0], [2.0]], "numbers"), ([1.0] * 9000, "9,000")]:
        with pytest.raises(ValueError, match=says):
            pack(bad)


def test_the_nearest_batch_by_batch_are_the_nearest_of_all():
    rng = random.Random(7)
    vectors = [pack([rng.uniform(-1, 1) for _ in range(16)]) for _ in range(500)]
    query = pack([rng.uniform(-1, 1) for _ in range(16)])
    everything = sorted(range(500), key=lambda i: -float(np.frombuffer(vectors[i], "<f4") @ np.frombuffer(query, "<f4")))
    near = Nearest(query, 10)
    for start in range(0, 500, 64):
        near.add(list(range(start, min(500, start + 64))), vectors[start:start + 64])
    near.add([999], [b"\0" * 8])  # another model's size: passed over
    assert [i for i, _ in near.best()] == everything[:10]


def test_the_first_look_keeps_the_nearest_by_their_signs_within_the_scope():
    rng = np.random.default_rng(3)
    vectors = [pack(rng.standard_normal(100)) for _ in range(300)]  # 100 numbers: 13 bytes of signs, padded to 16
    assert len(code(vectors[0])) == 16
    codes = Codes()
    # passages 1-200 in collection 7, 201-300 attached to conversation 9
    assert codes.add([(i + 1, i + 1, 7 if i < 200 else None, None if i < 200 else 9, 1000 + i // 50, code(v))
                      for i, v in enumerate(vectors)])
    assert len(codes) == 300 and codes.rev == 300
    query = vectors[41]  # passage 42's own vector: distance 0
    signs = lambda v: np.unpackbits(np.frombuffer(code(v), dtype=np.uint8))  # noqa: E731
    distance = {i + 1: int((signs(v) != signs(query)).sum()) for i, v in enumerate(vectors)}
    looked, more = codes.first_look(query, [7], None, (), 10)
    assert looked[0] == 42 and more
    assert sorted(distance[p] for p in looked) == sorted(distance[p] for p in range(1, 201))[:10]
    assert all(p <= 200 for p in looked), "only the collection's"
    looked, more = codes.first_look(query, [], 9, (), 500)
    assert sorted(looked) == list(range(201, 301)) and not more, "only the conversation's, all of them"
    assert codes.first_look(query, [8], None, (), 10) == ([], False)
    looked, more = codes.first_look(query, [], None, (1001,), 100)
    assert sorted(looked) == list(range(51, 101)) and not more, "one document's (picked for a message)"
    assert codes.first_look(pack([1.0, 2.0]), [7], None, (), 10) == ([], True), "another width: scored from the rows"
    # a passage held already (written again), or another width, asks for all to be read again
    assert not codes.add([(5, 301, 7, None, 1000, code(vectors[4]))])
    assert not codes.add([(400, 302, 7, None, 1000, code(pack([1.0, 2.0])))])
    assert codes.add([(401, 303, 7, None, 1000, code(vectors[0]))]) and len(codes) == 301 and codes.rev == 303


def test_reciprocal_rank_fusion_prefers_what_both_rankings_found():
    merged = fuse([1, 2, 3], [3, 4, 1])
    assert [i for i, _ in merged][:2] == [1, 3], "found by both"
    assert merged[0][1] == pytest.approx(1 / (K + 1) + 1 / (K + 3))
    assert fuse([], []) == []


# --- the store, on both engines -----------------------------------------------------------


@pytest.fixture
def owner(store) -> int:
    from app.accounts.rules import Accounts
    return Accounts(store).add("Owner", "correct horse battery").id


def read(store, owner: int, collection: int, texts: list[str]) -> int:
    file = store.add_file("notes.md", b"x", person=owner)
    d = store.add_document(owner, file, "notes.md", collection=collection, kind="md")
    store.take_document("w1", LEASE)
    store.read_page(d, "w1", 1, 1, [("", t) for t in texts], LEASE)
    store.finish_document(d, "w1", "ready")
    return d


def embed_all(store, server: FakeModelServer, model: str = "embedder") -> None:
    for p, text in store.passages_to_embed(model, 0, 1000):
        store.write_vectors(model, [(p, pack(server.embed(text)))])


def test_a_passage_worded_otherwise_is_found_by_its_meaning_and_merged_with_words(store, owner):
    server = FakeModelServer(models={"embedder": 0})
    server.concepts = CONCEPTS
    c = store.add_collection(owner, "Garage")
    read(store, owner, c, [*OTHERS, ANSWER])
    scope = Scope(collections=(c,))
    question = "How do I repair my car?"
    assert ANSWER not in [f.text for f in store.search_passages(question, scope)], "no word in common"
    assert store.vector_counts("embedder") == (0, 31)
    embed_all(store, server)
    assert store.vector_counts("embedder") == (31, 31) == store.vector_counts("embedder", c)
    assert store.vector_counts("embedder", c + 1) == (0, 0), "another collection's passages are its own"
    assert store.passages_to_embed("embedder", 0, 10) == [], "nothing left to embed"
    assert len(store.passages_to_embed("another-model", 0, 100)) == 31, "another model's vectors are its own"
    meaning = Meaning("embedder", pack(server.embed(question)))
    found = store.search_passages(question, scope, limit=3, meaning=meaning)
    assert found[0].text == ANSWER and found[0].name == "notes.md" and found[0].page == 1
    assert found[0].score == pytest.approx(1 / (K + 1)), "first by meaning, not found by words"
    # words and meaning both: a passage found by both comes first
    both = store.search_passages("weather of spring number 7", scope, limit=3,
                                 meaning=Meaning("embedder", pack(server.embed("weather of spring number 7"))))
    assert both[0].text == OTHERS[7]
    # outside the scope nothing is found by meaning either
    other = store.add_collection(owner, "Other")
    assert store.search_passages(question, Scope(collections=(other,)), meaning=meaning) == []


def test_a_deleted_document_takes_its_vectors_and_a_changed_model_embeds_again(store, owner):
    server = FakeModelServer(models={"embedder": 0})
    c = store.add_collection(owner, "K")
    d = read(store, owner, c, ["one passage", "two passages"])
    embed_all(store, server)
    assert rows_of(store, "passage_vectors") == 2
    [(first, _), (second, _)] = store.passages_to_embed("new-model", 0, 10)
    assert store.write_vectors("new-model", [(first, pack([1.0, 2.0]))]) == 1, "replaced by the new model's"
    assert rows_of(store, "passage_vectors") == 2
    assert [p for p, _ in store.passages_to_embed("new-model", 0, 10)] == [second]
    store.delete_document(d)
    assert rows_of(store, "passage_vectors") == 0
    assert store.write_vectors("embedder", [(second, pack([1.0]))]) == 0, "a passage gone meanwhile is passed over"


def test_a_large_index_is_looked_at_by_its_codes_and_found_as_every_vector_scored_finds_it(store, owner):
    rng = np.random.default_rng(5)
    c, other = store.add_collection(owner, "Large"), store.add_collection(owner, "Other")
    read(store, owner, c, [f"passage {n}" for n in range(1500)])
    read(store, owner, other, [f"elsewhere {n}" for n in range(500)])
    ids = [p for p, _ in store.passages_to_embed("m", 0, 5000)]
    vectors = {p: pack(rng.standard_normal(96)) for p in ids}
    # ten passages about one thing (near one point), as an embedding model places them
    topic = rng.standard_normal(96)
    near = ids[700:710]
    vectors |= {p: pack(topic + rng.standard_normal(96) * 0.5) for p in near}
    store.write_vectors("m", list(vectors.items()))
    query = pack(topic + rng.standard_normal(96) * 0.3)
    traced = statements_like(store, "FROM passage_vectors v")
    found = store.nearest_passages("m", query, Scope((c,)), 6)
    [second_look] = [s for s in traced if "v.vector" in s]
    assert [p for p, _ in found] == [p for p, _ in store._scan("m", query, Scope((c,)), 6)], "as if every one were scored"
    assert {p for p, _ in found} <= set(near)
    scans = [s for s in traced if "ORDER BY v.passage LIMIT" in s]
    assert len(scans) == 1, "only the comparison's own scan: the search read the first look's rows, not every vector"
    # and those rows by their keys: walking the model's index read every vector of it (~16 ms at 100,000)
    plan = [r[3] for r in store.db.conn.execute("EXPLAIN QUERY PLAN " + second_look)]
    assert any(step.startswith("SEARCH v USING INTEGER PRIMARY KEY") for step in plan), plan
    assert len(store.codes["m"]) == 2000
    assert all(p in ids[:1500] for p, _ in found), "the collection's only"


def statements_like(store, text: str) -> list[str]:
    """The statements run on the store's connection from now on that hold `text` (SQLite's trace)."""
    seen: list[str] = []
    if hasattr(store.db.conn, "set_trace_callback"):
        store.db.conn.set_trace_callback(lambda sql: seen.append(sql) if text in sql else None)
    else:
        pytest.skip("statements are counted on SQLite's connection")
    return seen


def test_the_codes_read_what_is_new_since_and_all_again_once_a_deleted_documents_are_gone(store, owner):
    rng = np.random.default_rng(8)
    c = store.add_collection(owner, "K")
    first = read(store, owner, c, [f"first {n}" for n in range(40)])
    store.write_vectors("m", [(p, pack(rng.standard_normal(32))) for p, _ in store.passages_to_embed("m", 0, 100)])
    query = pack(rng.standard_normal(32))
    assert len(store.nearest_passages("m", query, Scope((c,)), 6)) == 6
    codes = store.codes["m"]
    assert len(codes) == 40
    read(store, owner, c, [f"second {n}" for n in range(30)])
    store.write_vectors("m", [(p, pack(rng.standard_normal(32))) for p, _ in store.passages_to_embed("m", 0, 100)])
    store.nearest_passages("m", query, Scope((c,)), 6)
    assert store.codes["m"] is codes and len(codes) == 70, "the new rows added to those held"
    store.delete_document(first)
    found = store.nearest_passages("m", query, Scope((c,)), 6)
    assert len(found) == 6 and all(p not in codes.ids[:40] for p, _ in found), "none of the deleted document's"
    assert codes.stale, "most of the first look was gone: read again next time"
    store.nearest_passages("m", query, Scope((c,)), 6)
    assert len(store.codes["m"]) == 30


def test_another_persons_passages_are_not_found_by_meaning_however_near(store, owner):
    """The attack probe: B's agent given A's collection anyway, and B's question the very
    vector of A's passage: nothing of A's, by the codes' first look nor by the scan."""
    from app.accounts.rules import Accounts

    bea = Accounts(store).add("Bea", "correct horse battery staple").id
    a_collection, b_collection = store.add_collection(owner, "A's"), store.add_collection(bea, "B's")
    read(store, owner, a_collection, ["A's secret: the vault opens at dawn."])
    read(store, bea, b_collection, ["B's notes on gardening."])
    rng = np.random.default_rng(2)
    vectors = {p: pack(rng.standard_normal(64)) for p, _ in store.passages_to_embed("m", 0, 10)}
    store.write_vectors("m", list(vectors.items()))
    [secret] = [p for p, t in store.passages_to_embed("other", 0, 10) if "vault" in t]
    agent = store.default_agent(bea) or store.add_agent(Assistant(name="B's agent", person=bea))
    store.set_agent_collections(agent.id, [a_collection, b_collection])  # given while it was shared, say
    chat = store.new_conversation(agent.id, person=bea).id
    scope = store.knowledge_scope(chat, agent.id)
    assert a_collection not in scope.collections
    question = "the vault at dawn"
    found = store.search_passages(question, scope, meaning=Meaning("m", vectors[secret]))
    assert found and all("vault" not in f.text for f in found)
    assert secret not in [p for p, _ in store._scan("m", vectors[secret], scope, 10)]


def rows_of(store, table: str) -> int:
    return store._one(f"SELECT count(*) FROM {table}")[0]


# --- the worker's background embedding ------------------------------------------------------


class Feed:
    """The feed's one call the embedding makes: a future done at the next change."""

    def __init__(self):
        self.tick: asyncio.Future | None = None

    def next_change(self) -> asyncio.Future:
        if self.tick is None or self.tick.done():
            self.tick = asyncio.get_running_loop().create_future()
        return self.tick


def providers_for(server: FakeModelServer) -> Providers:
    config = load()
    return Providers(Config(**{**config.__dict__, "ai_url": server.url, "ai_key": "", "ollama_host": ""}))


async def test_passages_get_their_vectors_in_batches_and_a_refused_one_is_passed_over(store, owner, monkeypatch):
    c = store.add_collection(owner, "K")
    read(store, owner, c, [f"passage number {n}" for n in range(40)] + ["POISON"])
    with FakeModelServer(models={"embedder": 0}) as server:
        embed = server.embed
        server.embed = lambda t: (_ for _ in ()).throw(ValueError("too long")) if "POISON" in t else embed(t)
        providers = providers_for(server)
        try:
            worker = Embedding("embedder", store, Feed(), providers)
            worker.after = 0
            while await step_or_fail(worker):
                pass
        finally:
            await providers.close()
    assert store.vector_counts("embedder") == (40, 41), "all but the one the server refused"
    assert worker.refused and len(worker.refused) == 1
    sizes = [len(b["input"]) for b in server.embedded]
    assert sizes[0] == 32 and max(sizes) == 32, sizes
    assert all(b["encoding_format"] == "float" and b["model"] == "embedder" for b in server.embedded)


async def step_or_fail(worker: Embedding) -> bool:
    """One step as the worker's loop takes it: a failed batch is tried again, one by one."""
    try:
        return await worker.step()
    except Exception:
        return True


async def test_a_server_away_is_waited_for_and_the_passages_catch_up(store, owner):
    c = store.add_collection(owner, "K")
    read(store, owner, c, ["alpha", "beta"])
    with FakeModelServer(models={"embedder": 0}) as server:
        server.embed_error = error(503, "loading model")
        providers = providers_for(server)
        worker = Embedding("embedder", store, Feed(), providers)
        try:
            worker.start()
            await asyncio.to_thread(wait_for, lambda: len(server.embedded) >= 2)
            assert store.vector_counts("embedder") == (0, 2)
            server.embed_error = None
            await asyncio.to_thread(wait_for, lambda: store.vector_counts("embedder") == (2, 2))
        finally:
            await worker.stop()
            await providers.close()


# --- in the app ----------------------------------------------------------------------------


@pytest.mark.process  # (documents are read in a child process)
def test_an_agent_finds_the_passage_worded_otherwise_with_embeddings_set(monkeypatch, env, data, fake):
    from tests.conftest import app_client

    fake.models["embedder"] = 0
    fake.concepts = CONCEPTS
    monkeypatch.setenv("AI_EMBEDDINGS", "embedder")
    monkeypatch.setenv("AI_MODEL", "fake-model")
    with app_client(data) as client:
        c = made(client)
        upload(client, c, ("garage.md", "\n\n".join(["# Garage", *OTHERS, ANSWER]).encode(), "text/markdown"))
        ready(data)
        count = lambda table: rows(data, f"SELECT count(*) AS n FROM {table}")[0]["n"]  # noqa: E731
        wait_for(lambda: count("passage_vectors") == count("passages"))
        store = store_of(client)
        give(client, store.default_agent(store.owner()).id, c)
        fake.script([tool_call("search_knowledge", {"query": "repair a car"})], "Loosen the nuts first (garage.md, p. 1).")
        chat = start_chat(client, "How do I repair my car?")
        idle(client, chat)
        page = soup(client.get(f"/knowledge/{c}"))
        assert "by meaning" in page.select_one(".meaning").text and "have their vectors" in page.select_one(".meaning").text
    result = fake.streamed[1]["messages"][-1]
    assert result["role"] == "tool" and ANSWER in result["content"], result["content"]
    questions = [b for b in fake.embedded if b["input"] == ["repair a car"]]
    assert questions, "the query was embedded"
    [call] = rows(data, "SELECT sources FROM items WHERE kind = 'call'")
    assert json.loads(call["sources"])[0]["document"] == "garage.md"
