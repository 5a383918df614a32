"""What the feed keeps of a followed conversation (app/feed/followed.py): what its pages in
step have, and the renders of its answers, which go on from one dispatch to the next."""
import asyncio
import re
from pathlib import Path

from app import markdown
from app.agent.pieces import Pieces
from app.beat import FRAME_SECONDS
from app.feed.dispatch import Feed, encode
from app.feed.followed import Followed
from app.tables import item
from app.web import live
from app.web.completions import Place, Transcript
from tests.conftest import database_of

ANSWER = (Path(__file__).parent / "fixtures" / "long_answer.md").read_text()


def stream_answer(store, feed, chat, text, joins=()):
    """An answer to a new message written 40 characters a dispatch, then done with the run's
    end; new followers join at the writes in `joins`. Returns (the answer's item, the
    followers, the work of the dispatches)."""
    user = store.ask(chat, "Write it")
    answer = store.add(item("text", chat, "", turn=user.id))
    feed.dispatch()
    followers = []
    with markdown.counting() as work:
        ends = [*range(40, len(text), 40), len(text)]
        for k, end in enumerate(ends):
            if k in joins:
                followers.append(feed.follow(chat))
            if end == len(text):
                store.update(answer.id, text=text, done=True)
                store.update(user.id, done=True)
            else:
                store.update(answer.id, text=text[:end])
            feed.dispatch()
    return answer, followers, work


def test_a_followed_answer_is_rendered_from_its_last_render_and_finished_once(store):
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes)
    try:
        steady = feed.follow(chat)
        final = len(range(40, len(ANSWER), 40))  # the write that finishes it
        answer, (late, last_moment), work = stream_answer(store, feed, chat, ANSWER, joins=(100, final))
        # each dispatch parses from the answer's last open block (a whole parse each time
        # would be ~100x the answer), the page that joined late included
        assert work.parsed <= 10 * len(ANSWER), work.parsed / len(ANSWER)
        # the finished answer: rendered once for the message, the page that caught up in the
        # same dispatch, and the screen reader's announcement
        assert work.finals == 1
        assert "state done" in last_moment.messages[-1][1].decode()
        followed = feed.followed[chat]
        assert followed.renders[answer.id].finished
        last = steady.messages[-1][1].decode()
        assert 'id="announce"' in last and "Answer finished:" in last
        assert late.messages[-1] == steady.messages[-1], "in step: the same message"
    finally:
        feed.db.conn.close()


def test_a_followed_conversation_keeps_the_renders_of_its_last_answers_only(store):
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes)
    try:
        follower = feed.follow(chat)
        answers = [stream_answer(store, feed, chat, f"Answer number {n}, " * 8)[0] for n in range(live.FINISHED_KEPT + 3)]
        renders = feed.followed[chat].renders  # (the last answer's made when it began)
        assert list(renders) == [a.id for a in answers[-live.FINISHED_KEPT - 1:]]
        feed.unfollow(follower)
        assert chat not in feed.followed, "no page follows it: what was kept of it goes"
    finally:
        feed.db.conn.close()


def test_a_page_that_caught_up_gets_the_difference_from_nothing(store):
    chat = store.new_conversation(None).id
    user = store.ask(chat, "Hi")
    store.add(item("text", chat, "Hello **there**", turn=user.id))
    items = store.items_since(0)
    whole = live.chat_changes(store, chat, items, None)
    assert whole == live.chat_changes(store, chat, items, None, followed=Followed().nothing())
    # whole elements, and every fragment made of the state, known or not
    assert re.search(r'<article id="i\d+"[^>]*class="item text"', whole)
    assert 'id="status"' in whole and 'id="cut" hx-swap-oob="delete"' in whole
    followed = Followed()
    live.chat_changes(store, chat, items, None, followed=followed)
    assert followed.state is not None and followed.path is not None and followed.status
    assert set(followed.items) == {it.id for it in items}, "not done: kept to diff"


def assembled(messages: list[str], answer: int) -> list[str]:
    """The answer's paragraph as a page puts it together from `messages`, after each: a
    block whole (again), or a piece appended to it."""
    text, after = None, []
    block = re.compile(rf'<div class="md" id="i{answer}-0"[^>]*><p>(.*?)</p>|<hx-a t=i{answer}-0>(.*?)</hx-a>')
    for message in messages:
        for whole, added in block.findall(message):
            text = whole if whole else (text or "") + added
        after.append(text)
    return after


