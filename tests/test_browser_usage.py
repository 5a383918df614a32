"""Usage in Debian's Chromium (docs/usage.md): the owner's Usage page with its chart, a limit
saved there, and the composer of a person who used today's tokens saying so before anything
is sent; a send refused keeps what was typed, with script and without. Screenshots on a
desktop and a phone, light and dark."""
from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from app.accounts import usage as usage_rules
from tests.conftest import SHOTS, Served, light_and_dark, signed_in

pytestmark = pytest.mark.browser

VIEWS = [("desktop", {"width": 1280, "height": 800}), ("phone", {"width": 390, "height": 844})]
WORDS = "You have used today’s 200,000 tokens; it resets at 00:00 UTC."


def fill(store, people: dict[str, int]) -> None:
    """Thirty days of requests for each person, on two models, some of them estimated."""
    today = usage_rules.today()
    with store.write():
        for n, person in enumerate(people.values()):
            for d in range(30):
                day = usage_rules.days_before(today, d)
                for m, model in enumerate(("team-gpu:llama-3.1-70b", "openrouter:claude-sonnet")):
                    if (d + n + m) % 3:
                        store.add_usage(person, model, day, 4_000 * (n + 1) + 300 * (d % 7), 900 + 120 * m,
                                        estimated=(d + m) % 11 == 0)


def test_the_usage_page_and_the_composer_at_its_limit(browser, data, env):
    served = Served(data, env).start()
    try:
        for name in ("Bea", "Cal"):
            signed_in(data, name, owner=False, url=served.database_url)
        with served.store() as store:
            people = {p.name: p.id for p in store.people()}
            fill(store, people)
            me = store.owner()
            chat = store.new_conversation(store.default_agent(me).id, person=me).id
        os.makedirs(SHOTS, exist_ok=True)
        # the owner sets their own limit on the page, as typed
        with served.watched_page(browser) as page:
            page.goto("/settings/usage")
            expect(page.locator("figure.usage-chart svg title").first).to_contain_text("Everyone’s tokens a day")
            page.get_by_label("For everyone").fill("1,000,000")
            page.locator(f"input[name=limit-{me}]").fill("200,000")
            page.get_by_role("button", name="Save limits").click()
            expect(page.locator(".saved")).to_contain_text("Saved: the daily limits")
            expect(page.locator(f"input[name=limit-{me}]")).to_have_value("200,000")
        with served.store() as store:
            store.add_usage(me, "team-gpu:llama-3.1-70b", usage_rules.today(), 250_000, 1_000)
        for name, viewport in VIEWS:
            context = served.context(browser, viewport=viewport)
            page = context.new_page()
            for path, shot in (("/settings/usage", "usage"), ("/account#usage", "usage-account"),
                               (f"/c/{chat}", "usage-limit-composer")):
                page.goto(path)
                light_and_dark(page, os.path.join(SHOTS, f"{shot}-{name}-{{scheme}}.png"),
                               full_page=shot != "usage-limit-composer")
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= viewport["width"], f"{path} scrolls sideways on a {name}: {width} px"
            expect(page.locator("#composer-error")).to_have_text(WORDS)
            context.close()
        # a send refused with script: the words above the box, the text still in it
        with served.watched_page(browser, console=False) as page:
            page.goto(f"/c/{chat}")
            page.locator("#composer textarea").fill("A long message I do not want to lose")
            page.get_by_role("button", name="Send").click()
            expect(page.locator("#composer-error")).to_have_text(WORDS + " Nothing was sent.")
            expect(page.locator("#composer textarea")).to_have_value("A long message I do not want to lose")
            page.screenshot(path=os.path.join(SHOTS, "usage-limit-refused-desktop-light.png"))
        # and without
        with served.watched_page(browser, console=False, java_script_enabled=False) as page:
            page.goto(f"/c/{chat}")
            page.locator("#composer textarea").fill("Typed without script")
            page.get_by_role("button", name="Send").click()
            expect(page.locator("#composer-error")).to_have_text(WORDS)
            expect(page.locator("#composer textarea")).to_have_value("Typed without script")
        with served.store() as store:
            assert [i for i in store.items(chat) if i.kind == "user"] == [], "nothing was sent"
    finally:
        served.stop()
