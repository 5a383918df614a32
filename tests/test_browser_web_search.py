"""Web search in Debian's Chromium: the owner chooses SearXNG on the People page, the
composer's search switch (a checkbox without script, a switch with it) tells the agent to
search for one message, the results show as chips under the call, and a failed search says
why under its call. Screenshots on a desktop and a phone, light and dark."""
from __future__ import annotations

import json
import os
import re

import pytest
from playwright.sync_api import expect

from app.context.segments import SEARCH_WEB
from tests.conftest import SHOTS, Served, light_and_dark, wait_for
from tests.fakes.openai_server import text, tool_call
from tests.fakes.search_providers import FakeSearch

pytestmark = pytest.mark.browser

ANSWER = "High water in Brest is at 06:12 and 18:40 today, by the tide tables."


def live_part(page):
    """Without JavaScript a running conversation shows in its self-refreshing frame."""
    return page.frame_locator("iframe.watch-frame") if page.locator("iframe.watch-frame").count() else page


def choose_searxng(page, address: str) -> None:
    page.goto("/people")
    page.get_by_label("SearXNG (your own)").check()
    page.get_by_label("Address").fill(address)
    page.locator('form[action="/people/web-search"] button[type="submit"]').click()
    expect(page.locator('form[action="/people/web-search"] .saved')).to_contain_text("Saved")


def send(page, words: str, search: bool) -> None:
    switch = page.get_by_role("switch", name="Search the web")
    expect(switch).not_to_be_checked()
    if search:
        switch.check()
    page.locator("#composer textarea").fill(words)
    # exact: while the last answer's run ends, "Send now" shows beside the arrow (then named
    # "Queue"); a click resolved to it waited on a button that hid as the run ended
    page.get_by_role("button", name="Send", exact=True).click()


@pytest.mark.parametrize("javascript", [True, False])
def test_the_switch_tells_the_agent_to_search_for_one_message(browser, data, env, fake, javascript):
    with FakeSearch() as search:
        served = Served(data, env).start()
        context = served.context(browser, java_script_enabled=javascript)
        try:
            page = context.new_page()
            choose_searxng(page, search.url("/searxng"))
            fake.script([tool_call("web_search", {"query": "high water brest"})], [text(ANSWER)])
            page.goto("/")
            send(page, "When is high water in Brest?", search=True)
            expect(page).to_have_url(re.compile(r"/c/\d+"))
            where = live_part(page)
            where.locator("article.text").filter(has_text="06:12").wait_for(timeout=20_000)
            if not javascript:
                page.reload()
            chips = page.locator("article.call ul.chips a")
            expect(chips).to_have_count(2)
            expect(chips.first).to_have_attribute("target", "_blank")
            expect(chips.first).to_have_attribute("rel", re.compile(r"noopener noreferrer"))
            expect(chips.first.locator(".site")).to_have_text("tides.example")
            assert fake.requests[0]["messages"][-1]["content"].endswith(SEARCH_WEB)
            assert search.requests and "format=json" in search.requests[-1][1]
            fake.script([text("From what I read before: 06:12.")])
            send(page, "And once more?", search=False)  # the switch was off again: one message's
            wait_for(lambda: len(fake.requests) >= 3, timeout=20)
            assert SEARCH_WEB not in json.dumps(fake.requests[-1]["messages"][-1])
        finally:
            context.close()
            served.stop()


VIEWS = [("desktop", {"width": 1280, "height": 800}), ("phone", {"width": 390, "height": 844})]


def test_screenshots_of_the_switch_the_chips_and_an_error(browser, data, env, fake):
    with FakeSearch() as search:
        served = Served(data, env).start()
        try:
            context = served.context(browser)
            page = context.new_page()
            choose_searxng(page, search.url("/searxng"))
            fake.script([tool_call("web_search", {"query": "high water brest"})], [text(ANSWER)])
            page.goto("/")
            send(page, "When is high water in Brest?", search=True)
            page.locator("article.text").filter(has_text="06:12").wait_for(timeout=20_000)
            found = page.url
            with served.store() as store:  # a hosted provider reached at another address: the test's fake
                store.choose_search_provider("tavily", search.url("/tavily/search"), "busy")
            fake.script([tool_call("web_search", {"query": "tides tomorrow"})],
                        [text("The search is limited for now, so from memory: about 50 minutes later.")])
            page.goto("/")
            send(page, "And tomorrow?", search=True)
            page.locator("article.text").filter(has_text="50 minutes").wait_for(timeout=20_000)
            failed = page.url
            context.close()
            os.makedirs(SHOTS, exist_ok=True)
            for name, viewport in VIEWS:
                context = served.context(browser, viewport=viewport)
                page = context.new_page()
                page.goto("/")
                page.get_by_role("switch", name="Search the web").check()
                page.locator("#composer textarea").fill("What is new in Brest today?")
                box = page.locator("#composer").bounding_box()
                assert box["x"] + box["width"] <= viewport["width"] + 1, "the composer fits the width"
                light_and_dark(page, os.path.join(SHOTS, f"web-search-switch-{name}-{{scheme}}.png"))
                page.goto(found)
                expect(page.locator("article.call ul.chips a")).to_have_count(2)
                light_and_dark(page, os.path.join(SHOTS, f"web-search-chips-{name}-{{scheme}}.png"))
                page.goto(failed)
                page.locator("article.call details summary").first.click()
                expect(page.locator("article.call")).to_contain_text("Tavily is limiting the rate of searches")
                light_and_dark(page, os.path.join(SHOTS, f"web-search-error-{name}-{{scheme}}.png"))
                page.goto("/people#web-search")
                page.locator("#web-search").scroll_into_view_if_needed()
                expect(page.get_by_role("radio", name="Tavily")).to_be_checked()
                expect(page.locator('input[name="key"]')).to_have_value("")  # the key is never shown again
                light_and_dark(page, os.path.join(SHOTS, f"web-search-settings-{name}-{{scheme}}.png"))
                context.close()
        finally:
            served.stop()
