"""The Python API: each of the seed's functions called as the seed writes it
(`items.add(Chat.asked(prompt, chat, model))` is `store.add(api.asked(prompt, chat.id, model))`),
returning what the seed says; the runner behind `serve` answers what they write."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from app import api, markdown
from app.store import db as dbm
from app.providers.ids import GROUP_LOCAL, GROUP_SERVER, Choice
from app.tables import Assistant, Chip, Item, Plugin, Skill
from tests.conftest import serve_in_loop
from tests.fakes.openai_server import rate, text, tool_call

ROOT = Path(__file__).resolve().parent.parent
PLAN = "- [x] bread\n- [ ] tea"
LONG = "word " * 300

# The seed's functions: their parameters in order, and the defaults the seed gives.
SEED = {
    "item": [("kind", None), ("text", None), ("chat", "")],
    "asked": [("text", None), ("chat", None), ("model", ""), ("files", "")],
    "retried": [("chat", None), ("model", "")],
    "stopped": [("chat", None)],
    "decided": [("c", None), ("yes", None)],
    "assistant": [("id", None), ("name", None)],
    "plugin": [("agent", None), ("address", None)],
    "skill": [],
    "chips": [("sources", None)],
    "shapes": [],
    "keyed": [("text", None), ("key", None)],
    "groups": [("models", None)],
    "choice_of": [("id", None), ("fallback", False)],
    "in_use": [("models", None), ("agents", None), ("agent", None)],
}


def params(fn) -> list[tuple[str, object]]:
    return [(p.name, None if p.default is p.empty else p.default)
            for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD]


@pytest.mark.parametrize("name", SEED)
def test_each_seed_function_takes_the_seeds_arguments_in_its_order(name):
    fn = getattr(api, name)
    assert name in api.__all__ and fn.__doc__ and fn.__doc__.strip()
    got = params(fn)
    # the seed's parameters first, in its order, with its defaults; ours after, all optional
    assert got[:len(SEED[name])] == SEED[name]
    extra = [p for p in inspect.signature(fn).parameters.values()][len(SEED[name]):]
    assert all(p.default is not p.empty or p.kind is p.VAR_KEYWORD for p in extra), extra


# --- against the runner ----------------------------------------------------------------


async def until(done, every: float = 0.02):
    while not done():
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def serving():
    """The runner on the test's database (`api.serve`, as the README runs it), stopped after as
    serve stops by itself (`until`), so whatever its stop raises fails the test: cancelled
    instead, a CancelledError raised in its stop would pass for the cancellation. Its stop
    leaving work behind fails the test too (serve_in_loop)."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve_in_loop(until=stop.is_set))
    try:
        yield
    finally:
        stop.set()
        await task


@pytest.fixture
def session(env, data, fake):
    store = api.open()  # TABLETALK_DATA's, or DATABASE_URL's on PostgreSQL
    agent = store.default_agent()
    chat = store.new_conversation(agent.id)
    yield store, agent, chat
    store.db.conn.close()


