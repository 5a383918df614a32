"""The runner's statements (app/store/runs.py) on both engines: pending work, leases, growth."""
import asyncio

import pytest

from app.agent import Pieces
from app.store.rows import LeaseLost
from app.store.runs import CHUNK_CHARS, Chunked
from app.tables import item, retried, stopped


def test_pending_work_is_what_the_runner_and_the_page_find(store):
    chat = store.new_conversation(store.default_agent().id).id
    other = store.new_conversation(store.default_agent().id).id
    before = store.rev()
    assert store.pending_since(0) == [] and store.next_pending(chat) is None and store.answering(chat) is None
    first = store.ask(chat, "One")
    store.ask(other, "Elsewhere")
    second = store.ask(chat, "Two")
    assert store.pending_since(before) == [(chat, "user"), (other, "user"), (chat, "user")]
    assert store.pending_since(store.rev()) == [], "only what changed after the rev"
    assert store.next_pending(chat).id == first.id
    assert store.answering(chat).id == first.id and store.answering(chat).turn == first.id
    stop = store.add(stopped(chat))
    assert store.unhandled_stops(chat) == [stop.id]
    assert store.next_pending(chat).id == first.id, "oldest first"
    store.update(first.id, done=True)
    assert store.answering(chat).id == second.id, "a stop is a request, not an answer being written"
    store.update(second.id, done=True)
    again = store.add(retried(chat))
    assert store.answering(chat).id == again.id and store.answering(chat).turn == second.id
    store.update(stop.id, done=True)
    assert store.unhandled_stops(chat) == []
    mark = store.rev()
    store.delete_conversation(other)
    assert store.deleted_since(mark) == {other}
    assert store.deleted_since(store.rev()) == set()


def test_a_lease_is_one_owners_until_it_expires(store):
    chat = store.new_conversation(store.default_agent().id).id
    assert store.lease(chat, "a", 10)
    assert store.lease(chat, "a", 10), "its owner keeps it"
    assert not store.lease(chat, "b", 10), "a live lease of another owner holds"
    assert store.renew("a", [chat], 10) == {chat} and store.renew("b", [chat], 10) == set()
    store.release(chat, "b")  # not b's: nothing happens
    assert not store.lease(chat, "b", 10)
    store.release(chat, "a")
    assert store.lease(chat, "b", -1) and store.lease(chat, "a", 10), "released, then expired: taken over"
    store.void_leases()
    assert store.lease(chat, "b", 10)
    store.delete_conversation(chat)
    assert not store.lease(chat, "b", 10), "a conversation that is gone is not leased"
    assert store.renew("b", [chat], 10) == set()


def test_growth_of_many_items_is_written_in_one_rev_range(store):
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    text = store.add(item("text", chat, turn=user.id))
    call = store.add(item("call", chat, turn=user.id, name="t", input="{}"))
    pieces = Pieces()
    pieces.add("Hello, ")
    grown = pieces.add("world")  # a growing text is written as it was at its latest update
    top = store.rev()
    assert store.grow_items({text.id: {"text": grown}, call.id: {"output": "step 1 of 2"}}) == top + 2
    assert store.item(text.id).text == "Hello, world" and store.item(call.id).output == "step 1 of 2"
    assert sorted([store.item(text.id).rev, store.item(call.id).rev]) == [top + 1, top + 2]
    assert store.rev() == top + 2
    assert store.first_message(chat) == user.id and store.answer_text(user.id) == "Hello, world"


def test_only_growing_columns_are_written_in_a_batch(store):
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    with pytest.raises(ValueError, match="not growing columns"):
        store.grow_items({user.id: {"done": 1}})


def test_pending_work_leaves_out_what_another_owner_answers(store):
    """A runner's scan does not see the conversations another runner holds a live lease on
    (each would be a lease tried and refused: a write); an expired lease's it sees again."""
    held, free, mine = (store.new_conversation(None).id for _ in range(3))
    for chat in (held, free, mine):
        store.ask(chat, "hi")
    assert store.lease(held, "other", 10) and store.lease(mine, "me", 10)
    assert [c for c, _ in store.pending_since(0, "me")] == [free, mine]
    assert [c for c, _ in store.pending_since(0)] == [held, free, mine]
    assert store.lease(held, "other", -1)  # its server died: the lease ran out
    assert [c for c, _ in store.pending_since(0, "me")] == [held, free, mine]


