"""Text both engines keep alike: a NUL (U+0000), which SQLite's text holds and PostgreSQL's
cannot, is U+FFFD on both wherever a text is bound (app/store/db.py's `storable`), so
nothing fails to save on PostgreSQL and every page reads the same on both."""
import json

import pytest

from app.store import db as dbm
from app.tables import Skill, asked, item, plugin
from tests.conftest import ENGINES, csrf, on_both_engines, soup, start_chat, wait_for
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import text, tool_call

NUL, FFFD = "\x00", "\ufffd"


def test_storable_replaces_nul_in_texts_only():
    assert dbm.storable("a\x00b\x00") == "a\ufffdb\ufffd"
    assert dbm.storable(b"a\x00b") == b"a\x00b"  # bytes (files' chunks) untouched
    assert dbm.storable(["x\x00", 1]) == ["x\ufffd", 1]
    assert dbm.storable(None) is None and dbm.storable(3) == 3 and dbm.storable(True) is True
    assert dbm.bound({"n": "\x00"}) == {"n": "\ufffd"}


def test_every_kind_of_text_with_a_nul_is_saved_and_reads_back_alike(store):
    owner = store.add_person("owner", "h", owner=True)
    agent = store.default_agent(owner)
    chat = store.new_conversation(agent.id, title=f"ti{NUL}tle", person=owner).id
    said = store.add(asked(chat, f"pasted{NUL}text"))
    call = store.add(item("call", chat, name="echo", input=json.dumps({"t": f"a{NUL}b"}) + NUL,
                          output=f"out{NUL}put", state="done", done=True))
    store.add(item("text", chat, text=f"answer{NUL}here", done=True))
    file_id = store.add_file(f"odd{NUL}name.txt", b"bytes\x00kept", person=owner)
    memory = store.add_memory(agent.id, f"remember{NUL}this")
    added = store.add_plugin(plugin(agent.id, "https://mcp.example.com/mcp", name=f"plug{NUL}in"))
    store.update(call.id, output=f"changed{NUL}again")
    store.add_skill(Skill(name=f"sk{NUL}ill", description=f"d{NUL}", body=f"b{NUL}"))

    assert store.conversation(chat).title == f"ti{FFFD}tle"
    texts = {i.id: i for i in store.items(chat)}
    assert texts[said.id].text == f"pasted{FFFD}text"
    assert texts[call.id].input == json.dumps({"t": f"a{NUL}b"}) + FFFD  # JSON's own escape stays as it is
    assert json.loads(texts[call.id].input[:-1]) == {"t": f"a{NUL}b"}
    assert texts[call.id].output == f"changed{FFFD}again"
    assert [i.text for i in texts.values() if i.kind == "text"] == [f"answer{FFFD}here"]
    row, data = store.file_bytes(file_id)
    assert data == b"bytes\x00kept" and NUL not in row["name"]
    assert [m["text"] for m in store.memories(agent.id) if m["id"] == memory] == [f"remember{FFFD}this"]
    assert [p.name for p in store.plugins(agent.id) if p.id == added.id] == [f"plug{FFFD}in"]
    assert [(s.name, s.description, s.body) for s in store.skills()] == [(f"sk{FFFD}ill", f"d{FFFD}", f"b{FFFD}")]
    # read with a NUL in the parameter: the same rule, so it finds what was saved
    assert store.db.execute("SELECT count(*) FROM items WHERE text = ?", [f"pasted{NUL}text"]).fetchone()[0] == 1


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    return on_both_engines(request, env, monkeypatch)


def test_a_conversation_with_nuls_everywhere_reads_the_same_on_both_engines(make_client, fake):
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = soup(client.get("/agents")).select_one(".agent-list a")["href"]
        token = csrf(client, url)
        client.post(url + "/plugins", data={"_csrf_token": token, "address": mcp.url})
        fake.script([text(f"Let me{NUL} echo."), tool_call("127_0_0_1_echo", {"text": f"back{NUL}again"})],
                    f"Done{NUL} now.")
        chat = start_chat(client, f"Say{NUL} it", token=token)
        page = wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]')
                        and p.select_one("article.call") and len(p.select("article.text")) == 2 and p)
        assert page.select_one("article.user .body").get_text(strip=True) == f"Say{FFFD} it"
        answers = [a.get_text(strip=True) for a in page.select("article.text")]
        assert answers == [f"Let me{FFFD} echo.", f"Done{FFFD} now."]
        call = page.select_one("article.call")
        assert call.select_one(".state").text == "done"
        assert call.select_one("pre.output").text == f"back{FFFD}again"
        # the model was sent the tool's output and the person's words as they were kept
        sent = fake.streamed[1]["messages"]
        assert sent[-1]["content"] == f"back{FFFD}again"
        assert any(m["role"] == "user" and FFFD in json.dumps(m["content"], ensure_ascii=False) for m in sent)
        assert NUL not in client.get(chat).text

