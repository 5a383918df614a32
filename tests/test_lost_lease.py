"""A worker held up past its lease (a paused process, a stalled loop) while another took the
conversation: it writes nothing more and marks nothing as ended (not the answer, not the
person's message, not a call); whoever holds the lease next goes on from the last complete
step. The paused processes themselves: tests/test_chaos.py."""
import pytest

from app.run.turn import MAY_HAVE_RUN
from app.store import db as dbm
from app.tables import plugin
from tests.conftest import ENGINES, app_store, ask, idle, new_chat, on_both_engines, rows, wait_for
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import rate, text, tool_call

ANSWER = " ".join(f"w{i}" for i in range(150))
ELSEWHERE = "another server:1:cafe"


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    """Each test here on SQLite and on PostgreSQL (DATABASE_URL)."""
    return on_both_engines(request, env, monkeypatch)


def take_lease(data, chat: int) -> None:
    """Another worker takes the conversation, as it would once this one's lease expired."""
    with app_store(data) as store, store.write() as db:
        db.conn.execute("UPDATE runs SET owner = ?, expires = ? WHERE chat = ?", [ELSEWHERE, dbm.now() + 3600, chat])


def give_back(data, chat: int) -> None:
    """That worker dies: its lease is void (here at once; after TABLETALK_LEASE_SECONDS really)."""
    with app_store(data) as store, store.write() as db:
        db.conn.execute("DELETE FROM runs WHERE chat = ? AND owner = ?", [chat, ELSEWHERE])


def test_a_lost_lease_mid_answer_writes_nothing_and_the_next_owner_finishes_it(make_client, fake, data):
    fake.script([rate(25), text(ANSWER)], [rate(400), text(ANSWER)])
    with make_client(TABLETALK_LEASE_SECONDS="1") as client:
        runner = client.app.state.tabletalk.runner
        chat = new_chat(client)
        number = int(chat.rsplit("/", 1)[1])
        ask(client, chat, "Say the words")
        wait_for(lambda: any(r["kind"] == "text" and len(r["text"]) > 20 for r in rows(data)), 15)
        take_lease(data, number)
        taken = rows(data)
        wait_for(lambda: number not in runner.runs, 10)  # its next renewal found the lease gone
        assert rows(data) == taken, "nothing written past the lease: no growth, nothing marked done"
        user, cut = [r for r in taken if r["kind"] == "user"][0], [r for r in taken if r["kind"] == "text"][0]
        assert user["done"] == 0 and cut["done"] == 0 and ANSWER.startswith(cut["text"]) and cut["text"] != ANSWER
        assert not [r for r in taken if r["kind"] == "error"], "no error, no notice: nothing failed"
        give_back(data, number)
        page = idle(client, chat)
    texts = [r for r in rows(data) if r["kind"] == "text"]
    assert [(t["text"], t["done"]) for t in texts] == [(ANSWER, 1)], "answered once, whole, the cut step made again"
    assert texts[0]["id"] != cut["id"] and [r["done"] for r in rows(data) if r["kind"] == "user"] == [1]
    assert len(fake.streamed) == 2
    assert page.select_one("article.text").get_text(strip=True) == ANSWER


def test_a_lost_lease_during_a_call_leaves_the_call_as_it_was(make_client, fake, data):
    """Not "stopped by the person": the call stays running, as a crash leaves it, and the next
    owner says it may have run (it was sent) and goes on; the tool ran once."""
    with FakeMCPServer() as mcp:
        fake.script([tool_call("127_0_0_1_slow", {"seconds": 2, "quiet": True})], "Done after the call.")
        with make_client(TABLETALK_LEASE_SECONDS="1", CHAT_PRIVATE_PLUGINS="1") as client:
            with app_store(data) as store:
                store.add_plugin(plugin(store.default_agent(store.owner()).id, mcp.url))
            runner = client.app.state.tabletalk.runner
            chat = new_chat(client)
            number = int(chat.rsplit("/", 1)[1])
            ask(client, chat, "Wait a little")
            calls = "SELECT id, state, output, done, dispatched, interrupted FROM items WHERE kind = 'call'"
            wait_for(lambda: (r := rows(data, calls)) and r[0]["dispatched"] == 1, 15)
            # and running on the server: `dispatched` is written as the call leaves, and a lease
            # taken then (under load) cut the run before the request reached the server
            wait_for(lambda: mcp.calls == 1, 15)
            take_lease(data, number)
            wait_for(lambda: number not in runner.runs, 10)
            [call] = rows(data, calls)
            assert (call["state"], call["done"], call["output"]) == ("running", 0, ""), "the call is left as it was"
            assert [r["done"] for r in rows(data) if r["kind"] == "user"] == [0]
            give_back(data, number)
            idle(client, chat)
        [call] = rows(data, calls)
        assert (call["state"], call["output"], call["interrupted"]) == ("failed", MAY_HAVE_RUN, 1)
        assert [(r["text"], r["done"]) for r in rows(data) if r["kind"] == "text"] == [("Done after the call.", 1)]
        assert mcp.calls == 1, "the tool was not run again"
