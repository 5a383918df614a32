"""PostgreSQL's connections: one bounded psycopg pool per process and database, shared by
the process's Databases, each connection given back when its Database closes, checked and
opened again after the server restarts; a server's connections stay bounded however many
requests it serves."""
import time

import psycopg
import pytest

from app.store import Store, db as dbm, postgres as pg, schema
from tests.conftest import Served, start_chat, wait_for
from tests.test_serve import session


def ours(pg_url: str) -> int:
    """Connections open to the test's database (this one's not counted)."""
    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid != pg_backend_pid()", [name]).fetchone()[0]


def who(pg_url: str) -> list:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        return admin.execute("SELECT application_name, state, query, backend_start FROM pg_stat_activity "
                             "WHERE datname = current_database() AND pid != pg_backend_pid()").fetchall()


def test_the_databases_of_a_process_share_one_bounded_pool(pg_url, monkeypatch):
    monkeypatch.setattr(pg, "POOL_WAIT_SECONDS", 0.5)
    first = dbm.connect(pg_url, pool_size=2)
    second = dbm.connect(pg_url, pool_size=9)  # the pool is open: its size stays the first's
    try:
        assert first.conn.pool is second.conn.pool and second.conn.pool.size == 2
        assert first.conn.raw is not second.conn.raw
        with pytest.raises(pg.PoolFull, match="TABLETALK_PG_POOL"):
            dbm.connect(pg_url)
        schema.migrate(first)
        listened = second.conn.raw
        second.version()  # LISTENs on its connection
        second.conn.close()
        third = dbm.connect(pg_url)  # the one given back (reset: it listens no more)
        try:
            assert third.conn.raw is listened
            Store(first).new_conversation(None)
            time.sleep(0.2)
            third.conn.raw.execute("SELECT 1")
            assert list(third.conn.raw.notifies(timeout=0.2, stop_after=1)) == [], "UNLISTEN when given back"
        finally:
            third.conn.close()
    finally:
        second.conn.close()  # twice: nothing happens
        first.conn.close()
    assert pg.Pool._open.get(pg_url) is None
    assert wait_for(lambda: ours(pg_url) == 0, 10) is True, "the last Database closes the pool's connections"


def test_a_wrong_database_is_said_at_once_in_postgresqls_words(pg_url):
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        dbm.connect(pg_url + "_none")
    assert time.monotonic() - started < pg.POOL_WAIT_SECONDS
    assert pg.Pool._open.get(pg_url + "_none") is None


def test_after_the_server_restarts_reads_and_writes_go_on(pg_cluster, pg_url):
    """Every connection of the pool died with the restart: the one in use is given back
    broken and another taken, and the pool's check throws away the idle dead ones."""
    using, idle = dbm.connect(pg_url, pool_size=3), dbm.connect(pg_url)
    schema.migrate(using)
    idle.conn.close()  # back in the pool, idle
    store = Store(using)
    chat = store.new_conversation(None).id
    try:
        pg_cluster.restart()
        assert store.conversation(chat) is not None  # a read: sent again on a checked connection
        assert store.new_conversation(None).id > chat  # and a write
        other = dbm.connect(pg_url)  # a checked one, never the dead idle one
        try:
            assert Store(other).conversation(chat) is not None
        finally:
            other.conn.close()
    finally:
        using.conn.close()


def test_while_the_server_is_down_it_is_said_at_once_and_reached_again_once_it_is_back(pg_cluster, pg_url):
    """An outage is not a full pool: no request for a connection waits (the event loop's
    thread would), each says the server cannot be reached, in libpq's words, and the first
    after it is back connects."""
    from app.store import outage

    db = dbm.connect(pg_url)
    schema.migrate(db)
    store = Store(db)
    try:
        pg_cluster.down()
        started = time.monotonic()
        for _ in range(5):
            with pytest.raises(pg.Unreachable) as refused:
                store.rev()
        with pytest.raises(pg.Unreachable):
            dbm.connect(pg_url)  # a new Database too
        assert time.monotonic() - started < pg.POOL_WAIT_SECONDS / 2, "never the pool's wait"
        where = pg_url.split("@", 1)[1].split("/", 1)[0]  # HOST:PORT, as the line names the server
        assert outage.unavailable(refused.value).startswith(f"the database at {where} is unreachable (")
        assert "refused" in str(refused.value) or "No such file" in str(refused.value)
        pg_cluster.up()
        back = time.monotonic()

        def answers() -> bool:
            try:
                return store.rev() >= 1
            except pg.Unreachable:
                return False

        wait_for(answers, 10, every=0.05)
        assert time.monotonic() - back <= pg.RETRY_SECONDS[1] + 1, "the next try after it answers connects"
        assert db.conn.pool.lent == 1, "the connections that could not be made are not counted as taken"
    finally:
        pg_cluster.up()
        db.conn.close()


def test_a_refusal_is_no_outage(pg_url):
    """A database that does not exist, or a user: PostgreSQL's words, not 'unreachable'."""
    from app.store import outage

    for url in (pg_url + "_none", pg_url.replace("tabletalk@", "nobody@")):
        with pytest.raises(psycopg.OperationalError) as refused:
            dbm.connect(url)
        assert not isinstance(refused.value, pg.Unreachable) and outage.unavailable(refused.value) == ""


@pytest.fixture
def served(data, env, pg_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", pg_url)
    server = Served(data, env | {"DATABASE_URL": pg_url, "TABLETALK_PG_POOL": "4"}, workers=2).start()
    yield server
    server.stop()


def per_process(pg_url: str) -> list[int]:
    """How many connections each process holds (its pid is in the application name)."""
    counts: dict[str, int] = {}
    for name, *_ in who(pg_url):
        counts[name] = counts.get(name, 0) + 1
    return sorted(counts.values())


def test_a_server_keeps_its_connections_bounded_and_comes_back_after_a_restart(served, fake, pg_cluster, pg_url):
    """`serve` (its built-in model's supervisor) and two workers: each process at most
    TABLETALK_PG_POOL connections, none more for 80 requests, and after PostgreSQL restarts
    pages and answers go on."""
    fake.script(*[f"Answer {n}." for n in range(3)])
    client, token = session(served)
    chat = start_chat(client, "hello", token=token)
    wait_for(lambda: "Answer 0." in client.get(chat).text, 30)
    settled = ours(pg_url)
    for _ in range(40):
        assert client.get(chat).status_code == 200
        assert client.get("/").status_code == 200
    assert ours(pg_url) <= settled, "no connection per request"
    assert len(per_process(pg_url)) <= 3 and max(per_process(pg_url)) <= 4, who(pg_url)
    pg_cluster.restart()
    wait_for(lambda: client.get(chat).status_code == 200, 30)
    assert client.post(chat + "/ask", data={"_csrf_token": token, "text": "again"},
                       follow_redirects=False).status_code == 303
    wait_for(lambda: "Answer 1." in client.get(chat).text, 30)
    assert len(per_process(pg_url)) <= 3 and max(per_process(pg_url)) <= 4, who(pg_url)
