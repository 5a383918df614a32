"""The ⋯ menus in Debian's Chromium (issue 36): a sidebar row's and a conversation's own, by its
title (rename, pin, export, delete), which open without JavaScript and, with it, close on Esc
or a click elsewhere, one open at a time, never over another row's ⋯; the conversation's head
names the agent it is with."""
from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from tests.conftest import SHOTS, Served, idle, shared_fixtures, start_chat
from tests.fakes.openai_server import text

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar and an agent no other test sees, writing in conversations of its own.
served, fake = shared_fixtures(newcomer=True)


@pytest.fixture
def chats(served: Served, fake) -> list[str]:
    fake.script("One.", "Two.", "Three.")
    client = served.client(timeout=10)
    made = []
    for words in ("First", "Second", "Third"):
        made.append(start_chat(client, words))
        idle(client, made[-1])
    return made


def test_a_sidebar_menu_closes_on_esc_and_on_a_click_elsewhere_and_covers_no_other_menu(browser, served: Served, chats):
    context = served.context(browser, viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(chats[0])
        rows = page.locator("#conversations li.convo")
        expect(rows).to_have_count(3)
        first, second = rows.nth(0).locator("details.acts"), rows.nth(1).locator("details.acts")
        first.locator("summary").click()
        expect(first.get_by_role("link", name="Rename")).to_be_visible()
        # the next row's ⋯ is not under the open menu: a click there reaches it
        summary = second.locator("summary")
        box = summary.bounding_box()
        hit = page.evaluate("([x, y]) => document.elementFromPoint(x, y).closest('summary') !== null",
                            [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2])
        assert hit, "the open menu covers the next row's ⋯"
        summary.click()
        expect(second).to_have_attribute("open", "")
        expect(first).not_to_have_attribute("open", "")  # one open at a time
        page.keyboard.press("Escape")
        expect(second).not_to_have_attribute("open", "")
        assert page.evaluate("document.activeElement.tagName") == "SUMMARY", "focus goes back to its ⋯"
        expect(page.locator("#status")).to_have_attribute("data-running", "0")
        first.locator("summary").click()
        page.locator("#items").click()
        expect(first).not_to_have_attribute("open", "")
    finally:
        context.close()


@pytest.mark.parametrize("javascript", [True, False])
def test_a_conversations_menu_by_its_title_renames_pins_exports_and_deletes(browser, served: Served, chats, javascript):
    context = served.context(browser, viewport={"width": 1280, "height": 800}, java_script_enabled=javascript)
    try:
        page = context.new_page()
        page.goto(chats[1])
        expect(page.locator(".chat-actions")).to_have_count(0)  # no row of links under the title any more
        expect(page.locator("#with")).to_have_text("With Assistant")
        with served.store() as store:
            agent = store.default_agent(served.person)  # the test's person's own
        expect(page.locator("#with a")).to_have_attribute("href", f"/agents/{agent.id}")
        menu = page.locator("#chat-menu")
        menu.locator("summary").click()
        items = menu.locator(".menu-items > *")
        expect(items).to_have_text(["Rename", "Pin", "Export Markdown", "Export JSON", "Delete…"])
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, f"menu-title{'' if javascript else '-nojs'}.png"))
        menu.get_by_role("button", name="Pin").click()
        pinned = page.locator(f'#conversations li.convo.pinned a.open[href="{chats[1]}"]')
        expect(pinned).to_have_count(1)
        menu.locator("summary").click()
        expect(menu.get_by_role("button", name="Unpin")).to_be_visible()
        menu.get_by_role("link", name="Rename").click()
        if javascript:  # in place, in the title
            field = page.get_by_role("textbox", name="New title")
            field.fill("Renamed by its menu")
            field.press("Enter")
        else:
            page.get_by_label("Title").fill("Renamed by its menu")
            page.get_by_role("button", name="Rename").click()
        expect(page.locator("#title")).to_have_text("Renamed by its menu")
        expect(pinned).to_have_text("Renamed by its menu")
        page.locator("#chat-menu summary").click()
        with page.expect_download() as download:
            page.locator("#chat-menu").get_by_role("link", name="Export Markdown").click()
        assert download.value.suggested_filename.endswith(".md")
    finally:
        context.close()


def test_a_long_sidebar_title_has_its_whole_title_as_a_tooltip(browser, served: Served, fake):
    long = "A very long first message that the sidebar cannot show whole and cuts with an ellipsis"
    fake.script("Fine.")
    fake.plain_default = [text(long)]  # the model's name for it: as long
    client = served.client(timeout=10)
    chat = start_chat(client, long)
    idle(client, chat)
    context = served.context(browser, viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto("/")
        row = page.locator(f'#conversations a.open[href="{chat}"]')
        assert row.evaluate("e => e.scrollWidth > e.clientWidth"), "the title is cut"
        expect(row).to_have_attribute("title", row.inner_text())
    finally:
        context.close()


def test_again_with_another_model_is_a_small_menu_under_the_answer(browser, served: Served, fake):
    """▾ beside Again: a menu of the models under the answer (not a page), closed by Esc; the
    model pressed makes a new version of the answer. Without script ▾ is that choice's page."""
    fake.models["other-model"] = 4096
    fake.script("The first version.", "The version by the other model.")
    client = served.client(timeout=10)
    client.post("/models/refresh", data={"_csrf_token": client.get("/").text.split('name="_csrf_token" value="')[1]
                                         .split('"')[0]})
    chat = start_chat(client, "Say something")
    idle(client, chat)
    for javascript in (False, True):
        context = served.context(browser, viewport={"width": 1280, "height": 800}, java_script_enabled=javascript)
        try:
            page = context.new_page()
            page.goto(chat)
            more = page.get_by_role("link", name="Again with another model")
            more.click()
            if not javascript:
                expect(page).to_have_url(re.compile(r"/answers/\d+/again$"))
                continue
            menu = page.locator(".again-menu")
            expect(menu.get_by_role("button")).to_have_text(["fake-model", "other-model"])
            expect(menu.get_by_role("button", name="fake-model")).to_be_focused()
            assert page.url.endswith(chat), "no page of its own"
            os.makedirs(SHOTS, exist_ok=True)
            page.screenshot(path=os.path.join(SHOTS, "menu-again.png"))
            page.keyboard.press("Escape")
            expect(menu).to_have_count(0)
            expect(more).to_be_focused()
            more.click()
            menu.get_by_role("button", name="other-model").click()
            expect(page.locator(".answer-actions .pager .count")).to_have_text("2 / 2", timeout=15_000)
            expect(page.locator("article.text").last).to_have_text("The version by the other model.")
            expect(page.locator("#text")).to_be_focused()
            assert fake.streamed[-1]["model"] == "other-model"
        finally:
            context.close()
