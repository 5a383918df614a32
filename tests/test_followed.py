"""What the feed keeps of a followed conversation (app/feed/followed.py): what its pages in
step have, and the renders of its answers, which go on from one dispatch to the next."""
import re
from pathlib import Path

from app import markdown
from app.feed.dispatch import Feed
from app.feed.followed import Followed
from app.tables import item
from app.web import live
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
