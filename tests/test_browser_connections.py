"""The Connections page in Debian's Chromium, with script and without: the owner adds a model
server with its key, the Test's words and its models show, one model is switched off, and the
composer's picker offers the rest at once; the key is in no page. Screenshots on a desktop
and a phone, light and dark."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from tests.conftest import SHOTS, Served, signed_in
from tests.fakes.openai_server import FakeModelServer

pytestmark = pytest.mark.browser

KEY = "sk-browser-secret-99"
VIEWS = [("desktop", {"width": 1280, "height": 800}), ("phone", {"width": 390, "height": 844})]


def add(page, name: str, url: str, key: str) -> None:
    page.goto("/settings/connections")
    form = page.locator('form[action="/settings/connections"]')
    form.get_by_label("Name").fill(name)
    form.get_by_role("radio", name="OpenAI-compatible").check()
    form.get_by_label("Address").fill(url)
    form.get_by_label("API key").fill(key)
    form.get_by_role("button", name="Add and test").click()


@pytest.mark.parametrize("javascript", [True, False])
def test_the_owner_adds_a_server_and_its_models_are_offered_at_once(browser, data, env, fake, javascript):
    with FakeModelServer(models={"big-model": 32768, "small-model": 4096}, require_key=KEY) as team:
        served = Served(data, env).start()
        try:
            with served.watched_page(browser, java_script_enabled=javascript) as page:
                add(page, "Team GPU", team.url, KEY)
                card = page.locator("article.connection").filter(has_text="Team GPU")
                expect(page.locator(".saved")).to_contain_text("Saved “Team GPU”. Connected: 2 models.")
                expect(card.locator(".tested")).to_have_text("Connected: 2 models.")
                card.get_by_label("big-model").uncheck()
                card.get_by_role("button", name="Save the models").click()
                expect(page.locator(".saved")).to_contain_text("Saved the models of “Team GPU”.")
                expect(page.locator("article.connection").filter(has_text="Team GPU").get_by_label("big-model")) \
                    .not_to_be_checked()
                assert KEY not in page.content()
                page.goto("/")
                options = page.locator("#model-picker option")
                expect(options.filter(has_text="small-model")).to_have_count(1)
                expect(options.filter(has_text="big-model")).to_have_count(0)
                assert KEY not in page.content()
        finally:
            served.stop()


def test_screenshots_of_the_connections_page(browser, data, env, fake):
    with FakeModelServer(models={"big-model": 32768, "small-model": 4096, "tiny-model": 2048},
                         require_key=KEY) as team:
        served = Served(data, env).start()
        try:
            context = served.context(browser)
            page = context.new_page()
            for name in ("Bea", "Cal"):
                signed_in(data, name, owner=False, url=served.database_url)
            add(page, "Team GPU", team.url, KEY)
            expect(page.locator(".saved")).to_contain_text("Connected: 3 models.")
            card = page.locator("article.connection").filter(has_text="Team GPU")
            card.get_by_label("You and the people ticked").check()
            card.get_by_label("Bea").check()
            card.get_by_role("button", name="Save who may use it").click()
            expect(page.locator(".saved")).to_contain_text("Saved who may use “Team GPU”.")
            expect(page.locator("article.connection").filter(has_text="Team GPU")).to_contain_text(
                "for you and 1 chosen")
            add(page, "OpenRouter", team.url, "sk-not-this-one")
            expect(page.locator("article.connection").filter(has_text="OpenRouter").locator(".tested")) \
                .to_contain_text("Wrong key: the server refused the key (401).")
            context.close()
            os.makedirs(SHOTS, exist_ok=True)
            for name, viewport in VIEWS:
                for scheme in ("light", "dark"):
                    context = served.context(browser, viewport=viewport, color_scheme=scheme)
                    page = context.new_page()
                    page.goto("/settings/connections")
                    width = page.evaluate("document.documentElement.scrollWidth")
                    assert width <= viewport["width"], f"the page scrolls sideways on a {name}: {width} px"
                    page.screenshot(path=os.path.join(SHOTS, f"connections-{name}-{scheme}.png"), full_page=True)
                    context.close()
        finally:
            served.stop()
