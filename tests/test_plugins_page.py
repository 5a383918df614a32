"""The plugins tab as a person uses it: names set and changed, address, header and secret
edited (the secret never shown back), the transport and the time the status was read, the
tools as of that status, a new plugin's tools ticked, bad input refused beside its field."""
from __future__ import annotations

import re

import pytest

from tests.conftest import csrf, soup
from tests.fakes.mcp_server import FakeMCPServer, free_port


def agent_url(client) -> str:
    return soup(client.get("/agents")).select_one(".agent-list a")["href"]


def plugins_of(client, url) -> list:
    return soup(client.get(url + "?tab=plugins")).select("li.plugin")


def add(client, url, **fields):
    return client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), **fields})


def edit(client, url, item, **fields):
    action = item.select_one("details.plugin-edit form")["action"]
    return client.post(action, data={"_csrf_token": csrf(client, url), "action": "save", **fields})


@pytest.fixture
def private(make_client):
    with make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        yield client


def test_a_plugin_is_named_as_the_person_says_and_renamed(private):
    with FakeMCPServer() as mcp:
        url = agent_url(private)
        add(private, url, name="weather", address=mcp.url)
        item = plugins_of(private, url)[0]
        assert item.select_one("strong").text == "weather"
        meta = item.select_one("div.muted").text
        assert "over Streamable HTTP" in meta and re.search(r"\d+ tools \(read \d\d:\d\d\)", meta), meta
        listed = [c.text for c in item.select("details.plugin-tools code")]
        assert "add" in listed and "echo" in listed, "its tools as of that status"
        tools = [c.text for c in soup(private.get(url + "?tab=tools")).select("table.tools code")]
        assert "weather_add" in tools
        r = edit(private, url, item, name="sky", address=mcp.url, header="", secret="")
        assert r.status_code == 200 and "Plugin saved." in r.text
        assert plugins_of(private, url)[0].select_one("strong").text == "sky"
        tools = [c.text for c in soup(private.get(url + "?tab=tools")).select("table.tools code")]
        assert "sky_add" in tools and "weather_add" not in tools


def test_without_a_name_it_is_named_after_its_site_as_before(private):
    with FakeMCPServer() as mcp:
        url = agent_url(private)
        add(private, url, address=mcp.url)
        add(private, url, address=mcp.url)
        assert [i.select_one("strong").text for i in plugins_of(private, url)] == ["127_0_0_1", "127_0_0_1_2"]


@pytest.mark.parametrize("name,says", [
    ("<script>alert(1)</script>", "letters, digits, - and _ only"),
    ("two words", "letters, digits, - and _ only"),
    ("x" * 41, "at most 40 characters"),
    ("fetch", "read as built-in ones"),
    ("ev", "has a plugin named “ev” already"),
    ("EV", "has a plugin named “EV” already"),
])
def test_bad_names_are_refused_beside_the_field(private, name, says):
    with FakeMCPServer() as mcp:
        url = agent_url(private)
        add(private, url, name="ev", address=mcp.url)
        r = add(private, url, name=name, address=mcp.url)
        assert r.status_code == 400
        page = soup(r)
        note = page.select_one("#problem-name")
        assert note is not None and says in note.text, r.text[-2000:]
        assert "<script>alert" not in r.text, "a hostile name is shown escaped"
        assert page.select('input[name="address"]')[-1]["value"] == mcp.url, "the form as typed"
        assert len(plugins_of(private, url)) == 1


def test_an_edit_with_an_empty_name_is_refused(private):
    with FakeMCPServer() as mcp:
        url = agent_url(private)
        add(private, url, name="ev", address=mcp.url)
        r = edit(private, url, plugins_of(private, url)[0], name="", address=mcp.url)
        assert r.status_code == 400
        page = soup(r)
        assert "letters, digits" in page.select_one("#problem-name").text
        assert page.select_one("details.plugin-edit[open]") is not None, "the form stays open as typed"


@pytest.mark.parametrize("address,says", [
    ("", "http:// or https:// URL"),
    ("ftp://example.com/mcp", "http:// or https:// URL"),
    ("http://", "http:// or https:// URL"),
    ("http://exa mple.com/mcp", "no spaces"),
    ("http://[::1/mcp", "not a valid URL"),
    ("https://" + "a" * 3000, "too long: at most 2,000 characters"),
])
def test_bad_addresses_are_refused_beside_the_field_when_editing(private, address, says):
    with FakeMCPServer() as mcp:
        url = agent_url(private)
        add(private, url, name="ev", address=mcp.url)
        r = edit(private, url, plugins_of(private, url)[0], name="ev", address=address)
        assert r.status_code == 400
        assert says in soup(r).select_one("#problem-address").text
        assert plugins_of(private, url)[0].select_one("span.muted").text == mcp.url, "nothing changed"