def test_leases_taken_many_at_once_as_one_at_a_time(store):
    free, mine, held, expired = (store.new_conversation(None).id for _ in range(4))
    assert store.lease(mine, "me", 10) and store.lease(held, "other", 10) and store.lease(expired, "other", -1)
    gone = store.new_conversation(None).id
    store.delete_conversation(gone)
    assert store.lease_many([free, mine, held, expired, gone], "me", 10) == {free, mine, expired}
    assert not store.lease(held, "me", 10) and not store.lease(free, "other", 10)
    assert store.lease_many([], "me", 10) == set()


def test_a_runs_writes_hold_to_its_lease_in_their_own_transaction(store):
    """Store.fenced: each write of a run reads its lease inside the write lock; once another
    owner took it (after it expired) nothing more is written, not even a nested write, and
    the run's view stays refused (its fault) whatever it tries next."""
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    assert store.lease(chat, "a", 60)
    mine = store.fenced(chat, "a")
    text = mine.add(item("text", chat, "Hel", turn=user.id))
    mine.update(text.id, text="Hello")
    with mine.write():
        mine.update(text.id, text="Hello,")  # nested: a savepoint, fenced too
    assert store.item(text.id).text == "Hello," and mine.fence.fault is None
    assert store.lease(chat, "a", -1) and store.lease(chat, "b", 60), "a was held up past its lease: b took it"
    rev, before = store.rev(), store.item(text.id)
    with pytest.raises(LeaseLost):
        mine.update(text.id, text="Hello, world", done=True)
    with pytest.raises(LeaseLost):
        with store.write():  # inside a write of the plain store the fenced one is still held to the lease
            mine.update(user.id, done=True)
    with pytest.raises(LeaseLost):
        mine.add(item("error", chat, "Stopped", turn=user.id, done=True))
    assert isinstance(mine.fence.fault, LeaseLost)
    assert store.rev() == rev and store.item(text.id) == before and not store.item(user.id).done
    assert [i.kind for i in store.items(chat)] == ["user", "text"], "nothing was written past the lease"
    theirs = store.fenced(chat, "b")
    theirs.update(text.id, text="Hello again", done=True)  # the new owner writes as before
    assert store.item(text.id).text == "Hello again"
    store.delete_conversation(chat)
    with pytest.raises(LeaseLost):  # its lease went with it
        theirs.update(user.id, done=True)


def test_a_runners_growth_is_written_only_where_it_holds_the_lease(store):
    kept, taken = (store.new_conversation(store.default_agent().id).id for _ in range(2))
    texts = {}
    for chat in (kept, taken):
        user = store.ask(chat, "Write")
        assert store.lease(chat, "a", 60)
        texts[chat] = store.add(item("text", chat, "", turn=user.id))
    assert store.lease(taken, "a", -1) and store.lease(taken, "b", 60)
    top = store.rev()
    changes = {texts[kept].id: {"text": "mine"}, texts[taken].id: {"text": "stale"}}
    assert store.grow_items(changes, owner="a") == top + 1, "one rev: only the item it still holds"
    assert list(changes) == [texts[kept].id], "what it left out is said"
    assert store.item(texts[kept].id).text == "mine" and store.item(texts[taken].id).text == ""
    assert store.grow_items({texts[taken].id: {"text": "stale"}}, owner="a") == 0 and store.rev() == top + 1
    assert store.grow_items({texts[taken].id: {"text": "theirs"}}, owner="b") == top + 2


async def test_a_scan_knows_when_the_only_revs_since_it_are_its_runners_growth(store):
    """Writes.mine: the runner's scan skips its reads while every rev since the last one was
    taken by its own writes of growing text (revs have no holes); any other write (a new
    message, a stop, a deletion, another process's) makes it read again."""
    from app.run.writes import Writes

    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    a = store.add(item("text", chat, turn=user.id))
    b = store.add(item("text", chat, turn=user.id))
    writes = Writes(store)
    since = store.rev()
    assert writes.mine(since, since), "nothing since"
    writes.grow(a.id, text="one")
    writes.flush()
    writes.grow(a.id, text="one two")
    writes.grow(b.id, text="x")
    writes.flush()
    top = store.rev()
    assert top == since + 3 and writes.mine(since, top)
    assert writes.mine(since, since + 1) and writes.mine(since + 1, top), "any part of the writes' revs"
    store.ask(chat, "Another")  # a rev that is not the writes'
    assert not writes.mine(since, store.rev())
    writes.grow(a.id, text="one two three")
    writes.flush()
    assert not writes.mine(top, store.rev()), "the message's rev is still in the range"
    later = store.rev() - 1
    assert writes.mine(later, store.rev()), "from the message on: only growth again"
    store.add(stopped(chat))
    assert not writes.mine(store.rev() - 1, store.rev())
    writes.forget(store.rev())  # a full scan read up to here: what was written before is let go
    assert writes._wrote == []


