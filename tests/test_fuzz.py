"""Every route and form, fuzzed: empty, huge, malformed, hostile and wrong-typed values in
path ids, query strings, form fields (single and repeated), uploads and raw bodies.

Every answer is success or a 4xx with a message a person can read; never a 500, never a
traceback; and nothing that was not aimed at is lost (a witness conversation, agent and
skill stay exactly as they were).
"""
from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.store import db as dbm
from app.store import Store
from tests.conftest import Served, app_client, csrf, database, new_chat, signed_in, wait_for
from tests.fakes.openai_server import text

HOSTILE = [
    "", " ", "\x00", "\x00\x01\x02", "\r\n", "A" * 200_001, "é" * 30_000, "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>", "javascript:alert(1)", "data:text/html,<script>alert(1)</script>",
    "../../etc/passwd", "..\\..\\windows", "-1", "0", "1", "2", "99999999999999999999999", "1e9", "0x10", "１２",
    "NaN", "{}", "[]", "null", "true", "' OR 1=1 --", "\"; DROP TABLE items; --", "\u202e\u0644", "\ufeff",
    "%00", "%", "{{7*7}}", "${7*7}", "approve", "decline", "delete", "enable", "disable", "refresh", "high",
    "xhigh", "off", "fake-model", "local:nothing", "update_plan", "fetch_page", "settings", "tools", "plugins",
    "memory", "//evil.example", "/c/1", "Authorization",
]
# A plugin's address is reached for (through the guard): never a name that needs DNS.
ADDRESSES = ["", "http://127.0.0.1:1/mcp", "http://[::1]:1/", "http://0x7f000001/", "http://169.254.169.254/",
             "https://10.0.0.1/", "file:///etc/passwd", "javascript:alert(1)", "http://" + "1" * 3000, "ftp://127.0.0.1/"]
FIELDS = ["text", "model", "thinking", "agent", "decision", "name", "instructions", "use", "approve", "shown",
          "header", "secret", "action", "description", "body", "password", "again", "current", "next"]
IDS = ["0", "-1", "99999999999999999999", "abc", "1.5", "１", " 1", "%00", "..%2F..%2Fetc", "9" * 400, "1%0A2"]

value = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40), st.text(min_size=100, max_size=3000))
# a URL has room for less (the client refuses a query past 65,536 characters)
query_value = st.one_of(st.sampled_from([h for h in HOSTILE if len(h) < 5000]), st.text(max_size=40),
                        st.text(min_size=100, max_size=3000))
field_value = st.one_of(value, st.lists(value, min_size=2, max_size=4))  # repeated fields too
upload = st.tuples(
    st.sampled_from(["notes.txt", "", "../../x.txt", "a" * 600, "<svg onload=alert(1)>.svg", "x.png", "\x00.md",
                     "SKILL.md", "con", "日本語.txt"]),
    st.sampled_from([b"", b"\x00" * 64, b"<svg onload=alert(1)></svg>", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,
                     b"%PDF-1.4 hostile", "---\nname: fuzz\ndescription: d\n---\nbody".encode(), b"x" * 5000,
                     "é".encode("latin-1"), b"\xff\xfe\xfd"]),
    st.sampled_from(["text/plain", "image/png", "application/octet-stream", "text/html", "", "image/svg+xml"]),
)


@pytest.fixture
def app(env, data, fake, monkeypatch):
    """The app with small upload limits (so a too-large file is cheap), a target conversation,
    agent and skill to aim at, and witnesses that nothing aims at."""
    fake.plain_default = [text("fine")]
    signed_in(data)  # the database made, with the owner in it
    db = dbm.connect(database(data))
    store = Store(db)
    owner = store.owner()
    witness_agent = store.default_agent(owner)
    target_agent = store.add_agent(witness_agent.__class__(name="target", person=owner))
    witness = store.new_conversation(witness_agent.id, "witness", person=owner)
    store.ask(witness.id, "keep me")
    target = store.new_conversation(target_agent.id, "target", person=owner)
    store.ask(target.id, "aim here")
    from app.tables import skill
    skill_w = store.add_skill(skill("witness-skill", "kept", "body"))
    skill_t = store.add_skill(skill("target-skill", "aimed", "body"))
    memory = store.add_memory(target_agent.id, "a memory")
    file_id = store.add_file("f.txt", b"file", person=owner)
    db.conn.close()
    monkeypatch.setenv("TABLETALK_UPLOAD_MAX", "2000")
    monkeypatch.setenv("TABLETALK_UPLOAD_COUNT", "2")
    with app_client(data) as c:
        wait_for(lambda: c.get(f"/c/{witness.id}").status_code == 200)
        yield c, {"chat": target.id, "agent_id": target_agent.id, "skill_id": skill_t.id, "memory_id": memory,
                  "file": file_id, "call": 1, "plugin_id": 1, "person_id": owner,
                  "witness": (witness.id, witness_agent, skill_w)}


