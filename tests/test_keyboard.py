"""Keyboard only, in Debian's Chromium: a new conversation, send, approve, stop, with focus
where a person expects it; the shortcuts; and what a screen reader is told (issue 13)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.conftest import Served, shared_fixtures
from tests.fakes.openai_server import rate, text, tool_call

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar and an agent no other test sees, writing in conversations of its own.
served, fake = shared_fixtures(newcomer=True)

PLAN = "- [x] read the question\n- [ ] answer it"
SLOW = "A slow answer that takes its time, word by word. " * 40


def focused(page) -> str:
    """The focused element, as `tag#id` or `tag:text`."""
    return page.evaluate("""() => { const e = document.activeElement;
        return e.id ? `${e.tagName.toLowerCase()}#${e.id}` : `${e.tagName.toLowerCase()}:${e.textContent.trim()}`; }""")


def approval_needed(served: Served) -> None:
    with served.store() as store:
        store.update_agent(store.default_agent(served.person).id, approve="update_plan")


@pytest.fixture
def page(browser, served: Served):
    with served.watched_page(browser, console=False) as p:
        yield p


def test_new_conversation_send_approve_and_stop_by_keyboard(page, served: Served, fake):
    approval_needed(served)
    fake.script([text("I'll make a plan."), tool_call("update_plan", {"plan": PLAN})],
                [rate(8), text(SLOW)],
                [text("Short and **done**.")],
                [rate(8), text(SLOW)])
    page.goto("/agents")
    page.keyboard.press("Tab")
    assert focused(page) == "a:Skip to main content", "the first Tab offers to skip the header"
    page.keyboard.press("Control+Shift+O")
    page.locator("#composer").wait_for()
    assert focused(page) == "textarea#text", "a new conversation starts in the message box"

    page.keyboard.type("Plan it")
    page.keyboard.press("Enter")
    page.wait_for_url("**/c/*")
    approve = page.get_by_role("button", name="Approve update_plan")
    approve.wait_for()
    expect(page.get_by_role("button", name="Decline update_plan")).to_be_visible()
    assert focused(page) == "textarea#text", "after sending, still in the message box"

    approve.focus()
    page.keyboard.press("Enter")
    page.locator("article.call .state.done").wait_for(state="attached")
    page.locator("article.text .state.growing").last.wait_for(state="attached")
    assert focused(page) == "textarea#text", "after Approve, back in the message box"

    page.keyboard.press("Escape")  # in the message box: Esc stops the answer being written
    page.locator("article.stop").wait_for()
    expect(page.locator("#status")).to_have_attribute("data-running", "0")
    assert focused(page) == "textarea#text"

    page.keyboard.type("And now briefly")
    page.keyboard.press("Enter")
    expect(page.locator("#announce")).to_have_text("Answer finished: Short and done.")

    page.keyboard.type("Once more, slowly")
    page.keyboard.press("Enter")
    stop = page.get_by_role("button", name="Stop")
    stop.wait_for()
    page.locator("article.text .state.growing").last.wait_for(state="attached")
    stop.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#announce")).to_have_text("Stopped.")
    assert focused(page) == "textarea#text", "after Stop, back in the message box"


def test_shortcuts_never_fire_inside_text_fields(page, served: Served):
    page.goto(served.empty_chat())
    box = page.locator("#text")
    box.focus()
    page.keyboard.type("a/b?c")
    assert box.input_value() == "a/b?c"
    assert page.locator("dialog[open]").count() == 0, "? typed in the message box is just a character"

    page.locator("h1").click()  # outside any field
    page.keyboard.press("/")
    assert focused(page) == "textarea#text", "/ goes to the message box"
    assert box.input_value() == "a/b?c", "and types nothing"

    page.locator("h1").click()
    page.keyboard.press("?")
    dialog = page.locator("dialog[open]")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading", name="Keyboard shortcuts")).to_be_visible()
    expect(dialog.locator("dt").first).to_have_text("Esc")
    page.keyboard.press("Escape")
    expect(page.locator("dialog[open]")).to_have_count(0)

    page.goto("/agents")
    name = page.locator('input[name="name"]')
    name.focus()
    page.keyboard.type("?/")
    assert name.input_value() == "?/" and page.locator("dialog[open]").count() == 0
    page.locator("h1").click()
    page.keyboard.press("?")
    expect(page.locator("dialog[open]")).to_be_visible()


def test_the_help_list_is_a_page_without_javascript(browser, served: Served):
    context = served.context(browser, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto("/account")
        page.get_by_role("link", name="Keyboard shortcuts").click()
        page.wait_for_url("**/help/keys")
        expect(page.get_by_role("heading", level=1)).to_have_text("Keyboard shortcuts")
        assert page.locator("dt").count() >= 5
    finally:
        context.close()


def test_the_skip_link_on_a_conversation_goes_to_the_message_box(page, served: Served):
    page.goto(served.empty_chat())
    assert focused(page) == "textarea#text", "a conversation opens in its message box"
    page.locator("a.brand").focus()  # the header's first link: the skip links come before it
    page.keyboard.press("Shift+Tab")
    assert focused(page) == "a:Skip to main content"
    page.keyboard.press("Shift+Tab")
    assert focused(page) == "a:Skip to the message box", "the very first stop on the page"
    expect(page.locator("a.skip").first).to_be_in_viewport()
    page.keyboard.press("Enter")
    assert focused(page) == "textarea#text"


def test_after_again_focus_is_in_the_message_box(page, served: Served, fake):
    """Again hides itself while the new version is written: focus goes to the message box, not
    to the page's body."""
    fake.script("The first version.", [rate(20), text("The second version, a little slower.")])
    page.goto(served.empty_chat())
    page.keyboard.type("Say something")
    page.keyboard.press("Enter")
    again = page.get_by_role("button", name="Again: a new version of this answer")
    again.wait_for()
    again.focus()
    page.keyboard.press("Enter")
    page.locator(".answer-actions .pager").wait_for()
    assert focused(page) == "textarea#text", "after Again, in the message box"
    expect(page.locator("#items")).to_contain_text("The second version, a little slower.", timeout=15_000)  # (ends here)
