"""A plugin behind OAuth (tests/fakes/oauth_server.py: an authorization server and an MCP
server of ours, the mcp package's server auth pieces) connected with the MCP authorization
flow from the agent's Plugins tab, in Debian's Chromium with JavaScript off: discovery,
dynamic client registration, PKCE, the redirect back, tokens kept in the plugin's row and
refreshed. What a person sees at each step."""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.conftest import Served, rows, soup, wait_for
from tests.fakes.oauth_server import OAuthMCPServer
from tests.fakes.openai_server import tool_call

pytestmark = pytest.mark.browser


@pytest.fixture
def oauth_server():
    with OAuthMCPServer(token_seconds=3600) as s:
        yield s


@pytest.fixture
def site(data, env):
    s = Served(data, {**env, "CHAT_PRIVATE_PLUGINS": "1"}).start()
    yield s
    s.stop()


def add_plugin(site, server) -> str:
    """The plugin added as a person adds it; the agent's Plugins tab address."""
    with site.client() as c:
        agent = soup(c.get("/agents")).select_one(".agent-list a")["href"]
        token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get(agent).text).group(1)
        c.post(agent + "/plugins", data={"_csrf_token": token, "address": server.url})
    return agent + "?tab=plugins"


def connect(page, plugins_tab, answer="Allow"):
    page.goto(plugins_tab)
    page.click("button:has-text('Connect with OAuth')")
    assert page.locator("h1").inner_text() == "Connect 127_0_0_1"
    page.click("a:has-text('Continue to')")
    assert page.locator("h1").inner_text() == "Allow Tabletalk?", "the authorization server's own page"
    page.click(f"button:has-text('{answer}')")
    page.wait_for_load_state()


def status(page) -> str:
    """The plugin's status as its line says it (without when it was read)."""
    said = page.locator(".plugins li > div.muted").first.inner_text().split(" · ")[-1]
    return re.sub(r" \(read \d\d:\d\d\)$", "", said)


def test_connecting_with_oauth_from_the_plugins_tab_without_script(site, oauth_server, browser):
    tab = add_plugin(site, oauth_server)
    with site.watched_page(browser, console=False, java_script_enabled=False) as page:  # the sign-in site has no favicon
        page.goto(tab)
        assert status(page) == "401: the server asks you to sign in: connect with OAuth"
        connect(page, tab)
        assert "tab=plugins&saved=connected" in page.url
        assert page.locator(".saved, [role=status]").first.inner_text().strip() == "Connected with OAuth."
        assert re.fullmatch(r"\d+ tools", status(page)), status(page)
        assert page.locator(".plugins li > div.muted").first.inner_text().startswith("over Streamable HTTP · ")
        assert page.locator(".plugins li").first.inner_text().count("Connected with OAuth") == 1
    assert (oauth_server.registered, oauth_server.issued) == (1, 1)
    stored = rows(site.data, "SELECT plugin, client, tokens FROM plugin_auth")[0]
    with site.store() as store:  # kept sealed (app/store/plugin_auth.py), opened by the store
        row = store.plugin_auth(stored["plugin"])
    client, tokens = json.loads(row["client"]), json.loads(row["tokens"])
    assert all(stored[c].startswith("sealed:v1:") for c in ("client", "tokens"))
    assert tokens["token"]["access_token"] not in stored["tokens"]
    assert client["redirect_uris"] == [f"{site.url}/oauth/callback"] and client["client_name"] == "Tabletalk"
    assert tokens["token"]["access_token"].startswith("at-") and tokens["token"]["refresh_token"].startswith("rt-")
    assert tokens["expires_at"] > time.time() + 3000 and row["pending"] == ""


def test_a_run_calls_the_plugin_with_its_tokens_refreshed_when_they_expire(site, oauth_server, browser, fake):
    oauth_server.token_seconds = 2
    tab = add_plugin(site, oauth_server)
    with site.watched_page(browser, console=False, java_script_enabled=False) as page:  # the sign-in site has no favicon
        connect(page, tab)
    time.sleep(2.5)  # the access token has expired: the next connection refreshes it
    fake.script([tool_call("127_0_0_1_echo", {"text": "through OAuth"})], "It echoed.")
    with site.client() as c:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/").text).group(1)
        chat = c.post("/c", data={"_csrf_token": token, "text": "echo it"}).headers["location"]
        page = wait_for(lambda: (p := soup(c.get(chat))).select_one('#status[data-running="0"]') and p, timeout=20)
    assert page.select_one("article.call .state").text == "done"
    assert page.select_one("article.call pre.output").text == "through OAuth"
    assert oauth_server.refreshed >= 1 and oauth_server.issued == 1, "refreshed, not signed in again"
    assert oauth_server.echoed == ["through OAuth"]


def test_a_refused_sign_in_and_revoked_tokens_say_what_to_do(site, oauth_server, browser):
    tab = add_plugin(site, oauth_server)
    with site.watched_page(browser, console=False, java_script_enabled=False) as page:  # the sign-in site has no favicon
        connect(page, tab, answer="Deny")
        assert status(page) == "OAuth: the sign-in was refused (access_denied)"
        assert page.locator("button:has-text('Connect with OAuth')").count() == 1, "it may be tried again"
        connect(page, tab)
        assert "saved=connected" in page.url
        oauth_server.revoke_all()  # the server forgets its access tokens
        page.click("button:has-text('Refresh')")
        page.wait_for_load_state()
        assert status(page) == "401: connect with OAuth again"
        page.click("button:has-text('Disconnect')")
        page.wait_for_load_state()
        assert status(page) == "401: the server asks you to sign in: connect with OAuth"
    assert rows(site.data, "SELECT * FROM plugin_auth") == []


def test_a_callback_tabletalk_did_not_start_is_refused(site, oauth_server):
    with site.client() as c:
        r = c.get("/oauth/callback?code=x&state=made-up")
    assert r.status_code == 400
    assert "This sign-in is not one Tabletalk is waiting for" in r.text
