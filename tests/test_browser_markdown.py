"""Rich Markdown in Debian's Chromium: math as MathML, task lists, scrollable regions the
keyboard reaches, code blocks' Copy, the plan card's count; with and without JavaScript."""
import pytest
from playwright.sync_api import expect

from tests.conftest import Served, shared_fixtures
from tests.test_browser import live_part
from tests.fakes.openai_server import delay, rate, text, tool_call

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar and an agent no other test sees, writing in conversations of its own.
served, fake = shared_fixtures(newcomer=True)

LONG_LINE = "x = [" + ", ".join(str(n) for n in range(80)) + "]  # one line wider than any screen"
RICH = "\n\n".join([
    "Einstein's $E = mc^2$ and \\(a^2 + b^2 = c^2\\); a coffee costs $5 and a cake $10.",
    "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$",
    "\\[\n\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2} + " + " + ".join(f"x_{{{n}}}" for n in range(60)) + "\n\\]",
    "- [x] derive it\n- [ ] check it\n- [ ] write it up",
    "> A quoted remark, muted, with a border on its left.",
    "| " + " | ".join(f"column {n}" for n in range(14)) + " |\n|" + "---|" * 14 + "\n| "
    + " | ".join(str(n) for n in range(14)) + " |",
    f"```python\n{LONG_LINE}\nprint(len(x))\n```",
])


@pytest.fixture
def page(browser, served: Served):
    with served.watched_page(browser, permissions=["clipboard-read", "clipboard-write"]) as p:
        yield p


def answered(page, words: str = "Show me math") -> None:
    page.goto("/")  # the new-conversation page: its first message makes the conversation
    page.locator("#composer textarea").fill(words)
    page.locator("#composer textarea").press("Enter")
    page.wait_for_url("**/c/*")
    page.locator("article.text .state.done").wait_for(state="attached", timeout=20_000)


def test_math_tasks_and_regions_arrive_live_and_equal_a_fresh_render(page, served, fake):
    fake.script([rate(80), text(RICH, chunk=6)])
    answered(page)
    answer = page.locator("article.text")
    maths = answer.locator("math")
    expect(maths).to_have_count(4)
    for m in maths.all():  # a MathML element the browser lays out, not raw text
        box = m.bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0
    assert page.evaluate("document.querySelector('article.text math').namespaceURI") == (
        "http://www.w3.org/1998/Math/MathML")
    assert "$5 and a cake $10" in answer.inner_text()
    assert "\\," not in answer.inner_text() and "$$" not in answer.inner_text()
    boxes = answer.locator("input[type=checkbox]")
    expect(boxes).to_have_count(3)
    assert [b.is_checked() for b in boxes.all()] == [True, False, False]
    assert all(b.is_disabled() for b in boxes.all())
    # the live DOM is what a fresh render of the same rows gives
    live = page.locator("#items").inner_html()
    page.reload()
    page.locator("article.text .state.done").wait_for(state="attached")
    assert page.locator("#items").inner_html() == live


def test_wide_tables_code_and_formulas_scroll_with_the_keyboard(page, served, fake):
    page.set_viewport_size({"width": 390, "height": 844})
    fake.script([text(RICH)])
    answered(page)
    answer = page.locator("article.text")
    for selector in (".table-scroll", "pre", ".math-display:has(munderover)"):
        region = answer.locator(selector).last
        assert region.get_attribute("tabindex") == "0"
        wide = region.evaluate("el => el.scrollWidth > el.clientWidth")
        assert wide, f"{selector} is wider than the phone's screen"
        region.focus()
        assert region.evaluate("el => el === document.activeElement")
        for _ in range(5):
            page.keyboard.press("ArrowRight")
        expect(region).not_to_have_js_property("scrollLeft", 0)
    regions = answer.locator("[role=region]")
    assert regions.count() == 3 and all(r.get_attribute("aria-label") for r in regions.all())
    # the Tab key reaches them, in page order
    page.evaluate("document.activeElement.blur()")
    reached = set()
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("document.activeElement.className + '/' + document.activeElement.tagName"))
    assert {"table-scroll/DIV", "/PRE", "math-display/DIV"} <= reached, reached


