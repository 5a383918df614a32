"""Every family of rows through the store, on both engines (conftest's `store`): people,
sessions and the sign-in limiter, models and their limits, agents, memories and skills,
plugins and their MCP sessions, files, contexts and calibrations, the built-in model's row,
deleting a conversation with its tombstones."""
import sqlite3

import pytest

from app.accounts.setup import secret_key
from app.providers.ids import Choice
from app.providers.limits import Limits
from app.store.people import Taken
from app.store.secrets import APP_KEY
from app.tables import Assistant, Plugin, Skill, item


def test_people_sessions_and_the_limiter(store):
    owner = store.add_person("Ada", "hash-a", owner=True)
    with pytest.raises(Taken):
        store.add_person("ada", "other")  # names are unique without case
    bob = store.add_person("Bob", "hash-b")
    assert [p.name for p in store.people()] == ["Ada", "Bob"] and store.people_count() == 2
    assert store.person_named("Ada")[1] == "hash-a" and store.default_agent(bob).person == bob
    store.add_session("s1", bob, 60)
    store.add_session("s2", bob, 60)
    assert store.session_person("s1").name == "Bob"
    store.set_password(bob, "hash-c", keep="s2")
    assert store.session_person("s1") is None and store.session_person("s2").id == bob
    store.end_session("s2")
    assert store.session_person("s2") is None
    first = store.add_attempt(100.0, "Ada", "10.0.0.1")
    store.add_attempt(101.0, "Ada", "10.0.0.1")
    assert store.attempts_of_pair("Ada", "10.0.0.1") == (2, 101.0)
    assert store.attempts_from("10.0.0.1", 99.0) == (2, 100.0)
    store.take_back_attempt(first)
    store.forget_attempts(200.0)
    assert store.attempts_of_pair("Ada", "10.0.0.1") == (0, None)
    store.set_theme(owner, "dark")
    assert store.person(owner).theme == "dark" and store.person(owner).owner
    assert store.remove_person(bob) and not store.remove_person(owner)


def test_models_in_order_and_their_limits(store):
    store.replace_choices([Choice(id="b", name="B", group="g", window=100, tags=("tools",)),
                           Choice(id="a", name="A", group="g", up=False),
                           Choice(id="c", name="C", group="h")])
    assert [c.id for c in store.choices()] == ["b", "a", "c"]
    assert store.choice("a") is None and store.choice("b").window == 100 and store.choice("b").tags == ("tools",)
    store.replace_choices([Choice(id="c", name="C", group="h"), Choice(id="b", name="B2", group="g")])
    assert [(c.id, c.name) for c in store.choices()] == [("c", "C"), ("b", "B2")]
    assert store.limits("m") == Limits()
    store.set_limits("m", Limits(window=4096, tools=False))
    store.set_limits("m", Limits(window=2048, tools=False))
    assert store.limits("m") == Limits(window=2048, tools=False)


def test_agents_memories_and_skills(store):
    agent = store.add_agent(Assistant(name="Helper", instructions="be kind"))
    store.update_agent(agent.id, name="Helper 2", vet_memories=False)
    assert store.agent(agent.id).name == "Helper 2" and store.agent(agent.id).vet_memories is False
    chat = store.new_conversation(agent.id).id
    memory = store.add_memory(agent.id, "likes tea", outside=True, chat=chat)
    assert [(m["text"], m["outside"], m["chat"]) for m in store.memories(agent.id)] == [("likes tea", 1, chat)]
    assert store.delete_memory(agent.id, memory) and store.memories(agent.id) == []
    assert not store.outside_text(chat, ("remember",))
    store.ask(chat, "my own words")
    store.add(item("call", chat, name="remember", output="Remembered.", turn=0, done=True))
    assert not store.outside_text(chat, ("remember",))  # the person's words and an inside tool's
    store.add(item("call", chat, name="fetch_page", output="text", turn=0, done=True))
    assert store.outside_text(chat, ("remember",))
    # what else a plugin (or a file) brings in: a prompt's text, attachments, a question or sampling
    for outside in (lambda c: store.ask(c, "a prompt's words", outside=True),
                    lambda c: store.ask(c, "see the file", files=(store.add_file("a.txt", b"words"),)),
                    lambda c: store.add(item("ask", c, "Which one?", turn=0)),
                    lambda c: store.add(item("sample", c, "Write this", turn=0))):
        other = store.new_conversation(agent.id).id
        outside(other)
        assert store.outside_text(other, ("remember",))
    b = store.add_skill(Skill(name="beta", body="b"))
    store.add_skill(Skill(name="Alpha", body="a"))
    with pytest.raises(sqlite3.IntegrityError):
        store.add_skill(Skill(name="beta"))
    assert [s.name for s in store.skills()] == ["Alpha", "beta"]
    assert store.skill(b.id).name == "beta" and store.delete_skill(b.id)
    store.delete_agent(agent.id)
    assert store.conversation(chat).agent is None