def witnesses(data: Path, chat: int, agent: int, skill: int) -> tuple:
    db = dbm.connect(database(data))
    try:
        q = lambda sql, p: [tuple(r) for r in db.conn.execute(sql, p).fetchall()]  # noqa: E731
        return (q("SELECT id, kind, text FROM items WHERE chat = ? AND kind = 'user' ORDER BY id", [chat]),
                q("SELECT title FROM conversations WHERE id = ?", [chat]),
                q("SELECT name, instructions, model, tools, approve FROM assistants WHERE id = ?", [agent]),
                q("SELECT name, description, body FROM skills WHERE id = ?", [skill]),
                q("SELECT name, owner FROM people WHERE owner = 1", []))
    finally:
        db.conn.close()


def routes(c) -> list[tuple[str, str]]:
    out = []
    for route in c.app.routes:
        if route.path.startswith("/static") or route.path in ("/signout", "/events") or route.path.endswith("/events"):
            continue  # signing out ends the fuzzer's session; feeds are streams (fuzzed below)
        for method in sorted(getattr(route, "methods", set()) - {"HEAD", "OPTIONS"}):
            out.append((method, route.path))
    return out


def readable(r) -> bool:
    body = r.text
    return bool(body.strip()) and "Traceback" not in body and "Internal Server Error" not in body


def check(r, what: str) -> None:
    assert r.status_code < 500, f"{what} answered {r.status_code}: {r.text[:300]}"
    if 400 <= r.status_code < 500:
        assert readable(r), f"{what} answered {r.status_code} with no message a person can read"


