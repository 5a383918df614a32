"""The Connections page in Debian's Chromium, with script and without: a fresh install with no
model server is led from its first page to Connections, the owner adds a server with its key,
the Test's words and its models show, one model is switched off, the composer's picker offers
the rest at once and a message is answered there; the key is in no page. Screenshots on a
desktop and a phone, light and dark; one model kept for a chosen person from the link beside its
switch, with script and without, and its form on a desktop and a phone, light and dark."""
from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from tests.conftest import COOKIE, SHOTS, Served, light_and_dark, signed_in
from tests.fakes.openai_server import FakeModelServer, text

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


def live_part(page):
    """Without JavaScript a running conversation shows in its self-refreshing frame."""
    return page.frame_locator("iframe.watch-frame") if page.locator("iframe.watch-frame").count() else page


@pytest.mark.parametrize("javascript", [True, False])
def test_a_fresh_install_is_connected_from_the_browser_and_answers(browser, data, env, javascript):
    with FakeModelServer(models={"big-model": 32768, "small-model": 4096}, require_key=KEY) as team:
        served = Served(data, {**env, "AI_URL": "", "OLLAMA_HOST": ""}).start()
        try:
            with served.watched_page(browser, java_script_enabled=javascript) as page:
                page.goto("/")
                expect(page.locator("#connect")).to_contain_text("Connect a model")
                if javascript:
                    os.makedirs(SHOTS, exist_ok=True)
                    page.screenshot(path=os.path.join(SHOTS, "connections-no-model-desktop-light.png"))
                page.locator("#connect").get_by_role("link", name="Connections page").click()
                expect(page).to_have_url(re.compile(r"/settings/connections$"))
                expect(page.locator("article.from-environment")).to_have_count(0)
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
                expect(page.locator("#connect")).to_have_count(0)
                expect(page.locator('#model-picker option[value="team-gpu:small-model"]')).to_have_count(1)
                expect(page.locator("#model-picker option").filter(has_text="big-model")).to_have_count(0)
                assert KEY not in page.content()
                team.script(text("Hello from the team's server."))
                page.locator("#composer textarea").fill("Hello?")
                page.get_by_role("button", name="Send").click()
                expect(page).to_have_url(re.compile(r"/c/\d+"))
                live_part(page).locator("article.text").filter(has_text="Hello from the team's server.") \
                    .wait_for(timeout=20_000)
                assert team.requests[-1]["model"] == "small-model"
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
                context = served.context(browser, viewport=viewport)
                page = context.new_page()
                page.goto("/settings/connections")
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= viewport["width"], f"the page scrolls sideways on a {name}: {width} px"
                light_and_dark(page, os.path.join(SHOTS, f"connections-{name}-{{scheme}}.png"), full_page=True)
                page.locator("article.connection").filter(has_text="Team GPU").get_by_role("link", name="Edit").click()
                expect(page.locator("#edit ~ form input[name=key]")).to_have_value("")
                assert KEY not in page.content()
                light_and_dark(page, os.path.join(SHOTS, f"connections-edit-{name}-{{scheme}}.png"))
                context.close()
        finally:
            served.stop()


@pytest.mark.parametrize("javascript", [True, False])
def test_one_model_kept_for_chosen_people_from_its_switch(browser, data, env, javascript):
    """The link beside a model's switch opens who may use it; kept for Bea, Cal's picker lacks
    it. With script, screenshots of its form on a desktop and a phone, light and dark."""
    with FakeModelServer(models={"big-model": 32768, "small-model": 4096}, require_key=KEY) as team:
        served = Served(data, env).start()
        try:
            signed_in(data, "Bea", owner=False, url=served.database_url)
            cal = signed_in(data, "Cal", owner=False, url=served.database_url)
            with served.watched_page(browser, java_script_enabled=javascript) as page:
                add(page, "Team GPU", team.url, KEY)
                card = page.locator("article.connection").filter(has_text="Team GPU")
                card.get_by_role("link", name="Who may use big-model").click()
                form = page.locator("form.model-rule")
                expect(page.locator("#model-rule")).to_have_text("Who may use “big-model”")
                form.get_by_label("You and the people ticked").check()
                form.get_by_label("Bea").check()
                form.get_by_role("button", name="Save who may use it").click()
                expect(page.locator(".saved")).to_contain_text("Saved who may use “big-model” of “Team GPU”.")
                expect(page.locator("form.model-rule")).to_have_count(0)
                expect(card.get_by_role("link", name="Who may use big-model")).to_have_text(
                    re.compile(r"for you and 1 chosen"))
                expect(card.get_by_role("link", name="Who may use small-model")).to_have_text(re.compile("everyone"))
                if javascript:
                    os.makedirs(SHOTS, exist_ok=True)
                    for name, viewport in VIEWS:
                        page.set_viewport_size(viewport)
                        for scheme in ("light", "dark"):
                            page.emulate_media(color_scheme=scheme)
                            page.goto(card.get_by_role("link", name="Who may use big-model").get_attribute("href"))
                            expect(page.locator("form.model-rule")).to_be_visible()
                            width = page.evaluate("document.documentElement.scrollWidth")
                            assert width <= viewport["width"], f"the page scrolls sideways on a {name}: {width} px"
                            page.evaluate("window.scrollTo(0, 0)")  # a phone's fixed header stays at the top
                            page.screenshot(path=os.path.join(SHOTS, f"connections-model-rule-{name}-{scheme}.png"),
                                            full_page=True)
            context = browser.new_context(base_url=served.url, java_script_enabled=javascript)
            context.add_cookies([{"name": COOKIE, "value": cal, "url": served.url}])
            page = context.new_page()
            page.goto("/")
            expect(page.locator('#model-picker option[value="team-gpu:small-model"]')).to_have_count(1)
            expect(page.locator('#model-picker option[value="team-gpu:big-model"]')).to_have_count(0)
            context.close()
        finally:
            served.stop()