async def test_growth_wakes_the_feed_only_while_a_page_follows(store):
    """Writes.quiet (Runner.quiet: no page follows in the process, SQLite): a write of growing
    text is committed as ever but does not wake the feed, which sees it at its next poll; any
    other write, and growth while a page follows, wakes it at once."""
    from app.run.writes import Writes

    woken = []
    store.notify = lambda: woken.append(1)
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    text = store.add(item("text", chat, turn=user.id))
    followed = False
    writes = Writes(store, quiet=lambda: not followed)
    woken.clear()
    writes.grow(text.id, text="one")
    writes.flush()
    assert store.item(text.id).text == "one" and woken == []
    followed = True
    writes.grow(text.id, text="one two")
    writes.flush()
    assert store.item(text.id).text == "one two" and woken == [1]
    followed = False
    store.update(text.id, done=True)
    assert woken == [1, 1], "other writes wake it as before"


def _write(writes, item_id: int, text) -> None:
    """What a beat does with a growing text (Writes.grow, then its tick's flush), no loop needed."""
    writes.pending.setdefault(item_id, {})["text"] = text
    writes.flush()


def _chunk_rows(store, item_id: int) -> list:
    return [tuple(r) for r in store._all("SELECT n, text FROM text_chunks WHERE item = ? ORDER BY n", [item_id])]


def _head(store, item_id: int) -> str:
    """The item's own `text` column (empty while its text is in chunks)."""
    return store._one("SELECT text FROM items WHERE id = ?", [item_id])[0]


def test_a_growing_text_is_written_in_chunks_and_read_whole(store):
    """A beat's write rewrites the text's last chunk and adds new ones (m035), not the whole
    answer again, and the item's row holds no text while it grows; every read of the item
    (one, a conversation's, the feed's) has the whole text."""
    from app.run.writes import Writes

    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    text = store.add(item("text", chat, turn=user.id))
    writes, pieces, so_far = Writes(store), Pieces(), ""
    words = ["Once ", "upon ", "a ", "time, ", "there ", "was ", "a ", "store. ", "é" * (CHUNK_CHARS - 3), "ü" * 5,
             "x" * (2 * CHUNK_CHARS + 7), "end."]
    for word in words:
        so_far += word
        _write(writes, text.id, pieces.add(word))
        assert store.item(text.id).text == so_far
        if len(so_far) <= CHUNK_CHARS:  # one chunk or less: written whole into its row, as before
            assert _head(store, text.id) == so_far and _chunk_rows(store, text.id) == []
            continue
        assert _head(store, text.id) == ""
        assert [t for _, t in _chunk_rows(store, text.id)] == [so_far[at:at + CHUNK_CHARS]
                                                           for at in range(0, len(so_far), CHUNK_CHARS)]
    assert [it.text for it in store.items(chat) if it.id == text.id] == [so_far]
    assert [it.text for it in store.items_since(0, chats=[chat]) if it.id == text.id] == [so_far]
    # done without its text (a stop): the chunks become its text, searchable
    store.update(text.id, done=True)
    assert _chunk_rows(store, text.id) == []
    assert _head(store, text.id) == so_far
    assert store.item(text.id).text == so_far


def test_a_beat_writes_only_the_last_chunk_and_the_new_ones(store):
    """Counted: the characters a beat puts in chunks are its gain and at most one chunk
    before it, so an answer's writes are linear in its length (whole each beat: length² / step)."""
    from app.run.writes import Writes

    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    text = store.add(item("text", chat, turn=user.id))
    writes, pieces = Writes(store), Pieces()
    seen: list[list] = []
    grow_items = store.grow_items

    def counted(changes, notify=True, owner=None):
        seen.extend(v["text"] for v in changes.values())
        return grow_items(changes, notify, owner)

    store.grow_items = counted
    for k in range(2_000):  # ~84 KB, 42 characters a beat, as x10 of benchmarks/answer_cost.py
        _write(writes, text.id, pieces.add(f"word{k % 10} " * 6))
    whole = str(pieces.add(""))
    assert store.item(text.id).text == whole and _head(store, text.id) == ""
    whole_writes = [c for c in seen if not isinstance(c, Chunked)]
    seen = seen[len(whole_writes):]
    assert len(str(whole_writes[-1])) <= CHUNK_CHARS < len(seen[0].text), "whole while it fits a chunk, then chunks"
    assert [c.fresh for c in seen[:2]] == [True, False] and all(isinstance(c, Chunked) for c in seen)
    written = sum(len(c.text) for c in seen) + sum(len(str(c)) for c in whole_writes)
    assert written <= len(whole) + (len(seen) + len(whole_writes)) * CHUNK_CHARS, "at most one chunk a beat before its gain"
    whole_each_beat = sum(range(36, len(whole) + 1, 36))
    assert written * 10 < whole_each_beat, f"{written:,} characters written for a {len(whole):,}-character answer"


