"""Tests for the fake OpenAI server, driven by the real `openai` client and raw httpx.

The fake is only useful if the real client cannot tell it from a provider, so
every protocol feature is checked through `openai` 3.x itself; raw httpx is
used where we need to see bytes the client would hide (drop, stall, malformed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.openai_server import (
    FakeModelServer,
    delay,
    drop,
    error,
    finish,
    malformed,
    rate,
    reasoning,
    stall,
    text,
    tool_call,
    usage,
)

pytestmark = pytest.mark.timeout(20)

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server():
    with FakeModelServer(models={"fake-model": 8192, "big-model": 131072}) as s:
        yield s
    # Anything a callable turn or the server itself raised is a test failure.
    assert s.errors == []


@pytest.fixture(scope="module")
def base_client():
    # Building an OpenAI client costs ~40 ms (it loads the CA bundle), so the
    # tests share one and re-point copies of it with with_options().
    with openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0, timeout=5) as c:
        yield c


@pytest.fixture
def client(base_client, server):
    return base_client.with_options(base_url=server.url)


def stream(client, **kw):
    kw.setdefault("model", "fake-model")
    kw.setdefault("messages", MSGS)
    return list(client.chat.completions.create(stream=True, **kw))


def content(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.fixture(scope="module")
def http():
    # One client for the whole module: each new one loads the CA bundle (~80 ms).
    with httpx.Client(timeout=5) as c:
        yield c


def sse_lines(http, server, body: dict | None = None, timeout=5) -> list[str]:
    """Raw `data:` payloads of one streamed request."""
    body = {"model": "fake-model", "messages": MSGS, "stream": True, **(body or {})}
    with http.stream("POST", server.url + "/chat/completions", json=body, timeout=timeout) as r:
        return [line[6:] for line in r.iter_lines() if line.startswith("data: ")]


# ---- streaming ---------------------------------------------------------------


def test_text_streams_word_by_word_like_openai(server, client):
    server.script([text("Hello there,  big world")])
    chunks = stream(client)

    first = chunks[0]
    assert first.object == "chat.completion.chunk"
    assert first.model == "fake-model" and first.id.startswith("chatcmpl-")
    assert first.choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks[1:-1]]
    assert pieces == ["Hello ", "there,  ", "big ", "world"]
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1
    assert server.requests[0]["messages"] == MSGS


def test_text_fixed_size_chunks(server, client):
    server.script([text("abcdefg", chunk=3)])
    chunks = stream(client)
    assert [c.choices[0].delta.content for c in chunks[1:-1]] == ["abc", "def", "g"]


def test_default_turn_and_fifo_order(server, client):
    server.script("one", "two")
    server.default = [text("fallback")]
    assert [content(stream(client)) for _ in range(3)] == ["one", "two", "fallback"]
    assert server.pending == 0


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_fields(server, client, field):
    server.script([reasoning("Let me think.", field=field), text("Answer")])
    chunks = stream(client)
    # The typed ChoiceDelta has no reasoning attribute; pydantic keeps the
    # unknown field in model_extra and getattr still reaches it.
    thought = "".join(getattr(c.choices[0].delta, field, None) or "" for c in chunks if c.choices)
    assert thought == "Let me think."
    assert any(field in (c.choices[0].delta.model_extra or {}) for c in chunks if c.choices)
    assert content(chunks) == "Answer"


def test_tool_calls_assemble(server, client):
    server.script([text("Looking."), tool_call("search", {"q": "cats", "n": 3}, id="call_1"), tool_call("clock", "{}")])
    chunks = stream(client)

    calls: dict[int, dict] = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                assert slot["id"] is None, "only the first delta of a call carries its id"
                slot["id"] = tc.id
                assert tc.type == "function" and tc.function.name
            slot["name"] += (tc.function.name or "") if tc.function else ""
            slot["arguments"] += (tc.function.arguments or "") if tc.function else ""

    assert calls[0] == {"id": "call_1", "name": "search", "arguments": json.dumps({"q": "cats", "n": 3})}
    assert calls[1]["name"] == "clock" and calls[1]["arguments"] == "{}" and calls[1]["id"].startswith("call_")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    search_deltas = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls and c.choices[0].delta.tool_calls[0].index == 0]
    assert len(search_deltas) == 3  # pieces=3


def test_usage_chunk(server, client):
    server.script([usage(120, 7, cached_tokens=100), text("hi")])
    chunks = stream(client, stream_options={"include_usage": True})
    last = chunks[-1]
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (120, 7, 127)
    assert last.usage.prompt_tokens_details.cached_tokens == 100
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_usage_is_estimated_when_requested_but_not_scripted(server, client):
    server.script("a b c")
    last = stream(client, stream_options={"include_usage": True})[-1]
    assert last.choices == [] and last.usage.completion_tokens == 3 and last.usage.prompt_tokens > 0
    # ...and absent when not asked for, as with OpenAI.
    server.script("a b c")
    assert all(c.usage is None for c in stream(client))


def test_explicit_finish_reason(server, client):
    server.script([text("trunc"), finish("length")])
    assert stream(client)[-1].choices[0].finish_reason == "length"


def test_callable_turn_sees_the_request(server, client):
    server.script(lambda req: [text(f"you said {req['messages'][-1]['content']}")])
    assert content(stream(client)) == "you said hi"


def test_raw_wire_format(http, server):
    server.script([text("x")])
    lines = sse_lines(http, server)
    assert lines[-1] == "[DONE]"
    chunk = json.loads(lines[0])
    assert chunk["object"] == "chat.completion.chunk" and isinstance(chunk["created"], int)
    assert chunk["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": None}, "logprobs": None, "finish_reason": None}]


# ---- errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, exc",
    [
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
@pytest.mark.parametrize("streamed", [True, False])
def test_error_statuses_raise_the_right_exception(server, client, status, exc, streamed):
    server.script([error(status, "scripted failure")])
    with pytest.raises(exc) as info:
        client.chat.completions.create(model="fake-model", messages=MSGS, stream=streamed)
    assert info.value.status_code == status
    assert "scripted failure" in info.value.message
    assert info.value.body["message"] == "scripted failure"


def test_error_codes_and_retry_after(server, client):
    server.script([error(429, retry_after=7)])
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="fake-model", messages=MSGS)
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.code == "rate_limit_exceeded"


def test_error_after_stream_started_is_an_in_stream_event(server, client):
    server.script([text("partial"), error(500, "overloaded mid-way")])
    with pytest.raises(openai.APIError, match="overloaded mid-way"):
        stream(client)


def test_unknown_model_is_404_unless_scripted(server, client):
    with pytest.raises(openai.NotFoundError) as info:
        stream(client, model="nope")
    assert info.value.code == "model_not_found"
    server.script("scripted wins")
    assert content(stream(client, model="nope")) == "scripted wins"


def test_require_key(server, client):
    server.require_key = "sk-right"
    bad = client.with_options(api_key="sk-wrong")
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="fake-model", messages=MSGS)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = client.with_options(api_key="sk-right")
    assert good.chat.completions.create(model="fake-model", messages=MSGS).choices[0].message.content == "OK"
    assert server.request_headers[-1]["authorization"] == "Bearer sk-right"


def test_broken_callable_turn_answers_500_and_is_recorded(server, client):
    server.script(lambda req: 1 / 0)
    with pytest.raises(openai.InternalServerError, match="ZeroDivisionError"):
        client.chat.completions.create(model="fake-model", messages=MSGS)
    assert isinstance(server.errors.pop(), ZeroDivisionError)


# ---- failure modes on the wire ------------------------------------------------------


def test_stall_before_headers_sends_nothing(http, server):
    server.script([stall(1)])
    t0 = time.monotonic()
    # A read timeout while waiting for the status line proves not a byte came.
    with pytest.raises(httpx.ReadTimeout):
        sse_lines(http, server, timeout=httpx.Timeout(5, read=0.2))
    assert time.monotonic() - t0 < 0.9


def test_stall_times_out_the_openai_client(server, client):
    server.script([stall(1)], [text("a"), stall(1)])
    # A float timeout applies to connect, read, write and pool alike;
    # openai.Timeout (httpx2.Timeout) sets them separately.
    c = client.with_options(timeout=openai.Timeout(5, read=0.2))
    with pytest.raises(openai.APITimeoutError):
        c.chat.completions.create(model="fake-model", messages=MSGS, stream=True)
    # Mid-stream the timeout surfaces while iterating, already wrapped.
    chunks = []
    with pytest.raises(openai.APITimeoutError):
        for ch in c.chat.completions.create(model="fake-model", messages=MSGS, stream=True):
            chunks.append(ch)
    assert content(chunks) == "a"


def test_drop_truncates_the_stream(http, server, client):
    server.script([text("a b"), drop()])
    with pytest.raises(httpx.RemoteProtocolError):
        sse_lines(http, server)

    server.script([text("a b"), drop()])
    seen = []
    with pytest.raises(openai.APIConnectionError):
        for ch in client.chat.completions.create(model="fake-model", messages=MSGS, stream=True):
            seen.append(ch)
    assert content(seen) == "a b"  # everything before the drop arrived


def test_drop_before_anything(server, client):
    server.script([drop()])
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="fake-model", messages=MSGS)


def test_malformed_chunk(http, server, client):
    server.script([text("a"), malformed()])
    assert "{not json" in sse_lines(http, server)

    server.script([text("a"), malformed()])
    # openai 3.x does not wrap this: the SSE decoder's json.loads error escapes as-is.
    with pytest.raises(json.JSONDecodeError):
        stream(client)


def test_client_disconnect_mid_stream_is_quiet(http, server, client, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    server.script([rate(200), text("word " * 100)])
    body = {"model": "fake-model", "messages": MSGS, "stream": True}
    with http.stream("POST", server.url + "/chat/completions", json=body) as r:
        next(r.iter_lines())
    # Left mid-stream; the server must notice, log nothing and keep serving.
    assert content(stream(client)) == "OK"
    time.sleep(0.1)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


# ---- non-streaming, models, connections -------------------------------------------------


def test_non_streaming_completion(server, client):
    server.script([reasoning("hmm"), text("Hello world"), tool_call("f", {"x": 1}, id="call_9"), usage(10, 3, cached_tokens=4)])
    r = client.chat.completions.create(model="fake-model", messages=MSGS)
    assert r.object == "chat.completion"
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content == "Hello world"
    assert msg.model_extra["reasoning_content"] == "hmm"
    assert msg.tool_calls[0].id == "call_9" and msg.tool_calls[0].function.name == "f"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"x": 1}
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.usage.total_tokens == 13 and r.usage.prompt_tokens_details.cached_tokens == 4


def test_non_streaming_malformed(server, client):
    server.script([malformed()])
    with pytest.raises(json.JSONDecodeError):
        client.chat.completions.create(model="fake-model", messages=MSGS)


def test_models_endpoint(server, client):
    models = {m.id: m for m in client.models.list()}
    assert set(models) == {"fake-model", "big-model"}
    big = models["big-model"]
    assert big.owned_by == "fake"
    assert big.model_extra["context_length"] == 131072 and big.model_extra["max_model_len"] == 131072
    assert client.models.retrieve("fake-model").id == "fake-model"


def test_keep_alive_reuses_one_connection(http, server):
    server.script("a", [text("b")], "c", "d")
    chat = server.url + "/chat/completions"
    for _ in range(2):
        assert http.post(chat, json={"model": "fake-model", "messages": MSGS}).status_code == 200
    http.get(server.url + "/models")
    # A fully read stream leaves the connection reusable too.
    with http.stream("POST", chat, json={"model": "fake-model", "messages": MSGS, "stream": True}) as r:
        r.read()
    assert http.post(chat, json={"model": "fake-model", "messages": MSGS}).json()["choices"][0]["message"]["content"] == "d"
    assert server.connections == 1


def test_wait_requests(server, client):
    server.script([delay(0.05), text("x")])
    with pytest.raises(TimeoutError):
        server.wait_requests(1, timeout=0.05)
    stream(client)
    assert server.wait_requests(1)[0]["model"] == "fake-model"


# ---- pacing and scale ------------------------------------------------------------------


def test_rate_paces_chunks_and_records_times(server, client):
    server.record_times = True
    server.script([rate(100), text("w " * 10, chunk=2)])
    t0 = time.monotonic()
    assert content(stream(client)) == "w " * 10
    elapsed = time.monotonic() - t0
    assert 0.09 <= elapsed < 0.5
    # role chunk + 10 paced pieces + finish + [DONE]
    assert len(server.sent_at) == 13
    # An absolute schedule from the first piece, which goes after the role chunk: the k-th
    # piece after it never goes before k intervals, however loaded the machine (gaps between
    # two pieces are not: a late wake-up is followed by a shorter one, and a stall by none).
    first = server.sent_at[0]
    late = [round(t - first, 4) for t in server.sent_at[1:11]]
    assert all(t >= k * 0.01 - 0.001 for k, t in enumerate(late)), late


def test_delay_pauses_after_headers(http, server):
    server.script([delay(0.2), text("late")])
    # Headers and the role chunk come before the pause, so only the
    # 0.2 s gap itself can trip a 0.1 s read timeout.
    body = {"model": "fake-model", "messages": MSGS, "stream": True}
    with http.stream("POST", server.url + "/chat/completions", json=body, timeout=httpx.Timeout(5, read=0.1)) as r:
        assert r.status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            r.read()


async def test_async_client_concurrent_streams(server):
    server.default = [rate(100), text("tok " * 5)]
    async with openai.AsyncOpenAI(base_url=server.url, api_key="x", max_retries=0) as c:

        async def one():
            s = await c.chat.completions.create(model="fake-model", messages=MSGS, stream=True)
            return "".join([ch.choices[0].delta.content or "" async for ch in s if ch.choices])

        assert await asyncio.gather(*(one() for _ in range(20))) == ["tok " * 5] * 20
    assert len(await server.await_requests(20)) == 20


async def test_200_concurrent_paced_streams(server):
    # A bare asyncio client: the openai/httpx clients spend ~5 ms of CPU per
    # request, which would measure them rather than the server.
    server.record_times = True
    server.default = [rate(50), text("tok " * 10)]
    body = json.dumps({"model": "fake-model", "messages": MSGS, "stream": True}).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )

    async def one() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request)
        data = await reader.read(-1)  # Connection: close makes the server end it
        writer.close()
        return data

    t0 = time.monotonic()
    replies = await asyncio.gather(*(one() for _ in range(200)))
    elapsed = time.monotonic() - t0
    for data in replies:
        assert data.startswith(b"HTTP/1.1 200 OK\r\n")
        assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        assert data.count(b'"content":"tok "') == 10
    # 10 tokens at 50/s take 0.2 s per stream; the streams must overlap.
    assert elapsed < 1.5, elapsed
    assert len(server.sent_at) == 200 * 13


@pytest.mark.process
def test_cli_serves_the_default_turn():
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openai_server", "--port", "0", "--tokens", "5", "--rate", "1000"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split(" at ")[1].split()[0]
        with openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=5) as c:
            chunks = list(c.chat.completions.create(model="fake-model", messages=MSGS, stream=True))
        assert len(content(chunks).split()) == 5
    finally:
        proc.terminate()
        proc.wait(5)
