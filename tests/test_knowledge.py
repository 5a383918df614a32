"""Knowledge as a person uses it: collections, documents added and read in the background,
who may see and change what, an agent given a collection that searches it and cites the page."""
import json
import re

import pytest

from app.accounts.rules import Accounts
from tests.conftest import COOKIE, ask, csrf, idle, rows, signed_in, soup, start_chat, wait_for, store_of
from tests.fakes.openai_server import tool_call

HOSTILE = '<script>alert("x")</script> & “quotes”'
MANUAL = "\n\n".join(
    ["# Libtasn1 manual", "Libtasn1 is a library for ASN.1 structures and DER encoding.",
     "## Installing", "Run the configure script, then make and make install."]
    + [f"## Section {n}\n\n" + " ".join(f"Paragraph {n} word{w} about tree structures." for w in range(60))
       for n in range(1, 6)]
    + ["## Errors", "The function asn1_der_decoding returns ASN1_TAG_ERROR when a tag is wrong."])



def create(client, name="Manuals", description="", status=303):
    r = client.post("/knowledge", data={"_csrf_token": csrf(client, "/knowledge"), "name": name,
                                        "description": description}, follow_redirects=False)
    assert r.status_code == status, r.text
    return r


def made(client, name="Manuals") -> int:
    r = create(client, name)
    m = re.fullmatch(r"/knowledge/(\d+)\?saved=created", r.headers["location"])
    assert m, r.headers["location"]
    return int(m.group(1))


def upload(client, collection, *files, status=303):
    r = client.post(f"/knowledge/{collection}/documents", data={"_csrf_token": csrf(client, f"/knowledge/{collection}")},
                    files=[("file", f) for f in files], follow_redirects=False)
    assert r.status_code == status, r.text
    return r


def ready(data, document=None):
    def look():
        found = rows(data, "SELECT * FROM documents" + (" WHERE id = ?" if document else ""),
                     [document] if document else [])
        return found if found and all(d["state"] not in ("queued", "reading") for d in found) else None
    return wait_for(look)


# --- collections ------------------------------------------------------------------------


def test_a_collection_is_made_named_and_listed(client):
    page = soup(client.get("/knowledge"))
    assert page.select_one('nav.main a[href="/knowledge"]'), "the header leads to Knowledge"
    assert "No collections yet" in page.text
    c = made(client, HOSTILE)
    page = soup(client.get(f"/knowledge/{c}?saved=created"))
    assert page.select_one("h1").text == HOSTILE, "the name is text, never markup"
    assert "<script>" not in client.get("/knowledge").text
    assert page.select_one(f"#documents-{c}").text.strip() == "No documents yet."


@pytest.mark.parametrize("name,description,field", [("", "", "name"), ("   ", "", "name"), ("x" * 201, "", "name"),
                                                    ("ok", "d" * 2001, "description")])
def test_a_collection_refused_says_why_beside_its_field(client, name, description, field):
    r = create(client, name, description, status=400)
    page = soup(r)
    assert page.select_one(f"#problem-{field}"), r.text
    assert page.select_one('input[name="name"]')["value"] == name.strip(), "the form keeps what was typed"
    assert rows(client.app.state.tabletalk.config.data, "SELECT * FROM collections") == []


# --- documents ----------------------------------------------------------------------------


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_a_document_added_is_read_in_the_background_into_passages_with_pages_and_headings(client, data):
    c = made(client)
    upload(client, c, ("libtasn1.md", MANUAL.encode(), "text/markdown"))
    [d] = ready(data)
    assert (d["state"], d["kind"], d["reason"]) == ("ready", "markdown", ""), d
    assert d["pages_read"] == d["pages"] >= 1
    passages = rows(data, "SELECT page, heading, text FROM passages WHERE document = ? ORDER BY page, n", [d["id"]])
    assert d["passages"] == len(passages) >= 3
    assert all(len(p["text"]) <= 1200 for p in passages), "passages of about 1,000 characters"
    assert any(p["heading"] == "Errors" and "ASN1_TAG_ERROR" in p["text"] for p in passages), passages
    page = soup(client.get(f"/knowledge/{c}"))
    li = page.select_one(f"#document-{d['id']}")
    assert "Ready" in li.text and li.select_one(f'a[href="/files/{d["file"]}"]').text == "libtasn1.md"
    assert not page.select("meta[http-equiv=refresh], iframe"), "nothing being read: nothing reloads"


