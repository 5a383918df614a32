"""The agent page's tools and plugins tabs, and plugin tools used in a run."""
import socket

import pytest

from tests.conftest import database, csrf, idle, soup, start_chat, wait_for
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import tool_call


def agent_url(client) -> str:
    return soup(client.get("/agents")).select_one(".agent-list a")["href"]


def test_the_tools_tab_lists_builtin_tools_with_two_checkboxes(client):
    page = soup(client.get(agent_url(client) + "?tab=tools"))
    rows = page.select("table.tools tbody tr:has(td)")
    names = [r.select_one("code").text for r in rows]
    assert names[:3] == ["fetch_page", "web_search", "update_plan"]
    for r in rows:
        use, approve = r.select('input[type="checkbox"]')
        assert use["name"] == "use" and use.has_attr("checked"), "'' means every tool"
        assert approve["name"] == "approve" and not approve.has_attr("checked")


def test_the_tools_tab_says_what_each_tool_does_in_a_line_for_a_person(client):
    """Not the text written for the model (when to call it, its rules), but a line for a person."""
    from app.tools.standard import builtin_tools

    page = soup(client.get(agent_url(client) + "?tab=tools"))
    lines = {r.select_one("code").text: r.select_one("div.muted").text for r in page.select("table.tools tbody tr:has(td)")}
    assert lines["fetch_page"].startswith("Reads a public web page")
    assert lines["update_plan"] == "Keeps a checklist of the agent's plan, pinned above your message box."
    for tool in builtin_tools():
        assert tool.summary and len(tool.summary) <= 120 and tool.description[:60] not in lines[tool.name]


def test_a_plugin_tools_line_for_a_person_is_its_descriptions_first_sentence():
    from app.plugins.tools import LINE_MAX, person_line

    assert person_line("Echoes back the input. Call it with a message; the message must be short.") == \
        "Echoes back the input."
    assert person_line("", "Echo tool") == "Echo tool"
    long = person_line("word " * 60)
    assert len(long) <= LINE_MAX and long.endswith("…")


def test_tools_are_stored_as_the_seed_says(client, data):
    from app.store import db as dbm
    url = agent_url(client)
    token = csrf(client, url)
    shown = ["fetch_page", "update_plan"]
    client.post(url + "/tools", data={"_csrf_token": token, "shown": shown, "use": ["update_plan"],
                                      "approve": ["update_plan"]})
    db = dbm.connect(database(data))
    row = db.conn.execute("SELECT tools, approve FROM assistants").fetchone()
    assert (row["tools"], row["approve"]) == ("update_plan", "update_plan")
    client.post(url + "/tools", data={"_csrf_token": token, "shown": shown, "use": shown})
    row = db.conn.execute("SELECT tools, approve FROM assistants").fetchone()
    assert (row["tools"], row["approve"]) == ("", ""), "every offered tool checked means all"
    page = soup(client.get(url + "?tab=tools"))
    assert all(i.has_attr("checked") for i in page.select('input[name="use"]'))


def test_a_tool_the_agent_may_not_use_is_not_offered_to_the_model(client, fake):
    url = agent_url(client)
    token = csrf(client, url)
    client.post(url + "/tools", data={"_csrf_token": token, "shown": ["fetch_page", "update_plan"],
                                      "use": ["update_plan"]})
    chat = start_chat(client, "hi", token=token)
    request = fake.wait_requests(1)[0]
    assert [t["function"]["name"] for t in request["tools"]] == ["update_plan"]


@pytest.mark.parametrize("name,status,says", [
    ("", 400, "required"), ("   ", 400, "required"), ("x" * 81, 400, "at most 80"),
])
def test_agent_names_are_checked(client, name, status, says):
    r = client.post("/agents", data={"_csrf_token": csrf(client), "name": name})
    assert r.status_code == status and says in r.text


