"""What a restart leaves of a tool call: never sent (it runs), sent with no result (it may have
run: the page and the model say so, and the person may run it again), or finished."""
import asyncio
import signal

import pytest

from app import agent as loop
from app.store import db as dbm
from app.agent import Delta, Message
from app.store import Store
from app.tables import asked, plugin
from app.tools import Result, Tool
from app.run.turn import MAY_HAVE_RUN
from tests.conftest import ENGINES, Served, csrf, database, on_both_engines, soup, wait_for
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import text, tool_call


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    """Each test here on SQLite and on PostgreSQL (DATABASE_URL)."""
    return on_both_engines(request, env, monkeypatch)


def events_of(tool: Tool) -> list[str]:
    events: list = []

    async def stream(messages, tools):
        if len(messages) == 1:
            yield Delta(call_index=0, call_id="c1", call_name=tool.name, call_arguments="{}")
        else:
            yield Delta(text="ok")

    asyncio.run(loop.run([Message("user", "go")], [tool], stream, events.append))
    return [type(e).__name__ for e in events if type(e).__name__.startswith("Tool")]


def test_a_tool_is_marked_dispatched_before_it_runs_or_when_it_says_its_request_leaves():
    seen = []

    async def plain(args, ctx):
        seen.append("ran")
        return Result("done")

    assert events_of(Tool("plain", "", {"type": "object"}, plain)) == ["ToolStart", "ToolDispatched", "ToolEnd"]

    async def opens_then_sends(args, ctx):
        ctx.progress("connecting")
        ctx.dispatched()
        ctx.dispatched()  # once only
        return Result("sent")

    assert events_of(Tool("remote", "", {"type": "object"}, opens_then_sends, dispatches=True)) == \
        ["ToolStart", "ToolUpdate", "ToolDispatched", "ToolEnd"]

    async def fails_to_connect(args, ctx):
        raise ConnectionError("no route")

    assert events_of(Tool("remote", "", {"type": "object"}, fails_to_connect, dispatches=True)) == \
        ["ToolStart", "ToolEnd"], "a call that never left is not dispatched"


@pytest.mark.process
def test_a_call_cut_after_it_was_sent_may_have_run_and_the_person_may_run_it_again(data, env, fake):
    env = {**env, "CHAT_PRIVATE_PLUGINS": "1"}
    with FakeMCPServer() as mcp:
        fake.script([tool_call("127_0_0_1_slow", {"seconds": 3})],
                    [text("I cannot tell whether it ran.")],
                    [text("It ran again and waited.")])
        first = Served(data, env).start()
        db = dbm.connect(database(data))
        store = Store(db)
        agent = store.default_agent(store.owner())
        store.add_plugin(plugin(agent.id, mcp.url))
        chat = store.new_conversation(agent.id, person=store.owner()).id
        store.add(asked(chat, "Wait a bit"))

        def call_row():
            return db.conn.execute("SELECT * FROM items WHERE kind = 'call' ORDER BY id").fetchone()

        wait_for(lambda: (r := call_row()) and r["dispatched"] and mcp.calls == 1, timeout=30)
        first.signal(signal.SIGKILL)
        first.proc.wait(5)
        assert call_row()["state"] == "running" and not call_row()["done"]

        second = Served(data, env).start()
        try:
            client = second.client(timeout=15, follow_redirects=True)
            page = wait_for(lambda: (p := soup(client.get(f"/c/{chat}"))).select_one('#status[data-running="0"]')
                            and "I cannot tell" in p.get_text() and p, timeout=30)
            call = page.select_one("article.call")
            assert call.select_one(".state").get_text() == "may have run: check before running it again"
            assert "it may have run" in call.select_one("pre.output").get_text()
            assert call.select_one("button[value=again]").get_text() == "Run again 127_0_0_1_slow"  # it names its tool
            told = [m for m in fake.streamed[-1]["messages"] if m["role"] == "tool"]
            assert told[-1]["content"] == MAY_HAVE_RUN, "the model is told the same"
            assert mcp.calls == 1, "not run again by itself"

            r = client.post(f"/c/{chat}/calls/{call['id'][1:]}", data={"_csrf_token": csrf(client, f"/c/{chat}"),
                                                                     "decision": "again"})
            assert r.status_code == 200
            page = wait_for(lambda: (p := soup(client.get(f"/c/{chat}"))).select_one('#status[data-running="0"]')
                            and "It ran again" in p.get_text() and p, timeout=30)
            calls = page.select("article.call")
            assert len(calls) == 2 and calls[1].select_one(".state").get_text() == "done"
            assert calls[1].select_one("pre.output").get_text() == "waited 3 s"
            assert mcp.calls == 2
            again = client.post(f"/c/{chat}/calls/{calls[1]['id'][1:]}",
                                data={"_csrf_token": csrf(client, f"/c/{chat}"), "decision": "again"})
            assert again.status_code == 409
        finally:
            second.stop()
            db.conn.close()
    assert "Traceback" not in second.log.read_text()


# --- the words of two model-server faults -------------------------------------------------------

class EmptyReplies:
    """A model server that answers every chat request 200 with an empty body."""

    def __init__(self):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_an_empty_200_is_called_an_empty_reply_not_a_cut_connection(make_client):
    from app.providers.errors import EMPTY_REPLY
    from tests.conftest import ask, idle, new_chat

    empty = EmptyReplies()
    try:
        with make_client(AI_URL=empty.url, AI_MODEL="m") as client:
            chat = new_chat(client)
            ask(client, chat, "Hello")
            errors = [e.get_text() for e in idle(client, chat).select("article.error .error")]
            assert errors == [EMPTY_REPLY]
    finally:
        empty.server.shutdown()


def test_after_giving_up_no_notice_says_it_is_trying_again_and_after_success_it_says_how_it_went(client, fake):
    from tests.conftest import ask, idle, new_chat
    from tests.fakes.openai_server import error

    fake.script(*[[error(500, headers={"retry-after-ms": "20"})]] * 4)
    chat = new_chat(client)
    ask(client, chat, "Hello")
    page = idle(client, chat)
    assert [e.get_text() for e in page.select("article.error .error") if "Gave up after 4 tries" in e.get_text()]
    assert "Trying again" not in page.get_text(), "the error says it all"

    fake.script([error(503, headers={"retry-after-ms": "20"})], "Second time lucky.")
    ask(client, chat, "Again")
    page = idle(client, chat)
    notices = [e.get_text() for e in page.select("article.error.notice .error")]
    assert len(notices) == 1 and notices[0].endswith("It answered on try 2 of 4.") and "Trying again" not in notices[0]
