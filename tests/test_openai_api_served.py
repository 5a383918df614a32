"""The API against a real `tabletalk serve`, with real clients (docs/api.md): the `openai`
library streamed and not, an agent that uses a tool and its memory, a call approved on the
web page while its stream waits, the `llm` command (its own venv, `make llm`), every example
of docs/api.md run as written, and a stream cut by a kill -9 of the server taken up again
with curl and `Last-Event-ID`."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from app.accounts.api_keys import ApiKeys
from app.tables import Person
from app.web.completions import Completion
from tests.conftest import ROOT, Served, csrf, wait_for
from tests.fakes.openai_server import rate, text, tool_call

pytestmark = pytest.mark.process

LLM = ROOT / ".cache" / "llm" / "bin" / "llm"
DOC = (ROOT / "docs" / "api.md").read_text()


def key_of(served: Served) -> str:
    with served.store() as store:
        owner = store.owner()
        token, _ = ApiKeys(store).make(Person("owner", owner=True, id=owner), "tests")
    return token


@pytest.fixture
def api(served) -> tuple[Served, str]:
    return served, key_of(served)


def sdk(served: Served, key: str) -> OpenAI:
    return OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_the_openai_library_talks_to_an_agent_that_uses_a_tool_and_its_memory(api, fake):
    served, key = api
    fake.script([text("I will keep that."), tool_call("remember", {"text": "The person likes green tea."})],
                [text("Noted.")], [text("You like green tea.")])
    client = sdk(served, key)
    assert [m.id for m in client.models.list()] == ["agent-1"]
    raw = client.chat.completions.with_raw_response.create(
        model="agent-1", messages=[{"role": "user", "content": "I like green tea."}])
    chat = raw.headers["Tabletalk-Conversation"]
    reply = raw.parse()
    assert reply.choices[0].message.content == "I will keep that.\n\nNoted."
    assert [e["type"] for e in reply.model_extra["tabletalk"]["events"]] == ["tool_call", "tool_result"]
    chunks = list(client.chat.completions.create(
        model="agent-1", stream=True, stream_options={"include_usage": True},
        extra_headers={"Tabletalk-Conversation": chat},
        messages=[{"role": "user", "content": "What do I like?"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "You like green tea."
    assert chunks[-1].usage.total_tokens > 0 and chunks[-2].choices[0].finish_reason == "stop"
    asked = messages_of(fake, "What do I like?")
    assert "likes green tea" in asked[0]["content"], "what it remembered, in its prompt"
    assert asked[1] == {"role": "user", "content": "I like green tea."}, "the same conversation"


def test_a_call_approved_on_the_web_page_lets_its_stream_finish(api, fake):
    served, key = api
    with served.store() as store:
        agent = store.default_agent(store.owner())
        store.update_agent(agent.id, approve="remember")
    fake.script([tool_call("remember", {"text": "Approved memory."})], [text("Remembered, with your leave.")])
    page = served.client()

    def approve() -> None:
        with served.store() as store:
            call = wait_for(lambda: next((it for it in store.items(1) if it.kind == "call"
                                          and it.state == "approval"), None), timeout=30)
        r = page.post(f"/c/{call.chat}/calls/{call.id}", data={"_csrf_token": csrf(page, f"/c/{call.chat}"),
                                                               "decision": "approve"})
        assert r.status_code in (200, 303), r.text

    approving = threading.Thread(target=approve)
    approving.start()
    stream = sdk(served, key).chat.completions.create(
        model="agent-1", stream=True, messages=[{"role": "user", "content": "Remember this, if I agree."}])
    events, content = [], ""
    for chunk in stream:
        if chunk.model_extra and "tabletalk" in chunk.model_extra:
            events.append(chunk.model_extra["tabletalk"])
        elif chunk.choices:
            content += chunk.choices[0].delta.content or ""
    approving.join(30)
    assert [e["type"] for e in events] == ["tool_call", "approval", "tool_result"]
    assert events[1]["message"].startswith(f"Waiting for approval on the web page: {served.url}/c/1")
    assert events[2]["state"] == "done" and content == "Remembered, with your leave."


def test_a_client_that_drops_leaves_the_run_going_and_its_answer_in_the_conversation(api, fake):
    served, key = api
    answer = " ".join(f"word{i}" for i in range(60))
    fake.script([rate(40), text(answer)])
    with httpx.stream("POST", served.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": "agent-1", "stream": True,
                            "messages": [{"role": "user", "content": "Say the words"}]}, timeout=30) as r:
        chat = int(r.headers["tabletalk-conversation"])
        next(line for line in r.iter_lines() if '"content":"word' in line)
    # the client is gone after its first words; the answer goes on without it
    with served.store() as store:
        wait_for(lambda: [(it.text, it.done) for it in store.items(chat) if it.kind == "text"] == [(answer, True)],
                 timeout=60)
    again = httpx.get(f"{served.url}/v1/conversations/{chat}/stream", headers={"Authorization": f"Bearer {key}"},
                      timeout=30)
    assert Completion_of(sse_payloads(again.text)).content == answer, "come back later: the whole answer"


def test_a_stream_cut_by_a_kill_9_is_taken_up_again_with_curl(data, env, fake):
    answer = " ".join(f"word{i}" for i in range(80))
    fake.script([rate(40), text(answer)], [rate(200), text(answer)])
    first = Served(data, env).start()
    key = key_of(first)
    seen, place = [], None
    with httpx.stream("POST", first.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": "agent-1", "stream": True,
                            "messages": [{"role": "user", "content": "Say the words"}]}, timeout=30) as r:
        chat = r.headers["tabletalk-conversation"]
        for line in r.iter_lines():
            if line.startswith("id: "):
                place = line[4:]
            elif line.startswith("data: "):
                seen.append(json.loads(line[6:]))
            if len(Completion_of(seen).content) > 40:
                break
        first.signal(signal.SIGKILL)
    first.proc.wait(5)
    second = Served(data, env)
    second.port, second.url = first.port, first.url  # the same address the client knew
    second.start()
    try:
        rest = subprocess.run(["curl", "-sN", "--max-time", "60", f"{second.url}/v1/conversations/{chat}/stream",
                               "-H", f"Authorization: Bearer {key}", "-H", f"Last-Event-ID: {place}"],
                              capture_output=True, text=True, timeout=90)
        assert rest.stdout.rstrip().endswith("data: [DONE]"), rest.stdout[-500:]
        assert Completion_of(seen + sse_payloads(rest.stdout)).content == answer, \
            "what the client had, then the rest, is the answer"
        with second.store() as store:
            assert [it.text for it in store.items(int(chat)) if it.kind == "text"] == [answer]
    finally:
        second.stop()


def sse_payloads(stream: str, upto_id: int | None = None) -> list[dict]:
    """A stream's JSON payloads, all or up to the one of its `upto_id`th id line (a client
    that dropped there)."""
    out, ids = [], 0
    for block in stream.split("\n\n"):
        lines = block.splitlines()
        data = "".join(line[6:] for line in lines if line.startswith("data: "))
        if data and data != "[DONE]":
            out.append(json.loads(data))
        ids += any(line.startswith("id: ") for line in lines)
        if upto_id is not None and ids == upto_id:
            break
    return out


def Completion_of(payloads: list[dict]) -> Completion:  # noqa: N802  (a client applying the extension)
    whole = Completion()
    for p in payloads:
        whole.take(p)
    return whole


# --- docs/api.md, as written ------------------------------------------------------------------


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.S)


@pytest.fixture
def llm_home(tmp_path) -> dict[str, str]:
    if not LLM.exists():
        pytest.fail("the llm command is missing: `make llm` installs it into .cache/llm")
    home = tmp_path / "llm"
    home.mkdir()
    return {"LLM_USER_PATH": str(home), "PATH": f"{LLM.parent}{os.pathsep}{os.environ['PATH']}"}


def messages_of(fake, asked: str) -> list[dict]:
    """The messages of the model request that answered `asked` (not a title's request)."""
    return next(r["messages"] for r in reversed(fake.requests) if {"role": "user", "content": asked} in r["messages"])


def run_block(code: str, env: dict[str, str], cwd: Path, python: bool = False) -> str:
    command = [sys.executable, "-c", code] if python else ["bash", "-euo", "pipefail", "-c", code]
    done = subprocess.run(command, env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{code}\n--- out\n{done.stdout}\n--- err\n{done.stderr}"
    return done.stdout


def test_every_example_of_the_api_doc_runs_as_written(api, fake, llm_home, tmp_path):
    served, key = api
    env = {"TABLETALK_URL": served.url, "TABLETALK_KEY": key, **llm_home}
    shell, python = blocks("sh"), blocks("python")
    assert len(shell) == 3 and len(python) == 2, "the examples this test knows"

    # each client talks to an agent that uses a tool (remember) and then its memory
    fake.script([tool_call("remember", {"text": "The person counts in English."})], [text("Hello.")])
    out = run_block(shell[0], env, tmp_path)
    assert '"id":"agent-1"' in out and '"content":"Hello."' in out and '"type":"tool_result"' in out
    fake.script([rate(50), text("One, two, three, four, five.")])
    out = run_block(shell[1], env, tmp_path)
    assert "counts in English" in messages_of(fake, "Count to five.")[0]["content"], "curl's memory, in a new one"
    assert out.rstrip().endswith("data: [DONE]")
    # (where the third place falls depends on how the rows grew: the two halves make the answer)
    had = sse_payloads((tmp_path / "stream.txt").read_text(), upto_id=3)
    assert Completion_of(had + sse_payloads(out)).content == "One, two, three, four, five."

    fake.script([tool_call("remember", {"text": "The person likes green tea."}), text("Kept.")], [text("Noted.")],
                [text("Green tea.")])
    out = run_block(python[0], env, tmp_path, python=True)
    assert "['agent-1']" in out and "[tool_call: remember]" not in out and "Green tea." in out and "tokens)" in out
    fake.script([tool_call("get_weather", {"city": "Oslo"})], [text("Yes: it rains in Oslo.")])
    out = run_block(python[1], env, tmp_path, python=True)
    assert out.strip() == "Yes: it rains in Oslo."
    *_, asked, told = fake.streamed[-1]["messages"]
    assert told == {"role": "tool", "content": "Oslo: rain, 12 C", "tool_call_id": asked["tool_calls"][0]["id"]}

    fake.script([tool_call("remember", {"text": "The person learns French and German."})], [text("Bonjour !")],
                [text("Hallo!")])
    out = run_block(shell[2], env, tmp_path)
    assert out.splitlines() == ["Bonjour !", "Hallo!"], "llm shows the answer's text, not the tool's events"
    assert "learns French and German" in messages_of(fake, "And in German?")[0]["content"], "llm's memory, next"
    with served.store() as store:
        made = [c for c in store.conversations(store.owner()) if c.origin == "api"]
    assert len(made) == 6, "every request a conversation of the API's"