def test_open_with_a_folder_takes_database_urls_database_when_set_as_serve_does(pg_url, tmp_path, monkeypatch):
    """`api.open(folder)` opens what `tabletalk serve` with that data folder opens: the
    PostgreSQL database when DATABASE_URL is set (the folder's SQLite file is never made),
    else the folder's SQLite file."""
    monkeypatch.setenv("TABLETALK_DATA", str(tmp_path / "default"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    store = api.open(tmp_path / "given")
    try:
        assert not dbm.postgres(store.db) and (tmp_path / "given" / "tabletalk.db").exists()
    finally:
        store.db.conn.close()

    monkeypatch.setenv("DATABASE_URL", pg_url)
    first = api.open(tmp_path / "one")
    try:
        assert dbm.postgres(first.db) and first.db.url == pg_url
        made = first.new_conversation(first.default_agent().id)
        second = api.open(tmp_path / "two")
        try:
            assert [c.id for c in second.conversations(None)] == [made.id], "one database, whichever folder"
        finally:
            second.db.conn.close()
    finally:
        first.db.conn.close()
    assert not (tmp_path / "one" / "tabletalk.db").exists() and not (tmp_path / "two" / "tabletalk.db").exists()


def of(store, chat, kind: str) -> list[Item]:
    return [it for it in store.items(chat.id) if it.kind == kind]


async def test_asked_is_a_message_the_runner_answers_with_its_model_and_files(session, fake):
    store, _, chat = session
    fake.script("WAL is a log.")
    notes = store.add_file("notes.txt", b"WAL: write-ahead logging")
    prompt, model = "What is WAL?", "other-model"
    question = store.add(api.asked(prompt, chat.id, model, str(notes)))
    assert (question.kind, question.chat, question.text, question.model, question.done) == \
        ("user", chat.id, prompt, model, False)
    assert question.file_ids == [notes] and question.turn == question.id
    assert store.conversation(chat.id).title == prompt, "the first message names its conversation"
    async with serving():
        await asyncio.wait_for(until(lambda: store.item(question.id).done), 30)
    assert [it.text for it in of(store, chat, "text")] == ["WAL is a log."]
    sent = fake.streamed[0]
    assert sent["model"] == model
    assert prompt in json.dumps(sent["messages"][-1]) and "write-ahead logging" in json.dumps(sent["messages"][-1])


def test_asked_refuses_what_is_not_a_conversation_or_file_ids():
    assert api.asked("Hi", "7").chat == 7 and api.asked("Hi", 7, files=[3, 4]).files == "3,4"
    with pytest.raises(ValueError, match="file ids"):
        api.asked("Hi", 7, files="a.txt")
    with pytest.raises(ValueError, match="a number"):
        api.asked("Hi", "c1")


async def test_retried_makes_the_last_answer_again_from_the_model_named(session, fake):
    store, _, chat = session
    fake.script("First answer.", "Second answer.")
    question = store.add(api.asked("Hello", chat.id))
    async with serving():
        await asyncio.wait_for(until(lambda: store.item(question.id).done), 30)
        again = store.add(api.retried(chat.id, "other-model"))
        assert (again.kind, again.model, again.turn) == ("retry", "other-model", question.id)
        await asyncio.wait_for(until(lambda: store.item(again.id).done), 30)
    assert [it.text for it in of(store, chat, "text")] == ["First answer.", "Second answer."]
    assert [r["model"] for r in fake.streamed] == ["fake-model", "other-model"]
    assert api.retried(chat.id).model == ""


def test_retried_with_no_answer_yet_is_refused_when_stored(session):
    store, _, chat = session
    with pytest.raises(ValueError, match="no answer"):
        store.add(api.retried(chat.id))


async def test_stopped_ends_the_run_going_and_keeps_what_it_wrote(session, fake):
    store, _, chat = session
    fake.script([rate(40), text(LONG)])
    question = store.add(api.asked("Say a lot", chat.id))
    async with serving():
        await asyncio.wait_for(until(lambda: any(t.text for t in of(store, chat, "text"))), 30)
        stop = store.add(api.stopped(chat.id))
        assert (stop.kind, stop.turn) == ("stop", question.id)
        await asyncio.wait_for(until(lambda: store.item(stop.id).done and store.item(question.id).done), 30)
    written = of(store, chat, "text")[0]
    assert written.text and LONG.startswith(written.text) and written.text != LONG
    assert len(fake.streamed) == 1


@pytest.mark.parametrize("yes,state,told", [(True, "done", "Plan saved"), (False, "declined", "declined")])
async def test_decided_approves_or_declines_a_waiting_call(session, fake, yes, state, told):
    store, agent, chat = session
    store.update_agent(agent.id, approve="update_plan")
    fake.script([tool_call("update_plan", {"plan": PLAN})], "Planned.")
    question = store.add(api.item("user", "Plan a picnic", chat.id))
    async with serving():
        await asyncio.wait_for(until(lambda: any(c.state == "approval" for c in of(store, chat, "call"))), 30)
        call = of(store, chat, "call")[0]
        with pytest.raises(TypeError):
            api.decided(call, "no")  # a word is not a decision: "no" would read as yes
        c = api.decided(call, yes)
        assert (c.id, c.state) == (call.id, "approved" if yes else "declined")
        assert store.add(c).id == call.id, "a decided call is written over its row, not added"
        await asyncio.wait_for(until(lambda: store.item(question.id).done), 30)
    assert [it.state for it in of(store, chat, "call")] == [state]
    assert told in fake.streamed[1]["messages"][-1]["content"]
    assert of(store, chat, "text")[-1].text == "Planned."
    with pytest.raises(ValueError, match="waiting for approval"):
        api.decided(store.item(call.id), True)


async def test_in_use_is_the_model_an_agent_answers_with_when_none_is_chosen(session, fake, monkeypatch):
    store, agent, chat = session
    own = store.add_agent(api.assistant(None, "Own model", model="other-model"))
    fake.script("From the default.")
    async with serving():
        await asyncio.wait_for(until(lambda: store.choices()), 30)
        models, agents = store.choices(), store.agents(None)
        assert agents[0].id == agent.id and api.in_use(models, agents, "") == "fake-model"
        assert api.in_use(models, agents, agent.id) == "fake-model" == api.in_use(models, agents, str(agent.id))
        assert api.in_use(models, agents, own.id) == "other-model"
        question = store.add(api.asked("Hi", chat.id))
        await asyncio.wait_for(until(lambda: store.item(question.id).done), 30)
    assert fake.streamed[0]["model"] == api.in_use(models, agents, agent.id)
    monkeypatch.setenv("AI_MODEL", "set-model")
    assert api.in_use(models, agents, "") == "set-model" and api.in_use(models, agents, own.id) == "other-model"
    monkeypatch.setenv("AI_MODEL", "")
    local = [Choice("local:a", "a", GROUP_LOCAL), Choice("m", "m", GROUP_SERVER)]
    assert api.in_use(local, [], "") == "m", "the server at AI_URL first"
    assert api.in_use(local[:1], [], "") == "local:a" and api.in_use([], [], "") == ""
    with pytest.raises(ValueError, match="no agent"):
        api.in_use(models, agents, 999)


# --- rows --------------------------------------------------------------------------------


def test_item_is_any_entry_of_a_conversation(session):
    store, _, chat = session
    note = store.add(api.item("text", "Noted.", chat.id))
    assert (note.kind, note.text, note.chat, note.done) == ("text", "Noted.", chat.id, False)
    assert store.item(note.id) == note
    loose = api.item("plan", PLAN)
    assert (loose.kind, loose.text, loose.chat) == ("plan", PLAN, None)
    with pytest.raises(ValueError, match="belongs to a conversation"):
        store.add(loose)
    with pytest.raises(ValueError, match="unknown item kind"):
        api.item("chat", "x", chat.id)
    # an item that has an id is written over its own row, never over another conversation's
    other = store.new_conversation(None)
    with pytest.raises(ValueError, match=f"no item {note.id} in conversation {other.id}"):
        store.add(dataclasses.replace(note, chat=other.id, text="moved"))
    assert store.item(note.id).text == "Noted." and store.add(dataclasses.replace(note, text="Noted!")).text == "Noted!"


def test_assistant_is_an_agent_with_defaults(session):
    store, _, _ = session
    made = api.assistant(None, "Scribe")
    assert isinstance(made, Assistant) and (made.id, made.name, made.instructions, made.model, made.tools,
                                             made.approve) == (None, "Scribe", "", "", "", "")
    stored = store.add_agent(made)
    assert stored.id and store.agent(stored.id).name == "Scribe"
    assert api.assistant(5, "Researcher").id == 5
    with pytest.raises(ValueError, match="at most 80"):
        api.assistant(None, "x" * 81)


def test_plugin_is_an_mcp_server_for_an_agent_named_after_its_site(session):
    store, agent, _ = session
    p = store.add_plugin(api.plugin(agent.id, "https://mcp.example.com/mcp"))
    assert isinstance(p, Plugin) and (p.agent, p.name, p.address, p.enabled) == \
        (agent.id, "example", "https://mcp.example.com/mcp", True)
    assert [q.id for q in store.plugins(agent.id)] == [p.id]


def test_skill_called_bare_is_a_new_one_to_fill_in(session):
    store, _, _ = session
    new = store.add_skill(api.skill())
    assert isinstance(new, Skill) and (new.name, new.description, new.body) == ("new-skill", "", "")
    pdf = api.skill("pdf", "Use for PDF files", "# Steps")
    assert (pdf.name, pdf.description, pdf.body) == ("pdf", "Use for PDF files", "# Steps")
    assert [s.name for s in store.skills()] == ["new-skill"]


def test_chips_are_a_calls_sources_one_per_site():
    sources = json.dumps([{"url": "https://www.example.org/a", "title": "A"}, {"url": "https://example.org/b"},
                          {"url": "javascript:alert(1)", "title": "x"}, {"url": "http://docs.python.org/3/"}])
    got = api.chips(sources)
    assert all(isinstance(c, Chip) for c in got)
    assert [(c.letter, c.site, c.title) for c in got] == [("E", "example.org", "A"),
                                                          ("D", "docs.python.org", "docs.python.org")]


def test_shapes_describe_every_table_from_the_migrations():
    shapes = api.shapes()
    assert {"assistants", "conversations", "items", "choices", "plugins", "skills", "memories",
            "contexts", "files", "runs"} <= set(shapes)
    items = {c["name"]: c for c in shapes["items"]}
    assert items["kind"]["notnull"] and items["id"]["pk"] and "turn" in items


# --- models and rendering ----------------------------------------------------------------


def test_choice_of_is_where_a_model_id_runs(monkeypatch):
    monkeypatch.setenv("AI_ACCOUNTS", "openrouter=https://openrouter.ai/api/v1|sk-or-1")
    assert api.choice_of("local:llama3:8b") == Choice("local:llama3:8b", "llama3:8b", GROUP_LOCAL)
    assert api.choice_of("openrouter:meta-llama/llama-3-8b") == \
        Choice("openrouter:meta-llama/llama-3-8b", "meta-llama/llama-3-8b", "openrouter")
    assert api.choice_of("llama3:8b") == Choice("llama3:8b", "llama3:8b", GROUP_SERVER), "no such account: AI_URL's"
    assert api.choice_of("fake-model", True) == Choice("fake-model", "fake-model", GROUP_SERVER, note="the default")
    assert api.choice_of("fake-model").note == ""
    with pytest.raises(ValueError, match="required"):
        api.choice_of("")


def test_groups_are_the_groups_of_models_in_the_order_they_first_come():
    models = [Choice("m1", "m1", GROUP_SERVER), Choice("local:a", "a", GROUP_LOCAL),
              Choice("openrouter:x", "x", "openrouter"), Choice("local:b", "b", GROUP_LOCAL),
              Choice("m2", "m2", GROUP_SERVER)]
    assert api.groups(models) == [GROUP_SERVER, GROUP_LOCAL, "openrouter"]
    assert api.groups([]) == []


def test_keyed_is_markdown_as_html_blocks_keyed_key_dot_n():
    source = "# Title\n\nSome *text* <script>alert(1)</script>.\n\n- a\n- b\n\n```py\nx = 1\n```"
    got = api.keyed(source, "m7")
    assert isinstance(got, str)
    blocks = BeautifulSoup(got, "html.parser").find_all(recursive=False)
    assert [b["id"] for b in blocks] == ["m7.0", "m7.1", "m7.2", "m7.3"]
    assert [b.find().name for b in blocks[:3]] == ["h1", "p", "ul"] and blocks[3].find("pre")
    assert not BeautifulSoup(got, "html.parser").find("script"), "raw HTML stays text"
    # the page's blocks (ids m7-N), the same HTML but for the key
    page = markdown.keyed(source, "m7")
    assert got == "".join(b.html.replace(f'id="{b.id}"', f'id="m7.{n}"') for n, b in enumerate(page))
    assert api.keyed("", "m7") == ""


# --- the README's conversation -------------------------------------------------------------


def test_the_readmes_python_conversation_runs_as_written(env, data, fake, capsys):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    fake.script([text("A plan first."), tool_call("update_plan", {"plan": PLAN})],
                "Bread and tea.", [rate(40), text(LONG)])
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    store = api.open()
    chat = store.conversations(None)[0]
    calls, texts = of(store, chat, "call"), of(store, chat, "text")
    assert [(c.name, c.state) for c in calls] == [("update_plan", "done")]
    assert [t.text for t in texts[:2]] == ["A plan first.", "Bread and tea."]
    assert len(texts) == 3 and LONG.startswith(texts[2].text) and texts[2].text != LONG, "again, then stopped"
    assert all(it.done for it in store.items(chat.id) if it.kind in ("user", "retry", "stop"))
    assert store.plan(chat.id).text == PLAN
    out = capsys.readouterr().out
    assert "update_plan" in out and "Bread and tea." in out and 'id="answer.0"' in out
    store.db.conn.close()
