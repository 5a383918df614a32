"""Model servers that say little and fail oddly, against the scripted fake serving the exact
shapes of llama.cpp's server, llama-cpp-python and LM Studio: the window each says or an error
teaches, capabilities learned from failure, one request at a time, answers ended early, no
usage in the stream. The same cases against the real llama-cpp-python server are in
test_llama_server.py."""
from __future__ import annotations

import asyncio
import base64
import time

import httpx2
import pytest

from app import api
from app.providers import limits, servers
from app.providers.catalog import openai_catalog
from app.providers.errors import ENDED_EARLY
from app.providers.ids import GROUP_SERVER
from tests.conftest import serve_in_loop
from tests.fakes.openai_server import FakeModelServer, delay, empty, error, finish, text

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
OVERFLOW = ("This model's maximum context length is 2048 tokens. However, you requested 2600 tokens "
            "(2599 in the messages, 1 in the completion). Please reduce the length of the messages or completion.")
LONG = "Summarise this: " + "the quick brown fox jumps over the lazy dog " * 120  # ~1,350 raw tokens


@pytest.fixture
def server():
    with FakeModelServer(models={"m": 0}, kind="llama-cpp-python") as s:
        s.plain_default = [text("Otters at play")]  # titles
        yield s


@pytest.fixture
def opened(server, tmp_path, monkeypatch):
    monkeypatch.setenv("AI_URL", server.url)
    monkeypatch.setenv("AI_MODEL", "m")
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:1")
    monkeypatch.setenv("TABLETALK_DATA", str(tmp_path / "data"))
    store = api.open(tmp_path / "data")
    yield store
    store.db.conn.close()


def answer(store, *chats, timeout=30.0):
    """Serve until every message in `chats` is answered."""
    began = time.monotonic()

    def done():
        assert time.monotonic() - began < timeout, "answered in time"
        return all(it.done for c in chats for it in store.items(c) if it.kind == "user")

    asyncio.run(serve_in_loop(until=done))


def kinds(store, chat):
    return [(it.kind, it.state) for it in store.items(chat)]


