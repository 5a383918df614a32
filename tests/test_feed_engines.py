"""The change feed and the leases across connections (processes, machines), on both
engines (conftest's `store`): a follower hears another connection's write through the
feed's own poll (PostgreSQL: NOTIFY, no catch-up read needed), and two runners racing for a
conversation's lease get it one at a time, the second once the first's expires."""
import asyncio
import threading

from app.store import Store, db as dbm, postgres as pg, schema
from app.feed.dispatch import Feed
from app.tables import item
from app.web import live
from tests.conftest import database_of


async def test_a_follower_hears_a_write_of_another_connection(store, monkeypatch):
    monkeypatch.setattr(pg, "CATCH_UP_SECONDS", 3600.0)  # on PostgreSQL only NOTIFY can tell it
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes)
    feed.start()
    try:
        follower = feed.follow(chat)
        follower.fresh = False
        await asyncio.sleep(0.1)  # the feed has read its version (and listens)
        store.ask(chat, "written elsewhere")  # another connection: its commit wakes nobody here
        rev, data = 0, b""
        for _ in range(100):
            for rev, data in await asyncio.wait_for(follower.take(), 10):
                if b"written elsewhere" in data:
                    break
            if b"written elsewhere" in data:
                break
        assert b"written elsewhere" in data and rev == store.rev()
    finally:
        await feed.aclose()