async def test_words_read_in_this_process_reach_the_pages_once_whatever_the_rows_and_reconnects(store):
    """The fast path (Feed.grew) against the rows: pages in step are handed each read from
    memory, a dispatch of rows that are behind it sends nothing again, and a page that
    catches up in the middle (a reconnect) gets whole elements that the next messages go
    on from, even when its catch-up and the feed's first message for it are of one rev."""
    words = [f"w{n:03d} " for n in range(120)]
    final = "".join(words).strip()
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes, render_grown=live.texts_grown)
    try:
        steady = feed.follow(chat)
        user = store.ask(chat, "Count")
        answer = store.add(item("text", chat, "", turn=user.id))
        feed.dispatch()
        pieces, later, n = Pieces(), None, 0
        while n < len(words):
            so_far = pieces.add(words[n])
            feed.grew(chat, answer.id, so_far)
            await asyncio.sleep(FRAME_SECONDS)  # the frame goes out
            if n % 7 == 6:  # the rows, on the beat: behind what was read
                store.update(answer.id, text=pieces.text(so_far.size - len(words[n]) * 3))
                if n == 48:  # a page catches up here (stream.py) ...
                    later = feed.follow(chat)
                    with store.snapshot():
                        top = store.rev()
                        first = live.chat_changes(store, chat, feed.current(store.items_since(0, chat=chat)),
                                                  None, [], feed.followed[chat].nothing())
                    catch_up = [encode(top, first)]
                    n += 1  # ... and the answer grows before the feed's next dispatch, of the same rev
                    feed.grew(chat, answer.id, pieces.add(words[n]))
                feed.dispatch()
            n += 1
        store.update(answer.id, text=final, done=True)
        feed.dispatch()
        assert steady.messages and later.messages
        # what each page saw: the steady one from the start, the later one from its catch-up,
        # leaving out what its catch-up covered as stream.follow does
        pages = {"steady": [m.decode() for _, m in steady.messages],
                 "later": [m.decode() for m in catch_up]
                 + [m.decode() for rev, m in later.messages if not (rev and rev <= top)]}
        for name, messages in pages.items():
            shown = [t for t in assembled(messages, answer.id) if t is not None]
            assert shown[-1] == final, name
            lengths = [len(t) for t in shown]
            assert all(final.startswith(t.strip()) for t in shown), f"{name}: a word twice or one left out"
            assert lengths == sorted(lengths), f"{name}: the text went back"
        # read from memory: the steady page had a message for (nearly) every word, not every row
        assert len(steady.messages) >= len(words)
    finally:
        feed.db.conn.close()


async def test_a_page_that_caught_up_stays_out_of_the_frames_until_a_dispatch_brings_it_every_growing_text(store):
    """A page catches up while an answer grows here; frames bring the pages in step on; then
    another row of the conversation is committed before the next write of the answer's row.
    That dispatch's whole elements do not carry the answer, so the page is not yet in step:
    the frames leave it out until a dispatch that carries it (else they would send it the
    difference from text it never had). Found by review of the fast path."""
    words = [f"w{n:03d} " for n in range(60)]
    final = "".join(words).strip()
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes, render_grown=live.texts_grown)
    try:
        steady = feed.follow(chat)
        user = store.ask(chat, "Count")
        answer = store.add(item("text", chat, "", turn=user.id))
        feed.dispatch()
        pieces = Pieces()
        for n in range(20):
            so_far = pieces.add(words[n])
            feed.grew(chat, answer.id, so_far)
            await asyncio.sleep(FRAME_SECONDS)
            if n % 3 == 2:
                store.update(answer.id, text=str(so_far))
                feed.dispatch()
        # a page catches up (stream.chat_events)
        later = feed.follow(chat)
        with store.snapshot():
            top = store.rev()
            first = live.chat_changes(store, chat, feed.current(store.items_since(0, chat=chat)),
                                      None, [], feed.followed[chat].nothing())
        catch_up = [encode(top, first)]
        # two frames' reads before the next beat's write
        for n in range(20, 22):
            feed.grew(chat, answer.id, pieces.add(words[n]))
            await asyncio.sleep(FRAME_SECONDS * 1.5)
        # another row of the conversation is committed between two beats (the user item
        # re-rendered as answered, a call's state, a plugin's ask ...): a dispatch without the answer
        store.update(user.id)
        feed.dispatch()
        for n in range(22, 60):
            so_far = pieces.add(words[n])
            feed.grew(chat, answer.id, so_far)
            await asyncio.sleep(FRAME_SECONDS)
            if n % 3 == 2:
                store.update(answer.id, text=str(so_far))
                feed.dispatch()
        store.update(answer.id, text=final, done=True)
        store.update(user.id, done=True)
        feed.dispatch()
        later_msgs = [m.decode() for m in catch_up] + [m.decode() for rev, m in later.messages if not (rev and rev <= top)]
        shown = [t for t in assembled(later_msgs, answer.id) if t is not None]
        assert shown[-1] == final, "a word left out"
        assert all(final.startswith(t.strip()) for t in shown)
    finally:
        feed.db.conn.close()


