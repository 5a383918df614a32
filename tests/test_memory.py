"""Memory: `remember` keeps a text for the agent, later runs of that agent read it back."""

from app.store import Store, db as dbm, schema
from app.tools import ToolContext
from app.tools.memory import PROMPT_CHARS, PROMPT_COUNT, prompt_section, recalled, remember
from tests.conftest import csrf, database, soup, start_chat, wait_for
from tests.fakes.openai_server import tool_call

FACT = "The person's name is Ada and she prefers metric units."


def store_of(data) -> Store:
    return Store(dbm.connect(database(data)))


def memories(data) -> list[tuple[int, str]]:
    store = store_of(data)
    try:
        return [(r["agent"], r["text"]) for r in store.db.conn.execute("SELECT agent, text FROM memories ORDER BY id").fetchall()]
    finally:
        store.db.conn.close()


def finished(client, chat):
    return wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and p)


def ask(client, text, chat=None):
    token = csrf(client)
    if chat:
        client.post(chat + "/ask", data={"_csrf_token": token, "text": text})
    else:
        chat = start_chat(client, text, token=token)
    return finished(client, chat) and chat


def system(request) -> str:
    first = request["messages"][0]
    return first["content"] if first["role"] == "system" else ""


def default_agent_url(client) -> str:
    return soup(client.get("/agents")).select_one(".agent-list a")["href"]


def test_a_memory_is_in_the_next_run_of_the_same_agent_and_not_of_another(client, fake, data):
    fake.script([tool_call("remember", {"text": f"  {FACT}\n"})], "I'll remember that.")
    first = ask(client, "Remember: my name is Ada, and I like metric units.")
    assert fake.streamed[1]["messages"][-1]["content"].startswith("Remembered.")
    assert "What you remember" not in system(fake.streamed[0]), "nothing was remembered before"
    assert [text for _, text in memories(data)] == [FACT], "trimmed"

    ask(client, "What is my name?")  # another conversation, same agent
    prompt = system(fake.streamed[2])
    assert prompt.startswith("You are a helpful assistant"), "the instructions come first"
    assert f"## What you remember\n\nFrom your earlier conversations, oldest first:\n\n- {FACT}" in prompt

    # another agent, in a conversation of its own
    token = csrf(client, "/agents")
    other = client.post("/agents", data={"_csrf_token": token, "name": "Other"},
                        follow_redirects=False).headers["location"].split("?")[0]
    client.post(other, data={"_csrf_token": token, "name": "Other", "instructions": "You are Other.", "model": ""})
    store = store_of(data)
    convo = store.new_conversation(int(other.rsplit("/", 1)[1]))
    store.db.conn.close()
    assert ask(client, "What is my name?", chat=f"/c/{convo.id}") != first
    assert system(fake.streamed[3]) == "You are Other.", "no memories of the first agent"


def test_the_same_text_is_not_remembered_twice(client, fake, data):
    fake.script([tool_call("remember", {"text": FACT})],
                [tool_call("remember", {"text": "  " + FACT.upper().replace(" ", "  ") + " "})], "Done.")
    ask(client, "remember it twice")
    assert fake.streamed[2]["messages"][-1]["content"].startswith("Already remembered")
    assert [text for _, text in memories(data)] == [FACT]


def test_bad_texts_are_failed_calls_and_store_nothing(client, fake, data):
    fake.script([tool_call("remember", {"text": "   \n "})], [tool_call("remember", {"text": "x" * 2_001})],
                [tool_call("remember", {})], "Done.")
    page = finished(client, ask(client, "remember badly"))
    said = [fake.streamed[n]["messages"][-1]["content"] for n in (1, 2, 3)]
    assert "the text is empty" in said[0]
    assert "too long (2,001 characters, at most 2,000)" in said[1]
    assert "'text' is a required property" in said[2]
    assert [s.text for s in page.select("article.call .state")] == ["failed"] * 3
    assert memories(data) == []


