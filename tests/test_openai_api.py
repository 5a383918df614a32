"""The OpenAI-compatible API in this process (docs/api.md): keys on the account page, the
owner's settings, every refusal in the OpenAI error shape, the models, completions streamed
and whole, a conversation continued by its header, the agent's tools as the extension, the
client's own functions and their results, a wait for approval that ends, and a stream taken
up again from any place. Real clients against a served process: test_openai_api_served.py."""
from __future__ import annotations

import hashlib
import json
import re
import threading

import pytest

from app.accounts.api_keys import ApiKeys
from app.run.naming import TITLE_PROMPT
from app.tables import Item, Person, assistant
from app.web.completions import Completion, Place, Transcript
from app.web.toolkit import PERSON_QUEUE_MAX
from tests.conftest import COOKIE, csrf, rows, signed_in, soup, wait_for, store_of
from tests.fakes.openai_server import hold, reasoning, text, tool_call


def answered(fake) -> list[dict]:
    """The model requests that answered, not a title's (which may come after one, under load)."""
    return [r for r in fake.requests if r["messages"][0]["content"] != TITLE_PROMPT]


def make_key(client, name: str = "laptop", **form) -> str:
    r = client.post("/account/keys", data={"_csrf_token": csrf(client, "/account"), "name": name, **form})
    assert r.status_code == 200, r.text
    return soup(r).select_one("input.key")["value"]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def agent_of(client, key: str) -> str:
    return client.get("/v1/models", headers=bearer(key)).json()["data"][0]["id"]


def ask(client, key: str, words: str = "Hi", **body):
    model = body.pop("model", None) or agent_of(client, key)
    headers = bearer(key) | body.pop("headers", {})
    return client.post("/v1/chat/completions", headers=headers,
                       json={"model": model, "messages": [{"role": "user", "content": words}], **body})


def events(response) -> list[tuple[str | None, object]]:
    """A stream's messages: (its id, its data parsed, or "[DONE]")."""
    out = []
    for block in response.text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        place = next((line[4:] for line in lines if line.startswith("id: ")), None)
        data = "".join(line[6:] for line in lines if line.startswith("data: "))
        out.append((place, data if data == "[DONE]" else json.loads(data)))
    return out


def content_of(stream: list) -> str:
    """What a client that follows the extension's `withdrawn` makes of a stream's content."""
    whole = Completion()
    for _, payload in stream:
        if isinstance(payload, dict):
            whole.take(payload)
    return whole.content


