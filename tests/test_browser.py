"""What only a browser shows, in Debian's Chromium: the live page, with and without JavaScript."""
import re

import pytest
from playwright.sync_api import expect

from tests.conftest import Served, shared_fixtures
from tests.fakes.openai_server import delay, rate, reasoning, text

pytestmark = pytest.mark.browser



# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar and an agent no other test sees, writing in conversations of its own.
served, fake = shared_fixtures(newcomer=True)


ANSWER = "The answer grows **live** on the page, word by word, until it is complete."


@pytest.fixture
def page(browser, served: Served):
    with served.watched_page(browser) as p:
        yield p


def test_enter_sends_and_the_answer_streams_in_without_a_reload(page, served, fake):
    fake.script([reasoning("Considering."), delay(0.5), rate(15), text(ANSWER + " " + "More words arrive. " * 10)])
    page.goto(served.empty_chat())  # open before its first message
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
    expect(page).to_have_title("A fitting title · Tabletalk")  # the tab's title follows it live
    # the live DOM is what a fresh render of the same rows gives
    live = items_of(page)
    page.reload()
    page.locator("article.text .state.done").wait_for(state="attached")
    assert items_of(page) == live



def test_a_message_typed_while_the_last_one_is_on_its_way_is_kept(page, served, fake):
    """The composer empties of what it sent only: a second message typed before the first
    post answered stays in the box (the reset after the first emptied it, and Enter then
    sent nothing), and is sent with the next Enter."""
    fake.script("First.", "Second.")
    page.goto(served.empty_chat())
    held = []
    page.route("**/ask", lambda route: held.append(route))  # the first post waits here until the second is typed
    box = page.locator("#composer textarea")
    box.fill("One")
    box.press("Enter")
    for _ in range(200):
        if held:
            break
        page.wait_for_timeout(50)
    assert len(held) == 1
    box.fill("Two")
    held[0].continue_()
    page.unroute("**/ask")
    expect(page.locator("#items > article.user .body")).to_have_text(["One"])
    page.locator("#items > article.text .state.done").wait_for(state="attached", timeout=15_000)
    expect(box).to_have_value("Two")
    box.press("Enter")
    expect(page.locator("#items > article.user .body")).to_have_text(["One", "Two"])
    expect(box).to_have_value("")
    # answered whole: on a shared app a request still to come would take the next test's script
    expect(page.locator("#items > article.text .state.done")).to_have_count(2, timeout=15_000)

def live_part(page):
    """Without JavaScript, where the conversation shows: in the self-refreshing frame while a
    run goes (not while it waits for a decision), else in the page."""
    return page.frame_locator("iframe.watch-frame") if page.locator("iframe.watch-frame").count() else page