@pytest.mark.process  # the one file added is read in a child process (app/knowledge/reading.py)
def test_an_upload_refused_says_why_beside_the_form_in_the_forms_words_and_adds_nothing(make_client, data):
    with make_client(TABLETALK_DOCUMENT_MAX=str(2 * 1048576), TABLETALK_KNOWLEDGE_MAX=str(3 * 1048576)) as client:
        c = made(client)
        small = [(f"n{i}.txt", b"A note.", "text/plain") for i in range(21)]
        for files, status, words in [
            (small, 413, "Too many files: at most 20 at once. Nothing was added."),
            ([("a.txt", b"A note.", "text/plain"), ("empty.txt", b"", "text/plain")], 400,
             "“empty.txt” is empty: there is nothing in it. Nothing was added."),
            ([("big.txt", b"x" * (2 * 1048576 + 1), "text/plain")], 413,
             "“big.txt” is too large: at most 2 MB a file. Nothing was added."),
        ]:
            r = upload(client, c, *files, status=status)
            assert soup(r).select_one("#problem-file").text.strip() == words, r.text[-500:]
        upload(client, c, ("one.txt", b"y" * (2 * 1048576 - 10), "text/plain"))
        r = upload(client, c, ("two.txt", b"z" * (2 * 1048576 - 10), "text/plain"), status=413)
        assert soup(r).select_one("#problem-file").text.strip() == (
            "These documents need 2.0 MB, and 1.0 MB of your room for documents is left: delete some first. "
            "Nothing was added."), r.text[-500:]
        assert [d["name"] for d in rows(data, "SELECT name FROM documents")] == ["one.txt"]
        # the form's address opened (a reload of a refusal's page): the collection's page, not 405
        r = client.get(f"/knowledge/{c}/documents", follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, f"/knowledge/{c}")


def test_without_script_a_document_being_read_is_followed_in_a_frame_and_the_page_never_reloads(client, data):
    """The collection's page frames its documents (/knowledge/ID/watch), which reload
    themselves every 5 s while one is read; the page does not, so a refusal's words, or a
    description half typed, stay (a new-user walk lost both to the page's own reload)."""
    c = made(client)
    store = client.app.state.tabletalk.store

    def being_read():  # on the app's loop, in one go: its own reader cannot take it between
        owner = store.owner()
        store.add_document(owner, store.add_file("long.txt", b"Long notes.", owner), "long.txt", collection=c,
                           kind="text")
        return store.take_document("another-worker", 3600)

    d = client.blocking_portal.call(being_read)
    assert d is not None
    page = soup(client.get(f"/knowledge/{c}"))
    assert page.select_one(f'noscript iframe.documents-frame[src="/knowledge/{c}/watch"]')
    assert not page.select("meta[http-equiv=refresh]"), "the page itself never reloads"
    r = client.get(f"/knowledge/{c}/watch")
    frame = soup(r)
    assert r.status_code == 200 and "frame-ancestors 'self'" in r.headers["content-security-policy"]
    assert frame.select_one('meta[http-equiv=refresh][content="5"]') and frame.select_one('base[target="_top"]')
    assert frame.select_one(
        f'#document-{d.id} button[form="document-actions"][formaction="/knowledge/documents/{d.id}/stop"]')
    assert frame.select_one('form#document-actions input[name="_csrf_token"]')["value"], "its buttons post"
    r = upload(client, c, ("fake.pdf", b"Not a PDF at all.", "application/pdf"), status=400)
    assert "is not a PDF" in soup(r).select_one("#problem-file").text
    assert soup(r).select_one("noscript iframe.documents-frame") and not soup(r).select("meta[http-equiv=refresh]")
    client.blocking_portal.call(lambda: store.finish_document(d.id, "another-worker", "ready"))
    assert not soup(client.get(f"/knowledge/{c}/watch")).select("meta[http-equiv=refresh]"), "read: it stops"
    assert not soup(client.get(f"/knowledge/{c}")).select("iframe")


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_several_documents_at_once_and_each_kind_from_its_bytes(client, data):
    import io

    import docx

    word = docx.Document()
    word.add_paragraph("Spring tides follow the new moon.")
    held = io.BytesIO()
    word.save(held)
    c = made(client)
    upload(client, c, ("notes.txt", b"Plain notes about tides.\n\nThe moon pulls the sea.", "text/plain"),
           ("tides.docx", held.getvalue(), "application/octet-stream"),
           ("table.csv", b"name,role\nAda,engineer\nGrace,admiral\n", "text/csv"),
           ("page.html", b"<html><body><nav>menu</nav><article><h1>Tides</h1><p>" + b"The tide rises twice a day. " * 20
            + b"</p></article><script>alert(1)</script></body></html>", "text/html"))
    found = {d["name"]: d for d in ready(data)}
    assert {n: (d["kind"], d["state"]) for n, d in found.items()} == {
        "notes.txt": ("text", "ready"), "table.csv": ("csv", "ready"), "page.html": ("html", "ready"),
        "tides.docx": ("docx", "ready")}, found
    texts = " ".join(r["text"] for r in rows(data, "SELECT text FROM passages"))
    assert "Grace" in texts and "tide rises" in texts and "alert(1)" not in texts and "Spring tides" in texts
    page = soup(client.get(f"/knowledge/{c}"))
    assert {page.select_one(f"#document-{d['id']} .badge").text for d in found.values()} == {"Text", "CSV", "HTML", "Word"}