def refusal(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


# --- keys -----------------------------------------------------------------------------------


def test_a_key_is_shown_once_kept_as_its_hash_and_revoked(client, data):
    key = make_key(client, "laptop", expiry="30")
    assert re.fullmatch(r"tt-[A-Za-z0-9_-]{43}", key)
    [row] = rows(data, "SELECT * FROM api_keys")
    assert row["hash"] == hashlib.sha256(key.encode()).hexdigest() and row["name"] == "laptop"
    assert key not in json.dumps(row) and row["expires"] > row["created"] + 29 * 86400
    page = client.get("/account")
    assert key not in page.text and key[:9] in page.text, "listed by its first characters only"
    assert client.get("/v1/models", headers=bearer(key)).status_code == 200
    r = client.post(f"/account/keys/{row['id']}/delete", data={"_csrf_token": csrf(client, "/account")},
                    follow_redirects=False)
    assert r.status_code == 303
    refusal(client.get("/v1/models", headers=bearer(key)), 401, "invalid_api_key")


def test_a_key_needs_a_name_and_an_agent_of_ones_own(client):
    r = client.post("/account/keys", data={"_csrf_token": csrf(client, "/account"), "name": "  "})
    assert r.status_code == 400 and soup(r).select_one(".problem") and not soup(r).select_one("input.key")
    r = client.post("/account/keys", data={"_csrf_token": csrf(client, "/account"), "name": "x", "agent": "999"})
    assert r.status_code == 400 and "no such agent" in r.text


def test_an_expired_key_is_refused(client):
    store = store_of(client)
    owner = Person("owner", owner=True, id=store.owner())
    made_long_ago, _ = ApiKeys(store, clock=lambda: 1_000_000.0).make(owner, "old", "7")
    refusal(client.get("/v1/models", headers=bearer(made_long_ago)), 401, "invalid_api_key")
    lasting, _ = ApiKeys(store).make(owner, "new", "7")
    assert client.get("/v1/models", headers=bearer(lasting)).status_code == 200


def test_another_persons_key_is_revoked_by_nobody_else(client, data):
    key = make_key(client)
    [row] = rows(data, "SELECT id FROM api_keys")
    client.cookies.set(COOKIE, signed_in(data, "bea", owner=False))
    client.post(f"/account/keys/{row['id']}/delete", data={"_csrf_token": csrf(client, "/account")})
    assert client.get("/v1/models", headers=bearer(key)).status_code == 200


def test_the_owner_switches_the_api_off_or_opens_it_to_chosen_people(client, data):
    owner_key = make_key(client)
    owner_cookie = client.cookies.get(COOKIE)
    client.cookies.set(COOKIE, signed_in(data, "bea", owner=False))
    bea_key = make_key(client, "bea's")
    client.cookies.set(COOKIE, signed_in(data, "cal", owner=False))
    cal_key = make_key(client, "cal's")
    [bea] = rows(data, "SELECT id FROM people WHERE name = 'bea'")
    client.cookies.set(COOKIE, owner_cookie)

    def decide(mode: str, *people: int, per_minute: str = "60"):
        return client.post("/people/api", data={"_csrf_token": csrf(client, "/people"), "mode": mode,
                                                "person": [str(p) for p in people], "per_minute": per_minute,
                                                "approval_seconds": "300"}, follow_redirects=False)

    assert decide("off").status_code == 303
    for key in (owner_key, bea_key):
        refusal(client.get("/v1/models", headers=bearer(key)), 403, "api_not_allowed")
    assert decide("chosen", bea["id"]).status_code == 303
    assert client.get("/v1/models", headers=bearer(owner_key)).status_code == 200, "the owner always may"
    assert client.get("/v1/models", headers=bearer(bea_key)).status_code == 200
    refusal(client.get("/v1/models", headers=bearer(cal_key)), 403, "api_not_allowed")
    assert rows(data, "SELECT name, value FROM settings WHERE name = 'api.mode'") == [{"name": "api.mode",
                                                                                        "value": "chosen"}]
    r = decide("everyone", per_minute="lots")
    assert r.status_code == 400 and "whole number" in r.text
    client.cookies.set(COOKIE, signed_in(data, "cal", owner=False))
    assert client.post("/people/api", data={"_csrf_token": csrf(client, "/account"), "mode": "everyone"}
                       ).status_code == 403, "the owner's alone"


# --- refusals ---------------------------------------------------------------------------------


def test_every_refusal_is_in_the_openai_shape(client, data, fake):
    key = make_key(client)
    refusal(client.get("/v1/models"), 401, "invalid_api_key")
    refusal(client.get("/v1/models", headers={"Authorization": "Bearer tt-nothing"}), 401, "invalid_api_key")
    refusal(client.get("/v1/models", headers={"Cookie": f"{COOKIE}={client.cookies.get(COOKIE)}"}), 401)
    refusal(ask(client, key, model="gpt-4o"), 404, "model_not_found")
    refusal(ask(client, key, model="agent-999"), 404, "model_not_found")
    client.cookies.set(COOKIE, signed_in(data, "bea", owner=False))
    beas = agent_of(client, make_key(client, "bea's"))
    refusal(ask(client, key, model=beas), 404, "model_not_found")  # another person's agent is no agent
    refusal(client.get("/v1/nothing", headers=bearer(key)), 404)
    post = lambda body: client.post("/v1/chat/completions", headers=bearer(key), content=body)  # noqa: E731
    model = agent_of(client, key)
    refusal(post(b"{not json"), 400)
    refusal(post(b"[]"), 400)
    for messages in ([], [{"role": "wizard", "content": "x"}], [{"role": "assistant", "content": "hi"}],
                     [{"role": "user", "content": "x" * 100_001}], [{"role": "user", "content": "x"}] * 501,
                     [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
                     [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "nope", "content": "y"}],
                     [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]):
        refusal(post(json.dumps({"model": model, "messages": messages}).encode()), 400)
    for extra in ({"stream": "yes"}, {"n": 2}, {"tools": [{"type": "function", "function": {"name": "bad name"}}]},
                  {"tools": [{"type": "function", "function": {"name": "remember"}}]}):
        refusal(post(json.dumps({"model": model, "messages": [{"role": "user", "content": "x"}], **extra}).encode()),
                400)
    refusal(post(b"x" * 4_000_001), 413, "request_too_large")
    assert rows(data, "SELECT count(*) AS n FROM conversations")[0]["n"] == 0, "nothing refused was written"


def test_a_key_for_one_agent_reaches_no_other(client, data):
    store = store_of(client)
    owner = store.owner()
    other = store.add_agent(assistant(None, "Other", person=owner))
    first = store.agents(owner)[0]
    key = make_key(client, agent=str(first.id))
    assert [m["id"] for m in client.get("/v1/models", headers=bearer(key)).json()["data"]] == [f"agent-{first.id}"]
    refusal(ask(client, key, model=f"agent-{other.id}"), 403, "model_not_allowed")


def test_too_many_requests_a_minute_are_refused_with_retry_after(client, data, fake):
    key = make_key(client)
    client.post("/people/api", data={"_csrf_token": csrf(client, "/people"), "mode": "everyone", "per_minute": "2",
                                     "approval_seconds": "300"})
    for _ in range(2):
        assert ask(client, key).status_code == 200
    r = ask(client, key)
    refusal(r, 429, "rate_limit_exceeded")
    assert 1 <= int(r.headers["retry-after"]) <= 60


def test_a_request_past_the_messages_that_may_wait_is_refused(client, data, fake):
    """The pages' bound on waiting messages (issue 38) holds for the API's too: 30 of the
    person's wait behind hanging answers, and a request is refused, nothing written."""
    release = threading.Event()
    fake.default = [hold(release)]
    key = make_key(client)
    store = store_of(client)
    owner = store.owner()
    try:
        for i in range(PERSON_QUEUE_MAX):
            store.start_conversation(store.default_agent(owner).id, owner, f"waiting {i}")
        before = rows(data, "SELECT count(*) AS n FROM conversations")[0]["n"]
        assert "across your conversations" in refusal(ask(client, key), 429)["message"]
        assert rows(data, "SELECT count(*) AS n FROM conversations")[0]["n"] == before
    finally:
        release.set()


# --- models and completions -----------------------------------------------------------------


def test_the_models_are_the_persons_agents(client):
    key = make_key(client)
    store = store_of(client)
    listed = client.get("/v1/models", headers=bearer(key)).json()
    assert listed["object"] == "list"
    assert [(m["id"], m["name"]) for m in listed["data"]] == [(f"agent-{a.id}", a.name)
                                                              for a in store.agents(store.owner())]


def test_a_completion_is_a_conversation_of_the_api_that_its_header_continues(client, data, fake):
    key = make_key(client)
    fake.script([text("Hello there")], [text("Again hello")])
    r = ask(client, key, "Hi", messages=[{"role": "system", "content": "Answer briefly."},
                                         {"role": "user", "content": "Hi"}])
    assert r.status_code == 200, r.text
    body, chat = r.json(), r.headers["tabletalk-conversation"]
    assert body["object"] == "chat.completion" and body["choices"][0]["message"] == {"role": "assistant",
                                                                                      "content": "Hello there"}
    assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["total_tokens"] > 0
    assert body["tabletalk"]["conversation"] == int(chat)
    assert "Answer briefly." in fake.requests[0]["messages"][0]["content"], "the client's system text is said"
    assert soup(client.get("/")).select_one(f"#c{chat} .origin").text == "API", "marked in the sidebar"
    r = ask(client, key, "And again?", headers={"Tabletalk-Conversation": chat},
            messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"},
                      {"role": "user", "content": "And again?"}])
    assert r.json()["choices"][0]["message"]["content"] == "Again hello" and r.headers["tabletalk-conversation"] == chat
    assert [(m["role"], m["content"]) for m in answered(fake)[-1]["messages"][1:]] == [
        ("user", "Hi"), ("assistant", "Hello there"), ("user", "And again?")], "only the new message was added"
    assert [(r["kind"], r["text"]) for r in rows(data) if r["kind"] in ("user", "text")] == [
        ("user", "Hi"), ("text", "Hello there"), ("user", "And again?"), ("text", "Again hello")]
    refusal(ask(client, key, headers={"Tabletalk-Conversation": "999"}), 404, "conversation_not_found")


