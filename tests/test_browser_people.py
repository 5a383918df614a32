"""An invitation walked end to end in Debian's Chromium, on a desktop and a phone, with script
(the Copy button) and without (the link as text to select): the owner makes it on the People
page, the invited person opens it signed out, chooses a name and a password and is signed in;
the link then says it does not work, and the People page says who used it. Screenshots of
each step, light and dark (SHOTS)."""
from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from tests.conftest import SHOTS, Served, light_and_dark

pytestmark = pytest.mark.browser

VIEWS = [("desktop", {"width": 1280, "height": 800}), ("phone", {"width": 390, "height": 844})]
WALKS = [(view, True) for view in VIEWS] + [(VIEWS[0], False)]


def shot(page, name: str, view: str) -> None:
    """The page no wider than the screen, pictured light and dark."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{name} scrolls sideways on a {view}: {width} px"
    light_and_dark(page, os.path.join(SHOTS, f"people-{name}-{view}-{{scheme}}.png"), full_page=True)


def test_an_invitation_from_the_people_page_to_a_new_person_signed_in(browser, data, env):
    served = Served(data, env).start()
    os.makedirs(SHOTS, exist_ok=True)
    try:
        for n, ((view, viewport), javascript) in enumerate(WALKS):
            joiner = f"Cy {n}"
            owner = served.context(browser, viewport=viewport, java_script_enabled=javascript,
                                   permissions=["clipboard-read", "clipboard-write"] if javascript else [])
            page = owner.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto("/")
            if view == "phone":
                page.locator("label.menu-button").click()  # the header's links are behind Menu on a phone
            page.get_by_role("link", name="People").click()
            expect(page).to_have_url(re.compile(r"/people$"))
            form = page.locator('form[action="/people/invitations"]')
            form.get_by_label("Who it is for").fill(joiner)
            expect(form.get_by_label("The link works for")).to_have_value("7")
            if javascript:
                shot(page, "page", view)
            form.get_by_role("button", name="Make the link").click()
            expect(page.locator("h1")).to_have_text(f"An invitation for {joiner}")
            link = page.locator("#invitation-link").inner_text()
            assert re.fullmatch(rf"{re.escape(served.url)}/join\?token=[\w-]{{40,}}", link), link
            copy = page.locator("button[data-copy]")  # (its name changes to "Copied")
            if javascript:
                copy.click()
                expect(copy).to_have_text("Copied")
                assert page.evaluate("navigator.clipboard.readText()") == link
            else:
                expect(copy).to_be_hidden()  # the link is text to select: a triple click takes it whole
                page.locator("#invitation-link").click(click_count=3)
                assert page.evaluate("window.getSelection().toString()").strip() == link
            shot(page, "invitation-link" + ("" if javascript else "-no-js"), view)

            guest = browser.new_context(viewport=viewport, java_script_enabled=javascript)
            theirs = guest.new_page()
            theirs.goto(link)
            expect(theirs.locator("h1")).to_have_text("Join this Tabletalk")
            theirs.get_by_label("Your name").fill(joiner)
            theirs.get_by_label("Password (at least 8 characters)").fill("cy's long password")
            theirs.get_by_label("Password again").fill("cy's other password")
            theirs.get_by_role("button", name="Join").click()
            expect(theirs.locator("p.problem")).to_have_text("The two passwords differ: type the same one twice.")
            expect(theirs.get_by_label("Your name")).to_have_value(joiner)
            if javascript:
                shot(theirs, "join-refused", view)
            theirs.get_by_label("Password (at least 8 characters)").fill("cy's long password")
            theirs.get_by_label("Password again").fill("cy's long password")
            theirs.get_by_role("button", name="Join").click()
            expect(theirs).to_have_url(re.compile(r"/$"))
            expect(theirs.locator("nav.me a")).to_have_text(joiner)
            expect(theirs.locator("nav.main")).not_to_contain_text("People")
            theirs.goto(link)
            expect(theirs.locator("h1")).to_have_text("This invitation does not work")
            expect(theirs.locator("main form")).to_have_count(0)
            if javascript:
                shot(theirs, "join-used", view)
            guest.close()

            page.goto("/people")
            used = page.locator("li.invitation.used").filter(has_text=joiner)
            expect(used).to_contain_text("Used")
            expect(used).to_contain_text(f"{joiner} joined")
            expect(page.locator(".people-list")).to_contain_text(joiner)
            if javascript:
                shot(page, "page-after", view)
            owner.close()
            assert errors == [], errors
    finally:
        served.stop()