def test_without_javascript_the_answer_is_there_after_the_redirect(browser, served: Served, fake):
    fake.script([rate(40), text(ANSWER)])
    context = served.context(browser, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto("/")  # the new conversation: the composer, nothing written yet
        page.locator("#composer textarea").fill("Hello without JavaScript")
        page.get_by_role("button", name="Send").click()
        page.wait_for_load_state()
        where = live_part(page)
        assert where.locator("article.user .body").inner_text() == "Hello without JavaScript"
        # while the run goes a frame refreshes itself (the page stays), then stops refreshing
        where.locator("article.text:has(.state.done) strong").wait_for(timeout=20_000)
        assert where.locator("article.text strong").inner_text() == "live"
        expect(where.locator('meta[http-equiv="refresh"]')).to_have_count(0)
        assert page.locator('meta[http-equiv="refresh"]').count() == 0, "the page itself never refreshes"
    finally:
        context.close()


def test_without_javascript_stop_shows_the_stopped_conversation_and_keeps_what_was_typed(browser, served: Served, fake):
    """Stop without script: the page that comes back is the stopped conversation (no Stop, no
    "Send now", no frame still saying it is being written), and what was half typed in the
    composer is still there."""
    fake.script([rate(5), text("A slow answer, word by word. " * 40)])
    context = served.context(browser, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto("/")
        page.locator("#composer textarea").fill("Write slowly")
        page.get_by_role("button", name="Send").click()
        page.wait_for_load_state()
        expect(page.locator("iframe.watch-frame")).to_have_count(1)
        page.frame_locator("iframe.watch-frame").locator("article.text").wait_for(timeout=15_000)
        page.locator("#composer textarea").fill("half a thought, kept")
        page.get_by_role("button", name="Stop").click()
        page.wait_for_load_state()
        expect(page.locator("article.stop")).to_have_count(1)
        expect(page.locator("iframe.watch-frame")).to_have_count(0)
        expect(page.locator("#status")).to_have_attribute("data-running", "0")
        expect(page.get_by_role("button", name="Stop")).to_have_count(0)
        expect(page.get_by_role("button", name="Send now")).to_be_hidden()
        expect(page.locator("#composer textarea")).to_have_value("half a thought, kept")
        page.get_by_role("button", name="Send").click()  # and it sends as any message
        page.wait_for_load_state()
        expect(live_part(page).locator("article.user .body").last).to_have_text("half a thought, kept")
    finally:
        context.close()


LONG = "\n\n".join([
    "## A heading",
    "A paragraph with **bold**, *italic*, `code` and a [link](https://example.org/page).",
    "- one\n- two\n  - nested\n- three",
    "```python\ndef f(x):\n    return x * 2\n```",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "> quoted words to end with",
])


def items_of(page) -> str:
    """#items as the page has it, without the mark htmx leaves on the buttons it processed
    (a page without script has none: the actions under an answer carry hx-post)."""
    return re.sub(r' data-htmx-powered="true"', "", page.locator("#items").inner_html())


def fresh_items(browser, served, url):
    """#items as a fresh page load renders it."""
    context = served.context(browser, java_script_enabled=False)
    try:
        p = context.new_page()
        p.goto(url)
        return items_of(p)
    finally:
        context.close()


def test_two_pages_follow_one_answer_and_end_identical_to_a_fresh_render(browser, served, fake):
    fake.script([rate(40), text(LONG, chunk=7)])
    # two windows: a background tab in one window may pause its stream (htmx pauses SSE
    # while a tab is hidden), which is htmx's behaviour, not what this test is about
    context = served.context(browser)
    other = served.context(browser)
    try:
        a, b = context.new_page(), other.new_page()
        a.goto(served.empty_chat())  # open before its first message
        b.goto(a.url)
        a.locator("#composer textarea").fill("Show me everything")
        a.locator("#composer textarea").press("Enter")
        for p in (a, b):
            p.bring_to_front()  # a person looks at each (htmx pauses a hidden page's stream)
            p.locator("article.text .state.done").wait_for(state="attached", timeout=20_000)
        expect(b.locator("article.text table td").first).to_have_text("1")
        fresh = fresh_items(browser, served, a.url)
        assert items_of(a) == fresh
        assert items_of(b) == fresh
    finally:
        context.close()
        other.close()


def test_a_reload_mid_answer_continues_without_duplicates(browser, served, fake):
    fake.script([rate(12), text(LONG, chunk=5)])
    context = served.context(browser)
    try:
        p = context.new_page()
        p.goto(served.empty_chat())  # open before its first message
        p.locator("#composer textarea").fill("Go slowly")
        p.locator("#composer textarea").press("Enter")
        p.locator("article.text .state.growing").wait_for(state="attached", timeout=10_000)
        p.wait_for_timeout(800)
        p.reload()
        assert p.locator("article.text .state.growing").count() == 1, "the answer is still growing after the reload"
        p.locator("article.text .state.done").wait_for(state="attached", timeout=30_000)
        ids = p.eval_on_selector_all("[id]", "els => els.map(e => e.id)")
        assert len(ids) == len(set(ids)), "no element arrived twice"
        assert items_of(p) == fresh_items(browser, served, p.url)
    finally:
        context.close()


HOSTILE = "\n\n".join([
    "<script>window.__pwned = 1</script>",
    "<img src=x onerror=\"window.__pwned = 2\">",
    "[click](javascript:window.__pwned=3) [data](data:text/html;base64,PHNjcmlwdD5wYXJlbnQuX19wd25lZD00PC9zY3JpcHQ+)",
    "[entity](jav&#x09;ascript:window.__pwned=5) [upper](JAVASCRIPT:window.__pwned=6)",
    "<svg onload=\"window.__pwned = 7\"><script>window.__pwned = 8</script></svg>",
    "&lt;script&gt;window.__pwned = 9&lt;/script&gt; &#60;img src=x onerror=window.__pwned=10&#62;",
    "![img](javascript:window.__pwned=11) <iframe src=\"javascript:window.__pwned=12\"></iframe>",
    "```html\n</code></pre><script>window.__pwned = 13</script>\n```",
    "[title](https://example.org \"x\\\" onmouseover=\\\"window.__pwned=14\")",
])


def test_a_hostile_answer_is_inert_in_the_dom(page, served, fake):
    fake.script([rate(200), text(HOSTILE, chunk=9)])
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(served.empty_chat())  # open before its first message
    page.locator("#composer textarea").fill("be hostile")
    page.locator("#composer textarea").press("Enter")
    page.locator("article.text .state.done").wait_for(state="attached", timeout=15_000)
    for link in page.locator("article.text a").all():
        link.hover()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None and dialogs == []
    report = page.evaluate("""() => {
        const root = document.querySelector('article.text');
        const bad = [];
        for (const el of root.querySelectorAll('*')) {
            if (['SCRIPT', 'IFRAME', 'SVG', 'IMG', 'OBJECT', 'EMBED'].includes(el.tagName.toUpperCase())) bad.push(el.tagName);
            for (const a of el.attributes) if (a.name.startsWith('on')) bad.push(a.name);
            if (el.tagName === 'A' && !/^(https?:|mailto:)/i.test(el.getAttribute('href') || '')) bad.push(el.getAttribute('href'));
        }
        return bad;
    }""")
    assert report == []
    assert "window.__pwned = 1" in page.locator("article.text").inner_text(), "raw HTML is shown as text"
    page.reload()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None and dialogs == []


def test_the_conversation_list_follows_live(browser, served, fake):
    context = served.context(browser)
    second = served.context(browser)  # its own window: see the test above
    try:
        home, other = context.new_page(), second.new_page()
        home.goto("/")
        home.wait_for_timeout(300)  # its stream is open
        other.goto("/")
        other.locator("#composer textarea").fill("a title from the first words")
        other.locator("#composer textarea").press("Enter")
        other.wait_for_url("**/c/*")
        home.bring_to_front()  # a person looks at the list (htmx pauses a hidden page's stream)
        expect(home.locator("#conversations li.convo")).to_have_count(1, timeout=10_000)
        expect(home.locator("#conversations li.convo a.open").first).to_have_text("A fitting title", timeout=10_000)
    finally:
        context.close()
        second.close()


def plans_need_approval(served: Served) -> None:
    """The test's person's default agent asks before it runs update_plan."""
    with served.store() as store:
        store.update_agent(store.default_agent(served.person).id, approve="update_plan")


def test_a_call_is_approved_from_the_page_and_the_plan_appears_pinned(page, served, fake):
    from tests.fakes.openai_server import tool_call

    plans_need_approval(served)
    fake.script([tool_call("update_plan", {"plan": "- [ ] look\n- [ ] answer"})], "Planned.")
    page.goto(served.empty_chat())  # open before its first message
    page.locator("#composer textarea").fill("make a plan")
    page.locator("#composer textarea").press("Enter")
    approve = page.get_by_role("button", name="Approve")
    approve.wait_for(timeout=10_000)
    expect(page.locator("article.call pre.input")).to_contain_text('"plan": "- [ ] look')
    page.evaluate("window.__sameDocument = true")
    approve.click()
    expect(page.locator("#plan li")).to_have_count(2, timeout=10_000)
    expect(page.locator("article.text").last).to_have_text("Planned.", timeout=10_000)
    expect(page.locator("article.call .state")).to_have_text("done")
    assert page.evaluate("window.__sameDocument") is True, "approved without a reload"
    assert page.get_by_role("button", name="Approve").count() == 0


def test_without_javascript_a_call_is_approved_with_the_plain_form(browser, served, fake):
    from tests.fakes.openai_server import tool_call

    plans_need_approval(served)
    fake.script([tool_call("update_plan", {"plan": "- [ ] one"})], "Done.")
    context = served.context(browser, java_script_enabled=False)
    p = context.new_page()
    try:
        p.goto("/")  # the new conversation: the composer, nothing written yet
        p.locator("#composer textarea").fill("plan")
        p.get_by_role("button", name="Send").click()
        p.wait_for_load_state()
        live_part(p).get_by_role("button", name="Approve").wait_for(timeout=20_000)  # the frame refreshes itself
        with p.expect_navigation():  # the decision goes to the whole page, framed or not
            live_part(p).get_by_role("button", name="Approve").click()
        where = live_part(p)
        where.locator("article.text:has(.state.done)").last.wait_for(state="attached", timeout=20_000)
        assert where.locator("#plan li").count() == 1
    finally:
        context.close()


def test_send_now_during_a_run_is_read_at_the_next_step_and_moves_to_where_it_was_read(page, served, fake):
    from tests.fakes.openai_server import tool_call

    plans_need_approval(served)
    fake.script([text("Planning."), tool_call("update_plan", {"plan": "- [ ] one"})], "Planned, and noted.",
                "The queued one.")
    page.goto(served.empty_chat())  # open before its first message
    box = page.locator("#composer textarea")
    expect(page.get_by_role("button", name="Send now")).to_have_count(0)  # nothing is running
    box.fill("plan it")
    box.press("Enter")
    page.get_by_role("button", name="Approve").wait_for(timeout=10_000)
    box.fill("after the run")
    page.get_by_role("button", name="Queue").click()
    expect(page.locator("article.user .badge")).to_have_text(["queued"])
    box.fill("read this now")
    page.get_by_role("button", name="Send now").click()
    expect(page.locator("article.user .badge")).to_have_text(["queued", "sent now: read at the next step"])
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("article.text").last).to_have_text("The queued one.", timeout=15_000)
    # its words can come a commit before its end (the done flag): the comparison waits for that
    page.locator("article.text").last.locator(".state.done").wait_for(state="attached", timeout=15_000)
    expect(page.locator("#items > article.user .body")).to_have_text(["plan it", "read this now", "after the run"])
    assert fake.streamed[1]["messages"][-1]["content"] == "read this now"
    assert items_of(page) == fresh_items(page.context.browser, served, page.url)