def test_remember_needs_an_agent(tmp_path):
    import asyncio

    db = dbm.connect(tmp_path / "t.db")
    schema.migrate(db)
    store = Store(db)
    try:
        asyncio.run(remember.run({"text": "x"}, ToolContext(chat=1, agent=None, store=store)))
    except RuntimeError as e:
        assert "no agent" in str(e)
    else:
        raise AssertionError("remember without an agent must fail")
    agent = store.default_agent().id
    result = asyncio.run(remember.run({"text": " x "}, ToolContext(chat=1, agent=agent, store=store)))
    assert result.text.startswith("Remembered") and [m["text"] for m in store.memories(agent)] == ["x"]


def test_the_memory_tab_lists_and_deletes_what_the_tool_wrote(client, fake, data):
    fake.script([tool_call("remember", {"text": "<b>bold</b> & more"})], "Noted.",
                [tool_call("remember", {"text": FACT})], "Noted too.")
    ask(client, "remember one")
    ask(client, "remember two")
    url = default_agent_url(client)
    tab = soup(client.get(url + "?tab=memory"))
    assert [li.select_one("span").text for li in tab.select("ul.memories li")] == ["<b>bold</b> & more", FACT]
    assert tab.select("ul.memories b") == [], "a memory is text, not HTML"

    form = tab.select('ul.memories li form[action$="/delete"]')[0]
    r = client.post(form["action"], data={"_csrf_token": form.select_one("[name=_csrf_token]")["value"]},
                    follow_redirects=False)
    assert r.status_code == 303
    left = soup(client.get(url + "?tab=memory")).select("ul.memories li")
    assert [li.select_one("span").text for li in left] == [FACT]

    n = len(fake.streamed)
    ask(client, "and now?")
    prompt = system(fake.streamed[n])
    assert FACT in prompt and "bold" not in prompt


def test_the_prompt_holds_the_newest_memories_newest_last():
    texts = [f"memory {n}" for n in range(150)]
    kept = recalled(texts)
    assert len(kept) == PROMPT_COUNT and kept[0] == "memory 50" and kept[-1] == "memory 149"
    long = ["a" * 3_000, "b" * 3_000, "c" * 3_000, "d" * 3_000]
    assert recalled(long) == ["c" * 3_000, "d" * 3_000] and sum(map(len, recalled(long))) <= PROMPT_CHARS
    section = prompt_section(["first", "two\nlines"])
    assert section.endswith("- first\n- two\n  lines")
    assert "2 older ones are not shown" in prompt_section(long)
    assert prompt_section([]) == ""


# --- memories a person writes (issue 36) ---------------------------------------------------


def test_a_person_adds_edits_and_deletes_memories_by_hand_and_the_account_page_leads_there(client, data):
    from tests.conftest import csrf, rows, soup

    agent = rows(data, "SELECT id FROM assistants")[0]["id"]
    tab = f"/agents/{agent}?tab=memory"
    r = client.post(f"/agents/{agent}/memories/add", data={"_csrf_token": csrf(client, tab), "text": "  I live in Lyon. "},
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/agents/{agent}?tab=memory&saved=remembered"
    client.post(f"/agents/{agent}/memories/add", data={"_csrf_token": csrf(client, tab), "text": "i live in  lyon."})
    assert rows(data, "SELECT text, outside FROM memories") == [{"text": "I live in Lyon.", "outside": 0}], \
        "the same memory twice is kept once"
    page = soup(client.get(tab))
    memory = rows(data, "SELECT id FROM memories")[0]["id"]
    assert page.select_one(f'form[action="/agents/{agent}/memories/{memory}"] textarea').text == "I live in Lyon."
    client.post(f"/agents/{agent}/memories/{memory}", data={"_csrf_token": csrf(client, tab), "text": "I live in Paris."})
    assert rows(data, "SELECT text FROM memories") == [{"text": "I live in Paris."}]
    assert client.post(f"/agents/{agent}/memories/add", data={"_csrf_token": csrf(client, tab), "text": " "}).status_code == 400
    too_long = client.post(f"/agents/{agent}/memories/{memory}", data={"_csrf_token": csrf(client, tab), "text": "x" * 2001})
    assert too_long.status_code == 400
    assert client.post(f"/agents/{agent}/memories/99999", data={"_csrf_token": csrf(client, tab), "text": "x"}).status_code == 404
    account = soup(client.get("/account"))
    link = account.select_one(f'.memory-list a[href="/agents/{agent}?tab=memory"]')
    assert link is not None and "1 memory" in link.parent.text