@pytest.mark.parametrize("name,content,says", [
    ("program.exe", b"MZ\x90\x00\x03" + bytes(range(256)) * 4, "not a PDF"),
    ("old.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600, "save it as .docx"),
    ("photo.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "not a PDF"),
])
def test_a_file_that_is_no_document_is_refused_before_anything_is_kept(client, data, name, content, says):
    c = made(client)
    r = upload(client, c, ("fine.txt", b"fine words", "text/plain"), (name, content, "application/octet-stream"),
               status=400)
    note = soup(r).select_one("#problem-file").text
    assert name in note and says in note and "Nothing was added" in note, note
    assert rows(data, "SELECT * FROM documents") == [], "none of the batch is kept"


def test_an_empty_upload_and_an_empty_file_are_refused(client, data):
    c = made(client)
    r = client.post(f"/knowledge/{c}/documents", data={"_csrf_token": csrf(client, f"/knowledge/{c}")},
                    follow_redirects=False)
    assert r.status_code == 400 and "Choose one or more documents" in r.text
    r = upload(client, c, ("empty.txt", b"", "text/plain"), status=400)
    assert "empty" in r.text
    assert rows(data, "SELECT * FROM documents") == []


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_the_limits_on_a_document_and_on_a_persons_room(make_client, data):
    with make_client(TABLETALK_DOCUMENT_MAX="1000", TABLETALK_KNOWLEDGE_MAX="1500") as client:
        c = made(client)
        r = upload(client, c, ("big.txt", b"word " * 201, "text/plain"), status=413)
        assert "at most 1,000 bytes" in r.text
        upload(client, c, ("a.txt", b"a" * 900, "text/plain"))
        r = upload(client, c, ("b.txt", b"b" * 900, "text/plain"), status=413)
        assert "600 bytes" in r.text and "left" in r.text, r.text
        assert [d["name"] for d in rows(data, "SELECT name FROM documents")] == ["a.txt"]


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_a_failed_document_says_why_and_read_again_starts_over(client, data):
    c = made(client)
    upload(client, c, ("broken.pdf", b"%PDF-1.7\n this is no pdf at all \n%%EOF", "application/pdf"))
    [d] = ready(data)
    assert d["state"] == "failed" and d["reason"], d
    li = soup(client.get(f"/knowledge/{c}")).select_one(f"#document-{d['id']}")
    assert "Failed" in li.text and d["reason"][:30] in li.text
    assert li.select_one(f'button[formaction="/knowledge/documents/{d["id"]}/again"]')
    r = client.post(f"/knowledge/documents/{d['id']}/again", data={"_csrf_token": csrf(client, f"/knowledge/{c}")},
                    follow_redirects=False)
    assert r.status_code == 303
    [again] = ready(data)
    assert again["state"] == "failed" and again["reason"] == d["reason"], "read again, and failed the same way"


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_a_pdf_that_needs_a_password_fails_in_plain_words_and_the_next_one_is_read(client, data):
    from app.knowledge.child import NO_PASSWORD
    from tests.fakes.documents import text_pdf

    c = made(client)
    upload(client, c, ("locked.pdf", text_pdf([["tern-7 is locked"]], locked=True), "application/pdf"))
    [d] = ready(data)
    assert (d["state"], d["reason"], d["passages"]) == ("failed", NO_PASSWORD, 0)
    assert NO_PASSWORD in soup(client.get(f"/knowledge/{c}")).select_one(f"#document-{d['id']}").text
    upload(client, c, ("open.pdf", text_pdf([["tern-8 is open"]]), "application/pdf"))
    assert [x["state"] for x in ready(data)] == ["failed", "ready"], "the worker reads on"


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_a_document_deleted_takes_its_passages_and_file_with_it(client, data):
    c = made(client)
    upload(client, c, ("notes.txt", b"The moon pulls the sea.", "text/plain"))
    [d] = ready(data)
    # Delete… asks first, saying what goes, with a way back (found by a new-user walk: one
    # press lost the reading)
    asking = soup(client.get(f"/knowledge/{c}")).select_one(f"#document-{d['id']} a.danger")
    assert asking["href"] == f"/knowledge/documents/{d['id']}/delete" and "notes.txt" in asking.text
    page = soup(client.get(asking["href"]))
    assert page.h1.text == "Delete “notes.txt”?" and "1 passage go from" in page.select_one(".confirm p").text
    assert page.select_one(f'.confirm form[action="/knowledge/documents/{d["id"]}/delete"] button.danger')
    assert page.select_one(f'.confirm a[href="/knowledge/{c}"]').text == "Keep it"
    assert rows(data, "SELECT id FROM documents") == [{"id": d["id"]}], "asking deletes nothing"
    r = client.post(f"/knowledge/documents/{d['id']}/delete", data={"_csrf_token": csrf(client, asking["href"])},
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/knowledge/{c}?saved=removed"
    assert client.get(asking["href"]).status_code == 404
    assert rows(data, "SELECT * FROM documents") == [] and rows(data, "SELECT * FROM passages") == []
    assert client.get(f"/files/{d['file']}").status_code == 404


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_deleting_a_collection_asks_to_be_sure(client, data):
    c = made(client)
    upload(client, c, ("notes.txt", b"The moon pulls the sea.", "text/plain"))
    ready(data)
    token = csrf(client, f"/knowledge/{c}")
    r = client.post(f"/knowledge/{c}/delete", data={"_csrf_token": token}, follow_redirects=False)
    assert r.status_code == 400 and soup(r).select_one("#problem-sure")
    r = client.post(f"/knowledge/{c}/delete", data={"_csrf_token": token, "sure": "1"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/knowledge?saved=deleted"
    assert rows(data, "SELECT * FROM collections") == [] and rows(data, "SELECT * FROM documents") == []


# --- who sees what --------------------------------------------------------------------------


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_another_person_neither_sees_nor_changes_a_collection_until_it_is_shared(client, data):
    c = made(client)
    upload(client, c, ("notes.txt", b"The moon pulls the sea.", "text/plain"))
    [d] = ready(data)
    [p] = rows(data, "SELECT id FROM passages")
    owner = client.cookies.get(COOKIE)
    client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
    token = csrf(client, "/knowledge")
    for path in (f"/knowledge/{c}", f"/knowledge/passages/{p['id']}", f"/files/{d['file']}",
                 f"/knowledge/{c}/documents", f"/knowledge/documents/{d['id']}/delete", f"/knowledge/{c}/watch"):
        assert client.get(path).status_code == 404, path
    # another's passage is said as one that is not there, not as a collection that is
    assert client.get(f"/knowledge/passages/{p['id']}").text == client.get("/knowledge/passages/999999").text
    for path in (f"/knowledge/{c}", f"/knowledge/{c}/documents", f"/knowledge/{c}/delete",
                 f"/knowledge/documents/{d['id']}/stop", f"/knowledge/documents/{d['id']}/delete"):
        assert client.post(path, data={"_csrf_token": token, "sure": "1", "name": "x"}).status_code == 404, path
    assert "Manuals" not in soup(client.get("/knowledge")).select_one(".collection-list").text
    client.cookies.set(COOKIE, owner)
    r = client.post(f"/knowledge/{c}", data={"_csrf_token": csrf(client, f"/knowledge/{c}"), "name": "Manuals",
                                             "description": "", "shared": "1"}, follow_redirects=False)
    assert r.status_code == 303
    client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
    assert "shared with everyone" in soup(client.get("/knowledge")).select_one(".collection-list").text
    page = soup(client.get(f"/knowledge/{c}"))
    assert page.select_one(f"#document-{d['id']}") and not page.select("#document-%d :is(button, a.danger)" % d["id"])
    assert client.get(f"/knowledge/documents/{d['id']}/delete").status_code == 403
    assert not page.select("#add-documents, #edit-collection, #delete-collection"), "only its maker changes it"
    assert client.get(f"/knowledge/passages/{p['id']}").status_code == 200
    # the document's link (its file) opens for whoever sees the collection
    assert page.select_one(f'#document-{d["id"]} a[href="/files/{d["file"]}"]')
    opened = client.get(f"/files/{d['file']}")
    assert opened.status_code == 200 and opened.content == b"The moon pulls the sea."
    assert client.post(f"/knowledge/documents/{d['id']}/delete", data={"_csrf_token": csrf(client, "/knowledge")}
                       ).status_code == 403
    assert rows(data, "SELECT id FROM documents") == [{"id": d["id"]}]
    bea = client.cookies.get(COOKIE)
    client.cookies.set(COOKIE, owner)
    r = client.post(f"/knowledge/{c}", data={"_csrf_token": csrf(client, f"/knowledge/{c}"), "name": "Manuals",
                                             "description": ""}, follow_redirects=False)
    assert r.status_code == 303
    client.cookies.set(COOKIE, bea)
    assert client.get(f"/files/{d['file']}").status_code == 404, "unshared: the file is the owner's again"


@pytest.mark.parametrize("raw", ["0", "-1", "x", "1" * 30, "%00", "9" * 18])
def test_ids_that_name_nothing_are_404(client, raw):
    token = csrf(client, "/knowledge")
    for path in (f"/knowledge/{raw}", f"/knowledge/passages/{raw}"):
        assert client.get(path).status_code == 404, path
    for path in (f"/knowledge/documents/{raw}/stop", f"/knowledge/documents/{raw}/again",
                 f"/knowledge/{raw}/documents"):
        assert client.post(path, data={"_csrf_token": token}).status_code == 404, path


# --- an agent that searches -----------------------------------------------------------------


def give(client, agent, *collections, status=303):
    r = client.post(f"/agents/{agent}/knowledge", data={"_csrf_token": csrf(client, f"/agents/{agent}?tab=knowledge"),
                                                        "collection": [str(c) for c in collections]},
                    follow_redirects=False)
    assert r.status_code == status, r.text
    return r


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_an_agent_given_a_collection_searches_it_and_cites_the_page(client, data, fake):
    c = made(client)
    upload(client, c, ("libtasn1.md", MANUAL.encode(), "text/markdown"))
    [d] = ready(data)
    store = store_of(client)
    agent = store.default_agent(store.owner()).id
    tab = soup(client.get(f"/agents/{agent}?tab=knowledge"))
    assert tab.select_one(f'input[name="collection"][value="{c}"]:not([checked])')
    give(client, agent, c)
    assert soup(client.get(f"/agents/{agent}?tab=knowledge")).select_one(f'input[value="{c}"][checked]')

    fake.script([tool_call("search_knowledge", {"query": "What does asn1_der_decoding return for a wrong tag?"})],
                "It returns ASN1_TAG_ERROR (libtasn1.md, p. 1).")
    chat = start_chat(client, "What does asn1_der_decoding return when a tag is wrong?")
    page = idle(client, chat)
    tools = [t["function"]["name"] for t in fake.streamed[0].get("tools", [])]
    assert "search_knowledge" in tools, tools
    result = fake.streamed[1]["messages"][-1]
    assert result["role"] == "tool" and "ASN1_TAG_ERROR" in result["content"] and "libtasn1.md, p. " in result["content"]
    [call] = rows(data, "SELECT sources FROM items WHERE kind = 'call'")
    sources = json.loads(call["sources"])
    assert sources and all(s["document"] == "libtasn1.md" for s in sources), sources
    chip = page.select_one(".chips a")
    assert chip and re.fullmatch(r"/knowledge/passages/\d+#passage", chip["href"]) and "libtasn1.md" in chip.text
    passage = soup(client.get(chip["href"]))
    cited = re.search(r"\(libtasn1.md, p. (\d+) — Errors\)\nThe function asn1_der_decoding", result["content"])
    assert cited, result["content"]
    assert f"libtasn1.md, page {cited.group(1)} of {d['pages']}" == passage.select_one("h1").text
    assert "ASN1_TAG_ERROR" in passage.select_one("#passage mark").text, "the passage found is marked on its page"
    assert passage.select_one(f'a[href="/knowledge/{c}"]')
    # the document deleted: the conversation says so where its chip was, and links nowhere
    client.post(f"/knowledge/documents/{d['id']}/delete", data={"_csrf_token": csrf(client, f"/knowledge/{c}")})
    page = soup(client.get(chat))
    assert not page.select(".chips a"), "no link to a passage that is gone"
    gone = page.select_one(".chips .gone")
    assert gone and "libtasn1.md" in gone.text and "deleted since" in gone.text


def test_an_agent_without_knowledge_has_no_search_tool(client, fake):
    fake.script("Hello.")
    idle(client, start_chat(client, "Hi"))
    tools = [t["function"]["name"] for t in fake.streamed[0].get("tools", [])]
    assert "search_knowledge" not in tools


@pytest.mark.process  # the document is read in a child process (app/knowledge/reading.py)
def test_a_collection_not_the_persons_is_refused_and_an_unshared_one_is_not_searched(client, data, fake):
    c = made(client, "Secret")
    upload(client, c, ("secret.txt", b"The password is swordfish.", "text/plain"))
    ready(data)
    client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
    store = store_of(client)
    bea = store.default_agent(Accounts(store).session(client.cookies.get(COOKIE)).id)
    give(client, bea.id, c, status=400)
    assert store.agent_collections(bea.id) == []
    store.set_agent_collections(bea.id, [c])  # given while it was shared, say: it is unshared now
    fake.script([tool_call("search_knowledge", {"query": "password"})], "Nothing.")
    idle(client, start_chat(client, "What is the password?"))
    assert "search_knowledge" not in [t["function"]["name"] for t in fake.streamed[0].get("tools", [])]
    assert "swordfish" not in json.dumps(fake.requests)


# --- documents attached to a message ----------------------------------------------------------


def pdf_of(pages: int, lines: int = 40) -> bytes:
    from tests.fakes.documents import text_pdf

    return text_pdf([[f"Page {p}, line {n}: the keeper lights the lantern at dusk." for n in range(lines)]
                     + ([f"The secret harbour code is tern-{p}."] if p == pages else [])
                     for p in range(1, pages + 1)])


@pytest.mark.process
def test_a_word_document_attached_is_sent_whole_under_its_headings(client, data, fake):
    import io

    import docx

    d = docx.Document()
    d.add_heading("Holidays", level=1)
    d.add_paragraph("Each employee gets twenty-seven days a year.")
    d.add_heading("Expenses", level=1)
    d.add_paragraph("Expenses above 500 euros need a receipt.")
    held = io.BytesIO()
    d.save(held)
    fake.script("Twenty-seven.")
    chat = start_chat(client, "How many days off?", files={"file": (
        "handbook.docx", held.getvalue(), "application/vnd.openxmlformats-officedocument.wordprocessingml.document")})
    idle(client, chat)
    sent = fake.streamed[0]["messages"][-1]["content"]
    assert ("[page 1]\n## Holidays\nEach employee gets twenty-seven days a year.\n"
            "## Expenses\nExpenses above 500 euros need a receipt.\n--- End of handbook.docx ---") in sent, sent


@pytest.mark.process
def test_a_pdf_attached_to_a_message_is_read_first_and_sent_whole_with_its_pages(client, data, fake):
    fake.script("It is tern-3 (page 3).")
    chat = start_chat(client, "What is the harbour code?", files={"file": ("harbour.pdf", pdf_of(3), "application/pdf")})
    idle(client, chat)
    [d] = rows(data, "SELECT state, chat, kind, pages FROM documents")
    assert (d["state"], d["kind"], d["pages"], d["chat"]) == ("ready", "pdf", 3, int(chat.rsplit("/", 1)[1]))
    sent = fake.streamed[0]["messages"][-1]["content"]
    assert "--- Attached file: harbour.pdf (3 pages) ---\n[page 1]\nPage 1, line 0" in sent, sent[:500]
    assert "[page 3]" in sent and "tern-3" in sent and "not readable here" not in sent
    assert "search_knowledge" in [t["function"]["name"] for t in fake.streamed[0].get("tools", [])], \
        "its conversation may search what is attached to it"


@pytest.mark.process
def test_a_document_too_long_to_send_whole_is_searched_and_cited(client, data, fake):
    fake.script([tool_call("search_knowledge", {"query": "secret harbour code"})], "It is tern-60 (p. 60).")
    chat = start_chat(client, "What is the harbour code?", files={"file": ("long.pdf", pdf_of(60), "application/pdf")})
    page = idle(client, chat)
    sent = fake.streamed[0]["messages"][-1]["content"]
    assert "[Attached file: long.pdf (60 pages): too long to send whole. Search it with search_knowledge" in sent
    assert "Page 1, line 0" not in sent, "none of it inline"
    result = fake.streamed[1]["messages"][-1]["content"]
    assert "(long.pdf, p. 60)\n" in result and "tern-60" in result, result[:600]
    chip = page.select_one('.chips a[href^="/knowledge/passages/"]')
    assert chip and chip["href"].endswith("#passage"), "the chip opens its page at the passage"
    cited = soup(client.get(chip["href"].split("#")[0]))
    assert cited.select_one("#passage mark") and "tern-60" in cited.select_one("#passage mark").text
    assert cited.select_one(f'.crumbs a[href="{chat}"]').text == "Attached to a conversation", "the way back"
    [d] = rows(data, "SELECT file FROM documents")
    assert cited.select_one(f'a[href="/files/{d["file"]}"]').text == "Download long.pdf"
    assert cited.select_one("h1").text == "long.pdf, page 60 of 60"
    # a conversation deleted takes its documents with it
    r = client.post(f"{chat}/delete", data={"_csrf_token": csrf(client, chat)}, follow_redirects=False)
    assert r.status_code in (303, 204), r.text
    assert rows(data, "SELECT * FROM documents") == [] and rows(data, "SELECT * FROM passages") == []


@pytest.mark.process
def test_a_document_that_fits_a_message_but_not_the_models_window_is_searched_and_its_chip_says_so(client, data, fake):
    """Ten pages (~25,000 characters) are less than any file may send, but more than half of
    what an 8,192-token window leaves a request: searched there; sent whole to a model of
    128,000 tokens; each time its chip says which, on every page that shows it."""
    fake.models["big-model"] = 128_000
    client.post("/models/refresh", data={"_csrf_token": csrf(client)})
    fake.script([tool_call("search_knowledge", {"query": "secret harbour code"})], "It is tern-10 (p. 10).")
    chat = start_chat(client, "What is the harbour code?", model="fake-model",
                      files={"file": ("ten.pdf", pdf_of(10), "application/pdf")})
    page = idle(client, chat)
    sent = fake.streamed[0]["messages"][-1]["content"]
    assert "[Attached file: ten.pdf (10 pages): too long to send whole. Search it" in sent and "Page 1, line 0" not in sent
    assert "tern-10" in fake.streamed[1]["messages"][-1]["content"], "found by the search"
    assert "searched: too long for the model to be sent whole" in page.select_one(".attachments .document-progress").text
    [d] = rows(data, "SELECT sent FROM documents")
    assert d["sent"] == "searched"
    fake.script("It is tern-10.")
    ask(client, chat, "And with the big model?", model="big-model")
    page = idle(client, chat)
    assert "--- Attached file: ten.pdf (10 pages) ---" in json.dumps(fake.streamed[-1]["messages"]), "whole, in its message"
    assert "sent whole to the model" in page.select_one(".attachments .document-progress").text
    assert rows(data, "SELECT sent FROM documents")[0]["sent"] == "whole"


@pytest.mark.process
def test_another_conversation_does_not_search_what_was_attached_elsewhere(client, data, fake):
    fake.script("Read it.")
    idle(client, start_chat(client, "Keep this", files={"file": ("long.pdf", pdf_of(60), "application/pdf")}))
    fake.script([tool_call("search_knowledge", {"query": "secret harbour code"})], "I do not know.")
    idle(client, start_chat(client, "What is the harbour code?"))
    assert "search_knowledge" not in [t["function"]["name"] for t in fake.streamed[1].get("tools", [])]
    assert "tern-60" not in json.dumps(fake.streamed[1:])


# --- picked for one message with "/" ----------------------------------------------------------


@pytest.mark.process  # documents are read in a child process
def test_a_collection_picked_for_a_message_is_searched_for_it_alone(client, data, fake):
    """Not given to the agent, the collection is searched for the message it was picked for:
    the model is told, the tool offered and finds its passage, the message shows the pick;
    the next message, with no pick, has no search at all."""
    c = made(client, "Garage")
    upload(client, c, ("libtasn1.md", MANUAL.encode(), "text/markdown"))
    [d] = ready(data)
    fake.script([tool_call("search_knowledge", {"query": "ASN1_TAG_ERROR tag"})], "A wrong tag (libtasn1.md, p. 1).")
    chat = start_chat(client, "When is ASN1_TAG_ERROR returned?", knowledge=f"c{c}")
    page = idle(client, chat)
    asked = fake.streamed[0]["messages"][-1]["content"]
    assert "[For this message the person picked the collection “Garage”: search_knowledge searches them.]" in asked
    assert "search_knowledge" in [t["function"]["name"] for t in fake.streamed[0]["tools"]]
    assert "ASN1_TAG_ERROR when a tag is wrong" in fake.streamed[1]["messages"][-1]["content"]
    chip = page.select_one(".item.user .picks a.pick")
    assert chip["href"] == f"/knowledge/{c}" and chip.select_one(".name").text == "Garage"
    [item] = rows(data, "SELECT knowledge FROM items WHERE kind = 'user'")
    assert item["knowledge"] == f"c{c}"
    fake.script("Nothing to search now.")
    ask(client, chat, "And the weather?")
    idle(client, chat)
    assert "search_knowledge" not in [t["function"]["name"] for t in fake.streamed[-1].get("tools", [])], \
        "picked for one message, not for the conversation"
    # one document of it, picked (the form's fields as the composer sends them)
    fake.script("Picked the document.")
    ask(client, chat, "What does the manual say?", knowledge=f"d{d['id']}")
    page = idle(client, chat)
    assert "the document “libtasn1.md”" in fake.streamed[-1]["messages"][-1]["content"]
    assert page.select(".item.user")[-1].select_one(".picks a.pick")["href"] == f"/knowledge/{c}#document-{d['id']}"
    # the collection deleted: each message that picked it says so, linking nowhere
    r = client.post(f"/knowledge/{c}/delete", data={"_csrf_token": csrf(client, f"/knowledge/{c}"), "sure": "1"},
                    follow_redirects=False)
    assert r.status_code == 303
    said = [m.select_one(".picks") for m in soup(client.get(chat)).select(".item.user")]
    assert [p and p.select_one(".pick.gone").text.strip() for p in said] == [
        "A collection deleted since", None, "A document deleted since"]
    assert not soup(client.get(chat)).select(".picks a")


@pytest.mark.process
def test_what_is_not_the_persons_to_pick_is_refused_and_nothing_is_written(client, data, fake):
    c = made(client, "Mine")
    chat = start_chat(client, "Hello")
    idle(client, chat)
    theirs = Accounts(store_of(client)).add("Bea", "correct horse battery staple").id
    store = store_of(client)
    hidden = store.add_collection(theirs, "Bea's diary")
    before = rows(data, "SELECT count(*) AS n FROM items")[0]["n"]
    for picked, says in [(f"c{hidden}", "not one you may search"), ("c999999", "not one you may search"),
                         ("x1", "names no collection or document"), ("c1; DROP TABLE items", "names no collection"),
                         (",".join(f"c{c}" for _ in range(21)), None)]:
        r = ask(client, chat, "Read it", ok=False, knowledge=picked.split(","))
        if says is None:  # the same collection twenty-one times is one pick
            assert r.status_code == 303, r.text
            continue
        assert r.status_code == 400 and says in r.text, (picked, r.status_code, r.text[:300])
    r = ask(client, chat, "Too many", ok=False, knowledge=[f"c{n}" for n in range(1, 30)])
    assert r.status_code == 400 and "at most 20" in r.text
    assert rows(data, "SELECT count(*) AS n FROM items WHERE kind = 'user'")[0]["n"] == 2, "only the allowed one"
    assert before < rows(data, "SELECT count(*) AS n FROM items")[0]["n"]
    store.update_collection(hidden, shared=True)
    ask(client, chat, "Read Bea's, shared now", knowledge=f"c{hidden}")


@pytest.mark.process
def test_without_script_the_slash_page_sends_a_message_with_its_picks(client, data, fake):
    c = made(client, "Manuals")
    upload(client, c, ("libtasn1.md", MANUAL.encode(), "text/markdown"))
    [d] = ready(data)
    chat = start_chat(client, "Hello")
    idle(client, chat)
    page = soup(client.get(f"{chat}/prompts"))
    form = page.select_one("form.picks")
    assert form["action"] == f"{chat}/knowledge"
    assert {i["value"] for i in form.select("input[name=knowledge]")} == {f"c{c}", f"d{d['id']}"}
    token = csrf(client, f"{chat}/prompts")
    r = client.post(f"{chat}/knowledge", data={"_csrf_token": token, "text": "Summarise it"}, follow_redirects=False)
    assert r.status_code == 400 and "Tick a collection or document" in soup(r).select_one("form.picks .problem").text
    r = client.post(f"{chat}/knowledge", data={"_csrf_token": token, "knowledge": f"c{c}"}, follow_redirects=False)
    assert r.status_code == 400 and "Write what to ask" in r.text
    fake.script("Summary.")
    r = client.post(f"{chat}/knowledge", data={"_csrf_token": token, "knowledge": f"c{c}", "text": "Summarise it"},
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith(chat)
    idle(client, chat)
    assert rows(data, "SELECT knowledge FROM items WHERE text = 'Summarise it'")[0]["knowledge"] == f"c{c}"
    # a new conversation's "/" page picks too
    agent = store_of(client).default_agent(store_of(client).owner()).id
    fake.script("New one.")
    r = client.post(f"/new/{agent}/knowledge", data={"_csrf_token": token, "knowledge": f"d{d['id']}", "text": "Hi"},
                    follow_redirects=False)
    assert r.status_code == 303
    assert rows(data, "SELECT knowledge FROM items WHERE text = 'Hi'")[0]["knowledge"] == f"d{d['id']}"


def test_a_readings_end_is_said_in_the_live_region_and_a_hostile_name_stays_text(client, data):
    """The feed's message for documents whose reading ended fills the collection's polite live
    region ("NAME: ready: …."), escaped: a file's name is the person's text, never markup."""
    from bs4 import BeautifulSoup

    from app.web.knowledge import document_changes

    c = made(client)
    store = client.app.state.tabletalk.store
    name = '<img src=x onerror="alert(1)">.txt'

    def ended():
        owner = store.owner()
        d = store.add_document(owner, store.add_file(name, b"Notes.", owner), name, collection=c, kind="text",
                               state="ready")
        reading = store.add_document(owner, store.add_file("b.txt", b"More.", owner), "b.txt", collection=c, kind="text")
        return document_changes(store, [store.document(d), store.document(reading)], owner)

    html = client.blocking_portal.call(ended)
    parts = BeautifulSoup(html, "html.parser")
    said = parts.select_one('hx-partial[hx-target="#documents-announce"]')
    assert said.text == f"{name}: ready: 0 pages, 0 passages.", "the one that ended, not the one queued"
    assert not parts.select("img") and "&lt;img" in html
    assert soup(client.get(f"/knowledge/{c}")).select_one('#documents-announce[aria-live="polite"]')
