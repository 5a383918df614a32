"""Long conversations against the fake model server: what is sent fits the window, the oldest
turns are left out in chunks, the page shows where the model's view starts, an error when
even the latest turn does not fit, calibration, and prompt caching."""
import json

import pytest
from bs4 import BeautifulSoup

from app.feed.dispatch import Feed
from app.web import live
from tests.conftest import ask, database_of, idle, new_chat, rows, sse_value, store_of
from tests.fakes.openai_server import FakeModelServer, text, usage

WINDOW = 4000  # tokens, as the fake reports it: small enough to outgrow in a test


@pytest.fixture
def fake():
    with FakeModelServer(models={"tiny": WINDOW, "anthropic/claude-tiny": WINDOW}) as server:
        server.plain_default = [text("A fitting title")]
        yield server


def tokens_sent(request) -> int:
    """What a request costs by the fake's rule (4 characters a token), tools included."""
    return len(json.dumps({"messages": request["messages"], "tools": request.get("tools", [])})) // 4


def counted(words):
    """An answer whose usage is the request's cost, as a real server reports it (the fake's own
    default counts only the messages)."""
    return lambda request: [text(words), usage(tokens_sent(request), len(words) // 4)]


def question(n):
    return (f"Question {n}: " + "tell me more about the otters of the northern rivers and their habits. " * 5).strip()


def test_a_conversation_that_outgrows_the_window_leaves_out_its_oldest_turns(client, fake, data):
    chat = new_chat(client)
    # followed, as by its page open in another worker (that worker's row of `watched`): an
    # answer nobody follows is read once a second, and 24 turns took 24 s; followed, once a beat
    store_of(client).mark_watched([int(chat.rsplit("/", 1)[1])], 600)
    asked = []
    for n in range(1, 25):
        fake.script(counted(f"Answer {n}: " + "otters hold hands while they sleep so they do not drift apart. " * 6))
        asked.append(question(n))
        ask(client, chat, asked[-1])
        idle(client, chat)
    requests = fake.streamed
    assert len(requests) == 24
    assert max(tokens_sent(r) for r in requests) < WINDOW, "every request fits the window"
    assert all(tokens_sent(r) <= WINDOW * 0.75 * 1.05 for r in requests), "and the share of it the setting allows"
    last = [m["content"] for m in requests[-1]["messages"] if m["role"] == "user"]
    assert last == asked[-len(last):], "what is sent is the latest turns, in order"
    assert 1 < len(last) < 24, "the oldest turns were left out, not the newest"
    # Left out in chunks: the first message sent changes a few times, not at every request,
    # so a server that caches prompt prefixes can reuse them.
    firsts = [next(m["content"] for m in r["messages"] if m["role"] == "user") for r in requests]
    moves = sum(1 for a, b in zip(firsts, firsts[1:]) if a != b)
    assert 1 <= moves <= 4, f"the view moved {moves} times in 24 requests"
    # The page keeps every turn, with a marker where the model's view starts.
    page = idle(client, chat)
    assert len(page.select("#items > article.user")) == 24, "nothing was deleted"
    cut = page.select_one("#items > #cut")
    assert cut is not None and "no longer sent" in cut.text
    after = cut.find_next_sibling("article")
    assert "user" in after["class"] and after.select_one(".body").text == last[0]
    above = len(cut.find_all_previous("article", class_="user"))
    assert above == 24 - len(last)
    assert f"{above} earlier turns" in page.select_one("#status .left-out").text
    # The estimate learned the fake's count: one calibration row, taught by every answer.
    [(ratio, samples)] = [tuple(r.values()) for r in rows(data, "SELECT ratio, samples FROM calibrations WHERE model = 'tiny'")]
    assert samples == 24 and 0.5 < ratio < 2


def test_the_estimate_converges_to_what_the_server_reports(client, fake, data):
    # A server whose tokenizer counts 30% more than characters / 4 suggests.
    def answer(request):
        return [text("Noted."), usage(round(tokens_sent(request) * 1.3), 2)]

    chat = new_chat(client)
    for n in range(1, 9):
        fake.script(answer)
        ask(client, chat, question(n))
        idle(client, chat)
    [(ratio, samples)] = [tuple(r.values()) for r in rows(data, "SELECT ratio, samples FROM calibrations WHERE model = 'tiny'")]
    estimate = rows(data, "SELECT estimate FROM contexts")[0]["estimate"]
    reported = round(tokens_sent(fake.streamed[-1]) * 1.3)
    assert samples == 8
    assert abs(estimate - reported) / reported < 0.05, f"estimated {estimate} for {reported}"


def test_a_message_too_long_for_the_window_is_an_error_in_plain_words_and_the_chat_goes_on(client, fake):
    chat = new_chat(client)
    ask(client, chat, "otters " * 4000)  # ~7,000 tokens for a 4,000-token window
    page = idle(client, chat)
    err = page.select_one("article.error .error")
    assert err is not None and "too long for the model’s context window" in err.text
    assert "Nothing was sent" in err.text and "Traceback" not in err.text
    assert fake.streamed == [], "nothing was sent to the model"
    fake.script("Short answer.")
    ask(client, chat, "A short question")
    page = idle(client, chat)
    assert page.select("article.text")[-1].get_text(strip=True) == "Short answer."
    sent = [m["content"] for m in fake.streamed[0]["messages"] if m["role"] == "user"]
    assert sent == ["A short question"], "the long turn is left out of what is sent"
    assert page.select_one("#items > #cut") is not None


def test_claude_models_get_cache_marks_and_the_meter_shows_cached_tokens(client, fake):
    chat = new_chat(client)
    fake.script([text("Cached."), usage(1500, 10, cached_tokens=1200)], "Plain.")
    ask(client, chat, "first", model="anthropic/claude-tiny")
    page = idle(client, chat)
    assert "1,200 read from the server’s cache" in page.select_one("#status .cached").text
    marked = fake.streamed[0]["messages"]
    assert marked[0]["role"] == "system" and marked[0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marked[-1]["content"] == [{"type": "text", "text": "first", "cache_control": {"type": "ephemeral"}}]
    ask(client, chat, "second", model="tiny")
    idle(client, chat)
    assert "cache_control" not in json.dumps(fake.streamed[1]), "other servers get plain messages"


def test_the_feed_moves_the_marker_when_the_view_moves(store):
    chat = store.new_conversation(None).id
    users = [store.ask(chat, f"q{n}").id for n in range(3)]
    feed = Feed(database_of(store), render=live.chat_changes)
    follower = feed.follow(chat)
    follower.fresh = False
    store.set_context(chat, used=100, window=1000, start=users[1], turns_out=1, left_out=50)
    feed.dispatch()
    message = follower.messages.popleft()[1].decode()
    html = "".join(v for line in message.splitlines() if (v := sse_value(line, "data")) is not None)
    page = BeautifulSoup(html, "html.parser")
    assert page.select_one('div#cut[hx-swap-oob="delete"]') is not None, "removed where it was ..."
    placed = page.select_one('hx-partial[hx-target="#items"] #cut')
    assert placed["data-key"] == f"{users[1]:010d}-{0:010d}", "... and put before the first turn sent"
    store.set_context(chat, used=120)  # the view did not move: no marker in the message
    feed.dispatch()
    message = follower.messages.popleft()[1].decode()
    assert 'id="cut"' not in message
    feed.db.conn.close()


@pytest.mark.parametrize("raw", ["1", "1.5", "0", "-0.2", "most"])
def test_a_share_outside_zero_to_one_stops_the_app_with_a_clear_message(monkeypatch, raw):
    from app import config as configuration

    monkeypatch.setenv("TABLETALK_CONTEXT_SHARE", raw)
    with pytest.raises(SystemExit, match="TABLETALK_CONTEXT_SHARE"):
        configuration.load()
