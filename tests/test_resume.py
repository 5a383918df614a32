"""Resuming after a crash: completed steps are never repeated, cut-off ones are redone once."""
import asyncio
import re
import signal

import pytest

from app.store import db as dbm
from app.agent import Delta
from app.run.turn import MAY_HAVE_RUN, Turn
from app.run.writes import Writes
from app.store import Store
from app.tables import asked, item
from app.tools import Result, Tool
from tests.conftest import ENGINES, Served, database, on_both_engines, wait_for, whole_texts
from tests.fakes.openai_server import hold, rate, text


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    """Each test here on SQLite and on PostgreSQL (DATABASE_URL)."""
    return on_both_engines(request, env, monkeypatch)


def counting_tool(name, runs, idempotent=False):
    async def run(args, ctx):
        runs.append(name)
        return Result(f"{name} ran")
    return Tool(name, name, {"type": "object"}, run, idempotent=idempotent)


def test_a_crash_mid_turn_resumes_from_the_last_complete_step(store):
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Do the things")
    t = user.id
    # What the rows look like when the process died: one complete step with five calls in
    # every state, then a model step cut off while it streamed.
    store.add(item("text", chat, "On it.", turn=t, done=True))
    done_call = store.add(item("call", chat, turn=t, name="once", input="{}", output="once ran", state="done", done=True))
    cut = store.add(item("call", chat, turn=t, name="charge_card", input="{}", state="running", dispatched=True))
    unsent = store.add(item("call", chat, turn=t, name="send_mail", input="{}", state="running"))  # never reached it
    safe = store.add(item("call", chat, turn=t, name="lookup", input="{}", state="running"))
    queued = store.add(item("call", chat, turn=t, name="later", input="{}"))
    waiting = store.add(item("call", chat, turn=t, name="delete_all", input="{}", state="approval"))
    partial = store.add(item("text", chat, "Half a sen", turn=t))
    runs: list[str] = []
    tools = [counting_tool("once", runs), counting_tool("charge_card", runs), counting_tool("send_mail", runs),
             counting_tool("lookup", runs, idempotent=True), counting_tool("later", runs),
             counting_tool("delete_all", runs)]
    requests = []

    async def stream(messages, tools):
        requests.append(messages)
        yield Delta(text="All done.")

    async def changed(timeout):
        await asyncio.sleep(0.01)

    turn = Turn(store, Writes(store), chat, user, store.default_agent(), "m", tools=tools,
                changed=changed)

    async def main():
        task = asyncio.create_task(turn.run(stream))
        await asyncio.sleep(0.2)
        assert not task.done(), "the turn waits for the person's decision"
        assert store.item(waiting.id).state == "approval", "a call waiting for approval keeps waiting"
        assert requests == [], "no model step before the decision"
        store.update(waiting.id, state="declined")
        await asyncio.wait_for(task, 5)

    asyncio.run(main())

    assert sorted(runs) == ["later", "lookup", "send_mail"], \
        "a completed call never runs again; a cut-off one runs only if it never reached its tool or is idempotent"
    assert store.item(partial.id) is None, "the cut-off step's partial rows are replaced"
    assert store.tombstones_since(0, chat) == [(chat, f"i{partial.id}", None)]
    assert store.item(cut.id).state == "failed" and store.item(cut.id).output == MAY_HAVE_RUN
    assert store.item(cut.id).interrupted and store.item(cut.id).dispatched
    assert store.item(unsent.id).state == "done" and store.item(unsent.id).dispatched
    assert store.item(safe.id).state == "done" and store.item(queued.id).state == "done"
    assert store.item(waiting.id).state == "declined" and store.item(waiting.id).done
    assert store.item(done_call.id).output == "once ran"
    tool_results = {m.tool_call_id: m.content for m in requests[0] if m.role == "tool"}
    assert tool_results[f"call_{cut.id}"] == MAY_HAVE_RUN, "the model is told the call may have run"
    assert tool_results[f"call_{unsent.id}"] == "send_mail ran"
    assert tool_results[f"call_{safe.id}"] == "lookup ran"
    assert tool_results[f"call_{waiting.id}"] == "The person declined this call."
    texts = [i.text for i in store.items(chat) if i.kind == "text"]
    assert texts == ["On it.", "All done."]


