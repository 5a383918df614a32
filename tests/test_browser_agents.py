"""The agents in Debian's Chromium (issue 36): the list says what each agent is and starts a
conversation with it, a new agent's page says it was made where the person looks, and an
agent's page starts a conversation with it; desktop and phone."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from tests.conftest import SHOTS, Served

pytestmark = pytest.mark.browser


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