def test_a_whole_write_clears_the_chunks_and_a_takeover_writes_fresh(store):
    from app.run.writes import Writes

    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Write")
    text = store.add(item("text", chat, turn=user.id))
    writes, pieces = Writes(store), Pieces()
    for word in ["a" * CHUNK_CHARS, "b" * 100]:
        _write(writes, text.id, pieces.add(word))
    assert len(_chunk_rows(store, text.id)) == 2
    # another runner (a restart, another server) takes the run over: it writes its chunks fresh
    other, grown = Writes(store), pieces.add("c" * 100)
    _write(other, text.id, grown)
    assert len(_chunk_rows(store, text.id)) == 2 and store.item(text.id).text == str(grown)
    # one that starts over with a shorter text leaves no chunk of the longer one behind
    again = Writes(store)
    _write(again, text.id, Pieces().add("short"))
    assert _chunk_rows(store, text.id) == [] and store.item(text.id).text == "short"
    _write(again, text.id, Pieces().add("x" * (CHUNK_CHARS + 1)))
    assert _chunk_rows(store, text.id) == [(0, "x" * CHUNK_CHARS), (1, "x")] and _head(store, text.id) == ""
    # the end's whole text (Turn.end_step) and a deletion leave no chunk behind
    _write(other, text.id, pieces.add("e"))
    store.update(text.id, text="The whole answer.", done=True)
    assert _chunk_rows(store, text.id) == [] and store.item(text.id).text == "The whole answer."
    another = store.add(item("text", chat, turn=user.id))
    more = Pieces()
    for word in ["x" * CHUNK_CHARS, "y"]:
        _write(other, another.id, more.add(word))
    assert len(_chunk_rows(store, another.id)) == 2
    store.delete_conversation(chat)
    assert _chunk_rows(store, another.id) == []


def test_pieces_tail_joins_only_what_it_returns():
    pieces = Pieces()
    parts = ["ab", "cde", "", "f", "ghij"]
    sizes = [pieces.add(p).size for p in parts]
    whole = "".join(parts)
    for size in sizes:
        for start in range(size + 2):
            assert pieces.tail(start, size) == whole[start:size], (start, size)
    pieces.text()  # joined once: the tail reads the joined text the same
    assert pieces.tail(3, 7) == whole[3:7] and pieces.add("k").since(9) == "jk"