def test_two_runners_race_for_a_lease_and_one_wins(store):
    chat = store.new_conversation(None).id
    other = Store(dbm.connect(database_of(store)))
    try:
        results: list[tuple[str, bool]] = []
        ready = threading.Barrier(2)

        def take(s, owner):
            ready.wait()
            results.append((owner, s.lease(chat, owner, 30)))

        threads = [threading.Thread(target=take, args=(s, o)) for s, o in ((store, "a"), (other, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [o for o, won in results if won]
        assert len(winners) == 1
        winner, loser = (store, other) if winners == ["a"] else (other, store)
        assert winner.lease(chat, winners[0], 30), "the holder keeps it"
        assert not loser.lease(chat, "ab".replace(winners[0], ""), 30), "a live lease is not taken"
        winner.lease(chat, winners[0], -1)  # expired
        assert loser.lease(chat, "ab".replace(winners[0], ""), 30), "an expired one is"
    finally:
        other.db.conn.close()


async def test_a_stream_sends_every_message_of_one_dispatch_even_when_they_share_a_rev():
    """One dispatch may push a conversation's change and the built-in model's fragment with
    the same rev: the stream sends both; what the first message covered it skips. What queued
    while the stream waited leaves in one write."""
    from app.feed.dispatch import Follower
    from app.web.stream import follow

    class Open:
        closed = False

        def unfollow(self, follower):
            self.closed = True

    follower = Follower(1)
    for rev, data in ((5, b"covered"), (7, b"change"), (7, b"builtin"), (8, b"next")):
        follower.push(rev, data)
    follower.push(0, b"")  # then nothing more: the test ends the stream at the keep-alive
    got = []
    stream = follow(Open(), follower, b"first", 5, signed_in=lambda: False)
    async for data in stream:
        got.append(data)
    assert got[1:] == [b"changebuiltinnext"] and got[0].endswith(b"first")


def test_what_changed_since_a_rev_is_one_read_that_names_each_family(store):
    """The feed's first read at each dispatch: the current rev, and which families besides
    items have a row after the cursor (only those are then read), on both engines."""
    chat = store.new_conversation(None).id
    other = store.new_conversation(None).id
    user = store.ask(chat, "hello")
    cursor = store.rev()
    quiet = store.changed_since(cursor, [chat])
    assert (quiet.rev, quiet.conversations, quiet.tombstones, quiet.builtin, quiet.contexts) == (
        cursor, False, False, False, False)
    store.update(user.id, text="hello again")  # an item alone: nothing else to read
    grown = store.changed_since(cursor, [chat])
    assert grown.rev == store.rev() > cursor
    assert not (grown.conversations or grown.tombstones or grown.builtin or grown.contexts)
    store.set_title(chat, "A title")
    assert store.changed_since(cursor, [chat]).conversations
    store.set_context(other, used=10)  # another conversation's meter: not the followed one's
    assert not store.changed_since(cursor, [chat]).contexts
    assert not store.changed_since(cursor).contexts
    store.set_context(chat, used=20)
    assert store.changed_since(cursor, [chat, other]).contexts
    store.set_builtin(state="installing")
    assert store.changed_since(cursor, [chat]).builtin
    store.delete_conversation(other)
    assert store.changed_since(cursor, [chat]).tombstones
    top = store.rev()
    after = store.changed_since(top, [chat])
    assert after.rev == top and not (after.conversations or after.tombstones or after.builtin or after.contexts)


def test_the_feeds_read_of_items_is_found_by_rev_not_by_reading_the_conversation(tmp_path):
    """At every message of a growing answer the feed reads the items changed since its last
    look: by the rev index (the few rows changed), never the conversation's index, which
    read every row of it (through each long text's overflow pages, to reach `rev`)."""
    db = dbm.connect(tmp_path / "t.db")
    schema.migrate(db)
    store = Store(db)
    chat = store.new_conversation(None).id
    for _ in range(3):
        user = store.ask(chat, "hello")
        store.add(item("text", chat, "x" * 9000, turn=user.id, done=True))
    cursor = store.rev()
    store.update(user.id, text="hello again")
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    got = store.items_since(cursor, upto=store.rev(), chats=[chat])
    db.conn.set_trace_callback(None)
    assert [it.id for it in got] == [user.id]
    sql = next(s for s in statements if s.startswith("SELECT * FROM items"))
    plan = " ".join(row[3] for row in db.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
    assert "items_rev" in plan and "items_chat" not in plan, plan
    db.conn.close()


async def test_an_unfollowed_feed_is_woken_by_another_processs_write_not_by_polls(tmp_path, monkeypatch):
    """SQLite on Linux (feed/walwatch.py): with nobody following here, the feed is woken by
    the kernel when a process writes the database's WAL, and otherwise looks once a second,
    not ten times: a write of another connection is seen though the polls are put off for
    an hour, and idle for a second the feed looks for others' commits at most twice."""
    from app.feed import dispatch

    monkeypatch.setattr(dispatch, "TOLD_POLL_SECONDS", 3600.0)
    path = tmp_path / "data" / "tabletalk.db"
    schema.migrate(dbm.connect(path))
    feed = Feed(path)
    looks = []
    real = feed._data_version
    feed._data_version = lambda: (looks.append(1), real())[1]
    feed.start()
    try:
        assert feed._wal is not None and feed._wal.watching, "inotify on this Linux machine"
        await asyncio.sleep(1.0)
        assert len(looks) <= 3, f"{len(looks)} looks in a second idle (ten a second before)"
        other = Store(dbm.connect(path))
        chat = other.new_conversation(None).id
        other.ask(chat, "written elsewhere")
        await asyncio.wait_for(feed.next_change(), 10)
        assert feed.rev == other.rev()
        other.db.conn.close()
    finally:
        await feed.aclose()
    assert feed._wal.fd == -1


async def test_a_followed_feed_is_told_of_another_processs_write_and_does_not_poll(tmp_path, monkeypatch):
    """While a page follows here, the WAL watch stands in for the 25 ms polls too: idle for a
    second with a follower the feed looks a few times (40 before), and a write of another
    connection reaches the follower though the fallback look is put off for an hour."""
    from app.feed import dispatch
    from app.web import live

    monkeypatch.setattr(dispatch, "TOLD_FOLLOWED_POLL_SECONDS", 3600.0)
    path = tmp_path / "data" / "tabletalk.db"
    schema.migrate(dbm.connect(path))
    other = Store(dbm.connect(path))
    chat = other.new_conversation(None).id
    feed = Feed(path, render=live.chat_changes)
    looks = []
    real = feed._data_version
    feed._data_version = lambda: (looks.append(1), real())[1]
    feed.start()
    try:
        follower = feed.follow(chat)
        follower.fresh = False
        await asyncio.sleep(0.2)
        looks.clear()
        await asyncio.sleep(1.0)
        assert len(looks) <= 4, f"{len(looks)} looks in a second with a page following (40 before)"
        other.ask(chat, "written elsewhere")
        data = b""
        while b"written elsewhere" not in data:
            data = b"".join(d for _, d in await asyncio.wait_for(follower.take(), 10))
    finally:
        await feed.aclose()
        other.db.conn.close()
