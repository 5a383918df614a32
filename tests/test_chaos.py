"""kill -9 chaos with two workers (one worker killed alone, and the whole server), and an
upgrade: the new release started on a database of the previous one with runs in flight."""
import sqlite3
import time

import pytest

from app.store import db as dbm
from app.store.schema import migrations
from app.run.turn import MAY_HAVE_RUN
from tests.chaos import Chaos
from tests.conftest import Served, engine_setting, signed_in, soup, sqlite_only, wait_for
from tests.fakes.openai_server import text

pytestmark = pytest.mark.process


def test_kill_9_chaos_with_two_workers_loses_nothing_and_repeats_no_call(request, monkeypatch, tmp_path):
    url = engine_setting(request, monkeypatch).get("DATABASE_URL")  # PostgreSQL's under TABLETALK_TEST_POSTGRES=1
    with Chaos(tmp_path, conversations=6, workers=2, tokens_per_second=60, database_url=url) as chaos:
        chaos.kill_server(during="approval")
        chaos.kill_worker(during="call")
        chaos.kill_server(during="text")
        chaos.kill_worker(during="text")
        chaos.wait(timeout=120)
        f = chaos.outcome()
    print(f.table())
    assert f.server_kills == 2 and f.worker_kills == 2
    assert f.problems == [] and f.pending == 0 and f.stuck_calls == 0
    assert f.answered == 6, "every conversation answered once, whole"
    assert f.calls_repeated == 0, "no tool ran twice"
    assert f.rows_seen > 0 and f.rows_lost == 0
    assert f.tool_calls + f.may_have_run >= 6
    assert f.tracebacks == 0



def previous_release(path, upto: str = "m010_context"):
    """A database made by an earlier release's migrations (up to `upto`), with runs in flight
    as that release left them when it was stopped hard."""
    from tests.conftest import OWNER, password_hash

    db = dbm.connect(path)
    db.conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)")
    for fn in migrations.MIGRATIONS:
        with dbm.write(db):
            fn(db)
            db.conn.execute("INSERT INTO migrations (name, applied) VALUES (?, ?)", [fn.__name__, time.time()])
        if fn.__name__ == upto:
            break
    else:
        raise AssertionError(f"no migration {upto}")
    c, t = db.conn, time.time()
    c.execute("INSERT INTO people (id, name, hash, owner, created) VALUES (1, ?, ?, 1, ?)", [OWNER, password_hash(), t])
    c.execute("UPDATE assistants SET person = 1")
    agent = c.execute("SELECT id FROM assistants").fetchone()[0]
    chats = []
    for title in ("streaming", "calling", "approving"):
        chats.append(c.execute("INSERT INTO conversations (agent, title, created, updated, person, rev) "
                               "VALUES (?, ?, ?, ?, 1, ?)", [agent, title, t, t, dbm.bump(db)]).lastrowid)

    def add(chat, kind, turn=0, **values):
        cols = {"chat": chat, "kind": kind, "turn": turn, "created": t, "updated": t, "rev": dbm.bump(db), **values}
        item = c.execute(f"INSERT INTO items ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                         list(cols.values())).lastrowid
        if not turn:
            c.execute("UPDATE items SET turn = id WHERE id = ?", [item])
        return item

    a = add(chats[0], "user", text="Tell me a story")
    add(chats[0], "text", a, text="Once upon a ti")
    b = add(chats[1], "user", text="Send the mail")
    add(chats[1], "call", b, name="send_mail", input='{"to": "x"}', state="running")
    d = add(chats[2], "user", text="Delete the files")
    add(chats[2], "call", d, name="delete_files", input="{}", state="approval")
    c.execute("INSERT INTO runs (chat, owner, expires) VALUES (?, 'old-host:1:dead', ?)", [chats[0], t + 3600])
    db.conn.close()
    return chats


@sqlite_only("the previous release's data folder is a SQLite file (PostgreSQL's schema: test_pg_schema.py)")
def test_the_new_release_starts_on_a_database_of_the_previous_one_with_runs_in_flight(data, env, fake):
    data.mkdir(parents=True)
    chats = previous_release(data / "tabletalk.db")
    fake.default = [text("Answered after the upgrade.")]
    served = Served(data, env, account=False).start()
    try:
        served.cookies = {"tabletalk_session": signed_in(data)}
        db = sqlite3.connect(data / "tabletalk.db")
        applied = {r[0] for r in db.execute("SELECT name FROM migrations")}
        assert {fn.__name__ for fn in migrations.MIGRATIONS} <= applied
        client = served.client(timeout=15, follow_redirects=True)

        def texts(chat):
            return [r[0] for r in db.execute("SELECT text FROM items WHERE chat = ? AND kind = 'text' AND done = 1",
                                             [chat])]

        wait_for(lambda: texts(chats[0]) == ["Answered after the upgrade."], timeout=30)
        wait_for(lambda: texts(chats[1]) == ["Answered after the upgrade."], timeout=30)
        call = db.execute("SELECT state, output, dispatched, interrupted FROM items WHERE chat = ? AND kind = 'call'",
                          [chats[1]]).fetchone()
        assert call == ("failed", MAY_HAVE_RUN, 1, 1), "a call the old release left running may have run"
        page = soup(client.get(f"/c/{chats[1]}"))
        assert page.select_one("article.call .state").get_text() == "may have run: check before running it again"

        page = soup(client.get(f"/c/{chats[2]}"))
        assert page.select_one("article.call .state").get_text() == "waiting for approval"
        waiting = page.select_one("article.call")["id"][1:]
        token = page.select_one('input[name="_csrf_token"]')["value"]
        r = client.post(f"/c/{chats[2]}/calls/{waiting}", data={"_csrf_token": token, "decision": "approve"})
        assert r.status_code == 200
        wait_for(lambda: texts(chats[2]) == ["Answered after the upgrade."], timeout=30)
        for chat in chats:
            assert client.get(f"/c/{chat}").status_code == 200
        assert db.execute("SELECT count(*) FROM items WHERE done = 0").fetchone()[0] == 0
        db.close()
    finally:
        served.stop()
    assert "Traceback" not in served.log.read_text()
