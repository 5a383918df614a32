"""Accounts in Debian's Chromium: setting the owner up, signing out and in (with and without
JavaScript), and every page rendered under the Content-Security-Policy with no console error."""
from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from app.accounts.api_keys import SHOWN
from app.tables import skill
from tests.conftest import SHOTS, Served, csrf, rows, shared_fixtures, start_chat, wait_for
from tests.fakes.openai_server import text, tool_call

pytestmark = pytest.mark.browser


# One served app for the signed-in tests (docs/testing.md, "Shared servers"): the owner's pages,
# each adding a person of another name and putting its agent's approvals back; an API key is
# someone new's. Setting the owner up needs an app of its own, with no owner yet.
served, fake = shared_fixtures(newcomer=False)


def watched(page) -> list[str]:
    """Everything the page reports as wrong: script errors, console errors (a CSP refusal
    is one), and failed requests."""
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    # (a request the browser itself aborts, leaving the page, is not a failure)
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}")
            if "events" not in r.url and "ERR_ABORTED" not in (r.failure or "") else None)
    return problems


@pytest.mark.parametrize("javascript", [True, False])
def test_setting_up_the_owner_then_signing_out_and_in(browser, data, env, javascript):
    served = Served(data, env, account=False).start()
    context = browser.new_context(base_url=served.url, java_script_enabled=javascript)
    try:
        page = context.new_page()
        problems = watched(page)
        page.goto("/")
        expect(page).to_have_url(f"{served.url}/setup")
        code = re.search(r"/setup\?code=(\S+)", served.log.read_text()).group(1)
        form = page.locator("main form").bounding_box()
        centre = form["x"] + form["width"] / 2
        assert abs(centre - page.viewport_size["width"] / 2) < 2, "the form stands in the page's centre"
        page.get_by_label("Setup code").fill(code)  # as printed where it was started
        page.get_by_label("Your name").fill("Ada Lovelace")
        page.get_by_label("Password", exact=True).fill("analytical engine")
        page.get_by_label("The password again").fill("analytical engines")
        page.get_by_role("button", name="Set up").click()
        expect(page.locator(".problem")).to_contain_text("The two passwords differ")
        expect(page.get_by_label("Password", exact=True)).to_be_focused()  # not the name, which was right
        expect(page.get_by_label("Your name")).to_have_value("Ada Lovelace")
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, f"setup-refused{'' if javascript else '-nojs'}.png"))
        problems.clear()  # (the refusal's 400, asked for)
        page.get_by_label("Password", exact=True).fill("analytical engine")
        page.get_by_label("The password again").fill("analytical engine")
        page.get_by_role("button", name="Set up").click()
        expect(page).to_have_url(f"{served.url}/")
        expect(page.locator("nav.me a")).to_have_text("Ada Lovelace")
        cookie = next(c for c in context.cookies() if c["name"] == "tabletalk_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
        assert page.evaluate("document.cookie").find("tabletalk_session") == -1 if javascript else True

        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(f"{served.url}/signin")
        page.goto("/agents")
        expect(page).to_have_url(f"{served.url}/signin?next=/agents")
        page.get_by_label("Name").fill("ada lovelace")
        page.get_by_label("Password").fill("wrong password")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator(".problem")).to_have_text("That name and password do not match an account.")
        page.get_by_label("Password").fill("analytical engine")
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{served.url}/agents")
        expect(page.locator("h1")).to_have_text("Agents")
        assert [p for p in problems if "401" not in p] == [], problems
    finally:
        context.close()
        served.stop()


def test_every_page_renders_under_the_csp_with_no_console_error(browser, served: Served, fake):
    """Each template once (signed in as the owner, then the signed-out pages), in a browser
    that enforces the Content-Security-Policy: an inline script or style, or anything from
    another host, would show up as a console error."""
    with served.store() as store:
        owner = store.owner()
        agent = store.default_agent(owner)
        store.update_agent(agent.id, approve="update_plan")
        store.add_memory(agent.id, "likes tea")
        sk = store.add_skill(skill("tea", "making tea", "# Tea\n\n1. Boil water"))
    client = served.client(timeout=10, follow_redirects=True)
    client.post("/people", data={"_csrf_token": csrf(client), "name": "Cy", "password": "cy's password"})
    cy = rows(served.data, "SELECT id FROM people WHERE name = 'Cy'")[0]["id"]
    fake.script([text("Here is **bold**, `code` and a table:\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n"),
                 tool_call("update_plan", {"plan": "- [ ] tea"})])
    chat = start_chat(client, "tea?", files={"file": ("notes.txt", b"some notes", "text/plain")})
    wait_for(lambda: rows(served.data, "SELECT 1 AS one FROM items WHERE kind = 'call' AND state = 'approval'"))
    pages = ["/", chat, chat + "/delete", "/agents", f"/agents/{agent.id}", f"/agents/{agent.id}?tab=tools",
             f"/agents/{agent.id}?tab=plugins", f"/agents/{agent.id}?tab=memory", f"/agents/{agent.id}/delete",
             "/skills", f"/skills/{sk.id}", f"/skills/{sk.id}/delete", "/search?q=tea", "/people",
             f"/people/{cy}/delete", "/account", "/no/such/page", "/c/999999"]
    context = served.context(browser)
    try:
        page = context.new_page()
        problems = watched(page)
        for path in pages:
            response = page.goto(path)
            assert "script-src 'self'" in response.headers["content-security-policy"], path
            page.wait_for_load_state("load")
            if response.status >= 400:  # the page itself, as asked: Chromium logs its status
                said = f"console: Failed to load resource: the server responded with a status of {response.status}"
                problems[:] = [p for p in problems if not p.startswith(said)]
            assert problems == [], f"{path}: {problems}"
        # a signed-out person's pages, and the setup page of a new install
        context.clear_cookies()
        for path in ["/signin", "/signin?next=/agents"]:
            page.goto(path)
            page.wait_for_load_state("load")
            assert problems == [], f"{path}: {problems}"
    finally:
        context.close()
        with served.store() as store:
            store.update_agent(agent.id, approve=agent.approve)


