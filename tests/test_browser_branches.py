"""Actions on messages, edits with branches and Again's pager, in Debian's Chromium (JS on and off)."""
import threading

import pytest
from playwright.sync_api import expect

from tests.conftest import Served, shared_fixtures
from tests.fakes.openai_server import hold, text
from tests.test_browser import fresh_items, items_of

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar and an agent no other test sees, writing in conversations of its own.
served, fake = shared_fixtures(newcomer=True)


@pytest.fixture
def context(browser, served: Served):
    ctx = served.context(browser, permissions=["clipboard-read", "clipboard-write"])
    errors: list[str] = []
    ctx.on("weberror", lambda e: errors.append(str(e.error)))
    yield ctx
    ctx.close()
    assert errors == [], f"the page logged errors: {errors}"


def start(page, words: str):
    page.goto("/")  # the new conversation: the composer; its first message makes it
    page.locator("#composer textarea").fill(words)
    page.locator("#composer textarea").press("Enter")
    page.wait_for_url("**/c/*")
    idle(page)


def say(page, words: str):
    sent(page, words)
    idle(page)


def sent(page, words: str):
    """Send a message and wait for the feed to bring it: until then the status on the page is
    the one before it (not running), and the next message typed could race the post."""
    page.locator("#composer textarea").fill(words)
    page.locator("#composer textarea").press("Enter")
    expect(page.locator("#items > article.user .body").last).to_have_text(words)


def idle(page):
    page.locator('#status[data-running="0"]').wait_for(state="attached", timeout=20_000)
    page.locator("#items > .answer-actions").last.wait_for(timeout=20_000)


def bodies(page) -> list[str]:
    return page.locator("#items > article .body").all_inner_texts()


def test_copy_puts_the_answer_and_the_message_on_the_clipboard(context, fake):
    fake.script("Here is **bold** and `code`.")
    page = context.new_page()
    start(page, "Copy  me\nexactly")
    page.get_by_role("link", name="Copy answer").click()
    expect(page.get_by_role("link", name="Copy answer")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "Here is **bold** and `code`."
    page.get_by_role("link", name="Copy message").click()
    expect(page.get_by_role("link", name="Copy message")).to_have_text("Copied")
    # a form sends line breaks as CRLF (HTML's rule), and the message is kept as it came
    assert page.evaluate("navigator.clipboard.readText()").replace("\r\n", "\n") == "Copy  me\nexactly"


def test_edit_makes_a_branch_and_the_pager_switches_to_a_fresh_render(context, browser, served, fake):
    fake.script("Paris.", "It is large.")
    page = context.new_page()
    start(page, "Capital of France?")
    say(page, "Is it big?")
    answering = threading.Event()
    fake.script([hold(answering), text("Rome.")])  # runs until the test has looked
    sent(page, "And Italy?")
    page.locator('#status[data-running="1"]').wait_for(state="attached")
    expect(page.get_by_role("link", name="Edit message")).to_have_count(0)  # hidden while it runs
    expect(page.get_by_role("button", name="Again: a new version of this answer")).to_have_count(0)
    answering.set()
    idle(page)
    page.get_by_role("link", name="Edit message").first.click()
    box = page.get_by_role("textbox", name="Edit your message")
    expect(box).to_have_value("Capital of France?")
    box.fill("Capital of Italy?")
    fake.script("Roma.")
    page.get_by_role("button", name="Save and send").click()
    expect(page.locator("#items > article.text .body").last).to_have_text("Roma.", timeout=20_000)
    idle(page)
    assert bodies(page) == ["Capital of Italy?", "Roma."]
    pager = page.get_by_role("group", name="Versions of this message")
    expect(pager).to_contain_text("2 / 2")
    assert fake.streamed[-1]["messages"][-1]["content"] == "Capital of Italy?"
    assert [m["content"] for m in fake.streamed[-1]["messages"] if m["role"] != "system"] == ["Capital of Italy?"]
    assert items_of(page) == fresh_items(browser, served, page.url)
    page.get_by_role("button", name="Previous version").click()
    expect(pager.first).to_contain_text("1 / 2")
    assert bodies(page) == ["Capital of France?", "Paris.", "Is it big?", "It is large.", "And Italy?", "Rome."]
    assert items_of(page) == fresh_items(browser, served, page.url)


def test_again_pages_through_versions_and_another_tab_follows(context, browser, served, fake):
    fake.script("Version one.", "Version two.", "Version three.")
    page = context.new_page()
    start(page, "Say something")
    other = served.context(browser).new_page()  # another window: a hidden tab may pause its stream
    other.goto(page.url)
    for n in (2, 3):
        page.get_by_role("button", name="Again: a new version of this answer").click()
        expect(page.get_by_role("group", name="Versions of this answer")).to_contain_text(f"{n} / {n}",
                                                                                          timeout=20_000)
        idle(page)
    assert bodies(page)[-1] == "Version three."
    page.get_by_role("button", name="Previous version").click()
    expect(page.get_by_role("group", name="Versions of this answer")).to_contain_text("2 / 3")
    assert bodies(page)[-1] == "Version two."
    other.bring_to_front()
    expect(other.get_by_role("group", name="Versions of this answer")).to_contain_text("2 / 3")
    assert bodies(other)[-1] == "Version two.", "a switch in one tab follows in another"
    fresh = fresh_items(browser, served, page.url)
    assert items_of(page) == fresh
    assert items_of(other) == fresh
    other.context.close()


def whole(page):
    """Without script a run is watched in a frame that refreshes itself; once it ended, its
    link opens the whole conversation."""
    if page.locator("iframe.watch-frame").count():
        page.frame_locator("iframe.watch-frame").get_by_role("link", name="Show the whole conversation").click(
            timeout=20_000)
        page.wait_for_load_state()
    page.locator("#items > .answer-actions").last.wait_for(timeout=20_000)


def test_without_javascript_edit_and_the_pagers_are_plain_forms(browser, served, fake):
    fake.script("First answer.", "Second answer.", "Edited answer.")
    ctx = served.context(browser, java_script_enabled=False)
    try:
        page = ctx.new_page()
        page.goto("/")
        page.locator("#composer textarea").fill("Original question")
        page.get_by_role("button", name="Send").click()
        whole(page)
        assert page.get_by_role("link", name="Copy answer").get_attribute("href").endswith(".txt")
        page.get_by_role("button", name="Again: a new version of this answer").click()
        whole(page)
        expect(page.get_by_role("group", name="Versions of this answer")).to_contain_text("2 / 2")
        page.get_by_role("button", name="Previous version").click()
        expect(page.get_by_role("group", name="Versions of this answer")).to_contain_text("1 / 2")
        assert bodies(page) == ["Original question", "First answer."]
        page.get_by_role("link", name="Edit message").click()
        box = page.get_by_role("textbox", name="Edit your message")
        expect(box).to_have_value("Original question")
        box.fill("Edited question")
        page.get_by_role("button", name="Save and send").click()
        whole(page)
        expect(page.get_by_role("group", name="Versions of this message")).to_contain_text("2 / 2")
        assert bodies(page) == ["Edited question", "Edited answer."]
        page.get_by_role("button", name="Previous version").click()
        assert bodies(page) == ["Original question", "First answer."]
    finally:
        ctx.close()