async def test_an_api_stream_beside_a_page_is_handed_the_rows_not_the_pages_texts(store):
    """The feed's texts for the pages (Feed.current: at the length the pages in step have)
    can be behind the row an API stream already sent from: it is handed the rows, so it never
    sends a word twice. Found by review of the fast path."""
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes, render_grown=live.texts_grown)
    try:
        page = feed.follow(chat)
        user = store.ask(chat, "Count")
        answer = store.add(item("text", chat, "", turn=user.id))
        feed.dispatch()
        pieces = Pieces()
        feed.grew(chat, answer.id, pieces.add("alpha "))      # a quiet frame: sent at once
        await asyncio.sleep(0)
        feed.grew(chat, answer.id, s := pieces.add("beta "))  # within the frame: its frame waits ~16 ms
        store.update(answer.id, text=str(s))                  # the beat's write lands first
        # an API stream starts following the turn now (openai_api.follow): it reads the rows
        watcher = feed.watch(chat)
        t = Transcript(Place(user.id, start=user.id), "agent-1", "http://x/c/1")
        sent = []
        rows = {it.id: it for it in store.turn_items(chat, user.id, user.id)}
        sent += [p["choices"][0]["delta"].get("content", "") for _, p in t.advance(list(rows.values()), 0)]
        feed.dispatch()                                       # the write's dispatch, before the frame
        for it, in [watcher.take()[0]]:
            rows[it.id] = it
        sent += [p["choices"][0]["delta"].get("content", "") for _, p in t.advance(list(rows.values()), 0)]
        await asyncio.sleep(FRAME_SECONDS * 2)
        store.update(answer.id, text=str(pieces.add("gamma")), done=True)
        feed.dispatch()
        for it in watcher.take()[0]:
            rows[it.id] = it
        sent += [p["choices"][0]["delta"].get("content", "") for _, p in t.advance(list(rows.values()), 0)]
        assert "".join(sent) == "alpha beta gamma"
    finally:
        feed.db.conn.close()


def test_what_pages_and_api_streams_follow_here_is_marked_watched_for_every_runner(store, monkeypatch):
    """A feed marks the conversations its pages and API streams follow as watched in the rows
    (Store.mark_watched), so a runner in any worker or server writes their answers' growth on
    the beat: a new one at the feed's next turn, all of them again every WATCH_RENEW_SECONDS;
    a sidebar's stream (no conversation) marks nothing."""
    from app.feed import dispatch

    a = store.new_conversation(None).id
    b = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes)
    try:
        feed.follow(None, lists=True)
        feed._mark()
        assert store.watched([a, b]) == set()
        page = feed.follow(a)
        feed._mark()
        assert store.watched([a, b]) == {a}
        feed.watch(b)  # an API stream
        feed._mark()
        assert store.watched([a, b]) == {a, b}
        feed.unfollow(page)
        renewed = []
        monkeypatch.setattr(feed.store, "mark_watched", lambda chats, seconds, marker: renewed.append(chats))
        feed._mark()
        assert renewed == [], "nothing new, and not yet time to renew"
        feed._mark_at = 0.0  # WATCH_RENEW_SECONDS later
        feed._mark()
        assert renewed == [[b]] and dispatch.WATCH_RENEW_SECONDS < dispatch.WATCH_SECONDS
    finally:
        feed.close()


def test_a_text_handed_from_memory_needs_the_rows_on_the_beat_only_for_what_reads_them(store, tmp_path, monkeypatch):
    """Runner.watched: growth any follower reads from the rows is written on the beat, and
    the rest once a second. A text handed to the pages here from memory (Feed.grew) is read
    from the rows by a page catching up (until a dispatch brings it in step), by an API
    stream, and by any page in another worker or server (its feed's marks: a feed's own marks
    are left out while its pages are in step, and count once they left, for a page that
    comes back); a tool's output, not handed, is read from the rows by every page."""
    from app import config as configuration
    from app.run import runner as running
    from app.run.runner import Runner
    from app.plugins.sessions import Sessions

    monkeypatch.setenv("TABLETALK_DATA", str(tmp_path))
    monkeypatch.setattr(running, "WATCH_CHECK_SECONDS", 0.0)  # the marks read at each ask
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes, render_grown=live.texts_grown)
    try:
        runner = Runner(configuration.load(), store, feed, providers=None, sessions=Sessions())
        assert not runner.watched(chat, True) and not runner.watched(chat, False)  # nobody follows
        page = feed.follow(chat)
        assert page.fresh and runner.watched(chat, True), "a page catching up reads the rows"
        store.ask(chat, "Write it")
        feed.dispatch()
        assert not page.fresh, "the dispatch brought it in step"
        assert not runner.watched(chat, True), "handed from memory: the rows once a second"
        assert runner.watched(chat, False), "a tool's output: the page reads the rows"
        feed._mark()  # this feed's own mark
        assert not runner.watched(chat, True)
        api = feed.watch(chat)
        assert runner.watched(chat, True), "an API stream reads the rows"
        feed.unwatch(api)
        store.mark_watched([chat], 5.0, "a page in another worker")
        assert runner.watched(chat, True) and runner.watched(chat, False)
        store.db.conn.execute("DELETE FROM watched WHERE marker <> ?", [feed.marker])
        assert not runner.watched(chat, True)
        feed.unfollow(page)  # its last page here left: its own mark holds a few seconds more,
        assert runner.watched(chat, True), "so a page that comes back finds rows that went on"
    finally:
        feed.close()


