"""The agents in Debian's Chromium (issue 36): the list says what each agent is and starts a
conversation with it, a new agent's page says it was made where the person looks, and an
agent's page starts a conversation with it; desktop and phone."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from tests.conftest import SHOTS, Served, shared_fixtures

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar and an agent no other test sees, writing in conversations of its own.
served, fake = shared_fixtures(newcomer=True)


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}],
                         ids=["desktop", "phone"])
def test_an_agent_is_made_and_a_conversation_started_with_it(browser, served: Served, viewport):
    context = served.context(browser, viewport=viewport, color_scheme="dark")
    try:
        page = context.new_page()
        page.goto("/agents")
        first = page.locator(".agent-list li").first
        expect(first.locator(".agent-name")).to_have_text("Assistant")
        expect(first).to_contain_text("the default model")
        expect(first).to_contain_text("0 conversations")
        page.get_by_label("New agent").fill("Researcher")
        page.get_by_role("button", name="Create").click()
        note = page.locator(".saved[role=status]").first
        expect(note).to_have_text("Agent created: give it instructions and a model.")
        expect(note).to_be_in_viewport()
        page.get_by_label("Instructions").fill("Find sources and cite them.")
        page.get_by_role("button", name="Save").click()
        page.goto("/agents")
        row = page.locator(".agent-list li", has_text="Researcher")
        expect(row.locator(".agent-says")).to_have_text("Find sources and cite them.")
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, f"agents-{viewport['width']}.png"))
        row.get_by_role("link", name="New conversation with Researcher").click()
        expect(page.locator("h1")).to_have_text("New conversation with Researcher")
        page.goto("/agents")
        page.get_by_role("link", name="Researcher", exact=True).click()
        page.get_by_role("link", name="New conversation with Researcher").click()
        expect(page.locator("h1")).to_have_text("New conversation with Researcher")
    finally:
        context.close()


@pytest.mark.parametrize("javascript", [True, False])
def test_a_memory_is_added_and_changed_by_hand_from_the_account_page(browser, served: Served, javascript):
    context = served.context(browser, viewport={"width": 390, "height": 844}, java_script_enabled=javascript)
    try:
        page = context.new_page()
        page.goto("/account")
        page.locator(".memory-list").get_by_role("link", name="Assistant").click()
        expect(page.locator(".tabs a[aria-current]")).to_have_text("Memory")
        page.get_by_label("Add a memory").fill("I live in Lyon.")
        page.get_by_role("button", name="Add", exact=True).click()
        expect(page.locator(".saved[role=status]").first).to_have_text("Memory added: the agent reads it from its next answer.")
        memory = page.locator("ul.memories li").first
        expect(memory).to_contain_text("I live in Lyon.")
        memory.locator("summary").click()
        memory.get_by_label("The memory").fill("I live in Paris.")
        memory.get_by_role("button", name="Save").click()
        expect(page.locator("ul.memories li").first.locator(".memory > span")).to_have_text("I live in Paris.")
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, f"memory{'' if javascript else '-nojs'}.png"), full_page=True)
        page.goto("/account")
        expect(page.locator(".memory-list li").first).to_contain_text("1 memory")
    finally:
        context.close()