def test_plugins_and_their_mcp_sessions(store):
    agent = store.default_agent().id
    plugin = store.add_plugin(Plugin(agent=agent, name="p", address="http://x", args=("a",), env=(("K", "v"),)))
    assert (plugin.args, plugin.env, plugin.enabled) == (("a",), (("K", "v"),), True)
    store.update_plugin(plugin.id, enabled=False, listed='[["t", "a tool"]]')
    assert store.plugins(agent, enabled_only=True) == [] and store.plugin_row(plugin.id).listed == '[["t", "a tool"]]'
    chat = store.new_conversation(agent).id
    store.keep_mcp_session(chat, plugin.id, "f1", "sid-1", "{}")
    store.keep_mcp_session(chat, plugin.id, "f1", "sid-2", "{}")  # the newest is kept
    assert store.mcp_session(chat, plugin.id, "f1") == ("sid-2", "{}") and store.mcp_session(chat, plugin.id, "f2") is None
    store.keep_mcp_session(999, plugin.id, "f1", "sid-3", "{}")  # no such conversation: nothing kept
    assert store.mcp_session_used(999, plugin.id) is None
    store.forget_mcp_session(chat, plugin.id, "sid-1")
    assert store.mcp_session_used(chat, plugin.id) is not None
    store.forget_mcp_session(chat, plugin.id)
    assert store.mcp_session(chat, plugin.id, "f1") is None
    store.delete_plugin(plugin.id)
    assert store.plugins(agent) == []


def test_plugin_secrets_are_kept_sealed_with_the_apps_key(store):
    from app.store import sealed

    def stored() -> list[str]:
        return [r[0] for r in store.db.conn.execute("SELECT secret FROM plugins ORDER BY id").fetchall()]

    agent = store.default_agent().id
    p = store.add_plugin(Plugin(agent=agent, name="p", address="http://x", header="X-Key", secret="typed-1"))
    assert p.secret == "typed-1" and stored()[0].startswith(sealed.PREFIX) and "typed-1" not in stored()[0]
    store.update_plugin(p.id, secret="typed-2")
    assert store.plugin_row(p.id).secret == "typed-2" and "typed-2" not in stored()[0]
    none = store.add_plugin(Plugin(agent=agent, name="q", address="http://y"))
    assert stored()[1] == "" and none.secret == ""
    # a row a release before sealing wrote: read as it is, sealed at the next start
    with store.write() as db:
        db.conn.execute("UPDATE plugins SET secret = 'as-typed' WHERE id = ?", [none.id])
    assert store.plugin_row(none.id).secret == "as-typed"
    assert store.seal_plugin_secrets() == 1 and store.seal_plugin_secrets() == 0
    assert stored()[1].startswith(sealed.PREFIX) and store.plugin_row(none.id).secret == "as-typed"
    # sealed with another key (or damaged): no secret, never an exception
    other = sealed.Seal(b"another database's key", "plugins.secret").seal("theirs")
    with store.write() as db:
        db.conn.execute("UPDATE plugins SET secret = ? WHERE id = ?", [other, none.id])
    assert store.plugin_row(none.id).secret == ""
    assert sealed.Seal(b"k", "plugins.secret").open(sealed.Seal(b"k", "models.key").seal("x")) == ""


