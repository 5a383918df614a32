"""Playwright MCP (npm) driving Debian's Chromium, as a plugin, through the app, over
Streamable HTTP and SSE: the browser's page lasts from one step to the next (the MCP session
is kept), and a screenshot is shown on the page and kept as a file."""
from __future__ import annotations

import pytest

from tests.conftest import csrf, soup, start_chat, wait_for
from tests.fakes.openai_server import tool_call
from tests.fakes.playwright_mcp import LoopbackPage, PlaywrightMCP, installed
from tests.test_agents_tools import agent_url

pytestmark = [pytest.mark.process, pytest.mark.skipif(not installed(), reason="make npm-tools installs @playwright/mcp")]

PAGE = "<!doctype html><title>Loopback page</title><h1>Hello from loopback</h1><button>Press me</button>"


@pytest.fixture
def fake():
    """A model with a window that takes Playwright's 25 tools (about 4,600 tokens) and a screenshot."""
    from tests.fakes.openai_server import FakeModelServer, text

    with FakeModelServer(models={"fake-model": 32768}) as server:
        server.plain_default = [text("A fitting title")]
        yield server


@pytest.fixture(scope="module")
def browser_server(tmp_path_factory):
    with PlaywrightMCP(tmp_path_factory.mktemp("playwright")) as server:
        yield server


@pytest.fixture(scope="module")
def page():
    with LoopbackPage(PAGE) as served:
        yield served


@pytest.mark.parametrize("transport", ["streamable", "sse"])
def test_navigate_then_snapshot_shows_the_page_and_a_screenshot_is_shown(make_client, fake, browser_server, page,
                                                                        transport):
    address = browser_server.url if transport == "streamable" else browser_server.sse_url
    with make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "name": "browser", "address": address})
        item = soup(client.get(url + "?tab=plugins")).select_one("li.plugin")
        assert ("over Streamable HTTP" if transport == "streamable" else "over SSE") in item.text, item.text
        offered = [c.text for c in soup(client.get(url + "?tab=tools")).select("table.tools code")]
        assert {"browser_browser_navigate", "browser_browser_snapshot", "browser_browser_take_screenshot"} <= set(offered)
        fake.script([tool_call("browser_browser_navigate", {"url": page.url})],
                    [tool_call("browser_browser_snapshot", {})],
                    [tool_call("browser_browser_take_screenshot", {"type": "png"})],
                    "It says hello.")
        chat = start_chat(client, "open the page and look at it")
        approved: list[str] = []

        def answered():
            """The page once the run ended, approving each call that waits meanwhile (Playwright
            says navigating may change things, destructiveHint: such tools wait for approval
            from the moment their plugin is added), as the person would."""
            p = soup(client.get(chat))
            waiting = p.select_one("article.call:has(.state.approval)")
            if waiting is not None:
                client.post(f"{chat}/calls/{waiting['id'][1:]}", data={"_csrf_token": csrf(client), "decision": "approve"})
                approved.append(waiting.select_one("code").text if waiting.select_one("code") else waiting["id"])
                return None
            return (p.select_one('#status[data-running="0"]') and len(p.select("article.call")) == 3
                    and p.select("article.text, article.error") and p)

        shown = wait_for(answered, timeout=90)
        assert approved, "navigating waits for the person's approval (its server marks it destructive)"
        navigate, snapshot, screenshot = shown.select("article.call")
        assert [c.select_one(".state").text for c in (navigate, snapshot, screenshot)] == ["done"] * 3
        assert "Page Title: Loopback page" in navigate.select_one("pre.output").text
        looked = snapshot.select_one("pre.output").text
        assert 'heading "Hello from loopback"' in looked and 'button "Press me"' in looked, \
            "the next step's snapshot shows the page the first step opened (not about:blank)"
        img = screenshot.select_one("p.file img")
        assert img is not None and img["src"].startswith("/files/")
        served = client.get(img["src"])
        assert served.headers["content-type"] == "image/png" and served.content.startswith(b"\x89PNG")
        assert shown.select("article.text")[-1].get_text(strip=True) == "It says hello."
        sent = fake.streamed[3]["messages"]
        image = [p for p in sent[-1]["content"] if p["type"] == "image_url"][0]["image_url"]["url"]
        assert sent[-1]["role"] == "user" and image.startswith("data:image/png;base64,iVBORw0KGgo"), \
            "the model sees the screenshot too"