def test_a_turn_that_had_ended_is_not_answered_again(store):
    chat = store.new_conversation(None).id
    user = store.ask(chat, "hi")
    store.add(item("text", chat, "Hello!", turn=user.id, done=True))
    calls = []

    async def stream(messages, tools):
        calls.append(messages)
        yield Delta(text="again?")

    asyncio.run(Turn(store, Writes(store), chat, user, None, "m").run(stream))
    assert calls == [] and [i.text for i in store.items(chat) if i.kind == "text"] == ["Hello!"]


# --- with a real process, SIGKILL and a restart -----------------------------------------------

ANSWER = " ".join(f"w{i}" for i in range(120))


@pytest.mark.process
def test_kill_9_mid_answer_and_the_conversation_goes_on_after_a_restart(data, env, fake):
    fake.script([rate(40), text(ANSWER)], [rate(200), text(ANSWER)])
    first = Served(data, env).start()
    db = dbm.connect(database(data))
    store = Store(db)
    chat = store.new_conversation(store.default_agent().id).id
    store.add(asked(chat, "Say the words"))

    def text_rows():
        return whole_texts(db)

    wait_for(lambda: text_rows() and len(text_rows()[0]["text"]) > 30, timeout=15)
    first.signal(signal.SIGKILL)
    first.proc.wait(5)
    cut_id, cut_text, cut_done = text_rows()[0].values()
    assert not cut_done and len(cut_text) < len(ANSWER)

    second = Served(data, env).start()
    try:
        wait_for(lambda: any(r["done"] for r in text_rows()), timeout=20)
        rows = text_rows()
        assert len(rows) == 1, "the page shows the answer once"
        assert rows[0]["text"] == ANSWER and rows[0]["id"] != cut_id
        # the question is marked answered in the transaction after the answer's own
        wait_for(lambda: db.conn.execute("SELECT done FROM items WHERE kind = 'user'").fetchone()[0] == 1, timeout=10)
        assert len(fake.streamed) == 2 and fake.streamed[1]["messages"] == fake.streamed[0]["messages"]
        assert db.conn.execute("SELECT count(*) FROM tombstones WHERE dom = ?", [f"i{cut_id}"]).fetchone()[0] == 1
    finally:
        second.stop()
        db.conn.close()


@pytest.mark.process
def test_two_workers_answer_every_message_exactly_once(data, env, fake):
    fake.default = [rate(100), text("An answer of a few words.")]
    served = Served(data, env, workers=2).start()
    db = dbm.connect(database(data))
    store = Store(db)
    try:
        chats = [store.new_conversation(None).id for _ in range(8)]
        for round_ in range(3):
            for chat in chats:
                store.add(asked(chat, f"message {round_} in {chat}"))
        wait_for(lambda: db.conn.execute("SELECT count(*) FROM items WHERE kind = 'user' AND done = 0")
                 .fetchone()[0] == 0, timeout=30)
        per_turn = db.conn.execute(
            "SELECT turn, count(*) FROM items WHERE kind = 'text' GROUP BY turn").fetchall()
        assert len(per_turn) == 24 and all(n == 1 for _, n in per_turn)
        assert len(fake.streamed) == 24
    finally:
        served.stop()
        db.conn.close()