def test_a_plugins_oauth_tokens_and_client_are_kept_sealed(store):
    from app.store import sealed

    def stored() -> dict:
        return dict(store.db.conn.execute("SELECT client, tokens, pending FROM plugin_auth").fetchone())

    agent = store.default_agent().id
    p = store.add_plugin(Plugin(agent=agent, name="p", address="http://x"))
    tokens = '{"token": {"access_token": "at-typed", "refresh_token": "rt-typed"}, "expires_at": null}'
    client = '{"client_id": "cid", "client_secret": "cs-typed"}'
    store.set_plugin_auth(p.id, tokens=tokens, client=client, pending='{"state": "s"}')
    raw = stored()
    assert all(raw[c].startswith(sealed.PREFIX) and "typed" not in raw[c] for c in ("client", "tokens")), raw
    assert raw["pending"] == '{"state": "s"}'  # a flow's state and code are no secret past the flow
    assert (store.plugin_auth(p.id)["tokens"], store.plugin_auth(p.id)["client"]) == (tokens, client)
    assert store.plugins_with_auth([p.id]) == {p.id}
    store.set_plugin_auth(p.id, tokens="")  # signed out: nothing to seal
    assert stored()["tokens"] == "" and store.plugins_with_auth([p.id]) == set()
    # rows a release before sealing wrote: read as they are, sealed at the next start
    with store.write() as db:
        db.conn.execute("UPDATE plugin_auth SET tokens = ?, client = ? WHERE plugin = ?", [tokens, client, p.id])
    assert store.plugin_auth(p.id)["tokens"] == tokens
    assert store.seal_plugin_tokens() == 1 and store.seal_plugin_tokens() == 0
    assert all(stored()[c].startswith(sealed.PREFIX) for c in ("client", "tokens"))
    assert (store.plugin_auth(p.id)["tokens"], store.plugin_auth(p.id)["client"]) == (tokens, client)


def test_a_plugin_without_a_secret_makes_no_key(store, tmp_path):
    """A script of the API may add plugins before any server has started: one without a secret
    makes no app key, so the key an install before m028 kept in its data folder is still the
    one the first start reads in (and the forms of pages open across the upgrade stay valid)."""
    agent = store.default_agent().id
    p = store.add_plugin(Plugin(agent=agent, name="p", address="http://x"))
    store.update_plugin(p.id, secret="", header="")
    assert store.secrets_named(APP_KEY) == []
    (tmp_path / APP_KEY).write_text("the-old-installs-key")
    assert secret_key(store, tmp_path) == b"the-old-installs-key"
    store.update_plugin(p.id, secret="typed")  # sealed with that key
    assert store.plugin_row(p.id).secret == "typed"


def test_files_contexts_calibrations_and_deleting(store):
    chat = store.new_conversation(None).id
    file_id = store.add_file("notes.txt", b"hello")
    user = store.ask(chat, "see the file", files=(file_id,))
    assert store.file_bytes(file_id)[1] == b"hello" and list(store.files_of([user])) == [file_id]
    store.set_context(chat, used=10, window=100)
    store.set_context(chat, used=20)
    assert (store.context(chat)["used"], store.context(chat)["window"]) == (20, 100)
    assert store.contexts_since(0, store.rev(), [chat]) == [chat]
    assert store.calibration("m") == (1.0, 0)
    store.set_calibration("m", 1.25, 3)
    assert store.calibration("m") == (1.25, 3)
    rev = store.rev()
    assert store.delete_conversation(chat) and not store.delete_conversation(chat)
    assert store.file(file_id) is None and store.items(chat) == []
    assert {(c, dom) for c, dom, _ in store.tombstones_since(rev)} == {(None, f"c{chat}"), (chat, f"c{chat}")}
    assert store.new_conversation(None).id == chat + 1  # a deleted conversation's id is never given again


def test_the_builtin_models_row(store):
    assert store.builtin().state == "" and store.want_builtin() and not store.want_builtin()
    rev = store.rev()
    store.set_builtin(state="installing", percent=40)
    assert store.builtin_since(rev, store.rev()).percent == 40