def test_the_secret_is_never_shown_blank_keeps_it_and_it_can_be_removed(private):
    with FakeMCPServer(require="Bearer s3cret-value-123") as mcp:
        url = agent_url(private)
        add(private, url, name="ev", address=mcp.url, secret="wrong-secret-000")
        item = plugins_of(private, url)[0]
        assert "401: the server refused the secret" in item.text
        r = edit(private, url, item, name="ev", address=mcp.url, header="Authorization", secret="s3cret-value-123")
        assert "s3cret-value-123" not in r.text
        page = private.get(url + "?tab=plugins").text
        assert "s3cret-value-123" not in page and "wrong-secret" not in page, "never rendered back"
        item = plugins_of(private, url)[0]
        assert re.search(r"\d+ tools", item.select_one("div.muted").text), "the new secret works"
        assert not item.select_one('details.plugin-edit input[name="secret"]').has_attr("value")
        edit(private, url, item, name="ev2", address=mcp.url, header="Authorization", secret="")
        item = plugins_of(private, url)[0]
        assert item.select_one("strong").text == "ev2" and re.search(r"\d+ tools", item.text), "blank kept it"
        edit(private, url, item, name="ev2", address=mcp.url, header="Authorization", secret="", forget="1")
        assert "401: the server asks" in plugins_of(private, url)[0].text, "the secret is gone"


def test_the_address_is_edited_and_the_transport_shown(private):
    with FakeMCPServer() as streamable, FakeMCPServer(transport="sse") as sse:
        url = agent_url(private)
        add(private, url, name="ev", address=streamable.url)
        assert "over Streamable HTTP" in plugins_of(private, url)[0].text
        edit(private, url, plugins_of(private, url)[0], name="ev", address=sse.url)
        item = plugins_of(private, url)[0]
        assert item.select_one("span.muted").text == sse.url and "over SSE" in item.text


def test_a_dead_plugins_tools_are_marked_as_listed_before(private):
    mcp = FakeMCPServer().start()
    url = agent_url(private)
    try:
        add(private, url, name="ev", address=mcp.url)
    finally:
        mcp.stop()
    item = plugins_of(private, url)[0]
    private.post(item.select_one("form.inline")["action"], data={"_csrf_token": csrf(private, url),
                                                                 "action": "refresh"})
    item = plugins_of(private, url)[0]
    assert "unreachable" in item.select_one("div.muted").text
    assert "down" in item["class"]
    summary = item.select_one("details.plugin-tools summary").text
    assert "as listed before" in summary and "not answering now" in summary
    assert "add" in [c.text for c in item.select("details.plugin-tools code")]
    tab = soup(private.get(url + "?tab=tools"))
    heading = next(th.text for th in tab.select("table.tools th[colspan]") if "ev" in th.text)
    assert "unreachable" in heading and "as listed before" in heading, heading


def test_a_new_plugins_tools_are_ticked_after_a_tool_was_unticked(private):
    with FakeMCPServer() as one, FakeMCPServer() as two:
        url = agent_url(private)
        token = csrf(private, url)
        add(private, url, name="one", address=one.url)
        tab = soup(private.get(url + "?tab=tools"))
        shown = [i["value"] for i in tab.select('input[name="shown"]')]
        use = [v for v, code in zip(shown, [c.text for c in tab.select("table.tools code")]) if code != "fetch_page"]
        private.post(url + "/tools", data={"_csrf_token": token, "shown": shown, "use": use})
        add(private, url, name="two", address=two.url)
        tab = soup(private.get(url + "?tab=tools"))
        ticked = {r.select_one("code").text: r.select_one('input[name="use"]').has_attr("checked")
                  for r in tab.select("table.tools tbody tr:has(td)")}
        assert ticked["fetch_page"] is False, "the person's choice stays"
        assert ticked["one_add"] and ticked["two_add"] and ticked["two_echo"], ticked
        # unticking one tool of the new plugin keeps the rest ticked, and fetch_page off
        shown = [i["value"] for i in tab.select('input[name="shown"]')]
        codes = [c.text for c in tab.select("table.tools code")]
        use = [v for v, code in zip(shown, codes) if code not in ("fetch_page", "two_echo")]
        private.post(url + "/tools", data={"_csrf_token": token, "shown": shown, "use": use})
        tab = soup(private.get(url + "?tab=tools"))
        ticked = {r.select_one("code").text: r.select_one('input[name="use"]').has_attr("checked")
                  for r in tab.select("table.tools tbody tr:has(td)")}
        assert (ticked["fetch_page"], ticked["two_echo"], ticked["two_add"], ticked["one_add"]) == \
            (False, False, True, True)