@pytest.mark.process
def test_a_page_on_the_other_worker_is_sent_the_answer_on_the_beat(data, env, fake):
    """A page following a conversation in the worker that is not running its answer has its
    feed mark the conversation watched (Feed._mark), so the runner writes the growth on the
    beat for it, not once a second as for an answer nobody follows (run/writes.py). Counted:
    the page's messages that grow the text, for 40 words at 20 a second (2 s): ~40 writes on
    the beat, ~3 once a second."""
    import threading
    import time

    import httpx

    go = threading.Event()
    fake.script([hold(go), rate(20), text(" ".join(f"w{n:02d}" for n in range(40)))])
    served = Served(data, env, workers=2).start()
    db = dbm.connect(database(data))
    store = Store(db)
    clients: list[httpx.Client] = []
    try:
        chat = store.new_conversation(None).id
        store.add(asked(chat, "go"))  # its run waits for `go` at the model
        owner = wait_for(lambda: db.conn.execute("SELECT owner FROM runs WHERE chat = ?", [chat]).fetchone())[0]
        # which worker a stream lands on is the kernel's choice: streams are opened one at a
        # time, and one on the running worker is closed again (a page there would have its
        # answer on the beat anyway), until one is on the other
        for _ in range(40):
            client = httpx.Client(base_url=served.url, cookies=served.cookies, timeout=30)
            clients.append(client)
            stream = client.send(client.build_request("GET", f"/c/{chat}/events?since=0"), stream=True)
            lines = stream.iter_lines()
            if next(lines).split()[-1] != owner.split(":")[1]:  # ": worker PID", the stream's first line
                break
            stream.close()
            client.close()
        else:
            pytest.fail("40 streams all landed on the worker running the answer")
        time.sleep(0.5)  # the closed ones are gone from the running worker's feed
        go.set()
        messages, message, ended = [], "", False
        deadline = time.monotonic() + 60
        for line in lines:
            message += line + "\n"
            if line == "":
                messages.append(message)
                message = ""
                ended = ended or "w39" in messages[-1]
                if (ended and 'class="state done"' in messages[-1]) or time.monotonic() > deadline:
                    break
        assert ended, messages
        grew = [m for m in messages if "<hx-a t=i" in m or re.search(r'id="i\d+-0"', m)]
        assert len(grew) >= 10, f"{len(grew)} messages grew the text: {messages}"
    finally:
        go.set()
        for client in clients:
            client.close()
        served.stop()
        db.conn.close()


@pytest.mark.process
def test_a_page_served_by_one_worker_follows_a_run_in_the_other(data, env, fake):
    import threading

    import httpx

    fake.default = [rate(10), text("Slow words for the other worker to follow along.")]
    served = Served(data, env, workers=2).start()
    db = dbm.connect(database(data))
    store = Store(db)
    try:
        chat = store.new_conversation(None).id
        store.add(asked(chat, "go"))
        owner = wait_for(lambda: db.conn.execute("SELECT owner FROM runs WHERE chat = ?", [chat]).fetchone())[0]
        runner_pid = owner.split(":")[1]
        seen: dict[str, str] = {}

        def follow():
            with httpx.stream("GET", f"{served.url}/c/{chat}/events?since=0", cookies=served.cookies, timeout=20) as r:
                pid, body = "", ""
                for line in r.iter_lines():
                    if line.startswith(": worker "):
                        pid = line.split()[-1]
                    body += line
                    # at a message's end: a message's lines (a caught-up answer's state, then its
                    # text) come one by one
                    if line == "" and "item text" in body and 'class="state done"' in body:
                        break
                seen[pid] = body

        # which worker accepts a connection is the kernel's choice (and a worker still
        # starting on a loaded machine accepts none): follow in rounds of 12 at once until one
        # stream lands on the worker that is not running the answer, at most 10 rounds
        others: list[str] = []
        for _ in range(10):
            threads = [threading.Thread(target=follow) for _ in range(12)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            others = [pid for pid in seen if pid != runner_pid]
            if others:
                break
        assert others, f"120 streams all landed on the running worker {runner_pid}: {list(seen)}"
        followed = seen[others[0]]
        # the text arrives as a first block and then appended pieces (cut anywhere): put together
        # as the page does, it is the whole answer (the run's end, which repeats it in words
        # for screen readers, may come in a later message than the answer's done state)
        got = ""
        for block, added in re.findall(r'<div class="md" id="i\d+-0"[^>]*><p>(.*?)</p>|<hx-a t=i\d+-0>(.*?)</hx-a>',
                                       followed):
            got = block if block else got + added  # a block (again) whole, or a piece appended
        assert got == "Slow words for the other worker to follow along.", followed
    finally:
        served.stop()
        db.conn.close()