async def test_a_read_is_sent_at_once_when_half_a_frame_has_passed_and_many_pages_wait_their_turn(store):
    """Feed._schedule: a text read here goes to the pages at once when the last frame is half
    a frame old (FRAME_GAP_SECONDS): the reads come once a frame on a grid of their own, and a
    frame held to a whole frame after the last kept a lag behind them (~8 ms at the median).
    A read sooner waits for that half frame; a conversation a hundred pages follow waits for
    its share of FANOUT_SENDS, and a read in another conversation meanwhile is not held for it."""
    from app.feed.dispatch import FANOUT_SENDS, FRAME_GAP_SECONDS

    feed = Feed(database_of(store), render=live.chat_changes, render_grown=live.texts_grown)
    loop = asyncio.get_running_loop()
    try:
        chats, answers, pages = [], [], []
        for many in (1, 100):
            chat = store.new_conversation(None).id
            pages.append([feed.follow(chat) for _ in range(many)])
            user = store.ask(chat, "Count")
            answers.append(store.add(item("text", chat, "", turn=user.id)).id)
            chats.append(chat)
        feed.dispatch()
        (one, hundred), pieces = chats, [Pieces(), Pieces()]

        before = {id(p): len(p.messages) for group in pages for p in group}  # (the dispatch's)

        def frames(group: int) -> set[int]:  # the frames each page of a group was sent since
            return {len(p.messages) - before[id(p)] for p in pages[group]}

        feed.grew(one, answers[0], pieces[0].add("w1 "))
        assert feed._frame_at <= loop.time(), "the first read after a quiet frame: at once"
        await asyncio.sleep(0)
        assert frames(0) == {1}
        framed = feed._framed
        feed.grew(one, answers[0], pieces[0].add("w2 "))
        assert feed._frame_at == framed + FRAME_GAP_SECONDS < framed + FRAME_SECONDS
        await asyncio.sleep(FRAME_GAP_SECONDS * 2)
        assert frames(0) == {2}
        # a hundred pages: a frame, then the next read waits for their share of the sends
        feed.grew(hundred, answers[1], pieces[1].add("w1 "))
        await asyncio.sleep(FRAME_GAP_SECONDS * 2)
        assert frames(1) == {1}
        feed.grew(hundred, answers[1], pieces[1].add("w2 "))
        await asyncio.sleep(FRAME_GAP_SECONDS * 2)
        turn = feed._chat_framed[hundred] + 100 / FANOUT_SENDS
        assert frames(1) == {1} and feed._frame_at == turn, "its turn, not every frame"
        feed.grew(one, answers[0], pieces[0].add("w3 "))  # another conversation's read is not held for it
        assert feed._frame_at < turn
        await asyncio.sleep(FRAME_GAP_SECONDS * 2)
        assert frames(0) == {3}
        while loop.time() < turn + FRAME_GAP_SECONDS * 2:
            await asyncio.sleep(FRAME_GAP_SECONDS)
        assert frames(1) == {2}
    finally:
        feed.close()


async def test_the_last_page_leaving_a_text_read_here_has_it_written(store):
    """Feed.left (Runner.left): when the last page here following a conversation leaves
    while its text grows here, the runner is told, and writes what it read: those pages were
    handed the words from memory while the rows had them once a second, and a page opening it
    again catches up from the rows. A page leaving a conversation with nothing growing here,
    or with another page still following, tells nothing."""
    chat = store.new_conversation(None).id
    feed = Feed(database_of(store), render=live.chat_changes, render_grown=live.texts_grown)
    left: list[int] = []
    feed.left = left.append
    try:
        first, second = feed.follow(chat), feed.follow(chat)
        user = store.ask(chat, "Count")
        answer = store.add(item("text", chat, "", turn=user.id))
        feed.dispatch()
        feed.unfollow(second)
        quiet = feed.follow(chat)
        feed.unfollow(quiet)
        feed.grew(chat, answer.id, Pieces().add("w1 "))
        await asyncio.sleep(FRAME_SECONDS * 2)
        assert left == []
        feed.unfollow(first)
        assert left == [chat]
        again = feed.follow(chat)
        feed.unfollow(again)  # nothing read here since it came
        assert left == [chat]
    finally:
        feed.close()