def test_an_overflow_teaches_the_window_the_earlier_turns_are_left_out_and_the_request_is_made_again(server, opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    server.script("First answer.")
    opened.add(api.asked(LONG, chat))
    answer(opened, chat)
    server.script([error(400, OVERFLOW, code="context_length_exceeded")], "Second answer.")
    opened.add(api.asked(LONG, chat))
    answer(opened, chat)
    assert opened.limits("m").window == 2048
    first, refused, again = server.streamed
    assert len(refused["messages"]) > len(again["messages"]), "the first turn was left out of the try again"
    assert [it.text for it in opened.items(chat) if it.kind == "text"] == ["First answer.", "Second answer."]
    notices = [it for it in opened.items(chat) if it.kind == "error"]
    assert len(notices) == 1 and notices[0].state == "" and "2,048 tokens" in notices[0].text
    assert opened.context(chat)["turns_out"] == 1
    # the next message is built to fit from the start: no failure, no second notice
    server.script("Third answer.")
    opened.add(api.asked("And now?", chat))
    answer(opened, chat)
    assert kinds(opened, chat)[-1] == ("text", "")
    assert sum(1 for k, _ in kinds(opened, chat) if k == "error") == 1
    assert server.streamed[-1]["max_tokens"] <= 2048 - 256, "max_tokens leaves the request its room"


def test_an_empty_stream_is_asked_why_and_a_message_that_cannot_fit_says_so(server, opened):
    """llama-cpp-python answers 200 and nothing at all; the same request not streamed says why:
    its window, and its own count of the request, which teaches the estimate (so the message
    is known to be too long before anything more is sent)."""
    server.plain_default = lambda body: [error(400, OVERFLOW)] if body.get("max_tokens") == 1 else [text("Title")]
    chat = opened.new_conversation(opened.default_agent().id).id
    server.script([empty()], [empty()])
    opened.add(api.asked(LONG * 2, chat))
    answer(opened, chat)
    assert opened.limits("m").window == 2048
    errors = [it for it in opened.items(chat) if it.kind == "error"]
    assert [e.state for e in errors] == ["failed"], "one error: the notice gave way to it"
    assert "too long for the model’s context window" in errors[0].text and "2,048" in errors[0].text
    assert "cut" not in errors[0].text
    assert len(server.streamed) == 1, "nothing more was sent"


def test_an_image_a_text_only_server_fails_on_is_sent_by_name_and_the_model_marked(server, opened):
    server.plain_default = lambda body: ([error(500, 'can only concatenate str (not "list") to str')]
                                         if body.get("max_tokens") == 1 else [text("Title")])
    chat = opened.new_conversation(opened.default_agent().id).id
    picture = opened.add_file("dot.png", PNG)
    server.script([empty()], "A picture I cannot see.")
    opened.add(api.asked("What is in this picture?", chat, files=[picture]))
    answer(opened, chat)
    refused, again = server.streamed
    assert any(isinstance(m["content"], list) for m in refused["messages"])
    said = again["messages"][-1]["content"]
    assert isinstance(said, str) and "dot.png" in said and "does not read images" in said
    assert opened.limits("m").images is False
    assert kinds(opened, chat)[1:] == [("error", ""), ("text", "")], "said once, then answered"
    # later images go by name from the start, with no notice
    server.script("Still cannot see it.")
    opened.add(api.asked("And this one?", chat, files=[picture]))
    answer(opened, chat)
    assert all(isinstance(m["content"], str) for m in server.streamed[-1]["messages"])
    assert sum(1 for k, _ in kinds(opened, chat) if k == "error") == 1


def test_tools_a_server_refuses_are_left_out_from_then_on(server, opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    server.script([error(400, "This model does not support tools")], "Fine without them.")
    opened.add(api.asked("Hello", chat))
    answer(opened, chat)
    refused, again = server.streamed
    assert "tools" in refused and "tools" not in again
    assert opened.limits("m").tools is False
    assert kinds(opened, chat)[-1] == ("text", "")


def test_an_answer_ended_with_no_finish_reason_is_made_again_once_when_nothing_was_written(server, opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    server.script([finish(None)], "The whole answer.")
    opened.add(api.asked("Hello", chat))
    answer(opened, chat)
    assert len(server.streamed) == 2
    assert kinds(opened, chat) == [("user", ""), ("text", "")]


def test_an_answer_cut_after_it_began_says_the_server_ended_it_early(server, opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    server.script([text("Half an"), finish(None)])
    opened.add(api.asked("Hello", chat))
    answer(opened, chat)
    assert len(server.streamed) == 1, "what was written is not asked for again"
    last = opened.items(chat)[-1]
    assert (last.kind, last.state, last.text) == ("error", "failed", ENDED_EARLY)
    assert [it.text for it in opened.items(chat) if it.kind == "text"] == ["Half an"]


def test_a_server_that_answers_one_at_a_time_is_sent_one_request_at_a_time(server, opened):
    """Two conversations at once and a queued message: no request meets another at the
    server (llama-cpp-python would end the running one), titles wait for the answers."""
    one = opened.new_conversation(opened.default_agent().id).id
    two = opened.new_conversation(opened.default_agent().id).id
    server.default = [text("A slow"), delay(0.3), text(" answer.")]
    opened.add(api.asked("First", one))
    opened.add(api.asked("Queued", one))
    opened.add(api.asked("Other", two))
    answer(opened, one, two)
    assert server.most_active == 1
    assert len(server.streamed) == 3
    for chat in (one, two):
        assert [k for k, _ in kinds(opened, chat) if k == "text"], "answered"
        assert all(s != "failed" for _, s in kinds(opened, chat))
    waited = [it.text for c in (one, two) for it in opened.items(c) if it.kind == "error"]
    assert any("one request at a time" in w for w in waited)


def test_no_usage_in_the_stream_the_server_tokenizer_counts_and_the_meter_says_estimated(server, opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    server.script("Three words here.")
    opened.add(api.asked("Count me", chat))
    answer(opened, chat)
    context = opened.context(chat)
    assert context["used"] > 0 and context["estimated"] == 1
    assert "/extras/tokenize/count" in server.probes
    assert opened.calibration("m")[1] == 1, "the count taught the calibration"


def test_with_no_tokenizer_and_no_usage_the_meter_shows_the_estimate(opened, monkeypatch, tmp_path):
    with FakeModelServer(models={"m": 4096}) as plain:
        plain.sends_usage = False
        plain.plain_default = [text("Title")]
        monkeypatch.setenv("AI_URL", plain.url)
        chat = opened.new_conversation(opened.default_agent().id).id
        opened.add(api.asked("Hello", chat))
        answer(opened, chat)
    context = opened.context(chat)
    assert context["used"] > 0 and context["estimated"] == 1 and context["window"] == 4096
    assert opened.calibration("m")[1] == 0, "nothing was learned from a guess"


@pytest.mark.parametrize("kind, window, slots, tokenize", [
    ("llama.cpp", 2048, 2, "/tokenize"),
    ("llama-cpp-python", None, 1, "/extras/tokenize/count"),
    ("lmstudio", 2048, 0, ""),
])
async def test_each_kind_of_server_says_its_window_and_slots_where_it_can(kind, window, slots, tokenize):
    with FakeModelServer(models={"m": 2048}, kind=kind, slots=2) as fake:
        said: dict[str, servers.Server] = {}
        async with httpx2.AsyncClient() as http:
            listed = await openai_catalog(http, fake.url, "", GROUP_SERVER, servers=said)
    assert said[fake.url].kind == kind
    assert [c.window for c in listed] == [window]
    assert said[fake.url].slots == slots
    assert said[fake.url].tokenize.endswith(tokenize) if tokenize else not said[fake.url].tokenize


def test_a_llama_cpp_server_whose_template_renders_no_tools_is_sent_none_and_they_are_not_counted(tmp_path, monkeypatch):
    """llama.cpp's server leaves tools out of the prompt of a model whose chat template has none
    (SmolLM2's, measured: as many prompt tokens with 600 tokens of tools as without), and says
    so at /props: such a turn offers no tools, so neither the window nor the usage counts them."""
    with FakeModelServer(models={"m": 8192}, kind="llama.cpp") as fake:
        fake.plain_default = [text("Otters at play")]
        monkeypatch.setenv("AI_URL", fake.url)
        monkeypatch.setenv("AI_MODEL", "m")
        monkeypatch.setenv("OLLAMA_HOST", "")
        monkeypatch.setenv("TABLETALK_DATA", str(tmp_path / "data"))
        store = api.open(tmp_path / "data")
        try:
            chat = store.new_conversation(store.default_agent().id).id
            store.add(api.asked("Hello", chat))
            answer(store, chat)
            assert fake.streamed[-1].get("tools"), "a template that renders tools is sent them"
            fake.template_tools = False
            store.add(api.asked("Hello again", chat))
            answer(store, chat)
        finally:
            store.db.conn.close()
    assert "tools" not in fake.streamed[-1]


def test_the_words_of_an_overflow_name_the_window():
    assert limits.overflow(OVERFLOW) == 2048
    assert limits.prompt_tokens(OVERFLOW) == 2599
    assert limits.overflow("Requested tokens (2746) exceed context window of 2048") == 2048
    assert limits.prompt_tokens("Requested tokens (2746) exceed context window of 2048") == 2746
    llama = "request (4476 tokens) exceeds the available context size (4096 tokens) (n_prompt_tokens: 4476, n_ctx: 4096)"
    assert limits.overflow(llama) == 4096 and limits.prompt_tokens(llama) == 4476
    assert limits.overflow("the request exceeds the available context size, try increasing it (n_ctx: 8192)") == 8192
    lmstudio = ("Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded "
                "with context length of only 4096 tokens, which is not enough.")
    assert limits.overflow(lmstudio) == 4096
    assert limits.overflow("prompt is too long") is True
    assert limits.overflow("Incorrect API key provided.") is False
    assert limits.refused("This model does not support tools", 400, images=False, tools=True, reasoning=False) == "tools"
    assert limits.refused("Unrecognized request argument: reasoning_effort", 400,
                          images=False, tools=True, reasoning=True) == "reasoning"
    assert limits.refused("boom", 500, images=True, tools=True, reasoning=True) == "images"
    assert limits.refused("boom", 500, images=False, tools=True, reasoning=True) == ""


@pytest.mark.parametrize("suggested, title", [
    ("## Otters at play.", "Otters at play"),
    ("Otters sleep holding hands so that they do not drift apart while they rest on the water", "Why do otters hold hands?"),
    ("SECTION 1", "Why do otters hold hands?"),
])
def test_a_small_model_title_is_six_words_at_most_or_the_first_words_stay(server, opened, suggested, title):
    server.plain_default = [text(suggested)]
    chat = opened.new_conversation(opened.default_agent().id).id
    server.script("Otters hold hands while they sleep.")
    opened.add(api.asked("Why do otters hold hands?", chat))
    began, settled = time.monotonic(), []

    def named():
        assert time.monotonic() - began < 30, "named in time"
        asked = [r for r in server.requests if not r.get("stream")]
        if asked and server.active == 0:
            settled.append(time.monotonic())  # the title's answer was sent: give it time to be written
        return settled and time.monotonic() - settled[0] > 1.0 and opened.conversation(chat).title == title

    asyncio.run(serve_in_loop(until=named))
    asked = [r for r in server.requests if not r.get("stream")]
    assert len(asked) == 1 and server.most_active == 1, "the title was asked after the answer, alone"


async def test_ollama_says_the_window_a_loaded_model_runs_with():
    """/api/ps: what Ollama runs a model with (its default when no num_ctx is set), not the
    model's own length."""
    from app.providers.catalog import ollama_catalog
    from tests.fakes.ollama_server import FakeOllama, ollama_model

    models = {"loaded:1b": ollama_model(131072, loaded=4096), "idle:1b": ollama_model(131072, num_ctx=16384)}
    with FakeOllama(models) as ollama:
        async with httpx2.AsyncClient() as http:
            listed = {c.name: c.window for c in await ollama_catalog(http, ollama.address)}
    assert listed == {"loaded:1b": 4096, "idle:1b": 16384}


def test_a_model_listed_by_its_file_path_is_named_by_the_file_and_still_answered(tmp_path, monkeypatch):
    path = "/opt/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    with FakeModelServer(models={path: 0}, kind="llama-cpp-python") as s:
        s.plain_default = [text("Title")]
        monkeypatch.setenv("LOCAL_AI_URL", s.url)
        monkeypatch.setenv("AI_URL", "")
        monkeypatch.setenv("AI_MODEL", "")
        monkeypatch.delenv("OLLAMA_HOST", raising=False)
        monkeypatch.setenv("TABLETALK_DATA", str(tmp_path / "data"))
        store = api.open(tmp_path / "data")
        chat = store.new_conversation(store.default_agent().id).id
        store.add(api.asked("Hello", chat))
        answer(store, chat)
        assert [(c.id, c.name) for c in store.choices()] == [(f"local:{path}", "SmolLM2-135M-Instruct.Q4_1")]
        assert s.streamed[0]["model"] == path and kinds(store, chat)[-1] == ("text", "")
        store.db.conn.close()
