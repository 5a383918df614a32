"""Knowledge: how fast documents become searchable, what reading costs the pages meanwhile,
its memory, kill -9s during a reading, search at 100,000 passages, and search over Debian's
documentation with a question set whose answers are known (recall).

    .venv/bin/python benchmarks/knowledge.py               # every phase, SQLite
    .venv/bin/python benchmarks/knowledge.py --postgres    # search and recall on PostgreSQL too (a throwaway cluster)
    .venv/bin/python benchmarks/knowledge.py --only recall --postgres

Each phase serves `tabletalk serve --workers 1` as a real process group on a temporary data
folder and writes the documents as rows (a file and a queued document, as the upload does),
so the time measured is the worker's: its copy, the child's reading, the page writes.
PDFs are made here with a text layer (tests/fakes/documents.py), 50 lines of about 70
characters a page, as a manual's pages are. The search phase's passages are made-up words;
the recall phase's are Debian's documentation packages read by the app's own reader
(_debian_corpus.py; installed when missing, the pages read kept in the temporary folder),
asked the questions of knowledge_questions.json.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import subprocess
import random
import http.client
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _serving import Served, tree_cpu  # noqa: E402
from _shared import Table, free_port, pct  # noqa: E402

from app.accounts.rules import Accounts  # noqa: E402
from app.config import Config, load as load_config  # noqa: E402
from app.knowledge.ranking import Meaning  # noqa: E402
from app.knowledge.vectors import FLOAT  # noqa: E402
from app.providers.client import Providers  # noqa: E402
from app.run.embedding import Embedding  # noqa: E402
from app.knowledge.reading import read  # noqa: E402
from app.store import Scope, Store, db as dbm, schema  # noqa: E402
from app.store.knowledge import query_words  # noqa: E402
from app.tables import item  # noqa: E402
from tests.fakes.documents import text_pdf  # noqa: E402

from _debian_corpus import corpus as debian_corpus, normal, questions as corpus_questions  # noqa: E402

WORDS = ("tide stone keeper harbour lantern signal beacon current channel anchor rope sail mast compass chart "
         "depth shoal reef storm calm wind wave shore cliff lighthouse ferry dock pier buoy vessel crew").split()
COOKIE = "tabletalk_session"


def manual(pages: int, seed: int = 0) -> bytes:
    lines = []
    for p in range(1, pages + 1):
        lines.append([f"{p}.{n} The {WORDS[(p * 7 + n + seed) % len(WORDS)]} and the "
                      f"{WORDS[(p * 3 + n * 5 + seed) % len(WORDS)]} of chapter {p}, line {n}, doc {seed}."
                      for n in range(50)])
    return text_pdf(lines, outline=[(f"Chapter {p}", p) for p in range(1, pages + 1, 10)])


def store_of(target) -> Store:
    db = dbm.connect(target)
    schema.migrate(db)
    return Store(db)


def owner_session(store: Store) -> tuple[int, str]:
    people = Accounts(store)
    found = people.hash_of("owner")
    person = found[0] if found else people.add("owner", "x" * 60, owner=True)
    return person.id, people.start_session(person.id)


def queue(store: Store, person: int, collection: int, name: str, data: bytes, kind: str = "pdf") -> int:
    return store.add_document(person, store.add_file(name, data, person), name, collection=collection, kind=kind)


def state(store: Store, document: int):
    return store.document(document)


def serving(data: Path) -> Served:
    s = Served(data, "http://127.0.0.1:9", "none", data / "tabletalk.db", lease=3)
    s.start()
    s.wait_healthy()
    return s


def page_times(port: int, path: str, token: str, stop: threading.Event, out: list[float], every: float) -> None:
    while not stop.is_set():
        t = time.monotonic()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", path, headers={"Cookie": f"{COOKIE}={token}"})
        r = c.getresponse()
        r.read()
        c.close()
        if r.status == 200:
            out.append(time.monotonic() - t)
        stop.wait(every)


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reading_child(pid: int) -> bool:
    try:
        return b"app.knowledge.child" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return False


def whole(data: bytes) -> list[tuple[int, str]]:
    with tempfile.NamedTemporaryFile(suffix=".pdf") as f:
        f.write(data)
        f.flush()

        async def go():
            return [(page.number, p.text) async for page in read(f.name, "pdf") for p in page.passages]
        return asyncio.run(go())


# --- the phases ----------------------------------------------------------------------------


def one_large(table: Table, work: Path, pages: int = 300) -> None:
    data = work / f"large{pages}" / "data"
    data.mkdir(parents=True)
    store = store_of(data / "tabletalk.db")
    person, token = owner_session(store)
    chat = store.new_conversation(store.default_agent(person).id, "Reading meanwhile", person=person).id
    for n in range(20):
        u = store.add(item("user", chat, f"Question {n} about tides?", done=True))
        store.add(item("text", chat, "An answer about tides. " * 40, turn=u.id, done=True))
    c = store.add_collection(person, "Manuals")
    pdf = manual(pages)
    served = serving(data)
    try:
        stop, times = threading.Event(), []
        watcher = threading.Thread(target=page_times, args=(served.port, f"/c/{chat}", token, stop, times, 0.05))
        watcher.start()
        time.sleep(1.0)
        idle = list(times)
        t0 = time.monotonic()
        d = queue(store, person, c, "manual.pdf", pdf)
        first = None
        while (doc := state(store, d)).state in ("queued", "reading"):
            if first is None and doc.passages:
                first = time.monotonic() - t0
            time.sleep(0.01)
        took = time.monotonic() - t0
        during = times[len(idle):]
        stop.set()
        watcher.join()
        table.add(f"{pages}-page PDF ({len(pdf) / 2**20:.1f} MiB): first passage searchable", f"{first or took:.2f} s")
        table.add(f"{pages}-page PDF: all {pages} pages searchable",
                  f"{took:.2f} s ({doc.passages:,} passages, {doc.state})", "≤ 20 s" if pages <= 300 else "")
        table.add("a conversation's page while idle: p50 / p99", f"{pct(idle, 50) * 1000:.0f} / {pct(idle, 99) * 1000:.0f} ms")
        table.add("... while the PDF is read: p50 / p99", f"{pct(during, 50) * 1000:.0f} / {pct(during, 99) * 1000:.0f} ms "
                  f"({len(during)} loads)", "p99 ≤ 200 ms")
    finally:
        served.stop()
        store.db.conn.close()


def many(table: Table, work: Path, count: int = 100, pages: int = 30) -> None:
    data = work / "many" / "data"
    data.mkdir(parents=True)
    store = store_of(data / "tabletalk.db")
    person, _ = owner_session(store)
    c = store.add_collection(person, "Many")
    served = serving(data)
    try:
        peak_worker = peak_child = peak_tree = 0
        t0 = time.monotonic()
        ids = [queue(store, person, c, f"doc{n}.pdf", manual(pages, seed=n)) for n in range(count)]
        while True:
            pids = tree_cpu(served.proc.pid)
            sizes = {pid: rss(pid) for pid in pids}
            children = {pid: size for pid, size in sizes.items() if reading_child(pid)}
            peak_child = max([peak_child, *children.values()])
            peak_worker = max([peak_worker, *(v for p, v in sizes.items() if p not in children and p != served.proc.pid)])
            peak_tree = max(peak_tree, sum(sizes.values()))
            docs = store.documents(c)
            if not any(x.busy for x in docs):
                break
            time.sleep(0.05)
        took = time.monotonic() - t0
        states = {x.state: sum(1 for y in docs if y.state == x.state) for x in docs}
        table.add(f"{count} PDFs of {pages} pages: all searchable",
                  f"{took:.1f} s, {sum(x.passages for x in docs):,} passages, {states}")
        table.add("... the worker's RSS at its peak", f"{peak_worker / 2**20:.0f} MiB", "≤ 300 MiB")
        table.add("... a reading child's RSS at its peak", f"{peak_child / 2**20:.0f} MiB")
        table.add("... the whole server (granian, worker, children) at its peak", f"{peak_tree / 2**20:.0f} MiB")
        assert len(ids) == count
    finally:
        served.stop()
        store.db.conn.close()


def killed(table: Table, work: Path, kills: int = 5) -> None:
    data = work / "killed" / "data"
    data.mkdir(parents=True)
    store = store_of(data / "tabletalk.db")
    person, _ = owner_session(store)
    c = store.add_collection(person, "Killed")
    pdf = manual(300)
    d = queue(store, person, c, "manual.pdf", pdf)
    resumed = []
    served = serving(data)
    try:
        for k in range(kills):
            # kill once the reading is under way again: a few pages past where it was
            start = state(store, d).pages_read
            while state(store, d).pages_read < start + 20 + k * 5:
                time.sleep(0.001)
            at = state(store, d).pages_read
            os.killpg(served.proc.pid, signal.SIGKILL)
            served.proc.wait()
            served = serving(data)
            t = time.monotonic()
            while state(store, d).pages_read <= at and state(store, d).state == "reading":
                time.sleep(0.01)
            resumed.append((at, time.monotonic() - t))
        while state(store, d).state in ("queued", "reading"):
            time.sleep(0.02)
    finally:
        served.stop()
    doc = state(store, d)
    got = [(r[0], r[1]) for r in store.db.conn.execute("SELECT page, text FROM passages WHERE document = ? "
                                                       "ORDER BY page, n", [d])]
    expected = whole(pdf)
    duplicates = len(got) - len(set(got))
    missing = len({p for p, _ in expected} - {p for p, _ in got})
    table.add(f"kill -9 during a 300-page PDF, {kills} times: killed at pages",
              ", ".join(str(a) for a, _ in resumed))
    table.add("... reading again after each start (lease 3 s)", ", ".join(f"{s:.1f}" for _, s in resumed) + " s")
    table.add("... duplicate passages / missing pages / passages as one whole reading",
              f"{duplicates} / {missing} / {'yes' if got == expected else 'NO'} ({doc.state})", "0 / 0 / yes")
    store.db.conn.close()


def search(table: Table, work: Path, target, name: str, passages: int = 100_000, queries: int = 300) -> None:
    store = store_of(target)
    person, _ = owner_session(store)
    c = store.add_collection(person, "Search")
    t0 = time.monotonic()
    per_page = 10
    documents = 100
    pages = passages // per_page // documents
    # words as a language has them: a few very common ("the", "of": every passage holds them),
    # most rare (a vocabulary of 20,000, drawn log-uniformly: Zipf's law, roughly)
    rng = random.Random(7)
    common = ["the", "of", "and", "to", "a", "in", "is", "that", "for", "it"]
    word = lambda: rng.choice(common) if rng.random() < 0.4 else f"w{int(20_000 ** rng.random())}"  # noqa: E731
    text = lambda d, p, n: " ".join(word() for _ in range(170))[:1000]  # noqa: E731
    for d in range(documents):
        doc = queue(store, person, c, f"d{d}.pdf", b"%PDF-1.7 " + str(d).encode())
        store.take_document("bench", 3600)
        for p in range(1, pages + 1):
            store.read_page(doc, "bench", p, pages, [(f"Chapter {p}", text(d, p, n)) for n in range(per_page)], 3600)
        store.finish_document(doc, "bench", "ready")
    loaded = time.monotonic() - t0
    scope = Scope(collections=(c,))
    times, hits, matched = [], 0, []
    for q in range(queries):
        words = " ".join(f"w{int(20_000 ** rng.random())}" for _ in range(1 + q % 4))
        question = f"where is the {words} in it?"
        t = time.monotonic()
        found = store.search_passages(question, scope, limit=6)
        times.append(time.monotonic() - t)
        hits += bool(found)
        matched.append(matching(store, question))
    table.add(f"search at {passages:,} passages ({name}, synthetic words): p50 / p99",
              f"{pct(times, 50) * 1000:.1f} / {pct(times, 99) * 1000:.1f} ms ({queries} queries of 1-4 words and "
              f"common ones, {hits} found some; loaded in {loaded:.0f} s)",
              "≤ 20 / 50 ms")
    table.add("... passages a query matched (any of its words): median",
              f"{pct(matched, 50):,} of {passages:,} ({pct(matched, 50) / passages:.0%})")
    hybrid(table, store, scope, rng, queries // 3)
    store.db.conn.close()


def hybrid(table: Table, store: Store, scope: Scope, rng: random.Random, queries: int, dims: int = 384) -> None:
    """The same passages with vectors (random, `dims` numbers: an embedding model's size, the
    ranking's cost does not depend on what they mean), searched by words and meaning."""
    import numpy as np

    generator = np.random.default_rng(7)
    ids = [r[0] for r in store.db.conn.execute("SELECT id FROM passages ORDER BY id")]
    t0 = time.monotonic()
    for start in range(0, len(ids), 2048):
        part = ids[start:start + 2048]
        matrix = generator.standard_normal((len(part), dims)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        store.write_vectors("bench", [(p, matrix[i].astype(FLOAT).tobytes()) for i, p in enumerate(part)])
    loaded = time.monotonic() - t0
    first, times = None, []
    for q in range(queries + 1):
        vector = generator.standard_normal(dims)
        words = " ".join(f"w{int(20_000 ** rng.random())}" for _ in range(1 + q % 4))
        t = time.monotonic()
        store.search_passages(f"where is the {words} in it?", scope, limit=6,
                              meaning=Meaning("bench", (vector / np.linalg.norm(vector)).astype(FLOAT).tobytes()))
        if first is None:
            first = time.monotonic() - t  # (a worker's first search by meaning)
        else:
            times.append(time.monotonic() - t)
    table.add(f"... with vectors of {dims} numbers (random), words and meaning: p50 / p99",
              f"{pct(times, 50) * 1000:.1f} / {pct(times, 99) * 1000:.1f} ms ({queries} queries; the first "
              f"{first * 1000:.0f} ms; vectors written in {loaded:.0f} s)", "≤ 20 / 50 ms")


def matching(store: Store, question: str) -> int:
    """How many passages hold any of `question`'s words, as search_passages looks for them
    (its words, OR'ed; the same expressions): the passages its ranking has to score."""
    words = query_words(question)
    if not words:
        return 0
    if dbm.postgres(store.db):
        return store.db.conn.execute("SELECT count(*) FROM search_passages WHERE doc @@ to_tsquery('tabletalk_english', ?)",
                                     [" | ".join(words)]).fetchone()[0]
    return store.db.conn.execute("SELECT count(*) FROM search_passages WHERE search_passages MATCH ?",
                                 [" OR ".join(f'"{w}"' for w in words)]).fetchone()[0]


def recalled(table: Table, label: str, first: list[list], named: list[set], answers: list[set]) -> None:
    """Recall@5 and @1 of the searches `first` (one per question): against the answers the set
    names, and with the passages judged to answer as well; over all questions and over each
    half, the even-numbered (those the ranking's changes were tried on, 2026-12-06) and the
    odd-numbered (held out: never looked at while changing the search)."""
    n = len(first)
    for kind, wanted in (("named answers", named), ("named or judged", answers)):
        at5 = [bool({f.passage for f in found[:5]} & a) for found, a in zip(first, wanted)]
        at1 = [bool(found) and found[0].passage in a for found, a in zip(first, wanted)]
        half = lambda hits, r: f"{sum(hits[r::2])} of {len(hits[r::2])}"  # noqa: E731
        table.add(f"{label} recall@5 / recall@1 ({kind})",
                  f"{sum(at5) / n:.2f} / {sum(at1) / n:.2f} ({sum(at5)} / {sum(at1)} of {n}; at 5, tried on "
                  f"{half(at5, 0)}, held out {half(at5, 1)})", "recall@5 ≥ 0.9")


def recall(table: Table, target, name: str, corpus, repeat: int = 5, embedder: "Embedder | None" = None) -> list[str]:
    """Debian's documentation (benchmarks/_debian_corpus.py) as the app's own reader made its
    passages, written through `read_page` into one collection; the question set asked
    `repeat` times (limit 6, as the tool asks). A question is answered at k when one of its
    answer passages (in its source file, holding its phrase) is among the first k found:
    reported against the answers the set names, and with those judged to say the same.
    Returns the lines that say which questions were missed, and where their answer came."""
    docs, took, kept = corpus
    packages = len({d.name.split("/")[0] for d in docs})
    if embedder is not None:
        docs = embedder.subset(docs)
    store = store_of(target)
    person, _ = owner_session(store)
    c = store.add_collection(person, "Debian documentation")
    t0 = time.monotonic()
    ids = {}
    for d in docs:
        doc = queue(store, person, c, d.name, d.name.encode(), kind="html")
        store.take_document("bench", 3600)
        for number, pages, passages in d.pages:
            store.read_page(doc, "bench", number, pages, [tuple(p) for p in passages], 3600)
        store.finish_document(doc, "bench", "ready")
        ids[d.name] = doc
    loaded = time.monotonic() - t0
    total = store.db.conn.execute("SELECT count(*) FROM passages").fetchone()[0]
    questions = corpus_questions()
    answers, named, absent = [], [], []  # (every answer: named or judged), the named ones only
    for q in questions:
        found, by_name = set(), set()
        for a in q["answers"]:
            phrase = normal(a["phrase"])
            rows = store.db.conn.execute("SELECT id, text FROM passages WHERE document = ?",
                                         [ids.get(a["source"], -1)]).fetchall()
            holding = {r[0] for r in rows if phrase in normal(r[1])}
            if not 1 <= len(holding) <= 3:
                absent.append(f"{q['question']!r}: {len(holding)} passages of {a['source']} hold {a['phrase']!r} "
                              "(1-3 should)")
            found |= holding
            by_name |= holding if "judged" not in a else set()
        answers.append(found)
        named.append(by_name)
    if absent:
        raise SystemExit("answers not in the corpus as the question set says:\n  " + "\n  ".join(absent))
    scope = Scope(collections=(c,))
    first = [store.search_passages(q["question"], scope, limit=6) for q in questions]  # and warms the caches
    times = []
    for _ in range(repeat):
        for q in questions:
            t = time.monotonic()
            store.search_passages(q["question"], scope, limit=6)
            times.append(time.monotonic() - t)
    at5 = [bool({f.passage for f in found[:5]} & a) for found, a in zip(first, answers)]
    matched = [matching(store, q["question"]) for q in questions]
    sources = sorted({d.name.split("/")[0] for d in docs})
    read = f"read by the app's reader in {took:.0f} s" + (f", {kept} of {packages} packages kept from an earlier "
                                                           "run" if kept else "")
    table.add(f"Debian's documentation ({name}{', a subset' if embedder else ''}): passages",
              f"{total:,} of {len(docs):,} HTML files "
              f"({len(sources)} packages; {read}); written in {loaded:.0f} s")
    table.add(f"... {len(questions)} questions x {repeat}, limit 6: p50 / p99",
              f"{pct(times, 50) * 1000:.1f} / {pct(times, 99) * 1000:.1f} ms", "≤ 20 / 50 ms")
    recalled(table, "...", first, named, answers)
    table.add("... passages a question matched (any of its words): median",
              f"{pct(matched, 50):,} of {total:,} ({pct(matched, 50) / total:.1%}; p90 {pct(matched, 90):,})")
    meanings: list[Meaning | None] = [None] * len(questions)
    if embedder is not None:
        meanings = embedder.hybrid(table, store, name, questions, named, answers, scope, repeat)
    missed = []
    for q, found, a, hit, m in zip(questions, first, answers, at5, matched):
        if hit:
            continue
        deep = store.search_passages(q["question"], scope, limit=100)
        hybrid = ""
        if embedder is not None:
            near = store.search_passages(q["question"], scope, limit=100, meaning=meanings[questions.index(q)])
            at = next((i + 1 for i, f in enumerate(near) if f.passage in a), None)
            hybrid = f"; hybrid: at {at if at else '> 100'}"
        rank = next((i + 1 for i, f in enumerate(deep) if f.passage in a), None)
        top = found[0] if found else None
        missed.append(f"{q['question']} [{', '.join(a['source'] for a in q['answers'])}] words "
                      f"{query_words(q['question'])}, {m:,} matched; answer at "
                      f"{rank if rank else '> 100'}{hybrid}; first: {top.name + ' ' + repr(top.heading[:50]) if top else '-'}")
    store.db.conn.close()
    return missed


class Embedder:
    """all-MiniLM-L6-v2 behind /v1/embeddings (benchmarks/_embedding_server.py, in the venv of
    `make bench-embeddings`), and the app's own parts that use it: `Providers.embed` through
    AI_URL, and the background `Embedding` that gives passages their vectors."""

    MODEL = "all-minilm-l6-v2"
    VENV = ROOT / ".cache" / "embed" / "bin" / "python"

    def __init__(self, passages: int):
        self.passages = passages

    def subset(self, docs: list) -> list:
        """The documents that hold the questions' answers, then others drawn at random (the
        same each run), until about `passages` passages: embedding all of Debian's
        documentation would take this CPU hours (~5 GFLOP a passage of 256 tokens)."""
        answering = {a["source"] for q in corpus_questions() for a in q["answers"]}
        chosen = [d for d in docs if d.name in answering]
        others = [d for d in docs if d.name not in answering]
        random.Random(1).shuffle(others)
        count = lambda d: sum(len(passages) for _, _, passages in d.pages)  # noqa: E731
        total = sum(count(d) for d in chosen)
        for d in others:
            if total >= self.passages:
                break
            chosen.append(d)
            total += count(d)
        return sorted(chosen, key=lambda d: d.name)

    def __enter__(self) -> "Embedder":
        if not self.VENV.exists():
            subprocess.run(["make", "-C", str(ROOT), "bench-embeddings"], check=True)
        self.port = free_port()
        self.server = subprocess.Popen([str(self.VENV), str(Path(__file__).parent / "_embedding_server.py"),
                                        "--port", str(self.port)], stdout=subprocess.PIPE, text=True,
                                       env={**os.environ, "EMBED_THREADS": os.environ.get("EMBED_THREADS", "2")})
        assert "listening" in (self.server.stdout.readline() or ""), "the embedding server did not start"
        config = load_config()
        self.config = Config(**{**config.__dict__, "ai_url": f"http://127.0.0.1:{self.port}/v1", "ai_key": "",
                                "ollama_host": "", "local_ai_url": "", "accounts": (), "embeddings": self.MODEL})
        return self

    def __exit__(self, *exc) -> None:
        self.server.terminate()
        self.server.wait(10)

    def kept(self, store: Store) -> Path:
        """Where this corpus's vectors are kept between runs: keyed by its passages' texts."""
        key = hashlib.sha256(self.MODEL.encode())
        for (text,) in store.db.conn.execute("SELECT text FROM passages ORDER BY id"):
            key.update(text.encode())
        return Path(tempfile.gettempdir()) / f"tabletalk-vectors-{key.hexdigest()[:12]}.npy"

    def embed_all(self, store: Store) -> tuple[float, int]:
        """Every passage's vector, by the app's background embedding (or as an earlier run kept
        them): (seconds, passages embedded now)."""
        import numpy as np

        ids = [r[0] for r in store.db.conn.execute("SELECT id FROM passages ORDER BY id")]
        kept = self.kept(store)
        if kept.exists():
            matrix = np.load(kept)
            if len(matrix) == len(ids):
                store.write_vectors(self.MODEL, [(p, matrix[i].astype(FLOAT).tobytes()) for i, p in enumerate(ids)])
                return 0.0, 0

        async def run() -> int:
            providers = Providers(self.config)
            try:
                worker = Embedding(self.MODEL, store, None, providers)
                while await worker.step():
                    pass
                return worker.embedded
            finally:
                await providers.close()

        t = time.monotonic()
        embedded = asyncio.run(run())
        took = time.monotonic() - t
        vectors = dict(store.db.conn.execute("SELECT passage, vector FROM passage_vectors").fetchall())
        np.save(kept, np.stack([np.frombuffer(vectors[p], dtype=FLOAT) for p in ids]))
        return took, embedded

    def questions(self, texts: list[str]) -> tuple[list[Meaning], list[float]]:
        """Each question's vector as search_knowledge asks for it (one request each), and the times."""
        async def run() -> tuple[list[Meaning], list[float]]:
            providers = Providers(self.config)
            out, times = [], []
            try:
                for text in texts:
                    t = time.monotonic()
                    [vector] = await providers.embed(self.MODEL, [text])
                    times.append(time.monotonic() - t)
                    out.append(Meaning(self.MODEL, vector))
            finally:
                await providers.close()
            return out, times

        return asyncio.run(run())

    def hybrid(self, table: Table, store: Store, name: str, questions: list[dict], named: list[set],
               answers: list[set], scope: Scope, repeat: int) -> list[Meaning]:
        took, embedded = self.embed_all(store)
        total = store.db.conn.execute("SELECT count(*) FROM passages").fetchone()[0]
        table.add(f"... with embeddings ({self.MODEL}, 384 numbers, PyTorch on the CPU): passages embedded",
                  f"{embedded:,} in {took:.0f} s ({embedded / took:.0f} a second)" if embedded else
                  f"{total:,}, kept from an earlier run")
        meanings, asked = self.questions([q["question"] for q in questions])
        first = [store.search_passages(q["question"], scope, limit=6, meaning=m) for q, m in zip(questions, meanings)]
        times = []
        for _ in range(repeat):
            for q, m in zip(questions, meanings):
                t = time.monotonic()
                store.search_passages(q["question"], scope, limit=6, meaning=m)
                times.append(time.monotonic() - t)
        table.add("... hybrid search (words and meaning): p50 / p99",
                  f"{pct(times, 50) * 1000:.1f} / {pct(times, 99) * 1000:.1f} ms (and the question's vector: "
                  f"{pct(asked, 50) * 1000:.0f} / {pct(asked, 99) * 1000:.0f} ms)", "≤ 20 / 50 ms")
        recalled(table, "... hybrid", first, named, answers)
        by_meaning = [store.nearest_passages(self.MODEL, m.vector, scope, 5) for m in meanings]
        alone = sum(bool({p for p, _ in near} & a) for near, a in zip(by_meaning, named))
        table.add("... meaning alone recall@5 (named answers)", f"{alone / len(questions):.2f} ({alone} of {len(questions)})")
        # the first look (the vectors' signs) against every vector scored: of the 40 nearest
        # (what is merged with the words' ranking), how many it finds
        kept = [len({p for p, _ in store.nearest_passages(self.MODEL, m.vector, scope, 40)}
                    & {p for p, _ in store._scan(self.MODEL, m.vector, scope, 40)}) / 40
                for m in meanings]
        table.add("... the first look's 40 nearest, of every vector scored's: mean / worst",
                  f"{sum(kept) / len(kept):.0%} / {min(kept):.0%}")
        return meanings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", action="store_true", help="search and recall on PostgreSQL too")
    parser.add_argument("--only", nargs="+", choices=["large", "many", "killed", "search", "recall"],
                        help="these phases only")
    parser.add_argument("--fresh", action="store_true", help="read Debian's documentation again (recall), not "
                        "what an earlier run kept in the temporary folder")
    parser.add_argument("--embeddings", type=int, metavar="PASSAGES", help="recall with search by meaning too, "
                        "over a subset of the corpus of about PASSAGES passages (the answers' files and others "
                        "drawn at random): all-MiniLM-L6-v2 on PyTorch's CPU build, served on 127.0.0.1 from "
                        ".cache/embed (make bench-embeddings), embeds ~2-6 passages a second on one core")
    args = parser.parse_args()
    table = Table(echo=True)
    missed: list[str] = []
    runs = lambda phase: not args.only or phase in args.only  # noqa: E731
    corpus = debian_corpus(args.fresh) if runs("recall") else None
    embedder = Embedder(args.embeddings) if args.embeddings and runs("recall") else None
    with tempfile.TemporaryDirectory(prefix="tabletalk-knowledge-") as tmp, embedder or contextlib.nullcontext():
        work = Path(tmp)
        phases = {"large": lambda: (one_large(table, work), one_large(table, work, 3000)), "many": lambda: many(table, work),
                  "killed": lambda: killed(table, work),
                  "search": lambda: search(table, work, work / "search.db", "SQLite"),
                  "recall": lambda: missed.extend(f"SQLite: {m}" for m in recall(table, work / "recall.db", "SQLite", corpus,
                                                                                  embedder=embedder))}
        for name, phase in phases.items():
            if runs(name):
                phase()
        if args.postgres and (runs("search") or runs("recall")):
            from tests.pg import Cluster

            cluster = Cluster(durable=True).start()
            try:
                if runs("search"):
                    search(table, work, cluster.database(), "PostgreSQL")
                if runs("recall"):
                    missed.extend(f"PostgreSQL: {m}" for m in recall(table, cluster.database(), "PostgreSQL", corpus,
                                                                      embedder=embedder))
            finally:
                cluster.stop()
    table.print()
    if missed:
        print("\nquestions whose answer was not in the first 5:")
        for m in missed:
            print(f"  {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