def test_a_code_blocks_copy_button_puts_its_code_on_the_clipboard(page, served, fake):
    fake.script([text(RICH)])
    answered(page)
    block = page.locator("article.text .code").last
    expect(block.locator(".code-head .lang")).to_have_text("python")
    copy = block.get_by_role("button", name="Copy")
    expect(copy).to_be_visible()
    page.evaluate("""b => { window.__labels = [];
        new MutationObserver(() => window.__labels.push(b.textContent)).observe(b, {childList: true}); }""",
                  copy.element_handle())
    copy.click()
    for _ in range(100):  # "Copied", then back to "Copy" after 1.5 s (wait_for_function needs eval: CSP)
        if len(page.evaluate("window.__labels")) >= 2:
            break
        page.wait_for_timeout(100)
    # one assertion, so a failure says both what the clipboard holds and what the button said
    # ("Copy failed": the page's write was refused; none: the click never reached it)
    held, said = page.evaluate("navigator.clipboard.readText()"), page.evaluate("window.__labels")[:2]
    assert (held, said) == (f"{LONG_LINE}\nprint(len(x))\n", ["Copied", "Copy"])


def test_without_javascript_math_shows_and_copy_is_not_offered(browser, served, fake):
    fake.script([text(RICH)])
    context = served.context(browser, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(served.empty_chat())
        page.locator("#composer textarea").fill("math without script")
        page.get_by_role("button", name="Send").click()
        page.wait_for_load_state()
        where = live_part(page)  # while the run goes, the answer shows in a self-refreshing frame
        where.locator("article.text:has(.state.done) math").first.wait_for(timeout=20_000)
        box = where.locator("article.text math").first.bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0
        assert where.locator("article.text .code-head .lang").last.inner_text() == "python"
        expect(where.locator("article.text .code-head button")).to_be_hidden()
    finally:
        context.close()


def test_the_plan_card_shows_check_boxes_and_how_far_it_is(page, served, fake):
    plan = "- [x] read the question\n- [x] find the formula\n- [ ] check it\n- [ ] write it up\n- [x] $E = mc^2$"
    fake.script([tool_call("update_plan", {"plan": plan.replace("[x] find", "[ ] find")})],
                [delay(1.5), tool_call("update_plan", {"plan": plan})], "Planned.")
    page.goto(served.empty_chat())  # open before its first message
    page.evaluate("window.__sameDocument = true")
    page.locator("#composer textarea").fill("make a plan")
    page.locator("#composer textarea").press("Enter")
    card = page.locator("#plan .item.plan")
    expect(card.locator(".who .state")).to_have_text("2 of 5 done", timeout=10_000)
    # a step ticked: the count follows live, without a reload
    expect(card.locator(".who .state")).to_have_text("3 of 5 done", timeout=10_000)
    page.locator("article.text .state.done").wait_for(state="attached", timeout=10_000)
    assert page.evaluate("window.__sameDocument") is True
    expect(card.locator(".who")).to_have_text("Plan 3 of 5 done")
    expect(card.locator(".who .state")).to_have_text("3 of 5 done")
    boxes = card.locator("input[type=checkbox]")
    expect(boxes).to_have_count(5)
    assert [b.is_checked() for b in boxes.all()] == [True, True, False, False, True]
    assert all(b.is_disabled() for b in boxes.all())
    expect(card.locator("math")).to_have_count(1)
    assert "[x]" not in card.inner_text()


HOSTILE_MATH = "\n\n".join([
    "$\\href{javascript:window.__pwned=1}{click}$ and $\\text{<img src=x onerror=window.__pwned=2>}$",
    "$$\\text{<script>window.__pwned=3</script>}$$",
    "\\(\\style{background:url(javascript:window.__pwned=4)}{x}\\) \\(\\class{x}{y}\\)",
    "\\[\\text{</math><svg onload=window.__pwned=5>}\\]",
    "$$" + "{" * 300 + "x" + "}" * 300 + "$$",
    "$$" + "x+" * 3000 + "$$",
])


def test_hostile_latex_is_inert_in_the_dom(page, served, fake):
    fake.script([rate(200), text(HOSTILE_MATH, chunk=9)])
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    answered(page, "be hostile in LaTeX")
    page.locator("article.text math").first.hover()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None and dialogs == []
    report = page.evaluate("""() => {
        const bad = [];
        for (const m of document.querySelectorAll('article.text math')) {
            for (const el of m.querySelectorAll('*')) {
                if (el.namespaceURI !== 'http://www.w3.org/1998/Math/MathML') bad.push(el.tagName);
                for (const a of el.attributes)
                    if (/^(on|href|style|class|id|xlink)/i.test(a.name)) bad.push(el.tagName + ' ' + a.name);
            }
        }
        for (const el of document.querySelectorAll('article.text script, article.text svg, article.text img'))
            bad.push(el.tagName);
        return bad;
    }""")
    assert report == []
    # what could not be MathML shows as its source, as text
    sources = page.locator("article.text code.math-source")
    assert sources.count() == 5
    assert "<script>" in page.locator("article.text").inner_text()
