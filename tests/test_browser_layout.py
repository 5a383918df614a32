"""A conversation's layout in Debian's Chromium, desktop and phone, light and dark (issue 36):
the composer docked at the bottom however short the conversation, the plan pinned above it,
↓ back to the newest text, a phone's top bar that stays (Menu and New) and its 44 px targets,
and a touch keyboard's return that makes a new line. Screenshots: SHOTS."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from tests.conftest import SHOTS, Served, ask, idle, light_and_dark, shared_fixtures, start_chat
from tests.fakes.openai_server import rate, text, tool_call

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar and agents no other test sees (its screenshots show only what it made).
served, fake = shared_fixtures(newcomer=True)

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PLAN = "- [x] read the question\n- [ ] find the answer\n- [ ] write it up"
LONG = "\n\n".join(f"Paragraph {n}: " + "words that fill the screen " * 12 for n in range(12))
TARGET = 44  # px: WCAG 2.5.5's target size, a finger's


def screens(browser, served: Served, **kw):
    """(name, context) for a desktop and a phone: a phone is a touch screen. Light and dark
    are pictured by `shot` (a theme changes only colours)."""
    for device, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        touch = {"is_mobile": True, "has_touch": True} if device == "phone" else {}
        yield device, served.context(browser, viewport=viewport, **touch, **kw)


def shot(page, name: str) -> None:
    light_and_dark(page, os.path.join(SHOTS, f"layout-{name}-{{scheme}}.png"))


def bottom_of(page, selector: str) -> float:
    box = page.locator(selector).bounding_box()
    return box["y"] + box["height"]


@pytest.mark.parametrize("javascript", [True, False])
def test_the_composer_is_docked_at_the_bottom_of_a_short_conversation(browser, served: Served, fake, javascript):
    """One message and its answer: the composer still sits at the window's bottom (it used to
    float just under the answer), the plan on top of it, on a desktop and a phone."""
    fake.script([tool_call("update_plan", {"plan": PLAN})], "Planned.")
    client = served.client(timeout=10)
    chat = start_chat(client, "Plan my day")
    idle(client, chat)
    for name, context in screens(browser, served, java_script_enabled=javascript):
        try:
            page = context.new_page()
            page.goto(chat)
            height = page.viewport_size["height"]
            assert height - 40 <= bottom_of(page, "#composer") <= height + 1, name
            plan = page.locator("#plan .item.plan")
            expect(plan).to_be_visible()
            assert 0 <= page.locator("#composer").bounding_box()["y"] - bottom_of(page, "#plan") <= 16, \
                f"{name}: the plan sits on the composer's top edge"
            assert page.evaluate("document.documentElement.scrollWidth") == page.viewport_size["width"], name
            shot(page, f"short-{name}{'' if javascript else '-nojs'}")
        finally:
            context.close()


def test_in_a_long_conversation_the_plan_the_composer_and_the_top_bar_stay_in_view(browser, served: Served, fake):
    """Scrolled back up a long conversation: the plan and the composer stay at the bottom (the
    plan is pinned, as the README says), ↓ shows and takes the person back to the newest text;
    on a phone the top bar with Menu and New stays at the top."""
    fake.script([tool_call("update_plan", {"plan": PLAN})], LONG, LONG)
    client = served.client(timeout=10)
    chat = start_chat(client, "Plan, then write at length")
    idle(client, chat)
    ask(client, chat, "And more")
    idle(client, chat)
    for name, context in screens(browser, served):
        try:
            page = context.new_page()
            page.goto(chat)
            page.locator("html.js").wait_for(state="attached")
            latest = page.locator(".to-latest")
            expect(latest).to_be_hidden()  # a conversation opens at its newest text
            page.mouse.wheel(0, -2500)
            expect(latest).to_be_visible()
            height = page.viewport_size["height"]
            assert height - 40 <= bottom_of(page, "#composer") <= height + 1, name
            expect(page.locator("#plan .item.plan")).to_be_in_viewport()
            if name.startswith("phone"):
                top = page.locator("header.top")
                assert top.bounding_box()["y"] == 0, f"{name}: the top bar stays"
                expect(top.locator("label.menu-button")).to_be_in_viewport()
                expect(top.get_by_role("link", name="New conversation")).to_be_in_viewport()
            shot(page, f"long-{name}")
            latest.click()
            expect(latest).to_be_hidden()
            page.wait_for_function("() => innerHeight + scrollY >= document.body.scrollHeight - 2")
        finally:
            context.close()


def test_on_a_phone_every_action_under_a_message_is_a_finger_wide(browser, served: Served, fake):
    fake.script("A short answer.")
    client = served.client(timeout=10)
    chat = start_chat(client, "Hello")
    idle(client, chat)
    context = served.context(browser, viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        page.goto(chat)
        targets = page.locator(".actions .act, #chat-menu summary, label.menu-button, a.new-top, "
                               "#composer button.round:visible, #composer .attach, #composer .prompts-link")
        expect(page.locator(".answer-actions .act").first).to_be_visible()
        small = []
        for n in range(targets.count()):
            t = targets.nth(n)
            if not t.is_visible():
                continue
            box = t.bounding_box()
            if box["height"] < TARGET - 0.5 or box["width"] < TARGET - 0.5:
                small.append((t.evaluate("e => e.outerHTML.slice(0, 60)"), round(box["width"]), round(box["height"])))
        assert small == [], f"targets smaller than {TARGET} px: {small}"
    finally:
        context.close()


def test_on_a_touch_screen_return_makes_a_new_line_and_the_placeholder_says_so(browser, served: Served, fake):
    """A phone's return makes a new line and the arrow sends (the placeholder says that); a
    desktop's Enter sends, Shift+Enter makes a new line (and its placeholder says that)."""
    fake.script("Both lines arrived.")
    chat = served.empty_chat()
    context = served.context(browser, viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        page.goto(chat)
        box = page.locator("#text")
        expect(box).to_have_attribute("placeholder", "Write a message. Return makes a new line; the arrow sends.")
        box.click()
        page.keyboard.type("First line")
        page.keyboard.press("Enter")
        page.keyboard.type("second line")
        expect(box).to_have_value("First line\nsecond line")
        expect(page.locator("article.user")).to_have_count(0)
        page.get_by_role("button", name="Send").click()
        expect(page.locator("article.user .body")).to_have_text("First line\nsecond line")
    finally:
        context.close()
    context = served.context(browser, viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto(chat)
        expect(page.locator("#text")).to_have_attribute(
            "placeholder", "Write a message. Enter sends, Shift+Enter makes a new line.")
    finally:
        context.close()


def test_while_an_answer_streams_scrolling_up_stops_following_and_down_follows_again(browser, served: Served, fake):
    fake.script([rate(40), text(LONG)])
    client = served.client(timeout=10)
    chat = start_chat(client, "Write at length")
    context = served.context(browser, viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto(chat)
        page.locator("article.text .state.growing").wait_for(state="attached", timeout=15_000)
        page.wait_for_function("() => document.body.scrollHeight > innerHeight * 1.5", timeout=20_000)
        page.mouse.wheel(0, -600)
        latest = page.locator(".to-latest")
        expect(latest).to_be_visible()
        held = page.evaluate("scrollY")
        page.wait_for_function("() => document.body.scrollHeight > innerHeight * 2", timeout=20_000)
        assert page.evaluate("scrollY") == held, "scrolled up, the page stays where the person is"
        latest.click()
        page.wait_for_function("() => innerHeight + scrollY >= document.body.scrollHeight - 2")
        page.locator("article.text .state.done").wait_for(state="attached", timeout=30_000)
        page.wait_for_function("() => innerHeight + scrollY >= document.body.scrollHeight - 2")
    finally:
        context.close()


@pytest.mark.parametrize("javascript", [True, False])
def test_the_home_pages_agent_picker_offers_choose_only_without_script(browser, served: Served, javascript):
    from app.tables import Assistant

    with served.store() as store:
        other = store.add_agent(Assistant(name="Researcher", instructions="", person=served.person))
    context = served.context(browser, viewport=DESKTOP, java_script_enabled=javascript)
    try:
        page = context.new_page()
        page.goto("/")
        choose = page.locator("form.pick-agent").get_by_role("button", name="Choose")
        page.get_by_label("Agent").select_option(str(other.id))
        if javascript:
            expect(choose).to_be_hidden()  # the pick applies at once
        else:
            expect(choose).to_be_visible()
            choose.click()
        expect(page).to_have_url(f"{served.url}/?agent={other.id}")
        expect(page.locator("h1")).to_have_text("New conversation with Researcher")
    finally:
        context.close()