def test_a_history_is_written_as_rows_and_only_its_last_message_answered(client, data, fake):
    key = make_key(client)
    fake.script([text("Four.")])
    r = ask(client, key, messages=[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
                                   {"role": "user", "content": "In words?"}])
    assert r.json()["choices"][0]["message"]["content"] == "Four." and len(fake.requests) == 1
    assert [(r["kind"], r["text"], r["done"]) for r in rows(data) if r["kind"] in ("user", "text")] == [
        ("user", "2+2?", 1), ("text", "4", 1), ("user", "In words?", 1), ("text", "Four.", 1)]


def test_a_stream_has_openais_chunks_the_usage_and_done(client, fake):
    key = make_key(client)
    fake.script([reasoning("Thinking."), text("One two three")])
    r = ask(client, key, stream=True, stream_options={"include_usage": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    stream = events(r)
    assert stream[-1] == (None, "[DONE]")
    *chunks, usage, _ = stream
    assert usage[1]["choices"] == [] and usage[1]["usage"]["total_tokens"] > 0
    assert all(c["object"] == "chat.completion.chunk" and c["model"].startswith("agent-") for _, c in chunks)
    assert chunks[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1][1]["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for _, c in chunks) == "One two three"
    assert "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for _, c in chunks) == "Thinking."
    assert all(Place.parse(p) for p, _ in chunks), "every chunk says where it brings the client"
    r = ask(client, key, stream=True)
    assert all(not c.get("usage") for _, c in events(r)[:-1]), "no usage chunk unless asked"


def test_the_agents_tool_calls_are_the_extension_and_what_it_remembers_stays(client, data, fake):
    key = make_key(client)
    fake.script([text("I will note it."), tool_call("remember", {"text": "The person likes green tea."})],
                [text("Noted.")], [text("Green tea.")])
    stream = events(ask(client, key, "I like green tea", stream=True))
    extension = [c["tabletalk"] for _, c in stream if isinstance(c, dict) and "tabletalk" in c]
    assert [e["type"] for e in extension] == ["tool_call", "tool_result"]
    assert extension[0]["name"] == "remember" and "green tea" in extension[0]["arguments"]
    assert extension[1]["state"] == "done"
    assert content_of(stream) == "I will note it.\n\nNoted.", "one answer: its texts apart"
    r = ask(client, key, "What do I like?")
    assert r.json()["choices"][0]["message"]["content"] == "Green tea."
    assert "likes green tea" in answered(fake)[-1]["messages"][0]["content"], "its memory, in a new conversation"
    assert rows(data, "SELECT text FROM memories") == [{"text": "The person likes green tea."}]


def test_the_clients_functions_go_back_in_the_standard_shape_and_their_results_go_on(client, data, fake):
    key = make_key(client)
    weather = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                "parameters": {"type": "object", "properties": {
                                                    "city": {"type": "string"}}}}}
    fake.script([tool_call("get_weather", {"city": "Oslo"})], [text("It is sunny in Oslo.")])
    r = ask(client, key, "Weather in Oslo?", tools=[weather])
    body, chat = r.json(), r.headers["tabletalk-conversation"]
    assert fake.requests[0]["tools"][-1]["function"]["name"] == "get_weather", "offered to the model"
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    [call] = body["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'} and call["type"] == "function"
    [row] = rows(data, "SELECT state, done FROM items WHERE kind = 'call'")
    assert row == {"state": "waiting", "done": 0}
    assert soup(client.get(f"/c/{chat}")).select_one('#status[data-running="0"]'), "the turn is over meanwhile"
    r = ask(client, key, headers={"Tabletalk-Conversation": chat}, tools=[weather], messages=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"}])
    assert r.json()["choices"][0]["message"]["content"] == "It is sunny in Oslo."
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    sent = answered(fake)[-1]["messages"]
    assert sent[-1] == {"role": "tool", "content": "sunny, 21 C", "tool_call_id": call["id"]}
    assert rows(data, "SELECT state, output, done FROM items WHERE kind = 'call'") == [
        {"state": "done", "output": "sunny, 21 C", "done": 1}]
    refusal(ask(client, key, headers={"Tabletalk-Conversation": chat}, messages=[
        {"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": call["id"], "content": "again"}]), 400)


def test_a_history_with_the_clients_results_goes_on_from_them(client, data, fake):
    """As a client that keeps no conversation id sends it (the llm command with tools)."""
    key = make_key(client)
    fake.script([text("Sunny.")])
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    r = ask(client, key, tools=[weather], messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "abc", "type": "function", "function": {
            "name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "abc", "content": "sun"}])
    assert r.json()["choices"][0]["message"]["content"] == "Sunny."
    assert [m["role"] for m in fake.requests[0]["messages"][1:]] == ["user", "assistant", "tool"]


def test_a_call_that_waits_for_approval_too_long_is_declined_in_words(client, data, fake):
    key = make_key(client)
    store = store_of(client)
    store.update_agent(store.default_agent(store.owner()).id, approve="remember")
    client.post("/people/api", data={"_csrf_token": csrf(client, "/people"), "mode": "everyone", "per_minute": "60",
                                     "approval_seconds": "1"})
    fake.script([tool_call("remember", {"text": "x"})], [text("I could not.")])
    stream = events(ask(client, key, "Remember x", stream=True))
    kinds = [c["tabletalk"] for _, c in stream if isinstance(c, dict) and "tabletalk" in c]
    assert [k["type"] for k in kinds] == ["tool_call", "approval", "tool_result"]
    assert kinds[1]["url"].endswith(f"/c/{kinds[1]['url'].rsplit('/', 1)[1]}") and "web page" in kinds[1]["message"]
    assert kinds[2]["state"] == "declined" and "Not approved within 1 s" in kinds[2]["output"]
    assert content_of(stream) == "I could not."
    assert "Not approved within 1 s" in answered(fake)[-1]["messages"][-1]["content"], "the model is told why"


def test_a_stream_is_taken_up_again_from_any_place(client, fake):
    key = make_key(client)
    fake.script([reasoning("Hmm."), text("Alpha beta gamma delta"), tool_call("remember", {"text": "y"})],
                [text("Epsilon zeta.")])
    r = ask(client, key, stream=True)
    chat = r.headers["tabletalk-conversation"]
    whole = events(r)
    assert content_of(whole) == "Alpha beta gamma delta\n\nEpsilon zeta."
    for cut in range(1, len(whole) - 1):
        place = whole[cut - 1][0]
        if place is None:
            continue
        again = client.get(f"/v1/conversations/{chat}/stream", headers=bearer(key) | {"Last-Event-ID": place})
        rest = events(again)
        assert rest[-1] == (None, "[DONE]")
        assert content_of(whole[:cut]) + content_of(rest) == content_of(whole), place
    full = events(client.get(f"/v1/conversations/{chat}/stream", headers=bearer(key)))
    assert content_of(full) == content_of(whole), "without a place: the last answer from its start"


def test_a_step_a_restart_made_again_is_withdrawn_by_the_extension():
    """The rows after a kill -9 mid-answer: the cut step's item is gone, a new one holds it again."""
    before = [Item(kind="user", chat=1, text="q", id=10, turn=10),
              Item(kind="text", chat=1, text="Hello wor", id=11, turn=10)]
    t = Transcript(Place(10), "agent-1", "http://x/c/1")
    first = t.advance(before, 0.0)
    assert first[-1][0] == "10.0.11.t9"
    after = [before[0], Item(kind="text", chat=1, text="Hello world.", id=12, turn=10, done=True)]
    resumed = Transcript(Place.parse(first[-1][0]), "agent-1", "http://x/c/1")
    rest = resumed.advance(after, 0.0)
    client_side = Completion()
    for _, payload in first + rest:
        client_side.take(payload)
    assert client_side.content == "Hello world."
    assert rest[0][1]["tabletalk"]["type"] == "withdrawn" and rest[0][1]["tabletalk"]["characters"] == 9


def test_a_place_reads_back_as_written():
    for place in (Place(3), Place(3, 9, 12, "t", 40), Place(3, 0, 12, "c", 2)):
        assert Place.parse(str(place)) == place
    for bad in ("", "3", "3.1.2.x4", "a.b.c.e", "1" * 19 + ".0.0.e"):
        assert Place.parse(bad) is None
