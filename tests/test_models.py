"""Models: ids and where they are answered, the grouped list, windows, thinking levels.

Every server here is real and on 127.0.0.1: a fake Ollama (tests/fakes/ollama_server.py),
and the OpenAI-compatible fake as the server at AI_URL, at LOCAL_AI_URL and as a hosted
account. A test asserts on which of them received a request and what it carried.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from collections.abc import Iterator

import pytest

from app.providers import catalog, ids, thinking
from app.agent import Message, ModelError
from app.config import load
from app.providers.client import Providers
from app.providers.ids import GROUP_LOCAL, GROUP_SERVER, Choice, choice_of, groups
from tests.conftest import app_client, csrf, free_port, new_chat, rows, soup, start_chat, wait_for, store_of
from tests.fakes.ollama_server import FakeOllama, OllamaModel, ollama_model
from tests.fakes.openai_server import FakeModelServer, text
from app import config as configuration

HI = [Message("user", "Hi")]
KEY = "sk-test-account-key"


# --- the seed's functions -----------------------------------------------------------------


def test_choice_of_splits_an_id_into_where_it_runs_and_its_name():
    accounts = ["openrouter", "openai"]
    assert choice_of("local:llama3:8b", accounts) == ("local", "llama3:8b")
    assert choice_of("openrouter:meta-llama/llama-3-8b", accounts) == ("openrouter", "meta-llama/llama-3-8b")
    assert choice_of("openai:gpt-4o", accounts) == ("openai", "gpt-4o")
    # A bare name is the server at AI_URL, colons and all (Ollama's tags behind AI_URL).
    assert choice_of("fake-model", accounts) == ("", "fake-model")
    assert choice_of("llama3:8b", accounts) == ("", "llama3:8b")
    assert choice_of("mistral:7b") == ("", "mistral:7b")  # not an account: a name
    assert choice_of("local:") == ("", "local:")


def test_groups_are_this_computer_then_accounts_by_name_then_the_model_server():
    mixed = [
        Choice("m1", "m1", GROUP_SERVER),
        Choice("zeta:x", "x", "zeta"),
        Choice("local:b", "b", GROUP_LOCAL),
        Choice("alpha:y", "y", "alpha"),
        Choice("m0", "m0", GROUP_SERVER),
        Choice("local:a", "a", GROUP_LOCAL),
        Choice("!account:Beta", "beta.example", "Beta", note="unreachable: could not connect", up=False),
    ]
    got = groups(mixed)
    assert [title for title, _ in got] == [GROUP_LOCAL, "alpha", "Beta", "zeta", GROUP_SERVER]
    # each group keeps its server's own order
    assert [c.id for c in got[0][1]] == ["local:b", "local:a"]
    assert [c.id for c in got[-1][1]] == ["m1", "m0"]
    assert groups([]) == []


# --- settings -----------------------------------------------------------------------------


def test_accounts_are_name_url_key_entries():
    got = configuration.accounts(" openrouter=https://openrouter.ai/api/v1/|sk-or-1 ;\nopenai=https://api.openai.com/v1|sk-2|gpt-4o, gpt-4o-mini;local-vllm=http://127.0.0.1:8000/v1")
    assert [(a.name, a.url, a.key, a.models) for a in got] == [
        ("openrouter", "https://openrouter.ai/api/v1", "sk-or-1", ()),
        ("openai", "https://api.openai.com/v1", "sk-2", ("gpt-4o", "gpt-4o-mini")),
        ("local-vllm", "http://127.0.0.1:8000/v1", "", ()),
    ]
    assert "sk-or-1" not in repr(got)  # a key never reaches a log line through repr
    assert configuration.accounts("") == ()


@pytest.mark.parametrize("bad, says", [
    ("https://openrouter.ai/api/v1|k", "must start with a name"),
    ("Open Router=https://x.example/v1", "must start with a name"),
    ("local=http://127.0.0.1:1/v1", "taken by models on this computer"),
    ("a=https://x.example/v1;a=https://y.example/v1", "named twice"),
    ("a=ftp://x.example|secret-key", "http(s) URL"),
])
def test_a_wrong_account_is_refused_at_start_without_showing_its_key(monkeypatch, bad, says):
    monkeypatch.setenv("AI_ACCOUNTS", bad)
    with pytest.raises(SystemExit) as e:
        load()
    assert says in str(e.value) and "secret-key" not in str(e.value)


def test_ollama_host_is_read_as_ollama_reads_it():
    assert catalog.ollama_base("http://127.0.0.1:11434") == "http://127.0.0.1:11434"
    assert catalog.ollama_base("127.0.0.1") == "http://127.0.0.1:11434"
    assert catalog.ollama_base("0.0.0.0:9999") == "http://127.0.0.1:9999"
    assert catalog.ollama_base("https://gpu.example/") == "https://gpu.example"
    assert catalog.ollama_base("[::1]:8080") == "http://[::1]:8080"


# --- windows from metadata ----------------------------------------------------------------


def test_ollama_window_is_num_ctx_when_set_else_the_models_context_length():
    assert catalog.ollama_window({"parameters": "num_ctx                        16384\nstop \"x\"",
                                 "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}}) == 16384
    assert catalog.ollama_window({"parameters": "stop \"x\"",
                                 "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}}) == 40960
    assert catalog.ollama_window({"model_info": {"gemma3.context_length": 131072}}) == 131072
    assert catalog.ollama_window({}) is None


def test_openai_style_windows_under_their_usual_names():
    assert catalog.window_in({"id": "a", "context_length": 200000}) == 200000
    assert catalog.window_in({"id": "a", "max_model_len": 32768}) == 32768
    assert catalog.window_in({"id": "a", "top_provider": {"context_length": 65536}}) == 65536
    assert catalog.window_in({"id": "a", "context_length": "lots"}) is None
    assert catalog.window_in({"id": "a"}) is None


# --- thinking levels ----------------------------------------------------------------------


@pytest.mark.parametrize("level, openai_style, ollama_thinks", [
    (None, {}, {}),
    ("off", {}, {"reasoning_effort": "none"}),
    ("minimal", {"reasoning_effort": "minimal"}, {"reasoning_effort": "low"}),
    ("low", {"reasoning_effort": "low"}, {"reasoning_effort": "low"}),
    ("medium", {"reasoning_effort": "medium"}, {"reasoning_effort": "medium"}),
    ("high", {"reasoning_effort": "high"}, {"reasoning_effort": "high"}),
    ("xhigh", {"reasoning_effort": "xhigh"}, {"reasoning_effort": "high"}),
])
def test_thinking_levels_as_each_server_takes_them(level, openai_style, ollama_thinks):
    assert thinking.thinking_fields("openai", level, None) == openai_style
    assert thinking.thinking_fields("ollama", level, True) == ollama_thinks
    # Ollama refuses any effort for a model that cannot think, and older ones say nothing
    assert thinking.thinking_fields("ollama", level, False) == {}
    assert thinking.thinking_fields("ollama", level, None) == {}


def test_an_unknown_thinking_level_is_a_bug():
    with pytest.raises(ValueError):
        thinking.thinking_fields("openai", "extreme", None)


# --- against real servers -----------------------------------------------------------------

OLLAMA_CATALOG = {
    "llama3:8b": ollama_model(context_length=8192),
    "qwen3:4b": ollama_model(context_length=40960, num_ctx=16384, thinking=True),
    "nomic-embed-text:latest": ollama_model(context_length=2048, embedding=True),
    "mystery:1b": ollama_model(show_fails=True),
}


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with FakeOllama(OLLAMA_CATALOG) as server:
        # side requests (naming a conversation) leave the script alone: one that came late took
        # the next conversation's answer (a fresh clone's make test beside a burner)
        server.plain_default = [text("A fitting title")]
        yield server


@pytest.fixture
def lmstudio() -> Iterator[FakeModelServer]:
    with FakeModelServer(models={"lm-model": 32768, "qwen3:4b": 4096}) as server:
        yield server


@pytest.fixture
def account() -> Iterator[FakeModelServer]:
    with FakeModelServer(models={"meta-llama/llama-3-8b": 131072, "openai/o4-mini": 200000}, require_key=KEY) as server:
        yield server


@pytest.fixture
def everything(monkeypatch, env, ollama, lmstudio, account) -> dict[str, str]:
    """Settings naming every kind of server, one account down (on top of `env`'s: the data
    folder, the fake, the engine)."""
    values = env | {
        "OLLAMA_HOST": ollama.address, "LOCAL_AI_URL": lmstudio.url,
        "AI_ACCOUNTS": f"openrouter={account.url}|{KEY};gone=http://127.0.0.1:{free_port()}/v1|sk-gone",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


async def collect(providers: Providers, model: str, thinking: str | None = None) -> str:
    out = []
    async for delta in providers.stream_fn(model, thinking=thinking)(HI, []):
        out.append(delta.text)
    return "".join(out)


@pytest.fixture
async def providers(everything) -> Providers:
    p = Providers(load())
    yield p
    await p.close()


async def test_the_list_groups_every_server_and_notes_the_one_that_is_down(providers):
    listed = await providers.choices()
    by_id = {c.id: c for c in listed}
    assert [title for title, _ in groups(listed)] == [GROUP_LOCAL, "gone", "openrouter", GROUP_SERVER]
    assert [c.id for c in listed] == [c.id for _, members in groups(listed) for c in members]
    # this computer: Ollama's chat models (not the embedder), then the other local server's
    local = [c.id for c in listed if c.group == GROUP_LOCAL]
    assert local == ["local:llama3:8b", "local:qwen3:4b", "local:mystery:1b", "local:lm-model"]
    # the down account is one row that says so, and nothing can pick it
    gone = [c for c in listed if c.group == "gone"]
    assert len(gone) == 1 and not gone[0].up and gone[0].note == "unreachable: could not connect"
    assert not any(c.id == gone[0].id and c.up for c in listed)  # listed, but not as a model that answers
    assert {c.id for c in listed if c.group == "openrouter"} == {"openrouter:meta-llama/llama-3-8b", "openrouter:openai/o4-mini"}
    assert {c.id for c in listed if c.group == GROUP_SERVER} == {"fake-model", "other-model"}
    assert all(c.up for c in listed if c.group != "gone")
    # windows from each server's metadata
    assert by_id["local:llama3:8b"].window == 8192            # model_info
    assert by_id["local:qwen3:4b"].window == 16384            # num_ctx wins
    assert by_id["local:mystery:1b"].window is None           # /api/show failed: listed, window unknown
    assert by_id["local:lm-model"].window == 32768
    assert by_id["openrouter:openai/o4-mini"].window == 200000
    assert by_id["other-model"].window == 4096
    assert "thinking" in by_id["local:qwen3:4b"].tags and "thinking" not in by_id["local:llama3:8b"].tags


async def test_each_id_is_answered_by_its_own_server(providers, fake, ollama, lmstudio, account):
    await providers.choices()
    fake.default = [text("from AI_URL")]
    ollama.default = [text("from Ollama")]
    lmstudio.default = [text("from LM Studio")]
    account.default = [text("from the account")]
    assert await collect(providers, "local:llama3:8b") == "from Ollama"
    assert await collect(providers, "local:lm-model") == "from LM Studio"
    assert await collect(providers, "openrouter:meta-llama/llama-3-8b") == "from the account"
    assert await collect(providers, "fake-model") == "from AI_URL"
    assert [r["model"] for r in ollama.streamed] == ["llama3:8b"]
    assert [r["model"] for r in lmstudio.streamed] == ["lm-model"]
    assert [r["model"] for r in account.streamed] == ["meta-llama/llama-3-8b"]
    assert account.request_headers[-1]["authorization"] == f"Bearer {KEY}"
    assert [r["model"] for r in fake.streamed] == ["fake-model"]
    # a name both local servers list is Ollama's
    assert await collect(providers, "local:qwen3:4b") == "from Ollama"
    assert len(lmstudio.streamed) == 1


async def test_a_local_name_not_listed_yet_is_looked_up_before_it_is_used(providers, ollama, lmstudio):
    lmstudio.default = [text("found it")]
    # No listing in this process yet (another worker refreshed the list): ask both servers first.
    assert await collect(providers, "local:lm-model") == "found it"
    assert ollama.streamed == [] and [r["model"] for r in lmstudio.streamed] == ["lm-model"]


async def test_the_down_account_fails_in_plain_words(providers):
    with pytest.raises(ModelError) as e:
        await collect(providers, "gone:some-model")
    assert "Could not reach the model server" in str(e.value)


async def test_a_refused_account_key_names_where_to_fix_it(everything, monkeypatch, account):
    monkeypatch.setenv("AI_ACCOUNTS", f"openrouter={account.url}|wrong-key")
    p = Providers(load())
    try:
        listed = await p.choices()
        row = next(c for c in listed if c.group == "openrouter")
        assert not row.up and row.note == "unreachable: the key was refused (401)"
        with pytest.raises(ModelError) as e:
            await collect(p, "openrouter:meta-llama/llama-3-8b")
        assert "AI_ACCOUNTS" in str(e.value) and "wrong-key" not in str(e.value)
    finally:
        await p.close()


async def test_thinking_levels_reach_the_server_as_it_takes_them(providers, fake, ollama, account):
    await providers.choices()
    await collect(providers, "local:qwen3:4b", thinking="xhigh")
    await collect(providers, "local:qwen3:4b", thinking="off")
    await collect(providers, "local:llama3:8b", thinking="high")  # cannot think: nothing sent
    await collect(providers, "local:qwen3:4b")
    assert [r.get("reasoning_effort") for r in ollama.streamed] == ["high", "none", None, None]
    await collect(providers, "openrouter:openai/o4-mini", thinking="minimal")
    await collect(providers, "openrouter:openai/o4-mini", thinking="off")
    await collect(providers, "fake-model", thinking="medium")
    assert [r.get("reasoning_effort") for r in account.streamed] == ["minimal", None]
    assert fake.streamed[-1]["reasoning_effort"] == "medium"
    with pytest.raises(ModelError) as e:
        await collect(providers, "fake-model", thinking="extreme")
    assert "not a thinking level" in str(e.value)


async def test_titles_ask_a_thinking_model_not_to_think(providers, ollama):
    await providers.choices()
    ollama.plain_default = [text("A title")]
    assert await providers.complete("local:qwen3:4b", HI) == "A title"
    assert ollama.requests[-1]["reasoning_effort"] == "none" and not ollama.requests[-1].get("stream")


async def test_ollama_at_the_default_address_is_not_news_when_it_is_not_running(monkeypatch, data):
    for k in ("AI_URL", "LOCAL_AI_URL", "AI_ACCOUNTS"):
        monkeypatch.setenv(k, "")
    monkeypatch.setenv("TABLETALK_DATA", str(data))
    dead = f"http://127.0.0.1:{free_port()}"
    # unset: a guess at where Ollama might be; not running means not listed, not configured
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    p = Providers(dataclasses.replace(load(), ollama_host=dead))
    try:
        assert await p.choices() == [] and not p.configured
    finally:
        await p.close()
    # set: the person expects it, so its being down is shown
    monkeypatch.setenv("OLLAMA_HOST", dead)
    p = Providers(load())
    try:
        [row] = await p.choices()
        assert (row.group, row.up, row.note) == (GROUP_LOCAL, False, "unreachable: could not connect")
        assert p.configured
    finally:
        await p.close()


async def test_an_ollama_found_at_the_default_address_counts_as_set_up(monkeypatch, data, ollama):
    for k in ("AI_URL", "LOCAL_AI_URL", "AI_ACCOUNTS"):
        monkeypatch.setenv(k, "")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    p = Providers(dataclasses.replace(load(), ollama_host=ollama.address))
    try:
        assert not p.configured
        assert [c.id for c in await p.choices()][:2] == ["local:llama3:8b", "local:qwen3:4b"]
        assert p.configured
    finally:
        await p.close()


async def test_only_the_models_an_account_names_are_offered(everything, monkeypatch, account):
    monkeypatch.setenv("AI_ACCOUNTS", f"openrouter={account.url}|{KEY}|openai/o4-mini")
    p = Providers(load())
    try:
        assert [(c.id, c.window) for c in await p.choices() if c.group == "openrouter"] == [
            ("openrouter:openai/o4-mini", 200000)]
    finally:
        await p.close()


def test_the_default_model_prefers_the_server_at_ai_url_then_this_computer():
    listed = [Choice("local:a", "a", GROUP_LOCAL), Choice("acct:b", "b", "acct"), Choice("!server", "x", GROUP_SERVER, up=False)]
    assert Providers.preferred(listed) == "local:a"
    assert Providers.preferred([*listed, Choice("m", "m", GROUP_SERVER)]) == "m"
    assert Providers.preferred([Choice("acct:b", "b", "acct")]) == "acct:b"
    assert Providers.preferred([]) == ""


# --- in the app ---------------------------------------------------------------------------


@pytest.fixture
def app(everything, tmp_path):
    with app_client(Path(os.environ["TABLETALK_DATA"])) as c:
        yield c


def test_the_pickers_are_grouped_and_show_the_down_account(app):
    chat = new_chat(app)
    page = soup(app.get(chat))
    picker = page.select_one("#composer select[name=model]")
    assert [g["label"] for g in picker.select("optgroup")] == [GROUP_LOCAL, "gone", "openrouter", GROUP_SERVER]
    down = picker.select_one('optgroup[label="gone"] option')
    assert down.has_attr("disabled") and "unreachable" in down.text
    offered = [o["value"] for o in picker.select("optgroup option:not([disabled])")]
    assert offered[:2] == ["local:llama3:8b", "local:qwen3:4b"] and "fake-model" in offered
    # Again's other model (the ▾ under an answer) is picked from the same groups
    store = store_of(app)
    asked = store.ask(int(chat.rsplit("/", 1)[1]), "Hello")
    again = soup(app.get(f"{chat}/answers/{asked.id}/again")).select_one("select[name=model]")
    assert [g["label"] for g in again.select("optgroup")] == [GROUP_LOCAL, "gone", "openrouter", GROUP_SERVER]
    agent = soup(app.get("/agents/1"))
    assert [g["label"] for g in agent.select("select[name=model] optgroup")] == [GROUP_LOCAL, "gone", "openrouter", GROUP_SERVER]


def test_a_message_to_a_local_model_is_answered_by_ollama_with_its_window(app, fake, ollama, data):
    ollama.script([text("Hello from Ollama.")])
    chat = new_chat(app)
    r = app.post(chat + "/ask", data={"_csrf_token": csrf(app, chat), "text": "Hi", "model": "local:qwen3:4b"})
    assert r.status_code in (200, 303)
    # the answer done, not only begun: its item may show while its words still come
    answer = wait_for(lambda: soup(app.get(chat)).select_one("article.text:has(.state.done)"))
    assert answer.get_text(strip=True) == "Hello from Ollama."
    assert [r["model"] for r in ollama.streamed] == ["qwen3:4b"] and fake.streamed == []
    assert rows(data, 'SELECT "window" FROM contexts WHERE id = ?', [int(chat.rsplit("/", 1)[1])])[0]["window"] == 16384


def test_a_down_providers_row_cannot_be_named(app):
    chat = new_chat(app)
    r = app.post(chat + "/ask", data={"_csrf_token": csrf(app, chat), "text": "Hi", "model": "!account:gone"})
    assert r.status_code == 400


def test_refresh_reads_every_list_again(app, ollama):
    assert "local:phi4:14b" not in [m["id"] for g in app.get("/models").json()["groups"] for m in g["models"]]
    ollama.catalog["phi4:14b"] = ollama_model(context_length=16384)
    r = app.post("/models/refresh", data={"_csrf_token": csrf(app), "next": "/agents"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/agents"
    listing = app.get("/models").json()["groups"]
    assert [g["title"] for g in listing] == [GROUP_LOCAL, "gone", "openrouter", GROUP_SERVER]
    local = next(g for g in listing if g["title"] == GROUP_LOCAL)
    assert {"id": "local:phi4:14b", "name": "phi4:14b", "window": 16384, "tags": ["tools", "no-images"]} in local["models"]
    gone = next(g for g in listing if g["title"] == "gone")
    assert gone["models"] == [] and "unreachable" in gone["notes"][0]
    # never back to another site
    r = app.post("/models/refresh", data={"_csrf_token": csrf(app), "next": "//evil.example/"}, follow_redirects=False)
    assert r.headers["location"] == "/"
    r = app.post("/models/refresh", data={"_csrf_token": csrf(app)}, headers={"HX-Request": "true"})
    assert r.status_code == 204 and r.headers["hx-redirect"] == "/"


def test_a_server_going_down_is_noted_at_the_next_refresh_and_the_others_stay(app, lmstudio):
    lmstudio.stop()
    app.post("/models/refresh", data={"_csrf_token": csrf(app)})
    listing = {g["title"]: g for g in app.get("/models").json()["groups"]}
    local = listing[GROUP_LOCAL]
    assert "local:lm-model" not in [m["id"] for m in local["models"]]
    assert "local:llama3:8b" in [m["id"] for m in local["models"]]
    assert any("unreachable" in n for n in local["notes"])
    assert [m["id"] for m in listing[GROUP_SERVER]["models"]] == ["fake-model", "other-model"]


def test_with_every_server_down_the_pages_still_load_and_say_so(make_client):
    dead = f"http://127.0.0.1:{free_port()}"
    with make_client(AI_URL=f"{dead}/v1", OLLAMA_HOST=dead, AI_ACCOUNTS=f"openrouter={dead}/v1|k") as client:
        chat = new_chat(client)
        page = soup(client.get(chat))
        picker = page.select_one("#composer select[name=model]")
        assert [g["label"] for g in picker.select("optgroup")] == [GROUP_LOCAL, "openrouter", GROUP_SERVER]
        assert all(o.has_attr("disabled") and "unreachable" in o.text for o in picker.select("optgroup option"))
        assert client.get("/agents/1").status_code == 200
        client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": "Anyone?"})
        err = wait_for(lambda: soup(client.get(chat)).select_one("article.error .error"))
        assert "No model is available" in err.text


def test_a_thinking_level_per_agent_and_per_message_reaches_the_request(client, fake):
    from tests.conftest import csrf
    token = csrf(client)
    agent = client.get("/agents").text.split('href="/agents/')[1].split('"')[0]
    r = client.post(f"/agents/{agent}", data={"_csrf_token": token, "name": "Assistant", "instructions": "x",
                                              "model": "", "thinking": "low"})
    assert r.status_code in (200, 303)
    chat = start_chat(client, "one", token=token)
    assert fake.wait_requests(1)[0].get("reasoning_effort") == "low"
    client.post(chat + "/ask", data={"_csrf_token": token, "text": "two", "thinking": "high"})
    streamed = lambda: [r for r in fake.requests if r.get("stream")]
    from tests.conftest import wait_for
    wait_for(lambda: len(streamed()) >= 2)
    assert streamed()[1]["reasoning_effort"] == "high"
    bad = client.post(chat + "/ask", data={"_csrf_token": token, "text": "x", "thinking": "maximum"})
    assert bad.status_code == 400 and "thinking level" in bad.text


def test_images_reach_only_models_whose_list_does_not_say_they_read_none(app, ollama):
    """Ollama says what each model can do: one without "vision" is told the image's name
    only; one with it gets the image. A server that says nothing gets images (test_files)."""
    import base64
    import struct
    import zlib

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    dot = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))
    ollama.catalog["llava:7b"] = OllamaModel(capabilities=("completion", "vision"))
    app.post("/models/refresh", data={"_csrf_token": csrf(app), "next": "/"})
    for model in ("local:qwen3:4b", "local:llava:7b"):
        ollama.script([text("seen")])
        chat = new_chat(app)
        app.post(chat + "/ask", data={"_csrf_token": csrf(app, chat), "text": "What is this?", "model": model},
                 files={"file": ("dot.png", dot, "image/png")})
        wait_for(lambda: soup(app.get(chat)).select_one("article.text .state.done"))
    blind, seeing = ollama.streamed[-2]["messages"][-1]["content"], ollama.streamed[-1]["messages"][-1]["content"]
    assert isinstance(blind, str) and "[Attached image: dot.png; this model does not read images" in blind
    parts = [p for p in seeing if p["type"] == "image_url"]
    assert base64.b64decode(parts[0]["image_url"]["url"].split(",", 1)[1]) == dot


@pytest.mark.parametrize("entry,tags", [
    ({}, ()),
    ({"supported_parameters": ["tools", "reasoning"]}, ("thinking", "tools")),
    ({"architecture": {"input_modalities": ["text", "image"]}}, ("vision",)),
    ({"architecture": {"input_modalities": ["text"]}}, ("no-images",)),
    ({"architecture": {"input_modalities": "text"}}, ()),  # not a list: says nothing
    ({"supported_parameters": "tools", "architecture": None}, ()),
])
def test_what_an_openai_style_list_says_a_model_can_do(entry, tags):
    from app.providers.catalog import tags_in

    assert tags_in(entry) == tags