def test_every_route_and_form_survives_hostile_input(app, data):
    c, ids = app
    witness_chat, witness_agent, witness_skill = ids["witness"]
    before = witnesses(data, witness_chat, witness_agent.id, witness_skill.id)
    token = csrf(c)
    every = routes(c)
    assert len(every) >= 35, every

    @settings(max_examples=400, deadline=None, database=None, derandomize=True,  # the same cases on every run
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(route=st.sampled_from(every), aim=st.booleans(), bad_id=st.sampled_from(IDS),
           form=st.dictionaries(st.sampled_from(FIELDS), field_value, max_size=6),
           address=st.sampled_from(ADDRESSES), files=st.lists(upload, max_size=3), htmx=st.booleans(),
           query=st.dictionaries(st.sampled_from(["q", "tab", "versions", "since", "next", "x"]), query_value, max_size=2),
           token_ok=st.booleans())
    def fuzz(route, aim, bad_id, form, address, files, htmx, query, token_ok):
        method, template = route

        def fill(m):
            name = m.group(1)
            return str(ids[name]) if aim and name in ids else quote(bad_id, safe="%")

        path = re.sub(r"\{(\w+):\w+\}", fill, template)
        headers = {"HX-Request": "true"} if htmx else {}
        if method == "GET":
            r = c.get(path, params=query, headers=headers, follow_redirects=False)
        else:
            data = dict(form, _csrf_token=token if token_ok else "forged")
            if "plugins" in path:
                data["address"] = address
            sent = [("file", f) for f in files] if files else None
            r = c.post(path, data=data, files=sent, headers=headers, follow_redirects=False)
        check(r, f"{method} {path}")

    fuzz()
    assert witnesses(data, witness_chat, witness_agent.id, witness_skill.id) == before, "nothing not aimed at was lost"


@pytest.mark.parametrize("body,content_type", [
    (b"text=%FF%FE%FD", "application/x-www-form-urlencoded"),
    (b"\x00\x01\x02", "application/x-www-form-urlencoded"),
    (b"text=" + b"a" * 300_000, "application/x-www-form-urlencoded"),
    (b"--x\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nunterminated", "multipart/form-data; boundary=x"),
    (b"garbage", "multipart/form-data"),
    (b"garbage", "multipart/form-data; boundary="),
    (b'{"text": "json instead"}', "application/json"),
    (b"text=hi", "text/plain"),
    (b"", ""),
])
def test_malformed_bodies_get_a_clear_4xx(client, body, content_type):
    chat = new_chat(client)
    token = csrf(client)
    for path in [f"{chat}/ask", "/agents", "/skills", "/signin", "/people", "/account"]:
        headers = {"Content-Type": content_type, "X-CSRFToken": token} if content_type else {"X-CSRFToken": token}
        r = client.post(path, content=body, headers=headers, follow_redirects=False)
        check(r, f"POST {path} with {body[:30]!r} as {content_type!r}")


def test_a_body_past_the_limit_is_refused_before_it_is_read(make_client):
    with make_client(TABLETALK_UPLOAD_MAX="1000", TABLETALK_UPLOAD_COUNT="1", TABLETALK_DOCUMENT_MAX="1000") as c:
        chat = new_chat(c)
        r = c.post(f"{chat}/ask", content=b"x" * 5_000_000, headers={
            "Content-Type": "application/x-www-form-urlencoded", "X-CSRFToken": csrf(c)})
        assert r.status_code == 413 and "at most 2,001,000 bytes in one request" in r.text


@pytest.fixture(scope="module")
def feed_served(tmp_path_factory) -> Iterator[Served]:
    """One server for every hostile cursor (each only opens a feed: nothing is written), where
    a server each had cost 14 starts."""
    data = tmp_path_factory.mktemp("cursors") / "data"
    served = Served(data, {"TABLETALK_DATA": str(data), "AI_URL": "http://127.0.0.1:9/v1", "AI_KEY": "",
                           "AI_MODEL": ""}).start()
    yield served
    served.stop()


@pytest.mark.process
@pytest.mark.parametrize("cursor", IDS + ["", "1" * 19, "１２"])
def test_hostile_feed_cursors_resync_or_are_refused(feed_served, cursor):
    served = feed_served
    for path in [f"/events?since={quote(cursor)}", f"/c/{quote(cursor)}/events"]:
        # a header value cannot begin or end with a space (the client refuses to send it)
        headers = {"Last-Event-ID": cursor.encode("utf-8")} if cursor == cursor.strip() else {}
        with httpx.stream("GET", served.url + path, cookies=served.cookies, timeout=5, headers=headers) as r:
            assert r.status_code in (200, 404), (path, r.status_code)
            if r.status_code == 200:
                first = next(r.iter_lines())
                assert first.startswith(": worker") or first.startswith("id:")


# --- a plugin's schemas and the model's raw tool arguments ------------------------------------
# A plugin's input schema is the plugin's to write and the arguments are the model's: whatever
# they are, checking them gives a verdict, or says the schema cannot be used; never an
# exception out of the agent loop (which restarted runs), never the network or the disk.


async def tool_call_of(arguments: str, schema) -> tuple[str, bool]:
    from app import agent as loop
    from app.tools import Result, Tool

    async def run(args, ctx):
        return Result("ran")

    ended = []
    await loop.run_tool(loop.ToolCall("c", "t", arguments), {"t": Tool("t", "", schema, run)},
                        lambda e: ended.append(e) if isinstance(e, loop.ToolEnd) else None, None)
    return ended[0].output, ended[0].ok


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=12)
keywords = st.sampled_from(["type", "properties", "required", "pattern", "patternProperties", "additionalProperties",
                            "$ref", "$dynamicRef", "$id", "$schema", "$defs", "items", "enum", "const", "allOf",
                            "anyOf", "oneOf", "not", "if", "then", "else", "format", "minLength", "uniqueItems",
                            "propertyNames", "dependentSchemas", "unevaluatedProperties", "contains"])
schemas = st.recursive(
    st.dictionaries(keywords, json_values | st.sampled_from(["#", "#/$defs/a", "http://127.0.0.1:9/", "file:///x",
                                                             "^(a|a)+$", "(", "object", "string"]), max_size=5),
    lambda inner: st.dictionaries(keywords, inner | st.dictionaries(st.text(max_size=6), inner, max_size=3)
                                  | st.lists(inner, max_size=3), max_size=5),
    max_leaves=20)


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, args=json_values)
def test_fuzzed_schemas_are_checked_or_unusable_never_an_exception(schema, args):
    from app.tools.arguments import Unusable, problem

    try:
        result = problem(args, schema)
    except Unusable:
        return
    assert result is None or isinstance(result, str)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(raw=st.one_of(st.text(max_size=200), st.sampled_from(["", "null", "[]", "1", '"s"', "{", "{}" * 3, "\x00",
                                                            '{"a": NaN}', '{"a": 1e999}', "[" * 5000])))
def test_fuzzed_raw_arguments_are_a_result_never_an_exception(raw):
    output, ok = asyncio.run(tool_call_of(raw, {"type": "object", "properties": {"a": {"type": "integer"}}}))
    assert isinstance(output, str) and (ok or output.startswith("Error:"))
