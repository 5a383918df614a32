"""Long conversations: how good the token estimate is, and what building a request costs.

    .venv/bin/python benchmarks/context.py [--turns N] [--window W] [--items I]

1. Estimate error. A conversation of N turns (prose, code, tables, plan updates through the
   `update_plan` tool) is answered by the app's own `Turn` (rows in a temporary SQLite
   database, requests built, cut and calibrated exactly as the runner does) against the fake
   OpenAI server over HTTP. The fake reports each request's usage with a stand-in tokenizer
   (`server_count`: BPE-like word pieces over every message and the tool schemas, as a real
   server counts them), which is not our characters / 4. For every request the table
   compares with that report: the raw estimate (no calibration: ratio 1), the estimate the
   app used (calibrated by every earlier answer), and the same after the first 5 answers.
   It also reports how often the start of the request changed (a server's prefix cache is
   lost each time) and the share of each request that repeats the previous request's start.
2. Building a request. A conversation of I items (turns of user, reasoning, text, a tool
   call, text) written straight into SQLite; then the time of `Turn.prepare` (read the rows,
   build the messages, estimate, choose the view, write the context row): the first request
   (view chosen afresh, whole history read) and later ones (the view kept, read from its
   start), for a window that holds everything and for a 32k window.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app import config as configuration  # noqa: E402
from app.store import db as dbm, schema  # noqa: E402
from app.context import window  # noqa: E402
from app.providers.client import Providers  # noqa: E402
from app.store import Store  # noqa: E402
from app.tools.standard import builtin_tools  # noqa: E402
from app.run.turn import Turn  # noqa: E402
from app.run.writes import Writes  # noqa: E402
from tests.fakes.openai_server import FakeModelServer, text, tool_call, usage  # noqa: E402

MODEL = "bench-model"
PIECE = re.compile(r" ?[A-Za-z]{1,7}| ?\d{1,3}|\s+|[^\sA-Za-z\d]")


def server_count(request: dict) -> int:
    """A stand-in for a server's tokenizer: words in pieces of up to 7 letters, numbers in
    threes, each other character a token, 3 tokens of framing per message, the tool schemas
    as JSON. Not characters / 4, which is what the app guesses before it has learned."""
    total = 0
    for m in request["messages"]:
        content = m.get("content") or ""
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content)
        total += 3 + len(PIECE.findall(content))
        for call in m.get("tool_calls") or ():
            total += 3 + len(PIECE.findall(call["function"]["name"] + call["function"]["arguments"]))
    return total + len(PIECE.findall(json.dumps(request.get("tools", []))))


PROSE = ("Otters are semi-aquatic mammals of the weasel family; the river otter eats fish, "
         "crayfish and frogs, and holds its breath for up to eight minutes. ")
CODE = "```python\ndef count(xs):\n    return sum(1 for x in xs if x % 3 == 0)  # every third\n```\n"
TABLE = "| river | otters | km |\n|---|---:|---:|\n| Tay | 412 | 188 |\n| Spey | 268 | 172 |\n"


def answer_for(n: int):
    """Turn n's scripted answer: every fifth turn a plan update first; text of three kinds."""
    body = [PROSE * (2 + n % 4), CODE * (n % 3), TABLE * (n % 2)][n % 3] or PROSE

    def steps(request):
        return [text(f"Answer {n}. {body}"), usage(server_count(request), len(body) // 4)]

    if n % 5:
        return [steps]
    plan = "\n".join(f"- [{'x' if i < n % 7 else ' '}] step {i} of the survey" for i in range(6))
    return [lambda request: [tool_call("update_plan", {"plan": plan}), usage(server_count(request), 40)], steps]


def question(n: int) -> str:
    return f"Question {n}: " + ["What do otters eat?", "Write a small counting function.",
                                "Tabulate the otter counts by river, with lengths."][n % 3] + " " + PROSE * (n % 2)


def pct(xs: list[float]) -> str:
    return f"{statistics.mean(xs) * 100:.1f}% mean, {max(xs) * 100:.1f}% max" if xs else "-"


async def estimate_error(turns: int, size: int) -> list[tuple[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="tabletalk-bench-"))
    with FakeModelServer(models={MODEL: size}) as fake:
        os.environ.update(TABLETALK_DATA=str(folder), AI_URL=fake.url, AI_MODEL=MODEL, OLLAMA_HOST="")
        config = configuration.load()
        store = Store(dbm.connect(config.database))
        schema.migrate(store.db)
        providers = Providers(config)
        for n in range(1, turns + 1):
            fake.script(*answer_for(n))
        chat = store.new_conversation(store.default_agent().id).id
        agent = store.default_agent()
        estimates: list[tuple[int, int]] = []  # (calibrated estimate, raw) per request, in order
        for n in range(1, turns + 1):
            user = store.ask(chat, question(n))
            turn = Turn(store, Writes(store), chat, user, agent, MODEL, tools=builtin_tools(), window=size,
                        share=config.context_share)
            prepare = turn.prepare

            def recorded(prepare=prepare, turn=turn):
                messages = prepare()
                estimates.append((turn.estimate, turn.raw))
                return messages

            turn.prepare = recorded
            await turn.run(providers.stream_fn(MODEL))
            store.update(user.id, done=True)
        await providers.close()
        requests = fake.streamed
    reported = [server_count(r) for r in requests]
    raw_err = [abs(raw - rep) / rep for (_, raw), rep in zip(estimates, reported)]
    cal_err = [abs(est - rep) / rep for (est, _), rep in zip(estimates, reported)]
    firsts = [json.dumps(next(m for m in r["messages"] if m["role"] == "user")) for r in requests]
    moves = sum(1 for a, b in zip(firsts, firsts[1:]) if a != b)
    reused = []
    for a, b in zip(requests, requests[1:]):
        same = 0
        for x, y in zip(a["messages"], b["messages"]):
            if x != y:
                break
            same += 1
        reused.append(len(json.dumps(b["messages"][:same])) / len(json.dumps(b["messages"])))
    ratio, samples = store.calibration(MODEL)
    ctx = store.context(chat)
    store.db.conn.close()
    return [
        ("requests (turns, model steps)", f"{len(requests)} ({turns} turns)"),
        ("window / budget (tokens)", f"{size:,} / {int(size * config.context_share):,}"),
        ("server count per request", f"{min(reported):,} .. {max(reported):,}"),
        ("error, raw estimate (chars/4, no calibration)", pct(raw_err)),
        ("error, calibrated estimate (all requests)", pct(cal_err)),
        ("error, calibrated, after the first 5 answers", pct(cal_err[5:])),
        ("learned ratio (server / raw) after all", f"{ratio:.3f} from {samples} reports"),
        ("largest request / window (server count)", f"{max(reported) / size * 100:.1f}%"),
        ("turns left out at the end", f"{ctx['turns_out']} (about {ctx['left_out']:,} tokens)"),
        ("times the request's start changed", f"{moves} in {len(requests) - 1} requests"),
        ("request repeating the previous one's start", f"{statistics.mean(reused) * 100:.1f}% mean"),
    ]


def big_conversation(store: Store, items: int) -> tuple[int, object]:
    chat = store.new_conversation(store.default_agent().id).id
    t = dbm.now()
    with dbm.write(store.db) as db:
        rev = dbm.bump(db)
        n, user = 0, 0
        while n < items - 1:
            rows = []
            user_id = db.conn.execute(
                "INSERT INTO items (chat, kind, text, done, created, updated, rev) VALUES (?, 'user', ?, 1, ?, ?, ?)",
                [chat, question(n), t, t, rev]).lastrowid
            db.conn.execute("UPDATE items SET turn = id WHERE id = ?", [user_id])
            rows.append([chat, user_id, "reasoning", "Thinking about " + PROSE, "", "", "", "", 1, t, t, rev])
            rows.append([chat, user_id, "text", "Let me look.", "", "", "", "", 1, t, t, rev])
            rows.append([chat, user_id, "call", "", "update_plan", json.dumps({"plan": "- [ ] a\n- [x] b"}),
                         "Plan saved: 1 done, 1 to do." + (" " + TABLE * 30 if n % 7 == 0 else ""), "done", 1, t, t, rev])
            rows.append([chat, user_id, "text", PROSE * 2 + CODE, "", "", "", "", 1, t, t, rev])
            db.conn.executemany(
                "INSERT INTO items (chat, turn, kind, text, name, input, output, state, done, created, updated, rev) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            n += 5
        user = store.ask(chat, "And now?")
    return chat, user


def build_time(items: int) -> list[tuple[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="tabletalk-bench-"))
    store = Store(dbm.connect(folder / "tabletalk.db"))
    schema.migrate(store.db)
    chat, user = big_conversation(store, items)
    count = store.db.conn.execute("SELECT count(*) FROM items WHERE chat = ?", [chat]).fetchone()[0]
    out = [("conversation size", f"{count:,} items")]
    for label, size in (("a window that holds it all", 50_000_000), ("a 32k window", 32_768)):
        times_first, times_next = [], []
        for _ in range(5):
            store.db.conn.execute("DELETE FROM contexts")
            turn = Turn(store, Writes(store), chat, user, store.default_agent(), MODEL,
                        tools=builtin_tools(), window=size, share=0.75)
            t = time.perf_counter()
            messages = turn.prepare()
            times_first.append(time.perf_counter() - t)
            for _ in range(4):
                turn = Turn(store, Writes(store), chat, user, store.default_agent(), MODEL,
                            tools=builtin_tools(), window=size, share=0.75)
                t = time.perf_counter()
                turn.prepare()
                times_next.append(time.perf_counter() - t)
        sent = window.request_tokens(messages)
        out.append((f"{label}: first request (view chosen)", f"{statistics.median(times_first) * 1000:.1f} ms median, "
                                                            f"{len(messages):,} messages, ~{sent:,} tokens"))
        out.append((f"{label}: later requests (view kept)", f"{statistics.median(times_next) * 1000:.1f} ms median, "
                                                           f"{max(times_next) * 1000:.1f} ms max"))
    store.db.conn.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=80, help="turns of the scripted conversation (80)")
    parser.add_argument("--window", type=int, default=8_192, help="the model's window in tokens (8,192)")
    parser.add_argument("--items", type=int, default=5_000, help="items of the big conversation (5,000)")
    args = parser.parse_args()
    rows = asyncio.run(estimate_error(args.turns, args.window))
    rows += build_time(args.items)
    widths = [max(len(r[i]) for r in [("metric", "value"), *rows]) for i in range(2)]
    print(" | ".join(h.ljust(w) for h, w in zip(("metric", "value"), widths)).rstrip())
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


if __name__ == "__main__":
    main()
