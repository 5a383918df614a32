"""The sidebar, lazy conversations and phones, in Debian's Chromium (issue 13): the list follows
live and keeps its groups, rename, pin and delete with and without JavaScript, "More" with
and without it, no row before the first message, and no page wider than a 390 px phone."""
from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app.tables import skill
from tests.conftest import Served, csrf, rows, shared_fixtures, start_chat, wait_for
from tests.fakes.openai_server import text, tool_call

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with a sidebar, an agent and conversations no other test sees.
served, fake = shared_fixtures(newcomer=True)

DAY = 86_400_000


def earlier_today() -> int:
    """An age (ms) that is today's at any hour: half the time since midnight, in the server's
    time zone, as the sidebar groups (12 hours ago was yesterday before noon)."""
    now = datetime.now()
    return max(int((now - now.replace(hour=0, minute=0, second=0, microsecond=0)).total_seconds() * 1000) // 2, 2)


def seeded(served: Served, ages_ms: list[int], title: str = "Seeded") -> list[int]:
    """Conversations of the test's person whose last message was `ages_ms` ago; their ids."""
    with served.store() as store:
        owner = served.person or store.owner()
        agent = store.default_agent(owner)
        now = int(time.time() * 1000)
        ids = []
        for n, age in enumerate(ages_ms):
            c = store.new_conversation(agent.id, f"{title} {n}", person=owner)
            with store.write() as w:
                w.conn.execute("UPDATE conversations SET active = ? WHERE id = ?", [now - age, c.id])
            ids.append(c.id)
        return ids


def counts(served: Served) -> tuple[int, int]:
    """(conversations, messages) of the test's person in the database."""
    return (rows(served.data, "SELECT count(*) AS n FROM conversations WHERE person = ?", [served.person])[0]["n"],
            rows(served.data, "SELECT count(*) AS n FROM items JOIN conversations c ON c.id = items.chat "
                              "WHERE kind = 'user' AND c.person = ?", [served.person])[0]["n"])


def listed(page) -> list[str]:
    """The sidebar's children in order: group heading ids and row ids."""
    return page.eval_on_selector_all("#conversations > li", "els => els.map(e => e.id)")


def shown(page) -> list[str]:
    """The ids of what the sidebar shows (a heading left with no rows is hidden)."""
    return page.eval_on_selector_all("#conversations > li", "els => els.filter(e => e.offsetParent).map(e => e.id)")


def shown_headings(page) -> list[str]:
    return page.eval_on_selector_all("#conversations > li.group", "els => els.filter(e => e.offsetParent)"
                                     ".map(e => e.textContent)")


def row_menu(page, chat: int):
    """Open a row's ⋯ menu; the row."""
    row = page.locator(f"#c{chat}")
    row.hover()
    row.locator("summary").click()
    return row


def test_no_conversation_is_written_before_its_first_message(browser, served: Served, fake):
    fake.script([text("Hello back.")])
    context = served.context(browser)
    try:
        page = context.new_page()
        page.goto("/agents")
        page.get_by_role("link", name="New conversation", exact=True).click()
        expect(page).to_have_url(f"{served.url}/")
        expect(page.locator("h1")).to_have_text("New conversation")
        page.reload()
        assert counts(served) == (0, 0), "opening a new conversation writes nothing"
        page.locator("#composer textarea").fill("Hello there")
        page.locator("#composer textarea").press("Enter")
        page.wait_for_url("**/c/*")
        assert counts(served) == (1, 1), "the conversation and its first message, together"
        expect(page.locator("article.user .body")).to_have_text("Hello there")
        expect(page.locator(f'#conversations a.open[aria-current="page"]')).to_have_count(1)
    finally:
        context.close()


def test_a_suggestion_starts_the_conversation_without_javascript(browser, served: Served, fake):
    fake.script([text("Here is a plan.")])
    context = served.context(browser, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto("/")
        page.get_by_role("button", name="Help me plan my week").click()
        page.wait_for_url("**/c/*")
        expect(page.locator("article.user .body")).to_have_text("Help me plan my week")
        assert counts(served) == (1, 1)
    finally:
        context.close()


def test_the_sidebar_follows_live_groups_renames_pins_and_deletes(browser, served: Served, fake):
    [old] = seeded(served, [20 * DAY], "Old one")
    fake.script([text("Otters sleep holding hands.")])
    context, second = served.context(browser), served.context(browser)  # two windows (htmx pauses hidden pages)
    try:
        home, other = context.new_page(), second.new_page()
        home.goto("/agents")
        assert listed(home) == ["g-30", f"c{old}"]
        home.wait_for_timeout(300)  # its stream is open
        other.goto("/")
        other.locator("#composer textarea").fill("where do otters sleep")
        other.locator("#composer textarea").press("Enter")
        other.wait_for_url("**/c/*")
        chat = int(other.url.rsplit("/", 1)[1])
        home.bring_to_front()
        # the new row lands at the top under its own new heading; the old keeps its group
        expect(home.locator(f"#c{chat} a.open")).to_have_text("A fitting title", timeout=10_000)  # named by the model
        assert listed(home) == ["g-today", f"c{chat}", "g-30", f"c{old}"]
        assert shown_headings(home) == ["Today", "Previous 30 days"]
        # rename in place, with JavaScript
        other.bring_to_front()
        expect(other.locator(f'#c{chat} a.open[aria-current="page"]')).to_have_count(1)  # still marked after live swaps
        row_menu(other, chat).get_by_role("link", name="Rename").click()
        field = other.locator(f"#c{chat} input.rename-field")
        field.fill("Otters at night")
        field.press("Enter")
        expect(other.locator("#title")).to_have_text("Otters at night", timeout=10_000)
        home.bring_to_front()
        expect(home.locator(f"#c{chat} a.open")).to_have_text("Otters at night", timeout=10_000)
        # pin the old one: it moves on top under "Pinned"; "Today" stays, the emptied heading hides
        other.bring_to_front()
        row_menu(other, old).get_by_role("button", name="Pin").click()
        home.bring_to_front()
        expect(home.locator(f"#c{old}.pinned")).to_have_count(1, timeout=10_000)
        assert listed(home)[:2] == ["g-pinned", f"c{old}"]
        assert shown_headings(home) == ["Pinned", "Today"]
        assert home.locator(f"#c{old}").get_by_role("button", name="Unpin", include_hidden=True).count() == 1
        # delete, through the confirmation page
        other.bring_to_front()
        row_menu(other, chat).get_by_role("link", name="Delete…").click()
        other.get_by_role("button", name="Delete").click()
        other.wait_for_url(f"{served.url}/")
        home.bring_to_front()
        expect(home.locator(f"#c{chat}")).to_have_count(0, timeout=10_000)
        assert shown_headings(home) == ["Pinned"]
        # a fresh render of the same rows is what the live list shows
        live = shown(home)
        home.reload()
        assert shown(home) == live == ["g-pinned", f"c{old}"]
    finally:
        context.close()
        second.close()


def test_without_javascript_rename_pin_and_more_are_plain_forms_and_links(browser, served: Served):
    ids = seeded(served, [n * 60_000 for n in range(1, 56)])  # 55: one page of 50 and 5 more
    context = served.context(browser, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"/c/{ids[0]}")
        expect(page.locator("#conversations li.convo")).to_have_count(50)
        page.locator("#side").get_by_role("link", name="More").click()
        expect(page).to_have_url(re.compile(r"/conversations\?after=0-\d{15}-\d{10}$"))
        expect(page.locator("main li.convo")).to_have_count(5)
        assert page.locator("main li.convo a.open").all_inner_texts() == [f"Seeded {n}" for n in range(50, 55)]
        expect(page.locator("main").get_by_role("link", name="More")).to_have_count(0)
        # rename: the row's Rename opens a page with a form, which returns to the conversation
        page.goto(f"/c/{ids[3]}")
        row_menu(page, ids[3]).get_by_role("link", name="Rename").click()
        page.get_by_label("Title").fill("Renamed without script")
        page.get_by_role("button", name="Rename").click()
        expect(page).to_have_url(f"{served.url}/c/{ids[3]}")
        expect(page.locator(f"#c{ids[3]} a.open")).to_have_text("Renamed without script")
        expect(page.locator("#title")).to_have_text("Renamed without script")
        # pin: a plain form post, back to the page it came from
        page.goto("/skills")
        row_menu(page, ids[7]).get_by_role("button", name="Pin").click()
        expect(page).to_have_url(f"{served.url}/skills")
        assert listed(page)[:2] == ["g-pinned", f"c{ids[7]}"]
    finally:
        context.close()


def test_with_javascript_more_rows_load_as_the_sidebar_scrolls(browser, served: Served):
    seeded(served, [n * 60_000 for n in range(1, 121)])  # 120: three loads
    context = served.context(browser)
    try:
        page = context.new_page()
        page.goto("/agents")
        expect(page.locator("#conversations li.convo")).to_have_count(50)
        for expected in (100, 120):
            page.locator("#more").scroll_into_view_if_needed()
            expect(page.locator("#conversations li.convo")).to_have_count(expected, timeout=10_000)
        assert page.locator("#conversations li.convo a.open").all_inner_texts() == [f"Seeded {n}" for n in range(120)]
        assert page.url.endswith("/agents"), "loaded in place"
    finally:
        context.close()


# --- phones ---------------------------------------------------------------------------------

PHONE = {"width": 390, "height": 844}


def fits(page, path: str) -> None:
    page.goto(path)
    page.wait_for_load_state("load")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width == PHONE["width"], f"{path} is {width} px wide on a {PHONE['width']} px phone"


@pytest.mark.parametrize("javascript", [True, False])
def test_on_a_phone_no_page_is_wider_than_the_screen(browser, shared_served: Served, fake, javascript):
    served = shared_served  # the owner's pages (People among them); their agent's approvals put back after
    with served.store() as store:
        agent = store.default_agent(store.owner())
        store.update_agent(agent.id, approve="update_plan")
        sk = store.add_skill(skill(f"tea-{'js' if javascript else 'plain'}", "making tea", "# Tea\n\n1. Boil water"))
    client = served.client(timeout=10, follow_redirects=True)
    client.post("/people", data={"_csrf_token": csrf(client), "name": f"Bea {javascript}", "password": "bea's password"})
    fake.script([text("A table:\n\n| a | b |\n|---|---|\n| " + "wide " * 40 + "| 2 |\n\n```\n" + "x" * 300 + "\n```"),
                 tool_call("update_plan", {"plan": "- [ ] tea"})])
    chat = start_chat(client, "A long first message " * 20)
    wait_for(lambda: "Approve" in client.get(chat).text, timeout=15)
    context = served.context(browser, viewport=PHONE, java_script_enabled=javascript)
    try:
        page = context.new_page()
        for path in ["/", chat, chat + "/delete", chat + "/rename", "/agents", f"/agents/{agent.id}",
                     f"/agents/{agent.id}?tab=tools", f"/agents/{agent.id}?tab=plugins", f"/agents/{agent.id}?tab=memory",
                     "/skills", f"/skills/{sk.id}", "/search?q=x", "/search?q=long", "/account", "/people", "/conversations", "/c/999999"]:
            fits(page, path)
        # the sidebar and the header's links are behind Menu; the composer is on screen
        page.goto(chat)
        expect(page.locator("#side")).to_be_hidden()
        expect(page.get_by_role("link", name="Agents")).to_be_hidden()
        box = page.locator("#composer").bounding_box()
        assert box["y"] + box["height"] <= PHONE["height"] + 1, "the composer stays at the bottom of the screen"
        page.locator("label.menu-button").click()
        expect(page.locator("#side")).to_be_visible()
        expect(page.get_by_role("link", name="Agents")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") == PHONE["width"]
        page.locator(f'#conversations a.open[href="{chat}"]').click()
        page.wait_for_url(f"**{chat}")
        expect(page.locator("#side")).to_be_hidden()
        # signed out
        context.clear_cookies()
        for path in ["/signin", "/signin?next=/agents", "/no/such/page"]:
            fits(page, path)
    finally:
        context.close()
        with served.store() as store:
            store.update_agent(agent.id, approve=agent.approve)


def test_on_a_phone_the_setup_page_fits_and_on_a_desktop_the_sidebar_is_open(browser, env, elsewhere, served: Served):
    fresh = Served(Path(elsewhere["TABLETALK_DATA"]), env | elsewhere, account=False).start()
    try:
        context = browser.new_context(base_url=fresh.url, viewport=PHONE)
        page = context.new_page()
        fits(page, "/setup")
        context.close()
    finally:
        fresh.stop()
    for width in (900, 1280):
        context = served.context(browser, viewport={"width": width, "height": 800})
        try:
            page = context.new_page()
            page.goto("/")
            expect(page.locator("#side")).to_be_visible()
            expect(page.locator("label.menu-button")).to_be_hidden()
            assert page.evaluate("document.documentElement.scrollWidth") == width
        finally:
            context.close()


def test_a_page_other_than_a_conversation_stays_where_it_is_as_the_sidebar_follows(browser, served: Served):
    """The sidebar's live rows are swapped into every page; only a conversation's page keeps to
    its end. An agent's page, long enough to scroll, stays at its top."""
    ids = seeded(served, [n * 60_000 for n in range(1, 40)])
    with served.store() as store:
        agent = store.default_agent(served.person)
    context = served.context(browser, viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        page.goto(f"/agents/{agent.id}")
        page.locator("html[data-htmx-powered], html.js").first.wait_for(state="attached")
        time.sleep(0.5)  # the page's stream opens
        with served.store() as store:
            store.set_title(ids[5], "Renamed while the agent page is open")
        expect(page.locator(f"#c{ids[5]} a.open")).to_have_text("Renamed while the agent page is open")
        assert page.evaluate("window.scrollY") == 0
    finally:
        context.close()


# --- finding a conversation (issue 36) --------------------------------------------------------


@pytest.mark.parametrize("javascript", [True, False])
def test_the_sidebars_search_keeps_its_words_and_with_script_filters_the_titles_as_one_types(browser, served: Served,
                                                                                             javascript):
    today = earlier_today()
    ids = seeded(served, [today // 2, today, 3 * DAY], title="Trip")
    with served.store() as store:
        store.set_title(ids[0], "Café in Lyon")
        store.set_title(ids[1], "Tax forms")
        store.set_title(ids[2], "Lyon by train")
    context = served.context(browser, viewport={"width": 1280, "height": 800}, java_script_enabled=javascript)
    try:
        page = context.new_page()
        page.goto("/")
        box = page.locator("#side-q")
        titles = page.locator("#conversations li.convo:visible a.open")
        expect(titles).to_have_count(3)
        if javascript:
            box.press_sequentially("lyon")
            expect(titles).to_have_text(["Café in Lyon", "Lyon by train"])
            expect(page.locator("#side-filtered")).to_have_text("2 titles have “lyon”. Enter searches the messages too.")
            box.fill("cafe")  # as typed, accents aside
            box.dispatch_event("input")
            expect(titles).to_have_text(["Café in Lyon"])
            expect(page.locator("#conversations li.group:visible h2")).to_have_text(["Today"])
            box.fill("nothing like it")
            box.dispatch_event("input")
            expect(titles).to_have_count(0)
            expect(page.locator("#side-filtered")).to_contain_text("No title has “nothing like it”.")
            box.fill("lyon")
        else:
            box.fill("lyon")
        box.press("Enter")
        page.wait_for_url("**/search?q=lyon")
        expect(page.locator("#side-q")).to_have_value("lyon")
        expect(page.locator("#q")).to_have_value("lyon")
    finally:
        context.close()