def test_the_setup_page_renders_under_the_csp(browser, data, env):
    served = Served(data, env, account=False).start()
    context = browser.new_context(base_url=served.url)
    try:
        page = context.new_page()
        problems = watched(page)
        page.goto("/setup")
        page.wait_for_load_state("load")
        assert problems == [] and page.locator("h1").inner_text() == "Welcome to Tabletalk"
    finally:
        context.close()
        served.stop()


def test_the_owner_passes_on_a_link_that_sets_a_forgotten_password(browser, served: Served):
    """People: New password link shows the link once, Copy puts it on the clipboard; opened
    signed out (phone, dark), it sets the password and signs that browser in as the person."""
    client = served.client(timeout=10, follow_redirects=True)
    client.post("/people", data={"_csrf_token": csrf(client, "/people"), "name": "Bea", "password": "bea's password"})
    context = served.context(browser, permissions=["clipboard-read", "clipboard-write"])
    try:
        page = context.new_page()
        page.goto("/people")
        expect(page.locator(".people-list tbody td:nth-child(2)")).to_contain_text(["Owner (you)", "Save the role of Bea"])
        page.get_by_role("button", name="New password link for Bea").click()
        link = page.locator("#reset-link").inner_text()
        page.get_by_role("button", name="Copy").click()
        wait_for(lambda: page.evaluate("navigator.clipboard.readText()") == link, timeout=10)  # (written after the click)
    finally:
        context.close()
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True,
                                  has_touch=True)
    try:
        page = context.new_page()
        page.goto(link)
        expect(page.get_by_label("New password", exact=True)).to_be_focused()
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, "reset-phone-dark.png"))
        page.get_by_label("New password", exact=True).fill("bea's new password")
        page.get_by_label("New password again").fill("bea's new password")
        page.get_by_role("button", name="Set the password").click()
        expect(page).to_have_url(f"{served.url}/")
        page.goto(f"{served.url}/account")
        expect(page.locator("h1")).to_have_text("Bea")
        page.goto(link)
        expect(page.locator(".problem")).to_contain_text("does not work any more")
    finally:
        context.close()


def test_an_api_key_is_made_shown_once_and_revoked_on_the_account_page(browser, served: Served):
    """Account: Make key shows the new key this once, and it opens /v1/; the page shown again
    has only its start; Copy puts it on the clipboard; Revoke refuses it at once."""
    served = served.newcomer()  # no key of anyone's yet
    context = served.context(browser, permissions=["clipboard-read", "clipboard-write"])
    try:
        page = context.new_page()
        problems = watched(page)
        page.goto("/account#api")
        expect(page.get_by_text("No keys yet.")).to_be_visible()
        page.get_by_label("Name").fill("laptop")
        page.get_by_role("button", name="Make key").click()
        key = page.get_by_label("Your new key").input_value()
        assert key.startswith("tt-"), key
        page.get_by_role("button", name="Copy").click()  # the field's value, not its (empty) text
        wait_for(lambda: page.evaluate("navigator.clipboard.readText()") == key, timeout=10)
        api = served.client(timeout=10)
        assert api.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        page.goto("/account#api")
        expect(page.locator(".keys li")).to_have_count(1)
        expect(page.locator(".keys li strong")).to_have_text("laptop")
        expect(page.get_by_label("Your new key")).to_have_count(0)
        assert key not in page.content() and key[:SHOWN] in page.content()  # its start names it, no more
        page.get_by_role("button", name="Revoke").click()
        expect(page.get_by_text("Revoked: that key opens nothing any more.")).to_be_visible()
        expect(page.get_by_text("No keys yet.")).to_be_visible()
        assert api.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 401
        assert problems == [], problems
    finally:
        context.close()
