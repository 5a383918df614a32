"""What only a browser shows, in Debian's Chromium: the live page, with and without JavaScript."""
import pytest
from playwright.sync_api import expect

from tests.conftest import Served
from tests.fakes.openai_server import delay, rate, reasoning, text

pytestmark = pytest.mark.browser

ANSWER = "The answer grows **live** on the page, word by word, until it is complete."


@pytest.fixture
def page(browser, served: Served):
    context = browser.new_context(base_url=served.url)
    errors: list[str] = []
    p = context.new_page()
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield p
    context.close()
    assert errors == [], f"the page logged errors: {errors}"


def test_enter_sends_and_the_answer_streams_in_without_a_reload(page, fake):
    fake.script([reasoning("Considering."), delay(0.5), rate(15), text(ANSWER + " " + "More words arrive. " * 10)])
    page.goto("/")
    page.get_by_role("button", name="New conversation").click()
    page.wait_for_url("**/c/*")
    page.evaluate("window.__sameDocument = true")
    box = page.locator("#composer textarea")
    box.fill("First line")
    box.press("Shift+Enter")
    box.type("second line")
    box.press("Enter")
    page.locator("article.user").wait_for()
    assert page.locator("article.user .body").inner_text() == "First line\nsecond line"
    assert box.input_value() == "", "the composer empties after sending"
    page.locator("article.text .state.growing").wait_for(state="attached", timeout=10_000)  # seen while it grows
    page.locator("article.text .state.done").wait_for(state="attached", timeout=15_000)
    assert page.locator("article.text strong").inner_text() == "live"
    assert page.evaluate("window.__sameDocument") is True, "no reload happened"
    # the title starts as the first words, then the model's name for it arrives live
    expect(page.locator("#title")).to_have_text("A fitting title")
    # the live DOM is what a fresh render of the same rows gives
    live = page.locator("#items").inner_html()
    page.reload()
    page.locator("article.text .state.done").wait_for(state="attached")
    assert page.locator("#items").inner_html() == live


def test_without_javascript_the_answer_is_there_after_the_redirect(browser, served: Served, fake):
    fake.script([rate(40), text(ANSWER)])
    context = browser.new_context(base_url=served.url, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto("/")
        page.get_by_role("button", name="New conversation").click()
        page.wait_for_url("**/c/*")
        page.locator("#composer textarea").fill("Hello without JavaScript")
        page.get_by_role("button", name="Send").click()
        page.wait_for_load_state()
        assert page.locator("article.user .body").inner_text() == "Hello without JavaScript"
        # the page refreshes itself while the run goes, then stops refreshing
        page.locator("article.text:has(.state.done) strong").wait_for(timeout=20_000)
        assert page.locator("article.text strong").inner_text() == "live"
        assert page.locator('noscript').count() == 0 or "refresh" not in page.content().split("</head>")[0]
    finally:
        context.close()