def test_pieces_tail_walks_a_beat_of_pieces_not_the_answer():
    """As the write buffer asks (from the chunk its last write ended in, a beat of the model's
    chunks later): the pieces after the one `start` is in are kept joined, so a call walks
    the beat's new pieces and two more, and the list holds a piece or two a chunk, not one a
    model chunk (20,000 here, as before)."""
    pieces, whole, written = Pieces(), "", 0
    for beat in range(2_000):
        for k in range(10):
            so_far = pieces.add(f"w{beat}.{k} ")
            whole += f"w{beat}.{k} "
        start = written // CHUNK_CHARS * CHUNK_CHARS
        before = len(pieces._pieces)
        assert so_far.since(start) == whole[start:]
        joined = before - len(pieces._pieces) + 1  # the pieces this call joined into one
        assert joined <= 12, (beat, joined)
        written = so_far.size
    assert len(pieces._pieces) <= 2 * (len(whole) // CHUNK_CHARS) + 3 and str(pieces.add("")) == whole


async def test_a_text_read_once_a_frame_is_still_written_once_a_beat():
    """While a page in the runner's process follows an answer, its stream is read once a frame
    (~16.7 ms, Feed.grew); its row is still written once a beat, not at every phase after a
    read (40 a second: found by review of the fast path). A count of writes, bounded above:
    a loaded machine writes fewer, never more."""
    from app.beat import BEAT_SECONDS, FRAME_SECONDS, next_beat
    from app.run.writes import Writes

    class Counting:  # the store's side of a write of growth, counted
        writes = 0

        def grow_items(self, pending, notify=True, owner=None):
            Counting.writes += 1
            return 0

    writes, pieces = Writes(Counting()), Pieces()
    loop = asyncio.get_running_loop()
    start = loop.time()
    end = start + 1.0
    while loop.time() < end:
        now = loop.time()
        await asyncio.sleep(next_beat(now, FRAME_SECONDS) - now)  # a read on the frames' grid
        writes.grow(1, text=pieces.add("word "))
    await asyncio.sleep(BEAT_SECONDS * 2)
    beats = (loop.time() - start) / BEAT_SECONDS
    assert 0 < Counting.writes <= beats + 1, f"{Counting.writes} writes in {beats:.0f} beats"


def test_a_followed_conversation_is_marked_watched_until_its_mark_runs_out(store, monkeypatch):
    """Store.mark_watched (a feed's, for what its pages and API streams follow) and `watched`
    (a runner's, for whether to write growth on the beat): a mark holds for its seconds, a
    renewal never shortens one, a deleted conversation is left out, a runner may leave its
    own feed's marks out (`besides`), a mark a minute past goes at the next marking, and no
    page is told of any of it (no rev)."""
    from app.store import db as dbm

    a = store.new_conversation(None).id
    b = store.new_conversation(None).id
    gone = store.new_conversation(None).id
    store.delete_conversation(gone)
    assert store.watched([a, b]) == set()
    rev = store.rev()
    store.mark_watched([a, gone], 5.0, "here")
    assert store.watched([a, b, gone]) == {a} and store.rev() == rev
    assert store.watched([a, b], besides="here") == set() and store.watched([a], besides="there") == {a}
    store.mark_watched([a], 1.0, "here")  # a renewal, shorter: the longer mark holds
    store.mark_watched([a], 4.0, "there")  # another worker's
    assert store.watched([a], besides="here") == {a} and store.watched([a], besides="there") == {a}
    now = dbm.now()
    later = now + 4.5
    monkeypatch.setattr(dbm, "now", lambda: later)
    assert store.watched([a]) == {a} and store.watched([a], besides="here") == set()
    later += 1.0  # past its five seconds
    assert store.watched([a]) == set()
    store.mark_watched([a, b], 5.0, "here")
    assert store.watched([a, b]) == {a, b}
    later += 120.0
    store.mark_watched([b], 5.0, "here")
    assert [tuple(r) for r in store.db.conn.execute("SELECT chat, marker FROM watched").fetchall()] == [(b, "here")]
    assert store.rev() == rev


async def test_a_text_nobody_follows_is_written_once_a_second_and_on_the_beat_once_followed():
    """Writes.watched (Runner.watched: a page or an API stream follows the conversation here or
    anywhere): an answer nobody follows is written at most once every UNWATCHED_SECONDS,
    however often it grows (a slow model's every chunk was a write transaction); once it is
    followed, its next growth is written within a beat, and a flush (a step's end) writes
    everything at once. Counts of writes, bounded above; the one lower bound waits."""
    from app.beat import BEAT_SECONDS
    from app.run.writes import UNWATCHED_SECONDS, Writes

    class Counting:  # the store's side of a write of growth, counted
        written: list[dict] = []

        def grow_items(self, pending, notify=True, owner=None):
            Counting.written.append({k: str(v["text"]) for k, v in pending.items()})
            return 0

    followed: set[int] = set()
    writes, pieces = Writes(Counting(), watched=lambda chat, handed: chat in followed), Pieces()
    other = Pieces()
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() < start + 2.5:  # ten chunks a second, 2.5 seconds
        writes.grow(1, 7, text=pieces.add("word "))
        writes.grow(2, None, text=other.add("word "))  # (no conversation said: on the beat, as before)
        await asyncio.sleep(0.1)
    took = loop.time() - start
    slow = [w for w in Counting.written if 1 in w]
    assert 1 <= len(slow) <= took / UNWATCHED_SECONDS + 1, f"{len(slow)} writes in {took:.1f} s"
    assert len([w for w in Counting.written if 2 in w]) > len(slow)
    followed.add(7)  # a page begins to follow it
    before = len(Counting.written)
    writes.grow(1, 7, text=pieces.add("more "))
    deadline = loop.time() + 10 * BEAT_SECONDS  # (a loaded machine's timers are late)
    while len(Counting.written) == before and loop.time() < deadline:
        await asyncio.sleep(BEAT_SECONDS / 5)
    assert Counting.written[before:] and Counting.written[-1].get(1, "").endswith("more ")
    followed.clear()
    writes.grow(1, 7, text=pieces.add("last"))
    writes.flush()  # a step's end: whatever is pending, now
    assert Counting.written[-1][1].endswith("last")
    writes.close()