async def test_a_plugin_down_after_a_restart_offers_its_kept_tools_and_says_why(store):
    """This process never listed it (a restart), and it does not answer: the run offers the
    tools its row keeps, and a call to one tells the model the plugin is unreachable."""
    from app.plugins import tools as mcp_tools
    from app.plugins.sessions import Sessions
    from app.config import Config
    from app.tables import Assistant, plugin
    from app.tools import ToolContext
    from pathlib import Path

    agent = store.add_agent(Assistant(name="a", instructions=""))
    config = Config(data=Path("."), ai_url="", ai_key="", ai_model="", ollama_host="", private_plugins=True,
                    context_window=8192, model_timeout=60)
    with FakeMCPServer() as mcp:
        p = store.add_plugin(plugin(agent.id, mcp.url, name="ev"))
        run = mcp_tools.PluginRun(Sessions(), store)
        assert [t.name for t in await mcp_tools.agent_tools(store, config, agent, set(), run)][:1]
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    store.update_plugin(p.id, address=dead)  # the server is gone (and this process forgets it listed it)
    mcp_tools._last.clear()
    mcp_tools._down.clear()
    tools = {t.name: t for t in await mcp_tools.agent_tools(store, config, agent, set(), run)}
    assert "ev_add" in tools
    assert store.plugin_row(p.id).status.startswith("unreachable (")
    assert "as listed before" in store.plugin_row(p.id).status
    with pytest.raises(mcp_tools.PluginError) as failed:
        await tools["ev_add"].run({"a": 1, "b": 2}, ToolContext(chat=1, agent=agent.id))
    assert str(failed.value) == "The plugin ev is unreachable."


@pytest.mark.parametrize("command,args,name", [
    ("/usr/bin/npx", ("-y", "@modelcontextprotocol/server-memory"), "memory"),
    ("/usr/bin/npx", ("-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/srv"), "filesystem"),
    ("/usr/bin/npx", ("@playwright/mcp@latest",), "playwright"),
    ("uvx", ("mcp-server-git", "--repository", "."), "git"),
    ("/opt/venv/bin/mcp-server-time", (), "time"),
    ("/usr/bin/python3", ("-m", "mcp_server_fetch"), "fetch"),
    ("/usr/bin/node", ("/x/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"), "everything"),
    ("/usr/local/bin/my-tool", ("--flag",), "my-tool"),
])
def test_a_command_plugin_is_named_after_its_package_or_program(command, args, name):
    from app.plugins.stdio import program_name

    assert program_name(command, args) == name


def test_a_running_calls_summary_line_says_its_latest_progress():
    from app.tables import item
    from app.web.live import state_html

    def it(kind, id, turn, text="", **kw):
        return item(kind, 1, text, id=id, turn=turn, **kw)

    running = it("call", 6, 1, name="fs_index", input="{}", state="running", output="1/10\n3/10 folders read")
    assert ">running: 3/10 folders read</span>" in state_html(running)
    done = it("call", 7, 1, name="fs_index", input="{}", state="done", output="all read", done=True)
    assert ">done</span>" in state_html(done)


def test_the_tab_warns_when_the_tools_take_more_than_half_the_window(make_client):
    from app.context.window import tools_tokens
    from app.tools.standard import builtin_tools

    window = tools_tokens(builtin_tools()) * 2 + 200  # the built-in tools fit in half of it, a plugin's do not
    with make_client(CHAT_PRIVATE_PLUGINS="1", TABLETALK_CONTEXT_WINDOW=str(window)) as client, \
            FakeMCPServer() as mcp:
        url = agent_url(client)
        assert "more than half" not in soup(client.get(url + "?tab=plugins")).text
        add(client, url, name="fake", address=mcp.url)
        said = soup(client.get(url + "?tab=plugins")).select_one("p.problem").text
        assert "more than half" in said and f"window of {window:,}" in said, said
