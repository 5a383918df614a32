"""A plugin's question in a real browser (Debian's Chromium), with JavaScript and without:
server-everything's elicitation arrives in an open page by itself (the live feed) or on the
page itself without script (not in the self-refreshing frame), is answered with Accept, and
the call's result follows. Its sampling request is approved with one click."""
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.conftest import Served, shared_fixtures, soup, wait_for
from tests.fakes.everything import Everything
from tests.fakes.openai_server import delay, text, tool_call

pytestmark = pytest.mark.browser


# One served app and one server-everything for the file (docs/testing.md, "Shared servers"):
# the owner's agent has it as its plugin (a private address is the owner's agents' only), and
# each test begins a conversation of its own.
@pytest.fixture(scope="module")
def served_settings() -> dict[str, str]:
    return {"CHAT_PRIVATE_PLUGINS": "1"}


@pytest.fixture(scope="module")
def module_everything(module_served: Served) -> Iterator[Everything]:
    with Everything("streamableHttp") as ev:
        with module_served.client() as c:
            agent = soup(c.get("/agents")).select_one(".agent-list a")["href"]
            token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get(agent).text).group(1)
            c.post(agent + "/plugins", data={"_csrf_token": token, "address": ev.url})
        yield ev


fake = shared_fixtures(newcomer=False)[1]


@pytest.fixture
def site(shared_served: Served, module_everything: Everything) -> Served:
    return shared_served


def started(site, fake, call, args) -> str:
    fake.script([tool_call(call, args)], "Done with the plugin.")
    with site.client() as c:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/").text).group(1)
        return c.post("/c", data={"_csrf_token": token, "text": "go"}).headers["location"]


@pytest.mark.parametrize("js", [True, False])
def test_the_form_is_filled_in_and_accepted(site, fake, browser, js):
    chat = started(site, fake, "127_0_0_1_trigger-elicitation-request", {})
    with site.watched_page(browser, java_script_enabled=js) as page:
        page.goto(chat)
        if not js:  # without script the page shows what it had: it is loaded again once the question is there
            with site.client() as c:
                wait_for(lambda: soup(c.get(chat)).select_one("article.ask"), timeout=40)
            page.reload()
        form = page.locator("article.ask")
        form.locator("input[type=text]").first.wait_for(timeout=40000)
        assert page.locator("iframe.watch-frame").count() == 0
        form.get_by_label("String (required)").fill("Ada Lovelace")
        form.get_by_label("Boolean").check()
        form.get_by_label("String with email format").fill("ada@example.org")
        form.get_by_label("Salmon").check()
        form.get_by_role("button", name="Accept and send to 127_0_0_1").click()
        page.wait_for_load_state()
        if not js:  # back on the conversation, the answer being written shows in its frame; once it is done:
            assert re.search(re.escape(chat) + r"#i\d+$", page.url), page.url
            with site.client() as c:
                wait_for(lambda: soup(c.get(chat)).select_one('#status[data-running="0"]'), timeout=40)
            page.reload()
        page.locator("article.ask .state", has_text="answered").wait_for(timeout=40000)
        output = page.locator("article.call pre.output")
        output.filter(has_text="User provided the requested information").wait_for(state="attached", timeout=40000)
        said = output.text_content()
        assert "- Name: Ada Lovelace" in said and "- Agreed to terms: true" in said and '"fish-2"' in said
        answered = page.locator("article.ask dl.ask-answer").inner_text()
        assert "Ada Lovelace" in answered and "Salmon" in answered


def test_a_sampling_request_is_approved_with_one_click(site, fake, browser):
    fake.plain_default = lambda body: [text("Sampled words." if body["messages"][0]["content"].startswith(
        "You are a helpful test server") else "A fitting title")]
    chat = started(site, fake, "127_0_0_1_trigger-sampling-request", {"prompt": "hello", "maxTokens": 20})
    with site.watched_page(browser) as page:
        page.goto(chat)
        page.get_by_role("button", name="Approve 127_0_0_1’s request").click()
        page.locator("article.sample .sample-answer .body", has_text="Sampled words.").wait_for(timeout=40000)
        page.locator("article.call pre.output", has_text='"text": "Sampled words."').wait_for(state="attached", timeout=40000)
        assert page.url.endswith(chat), "approved in place: the page was not left"


def test_without_script_the_question_shows_in_the_answers_frame_and_is_answered_there(site, fake, browser):
    """The page a person opened before the question came: its self-refreshing frame shows the
    question (and stops refreshing); Accept there leads the whole page on."""
    # the model takes a while to call the tool, so the page is open (with its frame) first
    fake.script([delay(3), tool_call("127_0_0_1_trigger-elicitation-request", {})], "Done with the plugin.")
    with site.client() as c:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/").text).group(1)
        chat = c.post("/c", data={"_csrf_token": token, "text": "go"}).headers["location"]
    with site.watched_page(browser, java_script_enabled=False) as page:
        page.goto(chat)
        assert page.locator("iframe.watch-frame").count() == 1
        frame = page.frame_locator("iframe.watch-frame")
        frame.get_by_label("String (required)").fill("Grace Hopper", timeout=40000)
        assert frame.locator("meta[http-equiv=refresh]").count() == 0, "a frame with a form in it stays put"
        frame.get_by_role("button", name="Accept and send to 127_0_0_1").click()
        page.wait_for_url(re.compile(re.escape(chat) + r"#i\d+$"))
        with site.client() as c:
            wait_for(lambda: soup(c.get(chat)).select_one('#status[data-running="0"]'), timeout=40)
        page.reload()
        assert "- Name: Grace Hopper" in page.locator("article.call pre.output").text_content()
