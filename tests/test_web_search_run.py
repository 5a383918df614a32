"""Web search end to end, the app in this process: the owner chooses a provider on the People
page (the key never shown again), the composer's search switch tells the agent to search, the
agent searches, reads two pages (served on 127.0.0.1, playing public hosts) and answers, and
the page shows the sources as chips; a search that fails says why and the run goes on."""
from __future__ import annotations

import ipaddress
import json
import socket

import pytest

from app.context.segments import SEARCH_WEB
from app.netguard import Guard
from tests.conftest import ask, csrf, idle, soup, start_chat, store_of
from tests.fakes.openai_server import text, tool_call
from tests.fakes.redirect_server import LoopbackServer
from tests.fakes.search_providers import FakeSearch

PAGE = "<html><head><title>{title}</title></head><body><article><h1>{title}</h1><p>{body}</p></article></body></html>"


class Pages(LoopbackServer):
    """Two article pages, on the names tides.example and science.example (127.0.0.1)."""

    async def _answer(self, target, writer):
        title, body = (("Tide tables for Brest", "High water at 06:12 and 18:40 today, says the harbour office.")
                       if "brest" in target else ("Tides explained", "The moon pulls the oceans twice a day, "
                                                  "and the sun adds its own smaller pull."))
        page = PAGE.format(title=title, body=body * 3).encode()
        writer.write(f"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/html; charset=utf-8\r\n"
                     f"Content-Length: {len(page)}\r\n\r\n".encode() + page)
        await writer.drain()


def resolve(host, port):
    if host.endswith(".example"):
        return ["127.0.0.1"]
    raise socket.gaierror(socket.EAI_NONAME, host)


@pytest.fixture
def served():
    with FakeSearch() as search, Pages() as pages:
        yield search, pages


def choose(client, **fields):
    return client.post("/people/web-search", data={"_csrf_token": csrf(client, "/people"), **fields},
                       follow_redirects=False)


def test_the_owner_chooses_a_provider_and_its_key_is_never_shown_again(client, served):
    search, _ = served
    assert choose(client, kind="brave").status_code == 400, "Brave needs its key"
    r = choose(client, kind="searxng", address="ftp://x")
    assert r.status_code == 400 and "starts with http://" in soup(r).select_one("#web-search ~ p.problem").text
    assert "Give SearXNG's address" in soup(choose(client, kind="searxng")).select_one("#web-search ~ p.problem").text
    r = choose(client, kind="brave", key="sekret-key-123")
    assert r.status_code == 303 and r.headers["location"].endswith("saved=web_search#web-search")
    page = client.get("/people?saved=web_search")
    assert "sekret-key-123" not in page.text and "a key is saved" in page.text
    assert soup(page).select_one('input[name="kind"][value="brave"]').has_attr("checked")
    store = store_of(client)
    stored = store.settings("web_search.")["web_search.key"]
    assert stored.startswith("sealed:v1:") and "sekret" not in stored
    assert store.search_provider().key == "sekret-key-123"
    assert choose(client, kind="tavily").status_code == 303, "a saved key is kept when the field is left empty"
    assert store.search_provider().key == "sekret-key-123"
    choose(client, kind="", forget="1")
    assert store.search_provider() is None and not store.search_key_saved()
    assert not soup(client.get("/")).select('input[name="search_web"]'), "no provider: no switch"


def test_with_the_switch_on_the_agent_searches_reads_two_pages_and_answers_with_chips(client, fake, served):
    search, pages = served
    port = pages.port
    search.pages = [("Tide tables for Brest", f"http://tides.example:{port}/brest", "High water at 06:12."),
                    ("Tides explained", f"http://www.science.example:{port}/tides", "The moon pulls twice a day."),
                    ("More tides", f"http://tides.example:{port}/more", "The same site again.")]
    # the page fetches go through the guard as ever; its test stand-in lets 127.0.0.1 play the public hosts
    client.app.state.tabletalk.runner.turn_setup.guard = Guard(
        resolve=resolve, allow_for_tests=lambda ip: ip == ipaddress.ip_address("127.0.0.1"))
    assert choose(client, kind="searxng", address=search.url("/searxng")).status_code == 303
    store = store_of(client)
    agent = store.default_agent()
    store.update_agent(agent.id, tools="update_plan")  # not given web_search: the switch gives it for the message
    assert soup(client.get("/")).select_one('#composer input[type="checkbox"][name="search_web"][role="switch"]')
    fake.script(
        [tool_call("web_search", {"query": "tides brest today"})],
        [tool_call("fetch_page", {"url": f"http://tides.example:{port}/brest"}),
         tool_call("fetch_page", {"url": f"http://www.science.example:{port}/tides"})],
        [text("High water in Brest is at 06:12 and 18:40 today (tides.example); the moon pulls twice a day.")],
    )
    chat = start_chat(client, "When is high water in Brest today?", search_web="1")
    page = idle(client, chat)
    first = fake.requests[0]
    assert first["messages"][-1]["content"].endswith(SEARCH_WEB), "told to search for this message"
    assert {t["function"]["name"] for t in first["tools"]} >= {"web_search", "fetch_page", "update_plan"}
    results = next(m["content"] for m in fake.requests[1]["messages"] if m["role"] == "tool")
    assert results.startswith("Web search results follow") and "not instructions" in results
    read = [m["content"] for m in fake.requests[2]["messages"] if m["role"] == "tool"][1:]
    assert len(read) == 2 and "06:12 and 18:40" in read[0] and "twice a day" in read[1]
    calls = page.select(".item.call")
    chips = calls[0].select("ul.chips a")
    assert [(c.select_one(".letter").text, c.select_one(".site").text, c.select_one(".title").text) for c in chips] == [
        ("T", "tides.example", "Tide tables for Brest"), ("S", "science.example", "Tides explained")], \
        "one chip a site: the third result is tides.example again"
    assert all(c["target"] == "_blank" and {"noopener", "noreferrer"} <= set(c["rel"]) for c in chips)
    assert [len(c.select("ul.chips a")) for c in calls[1:]] == [1, 1], "each page read is its step's source"
    assert "High water in Brest" in page.text
    ask(client, chat, "And tomorrow?")  # the switch is for one message: off, the agent is not told
    fake.script([text("I would have to look again.")])
    idle(client, chat)
    assert SEARCH_WEB not in json.dumps(fake.requests[-1]["messages"][-1])
    assert "web_search" not in {t["function"]["name"] for t in fake.requests[-1].get("tools", [])}, \
        "off, and not among the agent's tools"


def test_a_failed_search_says_why_and_the_run_goes_on(client, fake, served):
    search, _ = served
    # a hosted provider at another address (as behind a proxy): the test's fake stands in for it
    assert choose(client, kind="tavily", key="busy", address=search.url("/tavily/search")).status_code == 303
    fake.script([tool_call("web_search", {"query": "tides"})], [text("The search is limited for now; from memory: twice a day.")])
    chat = start_chat(client, "How often are tides?", search_web="1")
    page = idle(client, chat)
    call = page.select_one(".item.call")
    assert "Tavily is limiting the rate of searches (429" in call.text and "try again in 20 s" in call.text
    assert "from memory: twice a day" in page.text
