"""web_search and its providers, each against a fake on 127.0.0.1 answering its documented
shape: results, and the errors a person meets (a bad key, a quota used up, a rate limit with
its wait), each in plain words; the limits a query and a run."""
from __future__ import annotations

import asyncio

import pytest

from app.tools import ToolContext
from app.tools.search_providers import SearchFailed, SearchProvider, search
from app.tools.web_search import NONE_SET, UNTRUSTED, web_search_tool
from tests.fakes.search_providers import FakeSearch

PATHS = {"searxng": "/searxng", "brave": "/brave/res/v1/web/search", "tavily": "/tavily/search",
         "exa": "/exa/search"}


@pytest.fixture(scope="module")
def fake():
    with FakeSearch(slow=3.0) as f:
        yield f


def provider(fake, kind: str, key: str = "good", path: str = "") -> SearchProvider:
    return SearchProvider(kind, fake.url(path or PATHS[kind]), "" if kind == "searxng" else key)


def found(fake, kind: str, key: str = "good", count: int = 2, path: str = "", timeout: float = 10.0):
    return asyncio.run(search(provider(fake, kind, key, path), "tides brest", count, timeout))


def failure(fake, kind: str, key: str = "good", path: str = "", timeout: float = 10.0) -> str:
    with pytest.raises(SearchFailed) as e:
        found(fake, kind, key, path=path, timeout=timeout)
    return str(e.value)


@pytest.mark.parametrize("kind", ["searxng", "brave", "tavily", "exa"])
def test_each_provider_gives_titles_addresses_and_snippets(fake, kind):
    hits = found(fake, kind)
    assert [(h.title, h.url) for h in hits] == [("Tide tables for Brest", "https://tides.example/brest"),
                                                ("Tides explained", "https://www.science.example/tides")]
    assert hits[1].snippet == "The moon pulls the oceans twice a day.", "Brave's <strong> marks are dropped"
    method, path, headers, body = fake.requests[-1]
    if kind == "searxng":
        assert method == "GET" and "format=json" in path and "q=tides+brest" in path
    elif kind == "brave":
        assert method == "GET" and "count=2" in path and headers["x-subscription-token"] == "good"
    elif kind == "tavily":
        assert method == "POST" and body == {"query": "tides brest", "max_results": 2}
        assert headers["authorization"] == "Bearer good"
    else:
        assert method == "POST" and body["numResults"] == 2 and headers["x-api-key"] == "good"


@pytest.mark.parametrize("kind", ["brave", "tavily", "exa"])
def test_a_bad_key_is_said_so(fake, kind):
    said = failure(fake, kind, "bad")
    assert "did not accept the API key (401" in said and "People page" in said


@pytest.mark.parametrize("kind, key, status", [("brave", "spent", "429"), ("brave", "month", "429"),
                                               ("tavily", "spent", "432"), ("exa", "spent", "402")])
def test_a_quota_used_up_is_said_so(fake, kind, key, status):
    said = failure(fake, kind, key)
    assert f"quota is used up ({status}" in said


@pytest.mark.parametrize("kind, wait", [("brave", 1), ("tavily", 20), ("exa", 7)])
def test_a_rate_limit_says_how_long_to_wait(fake, kind, wait):
    said = failure(fake, kind, "busy")
    assert f"limiting the rate of searches (429" in said and said.endswith(f"try again in {wait} s")


def test_searxng_without_json_and_busy_say_what_to_do(fake):
    assert "add “json” to search.formats" in failure(fake, "searxng", path="/searxng-off").replace("adds", "add")
    assert failure(fake, "searxng", path="/searxng-busy").endswith("try again in 30 s")


def test_a_slow_provider_is_cut_at_the_time_limit(fake):
    assert failure(fake, "tavily", "slow", timeout=0.5) == "Tavily did not answer within 0.5 s"


def test_no_key_and_nobody_listening_are_said_so():
    with pytest.raises(SearchFailed, match="needs an API key"):
        asyncio.run(search(SearchProvider("brave"), "x", 3, 5))
    with pytest.raises(SearchFailed, match="could not be reached at 127.0.0.1:9"):
        asyncio.run(search(SearchProvider("searxng", "http://127.0.0.1:9"), "x", 3, 5))


# --- the tool -------------------------------------------------------------------------


def run(tool, query="tides brest"):
    return asyncio.run(tool.run({"query": query}, ToolContext(chat=1, agent=None)))


def test_the_tool_marks_results_untrusted_and_makes_each_a_source(fake):
    result = run(web_search_tool(provider(fake, "searxng"), results=2))
    assert result.text.startswith(UNTRUSTED)
    assert "[1] Tide tables for Brest\nhttps://tides.example/brest\nHigh water" in result.text
    assert "[3]" not in result.text, "at most `results` a query"
    assert [(s.url, s.title) for s in result.sources] == [("https://tides.example/brest", "Tide tables for Brest"),
                                                          ("https://www.science.example/tides", "Tides explained")]


def test_the_tool_refuses_past_its_queries_a_run_and_says_failures(fake):
    tool = web_search_tool(provider(fake, "exa"), queries=2)
    run(tool), run(tool)
    with pytest.raises(RuntimeError, match="made its 2 web searches"):
        run(tool)
    with pytest.raises(RuntimeError, match="the web search failed: Exa did not accept the API key"):
        run(web_search_tool(provider(fake, "exa", "bad")))
    with pytest.raises(RuntimeError) as e:
        run(web_search_tool(None))
    assert str(e.value) == NONE_SET
    with pytest.raises(ValueError, match="too long"):
        run(web_search_tool(provider(fake, "exa")), "x" * 401)


def test_a_stop_ends_a_search_at_once(fake):
    async def go():
        ctx = ToolContext(chat=1, agent=None)
        task = asyncio.create_task(web_search_tool(provider(fake, "brave", "slow"), timeout=30).run({"query": "q"}, ctx))
        await asyncio.sleep(0.2)
        ctx.abort.set()
        return await asyncio.wait_for(task, 10)

    with pytest.raises(RuntimeError, match="stopped while searching"):
        asyncio.run(go())


def test_the_owners_choice_is_kept_with_its_key_sealed(store):
    assert store.search_provider() is None
    store.choose_search_provider("exa", "", "exa-key-1")
    stored = store.settings("web_search.")["web_search.key"]
    assert stored.startswith("sealed:v1:") and "exa-key-1" not in stored
    assert store.search_provider() == SearchProvider("exa", "", "exa-key-1")
    store.choose_search_provider("searxng", "http://127.0.0.1:8888")  # the key kept, unused by SearXNG
    assert store.search_provider() == SearchProvider("searxng", "http://127.0.0.1:8888", "exa-key-1")
    store.choose_search_provider("", "", "")
    assert store.search_provider() is None and not store.search_key_saved()


def test_an_edit_keeps_the_messages_search_switch(store):
    chat = store.new_conversation(store.default_agent().id).id
    asked = store.ask(chat, "When is high water?", search_web=True)
    assert store.item(asked.id).search_web
    assert store.item(store.edit(store.item(asked.id), "When is low water?").id).search_web
