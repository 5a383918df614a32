"""Knowledge in Debian's Chromium: documents added from the page become ready while the page
follows their reading live (a progress bar that moves, Stop that works) with JavaScript, and
by a frame that reloads itself without it; an answer's chip opens the passage on its page; no page wider
than a phone. Screenshots, desktop and phone, light and dark: SHOTS."""
from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from tests.conftest import SHOTS, Served, light_and_dark, rows, shared_fixtures, start_chat, wait_for
from tests.fakes.openai_server import tool_call
from tests.test_ingest import CSV
from tests.test_knowledge import MANUAL

pytestmark = pytest.mark.browser

# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it, with collections, documents and conversations of their own.
served, fake = shared_fixtures(newcomer=True)


def collection(served: Served, name: str = "Manuals") -> int:
    with served.store() as store:
        return store.add_collection(served.person, name, "The GNU manuals we use")


def chat_id(chat: str) -> int:
    """The conversation's id, from its path (`/c/12`)."""
    return int(chat.rsplit("/", 1)[1])


def ready(served: Served) -> None:
    """Waits until every document of this test's person has been read."""
    wait_for(lambda: rows(served.data, "SELECT state FROM documents WHERE person = ?", (served.person,))
             == [{"state": "ready"}] or None, 60)


def answered(served: Served, chat: str) -> None:
    """Waits until the conversation holds a finished answer."""
    wait_for(lambda: rows(served.data, "SELECT 1 FROM items WHERE chat = ? AND kind = 'text' AND done = 1",
                          (chat_id(chat),)) or None, 60)