def test_create_edit_and_delete_an_agent_keeping_its_conversations(client):
    token = csrf(client)
    r = client.post("/agents", data={"_csrf_token": token, "name": "Researcher"}, follow_redirects=False)
    url = r.headers["location"].split("?")[0]
    client.post(url, data={"_csrf_token": token, "name": "Researcher 2", "instructions": "Cite sources.", "model": ""})
    page = soup(client.get(url))
    assert page.select_one("h1").text == "Researcher 2"
    assert page.select_one("textarea[name=instructions]").text == "Cite sources."
    confirm = soup(client.get(url + "/delete"))
    assert "Delete Researcher 2?" in confirm.text and confirm.select_one("main form button").text == "Delete"
    r = client.post(url + "/delete", data={"_csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303 and client.get(url).status_code == 404


def test_plugins_tab_adds_lists_masks_and_removes(make_client):
    with FakeMCPServer(require="Bearer s3cret-value-123") as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        token = csrf(client, url)
        client.post(url + "/plugins", data={"_csrf_token": token, "address": mcp.url, "header": "Authorization",
                                            "secret": "s3cret-value-123"})
        page = client.get(url + "?tab=plugins")
        assert "s3cret-value-123" not in page.text, "the secret is never rendered back"
        item = soup(page).select_one("li.plugin")
        assert item.select_one("strong").text == "127_0_0_1" and "tools" in item.text
        tools = [c.text for c in soup(client.get(url + "?tab=tools")).select("table.tools code")]
        assert "127_0_0_1_add" in tools
        form = soup(page).select_one("li.plugin form")["action"]
        client.post(form, data={"_csrf_token": token, "action": "disable"})
        assert "disabled" in soup(client.get(url + "?tab=plugins")).select_one("li.plugin").text
        assert "127_0_0_1_add" not in client.get(url + "?tab=tools").text
        client.post(form, data={"_csrf_token": token, "action": "delete"})
        assert soup(client.get(url + "?tab=plugins")).select("li.plugin") == []


def test_a_loopback_plugin_is_refused_unless_private_plugins_are_allowed(client):
    with FakeMCPServer() as mcp:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": mcp.url})
        status = soup(client.get(url + "?tab=plugins")).select_one("li.plugin").text
        assert "refused:" in status and "loopback" in status


@pytest.mark.parametrize("address,says", [
    ("", "http:// or https://"), ("ftp://x", "http:// or https://"), ("javascript:alert(1)", "http:// or https://"),
    ("https://" + "a" * 3000, "too long"),
])
def test_bad_plugin_addresses(client, address, says):
    url = agent_url(client)
    r = client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": address})
    assert r.status_code in (400, 413) and says in r.text


def test_a_plugin_tool_is_used_in_a_run(make_client, fake):
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        token = csrf(client, url)
        client.post(url + "/plugins", data={"_csrf_token": token, "address": mcp.url})
        fake.script([tool_call("127_0_0_1_add", {"a": 2, "b": 3})], "2 + 3 is 5.")
        chat = start_chat(client, "add 2 and 3", token=token)
        page = wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and
                        p.select_one("article.call") and p)
        call = page.select_one("article.call")
        assert call.select_one(".state").text == "done" and call.select_one("pre.output").text == "5"
        assert fake.streamed[1]["messages"][-1]["content"] == "5"
        assert page.select("article.text")[-1].get_text(strip=True) == "2 + 3 is 5."


def test_a_plugin_listing_left_running_by_a_run_ends_with_the_worker(make_client, fake):
    """A plugin that listed its tools and then went silent: a run waits a second for its
    listing, goes on with the tools listed before, and leaves the listing running (its answer
    is for the next run). The worker's stop ends it too: left running, it outlived the
    worker's loop (in_process fails the test on such a task)."""
    from app.plugins import tools as mcp_tools

    with socket.socket() as silent, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        with FakeMCPServer() as mcp:
            url = agent_url(client)
            token = csrf(client, url)
            client.post(url + "/plugins", data={"_csrf_token": token, "address": mcp.url})  # listed, kept
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind(("127.0.0.1", mcp.port))
        silent.listen()  # takes connections, never answers
        fake.script("Answered with the tools listed before.")
        page = idle(client, start_chat(client, "hello", token=token))
        assert page.select("article.text")[-1].get_text(strip=True) == "Answered with the tools listed before."
        assert [t for t in mcp_tools._pending.values() if not t.done()], "the listing is still under way"


def test_a_failing_plugin_tool_is_a_failed_call_the_model_sees(make_client, fake):
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        token = csrf(client, url)
        client.post(url + "/plugins", data={"_csrf_token": token, "address": mcp.url})
        fake.script([tool_call("127_0_0_1_fail", {})], "It failed.")
        chat = start_chat(client, "fail", token=token)
        page = wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and p)
        assert page.select_one("article.call .state").text == "failed"
        assert "the disk is full" in fake.streamed[1]["messages"][-1]["content"]


def test_a_new_conversation_picks_its_agent(client, fake, data):
    token = csrf(client)
    r = client.post("/agents", data={"_csrf_token": token, "name": "Poet"}, follow_redirects=False)
    poet = r.headers["location"].split("?")[0].rsplit("/", 1)[1]
    client.post(f"/agents/{poet}", data={"_csrf_token": token, "name": "Poet", "instructions": "Answer in verse.",
                                         "model": ""})
    picker = soup(client.get("/")).select_one('form.pick-agent select[name=agent]')
    assert [o.text for o in picker.select("option")] == ["Assistant", "Poet"]
    chat = start_chat(client, "rain", agent=poet, token=token)
    assert fake.wait_requests(1)[0]["messages"][0]["content"].startswith("Answer in verse.")
    for bad in ["999", "x", "-1", "1" * 40]:
        assert client.post("/c", data={"_csrf_token": token, "agent": bad}).status_code in (400, 413)


def test_private_plugins_are_lifted_for_the_owners_agents_only(make_client, fake, data):
    """CHAT_PRIVATE_PLUGINS=1 lets the owner's agents reach a plugin on this computer; another
    person's agent is still refused (the owner's private network is not theirs to reach)."""
    from tests.conftest import COOKIE, signed_in

    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": mcp.url})
        from app.store import db as dbm
        db = dbm.connect(database(data))
        [(status,)] = db.conn.execute("SELECT status FROM plugins").fetchall()
        db.conn.close()
        assert "refused" in status, status
        fake.script([tool_call("127_0_0_1_add", {"a": 2, "b": 3})], "no tool")
        chat = start_chat(client, "add 2 and 3")
        wait_for(lambda: soup(client.get(chat)).select_one('#status[data-running="0"]') and len(fake.streamed) >= 1)
        offered = {t["function"]["name"] for t in fake.streamed[0].get("tools", [])}
        assert "127_0_0_1_add" not in offered, "Bea's agent is not offered the loopback plugin's tools"
