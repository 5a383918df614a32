"""A connection added on one worker of `tabletalk serve --workers 2` is used by both at once:
no restart, nothing kept per process. The answers are made by whichever worker's runner
claims each conversation (its lease names its process), so rounds of messages are sent until
both workers have answered with the connection the page added on one of them; then a changed
key is what both send next."""
from __future__ import annotations

import pytest

from app.store import Store
from app.store import db as dbm
from app.tables import asked
from tests.conftest import Served, csrf, database, wait_for
from tests.fakes.openai_server import FakeModelServer, rate, text

pytestmark = pytest.mark.process

KEY = "sk-team-key-77"


def answered_by(served: Served, db, store: Store, model: str, rounds: int = 20) -> set[str]:
    """Messages for `model`, in rounds of 6 conversations, until two workers answered some
    (or `rounds` ran out); the processes (pids) seen holding their leases. Which worker claims
    a conversation is a race: under load one took all 36 of 6 rounds once, so up to 20 are
    sent (a quiet machine sees both in the first)."""
    pids: set[str] = set()
    for _ in range(rounds):
        chats = [store.new_conversation(None).id for _ in range(6)]
        for chat in chats:
            store.add(asked(chat, "which server answers?", model=model))

        def done() -> bool:
            pids.update(r[0].split(":")[1] for r in db.conn.execute("SELECT owner FROM runs").fetchall())
            return db.conn.execute("SELECT count(*) FROM items WHERE kind = 'user' AND done = 0").fetchone()[0] == 0

        wait_for(done, timeout=30, every=0.01)
        if len(pids) >= 2:
            break
    return pids


def test_a_connection_added_on_one_worker_is_used_by_both(data, env):
    with FakeModelServer(models={"big-model": 32768}, require_key=KEY) as team:
        team.default = [rate(200), text("The team's server answers, slowly enough to be seen.")]
        served = Served(data, env, workers=2).start()
        db = dbm.connect(database(data))
        store = Store(db)
        try:
            with served.client() as http:
                r = http.post("/settings/connections", data={"_csrf_token": csrf(http, "/settings/connections"),
                                                             "name": "Team", "kind": "openai", "url": team.url,
                                                             "key": KEY})
                assert r.status_code == 303 and store.connection_named("Team").tested == "Connected: 1 model."
            pids = answered_by(served, db, store, "team:big-model")
            assert len(pids) == 2, f"the answers were all made by one worker: {pids}"
            texts = [r[0] for r in db.conn.execute("SELECT text FROM items WHERE kind = 'text'").fetchall()]
            assert texts and all(t.startswith("The team's server answers") for t in texts), texts
            assert {h["authorization"] for h in team.request_headers} == {f"Bearer {KEY}"}
            # a key changed on the page is the one every worker sends next
            k = store.connection_named("Team")
            with served.client() as http:
                http.post(f"/settings/connections/{k.id}", data={
                    "_csrf_token": csrf(http, "/settings/connections"), "name": "Team", "kind": "openai",
                    "url": team.url, "key": "sk-wrong"})
            before = len(team.request_headers)
            answered_by(served, db, store, "team:big-model", rounds=1)
            sent = {h["authorization"] for h in team.request_headers[before:]}
            assert sent == {"Bearer sk-wrong"}, sent
            errors = [r[0] for r in db.conn.execute("SELECT text FROM items WHERE kind = 'error'").fetchall()]
            assert errors and all("refused the key (401)" in e and "connection “Team”" in e for e in errors), errors
        finally:
            served.stop()
            db.conn.close()