def no_wider_than(page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "nothing wider than the screen"


def shots(page, name: str, full_page: bool = False) -> None:
    light_and_dark(page, f"{SHOTS}/knowledge-{name}-{{scheme}}.png", full_page=full_page)


def test_documents_added_from_the_page_are_followed_live_and_stopped(browser, served, tmp_path):
    os.makedirs(SHOTS, exist_ok=True)
    c = collection(served)
    big = tmp_path / "tides.csv"
    big.write_bytes(CSV * 8)
    manual = tmp_path / "libtasn1.md"
    manual.write_text(MANUAL)
    with served.watched_page(browser, viewport={"width": 1280, "height": 900}) as page:
        page.goto(f"/knowledge/{c}")
        page.set_input_files("#add-documents input[type=file]", [str(manual), str(big)])
        page.click("#add-documents button[type=submit]")
        docs = {d["name"]: d["id"] for d in wait_for(
            lambda: rows(served.data, "SELECT id, name FROM documents WHERE collection = ?", (c,)) or None)}
        ready = page.locator(f"#document-{docs['libtasn1.md']}")
        expect(ready).to_contain_text("Ready: ", timeout=30_000)
        reading = page.locator(f"#document-{docs['tides.csv']}")
        bar = reading.locator("progress")
        expect(bar).to_be_visible(timeout=30_000)  # the page was not reloaded: the feed brought it
        first = int(bar.get_attribute("value"))
        wait_for(lambda: int(bar.get_attribute("value") or 0) > first or None, 30, every=0.1)
        page.screenshot(path=f"{SHOTS}/knowledge-reading-desk-light.png")
        # a screen reader is told when each reading ends (a polite live region), the bar's changes are silent
        said = page.locator("#documents-announce[aria-live=polite]")
        expect(said).to_have_text(re.compile(r"^libtasn1\.md: ready: \d+ pages, \d+ passages\.$"))
        reading.get_by_role("button", name="Stop").click()
        expect(reading).to_contain_text("Stopped at page", timeout=15_000)
        expect(said).to_have_text(re.compile(r"^tides\.csv: stopped at page [\d,]+ of [\d,]+\.$"))
        expect(reading.get_by_role("button", name="Read again")).to_be_visible()
        [d] = rows(served.data, "SELECT state, pages_read, pages FROM documents WHERE id = ?", (docs["tides.csv"],))
        assert d["state"] == "stopped" and 0 < d["pages_read"] < d["pages"], d
        # Delete… asks on a page of its own first, and comes back to the collection
        reading.get_by_role("link", name="Delete… tides.csv").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Delete “tides.csv”?")
        shots(page, "document-delete-desk")
        page.get_by_role("button", name="Delete").click()
        expect(page.locator("main")).to_contain_text("Document deleted.")
        expect(page.locator(f"#document-{docs['tides.csv']}")).to_have_count(0)
        expect(ready).to_be_visible()


def test_without_javascript_a_collection_being_read_follows_it_in_a_frame_and_keeps_what_is_typed(browser, served):
    """The documents' list refreshes itself in a frame every 5 s (/knowledge/ID/watch); the page
    around it does not reload, so a description half typed stays (a new-user walk lost it to
    the page's own reload), and the frame's buttons act on the whole page."""
    c = collection(served)
    with served.store() as store:
        owner = served.person
        file = store.add_file("tides.csv", CSV * 8, owner)
        d = store.add_document(owner, file, "tides.csv", collection=c, kind="csv")
    with served.watched_page(browser, java_script_enabled=False, viewport={"width": 390, "height": 844}) as page:
        page.goto(f"/knowledge/{c}")
        assert page.locator('meta[http-equiv="refresh"]').count() == 0, "the page itself never refreshes"
        expect(page.locator(f"ul.documents #document-{d}")).to_be_hidden()  # (the frame shows the list)
        page.fill("#edit-collection textarea[name=description]", "Half typed")
        item = page.frame_locator("iframe.documents-frame").locator(f"#document-{d}")
        expect(item).to_contain_text("Ready: ", timeout=60_000)  # by the frame's own reload, every 5 s
        expect(page.locator("#edit-collection textarea[name=description]")).to_have_value("Half typed")
        no_wider_than(page, 390)
        page.locator("h1").scroll_into_view_if_needed()  # (the top bar sticks: drawn where the page was scrolled)
        page.screenshot(path=f"{SHOTS}/knowledge-collection-nojs-phone-light.png", full_page=True)
        item.get_by_role("link", name="Delete… tides.csv").click()  # the frame's links open on the whole page
        expect(page).to_have_url(re.compile(f"/knowledge/documents/{d}/delete$"))


def test_an_answer_cites_a_page_and_its_chip_opens_it(browser, served, fake):
    c = collection(served)
    with served.store() as store:
        owner = served.person
        file = store.add_file("libtasn1.md", MANUAL.encode(), owner)
        store.add_document(owner, file, "libtasn1.md", collection=c, kind="markdown")
        agent = store.default_agent(owner).id
        store.set_agent_collections(agent, [c])
    ready(served)
    fake.script([tool_call("search_knowledge", {"query": "asn1_der_decoding wrong tag"})],
                "It returns **ASN1_TAG_ERROR** (libtasn1.md, p. 5).")
    with served.client() as client:
        chat = start_chat(client, "What does asn1_der_decoding return for a wrong tag?")
    for width, height, name in ((1280, 900, "desk"), (390, 844, "phone")):
        with served.watched_page(browser, viewport={"width": width, "height": height}) as page:
            page.goto(chat)
            chip = page.locator(".chips a").first
            expect(chip).to_be_visible(timeout=30_000)
            expect(chip).to_contain_text("libtasn1.md")
            shots(page, f"answer-{name}")
            with page.context.expect_page() as opened:  # (a tab of its own: the conversation stays)
                chip.click()
            cited = opened.value
            expect(cited.locator("#passage mark")).to_contain_text("ASN1_TAG_ERROR")
            no_wider_than(cited, width)
            shots(cited, f"passage-{name}", full_page=True)
            cited.close()
            page.goto("/knowledge")
            expect(page.locator(".collection-list")).to_contain_text("Manuals")
            no_wider_than(page, width)
            shots(page, f"list-{name}", full_page=True)
            page.goto(f"/knowledge/{c}")
            no_wider_than(page, width)
            shots(page, f"collection-{name}", full_page=True)
            page.goto(f"/agents/{agent}?tab=knowledge")
            expect(page.get_by_label("Manuals")).to_be_checked()
            no_wider_than(page, width)
            shots(page, f"agent-tab-{name}", full_page=True)


def test_an_attached_pdfs_reading_and_a_deleted_sources_chip_on_the_conversation(browser, served, fake):
    """A PDF attached to a message says beside its chip how its reading ended ("Ready: 3
    pages"), and the chip of a source whose document was deleted since says so, linking
    nowhere: desktop and phone, nothing wider than the screen."""
    from tests.fakes.documents import text_pdf

    c = collection(served)
    with served.store() as store:
        owner = served.person
        cited = store.add_document(owner, store.add_file("libtasn1.md", MANUAL.encode(), owner), "libtasn1.md",
                                   collection=c, kind="markdown")
        store.set_agent_collections(store.default_agent(owner).id, [c])
    ready(served)
    fake.script([tool_call("search_knowledge", {"query": "asn1_der_decoding wrong tag"})],
                "It returns **ASN1_TAG_ERROR** (libtasn1.md, p. 5); the log says tern-3.")
    pdf = text_pdf([[f"Page {p} of the keeper's log: the lantern is lit at dusk." for _ in range(30)] for p in range(1, 4)])
    with served.client() as client:
        chat = start_chat(client, "What does asn1_der_decoding return for a wrong tag, and what is in the log?",
                          files={"file": ("keepers-log.pdf", pdf, "application/pdf")})
        answered(served, chat)
        token = client.get(f"/knowledge/{c}").text.split('name="_csrf_token" value="')[1].split('"')[0]
        assert client.post(f"/knowledge/documents/{cited}/delete", data={"_csrf_token": token},
                           follow_redirects=False).status_code == 303
    for width, height, name, js in ((1280, 900, "desk", True), (390, 844, "phone", True), (390, 844, "phone-nojs", False)):
        with served.watched_page(browser, viewport={"width": width, "height": height}, java_script_enabled=js) as page:
            page.goto(chat)
            expect(page.locator(".attachments .document-progress")).to_contain_text("Ready: 3 pages")
            gone = page.locator(".chips .gone").first
            expect(gone).to_contain_text("deleted since")
            expect(page.locator(".chips a")).to_have_count(0)
            no_wider_than(page, width)
            shots(page, f"attached-and-gone-{name}")


def test_hash_in_the_composer_picks_a_collection_for_one_message(browser, served, fake):
    """"#" at the start of a message shows the person's collections and documents over the
    composer; typing filters them; the ones ticked ride with the message as chips (removable),
    and the message shows them once sent. Without script the "/" page's form does the same.
    Desktop and phone, nothing wider than the screen."""
    c = collection(served, "Tide tables")
    other = collection(served, "Recipes")
    with served.store() as store:
        owner = served.person
        store.add_document(owner, store.add_file("libtasn1.md", MANUAL.encode(), owner), "libtasn1.md",
                           collection=c, kind="markdown")
    ready(served)
    with served.client() as client:
        chat = start_chat(client, "Hello")
    answered(served, chat)
    for width, height, name in ((1280, 900, "desk"), (390, 844, "phone")):
        fake.script(f"Searched ({name}).")
        with served.watched_page(browser, viewport={"width": width, "height": height}) as page:
            page.goto(chat)
            box = page.locator("#text")
            box.click()
            pop = page.locator(".prompt-popover form.picks")
            if name == "desk":
                box.type("#zepp")  # a name nothing has: said, and nothing to send
                expect(pop.locator(".no-match")).to_have_text("Nothing of your knowledge is named “zepp”.")
                expect(pop.get_by_role("button", name="Search them for the message")).to_be_disabled()
                expect(pop.locator("ul.pickable > li:not([hidden])")).to_have_count(0)
                box.fill("")
                box.type("#libt")  # a document's name: it shows under its collection's, and Enter goes to it
                expect(pop.get_by_label("libtasn1.md")).to_be_visible()
                expect(pop.get_by_label("Tide tables")).to_be_visible()
                expect(pop.get_by_label("Recipes")).to_be_hidden()
                expect(pop.locator(".no-match")).to_be_hidden()
                box.press("Enter")
                expect(pop.get_by_label("libtasn1.md")).to_be_focused()
                box.fill("")
            box.type("#tide")
            expect(pop).to_be_visible()
            expect(pop.get_by_label("Tide tables")).to_be_visible()
            expect(pop.get_by_label("Recipes")).to_be_hidden()  # filtered by the name typed
            no_wider_than(page, width)
            shots(page, f"pick-{name}")
            box.press("Enter")  # to the first collection shown, ticked with Space
            expect(pop.get_by_label("Tide tables")).to_be_focused()
            page.keyboard.press("Space")
            pop.get_by_role("button", name="Search them for the message").click()
            chip = page.locator("#composer ul.picked-resources li")
            expect(chip).to_have_count(1)
            expect(chip).to_contain_text("Tide tables")
            expect(box).to_have_value("")
            box.fill("What is high tide at noon?")
            box.press("Enter")
            sent = page.locator(".item.user").last
            expect(sent.locator(".picks a.pick")).to_contain_text("Tide tables")
            expect(page.locator("#composer ul.picked-resources li")).to_have_count(0)
            no_wider_than(page, width)
            shots(page, f"picked-{name}")
    [last] = rows(served.data, "SELECT knowledge FROM items WHERE chat = ? AND kind = 'user' ORDER BY id DESC LIMIT 1",
                  (chat_id(chat),))
    assert last["knowledge"] == f"c{c}"
    assert other not in [c]
    fake.script("Without script.")
    with served.watched_page(browser, java_script_enabled=False, viewport={"width": 390, "height": 844}) as page:
        page.goto(f"{chat}/prompts")
        form = page.locator("form.picks")
        form.get_by_label("Recipes").check()
        form.get_by_label("Message").fill("Any soup?")
        no_wider_than(page, 390)
        shots(page, "pick-nojs-phone", full_page=True)
        form.get_by_role("button", name="Send, searching them").click()
        expect(page.locator(".item.user").last.locator(".picks")).to_contain_text("Recipes")
    [last] = rows(served.data, "SELECT knowledge FROM items WHERE chat = ? AND kind = 'user' ORDER BY id DESC LIMIT 1",
                  (chat_id(chat),))
    assert last["knowledge"] == f"c{other}"


def test_a_name_of_one_long_word_wraps_on_every_page_that_shows_it(browser, served, fake):
    """A collection named with a 150-letter word: its page, the list, the "#" picker, the
    composer's chip (its × still on the screen) and the sent message's chip all stay within
    a phone's width."""
    long = "Tide" + "z" * 150
    c = collection(served, long)
    with served.client() as client:
        chat = start_chat(client, "Hello")
    answered(served, chat)
    fake.script("Searched.")
    with served.watched_page(browser, viewport={"width": 390, "height": 844}) as page:
        for path in (f"/knowledge/{c}", "/knowledge"):
            page.goto(path)
            no_wider_than(page, 390)
        page.goto(chat)
        box = page.locator("#text")
        box.click()
        box.type("#tide")
        pop = page.locator(".prompt-popover form.picks")
        expect(pop.get_by_label(long)).to_be_visible()
        no_wider_than(page, 390)
        pop.get_by_label(long).check()
        pop.get_by_role("button", name="Search them for the message").click()
        chip = page.locator("#composer ul.picked-resources li")
        expect(chip).to_have_count(1)
        no_wider_than(page, 390)
        x = chip.get_by_role("button").bounding_box()
        assert x["x"] + x["width"] <= 390, f"the chip's × is off the screen: {x}"
        box.fill("High tide?")
        box.press("Enter")
        expect(page.locator(".item.user").last.locator(".picks a.pick")).to_contain_text("Tide")
        no_wider_than(page, 390)
        shots(page, "long-name-phone")
