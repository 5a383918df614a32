"""Attachments: uploading through the composer, what the model receives, and serving files safely."""
import base64
import struct
import zlib
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from app import files as filestore
from tests.conftest import ENGINES, database, csrf, idle, new_chat, on_both_engines, start_chat, wait_for, store_of
from tests.fakes.openai_server import text


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    """Each test on SQLite (bytes in files/) and on PostgreSQL (bytes in the database's rows)."""
    return on_both_engines(request, env, monkeypatch)


def held(store) -> list[bytes]:
    """Every content the store holds, whichever engine keeps it."""
    if store.blobs.transactional:
        found = store._all("SELECT sha256 FROM blobs ORDER BY sha256")
        return [store.blobs.read(r[0]) for r in found]
    root: Path = store.blobs.root
    assert not list(root.rglob(".tmp-*")), "no temporary file left"
    return [p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()]


def png() -> bytes:
    """A real 1x1 PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))


def send(client, chat, files, text_="See these", **headers):
    return client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": text_},
                       files=[("file", f) for f in files], headers=headers, follow_redirects=False)


def counts(client) -> tuple[int, int]:
    store = store_of(client)
    files, items = (store._one(f"SELECT count(*) FROM {table}")[0] for table in ("files", "items"))
    return files, items


def file_ids(client, chat) -> list[int]:
    page = BeautifulSoup(client.get(chat).text, "html.parser")
    return [int(a["href"].rsplit("/", 1)[1]) for a in page.select("article.user ul.attachments a")]


def test_the_composer_is_a_multipart_form_with_a_file_input(client):
    chat = new_chat(client)
    form = BeautifulSoup(client.get(chat).text, "html.parser").select_one("form#composer")
    assert form["enctype"] == "multipart/form-data"
    box = form.select_one('input[type="file"][name="file"]')
    assert box is not None and box.has_attr("multiple")


def test_a_text_file_and_an_image_reach_the_model(client, fake):
    fake.script([text("Got them.")])
    chat = new_chat(client)
    image = png()
    r = send(client, chat, [("notes.txt", "The secret word is marmalade.\n".encode(), "text/plain"),
                            ("dot.png", image, "image/png")])
    assert r.status_code == 303, r.text
    wait_for(lambda: fake.streamed)
    content = fake.streamed[-1]["messages"][-1]["content"]
    assert isinstance(content, list)
    words = " ".join(p["text"] for p in content if p["type"] == "text")
    assert "See these" in words and "The secret word is marmalade." in words and "notes.txt" in words
    images = [p for p in content if p["type"] == "image_url"]
    assert len(images) == 1
    url = images[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == image
    # the page links both attachments, and each serves with its own type
    ids = file_ids(client, chat)
    assert len(ids) == 2
    txt, img = client.get(f"/files/{ids[0]}"), client.get(f"/files/{ids[1]}")
    assert txt.headers["content-type"].startswith("text/plain")
    assert txt.headers["content-disposition"].startswith("attachment;")
    assert txt.headers["x-content-type-options"] == "nosniff"
    assert img.headers["content-type"] == "image/png" and img.content == image
    assert img.headers["content-disposition"].startswith("inline;")
    assert img.headers["x-content-type-options"] == "nosniff"


def test_a_message_with_only_a_text_file_stays_a_string(client, fake):
    fake.script([text("ok")])
    chat = new_chat(client)
    assert send(client, chat, [("a.txt", b"alpha beta", "text/plain")]).status_code == 303
    wait_for(lambda: fake.streamed)
    content = fake.streamed[-1]["messages"][-1]["content"]
    assert isinstance(content, str) and "alpha beta" in content


def test_with_htmx_an_upload_answers_204(client):
    chat = new_chat(client)
    r = send(client, chat, [("a.txt", b"hello", "text/plain")], **{"HX-Request": "true"})
    assert r.status_code == 204
    assert counts(client)[0] == 1


@pytest.mark.parametrize("content, kind, inline", [
    (png(), "image/png", True),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "image/jpeg", True),
    (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif", True),
    (b"RIFF\x1a\x00\x00\x00WEBPVP8 ", "image/webp", True),
    # a PDF attached to a message is read for the model, in a child process (app/knowledge/reading.py)
    pytest.param(b"%PDF-1.4\n%%EOF\n", "application/pdf", False, marks=pytest.mark.process),
    (b"plain words\n", "text/plain", False),
    (b"\x00\x01\x02binary", "application/octet-stream", False),
    (b"\xff\xfe not utf8 \x80", "application/octet-stream", False),
    (b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>", "text/plain", False),
])
def test_types_come_from_the_bytes_and_only_images_are_inline(client, content, kind, inline):
    chat = new_chat(client)
    assert send(client, chat, [("thing.bin", content, "image/svg+xml")]).status_code == 303
    r = client.get(f"/files/{file_ids(client, chat)[0]}")
    assert r.status_code == 200 and r.content == content
    assert r.headers["content-type"].split(";")[0] == kind
    assert r.headers["content-disposition"].startswith("inline;" if inline else "attachment;")
    assert r.headers["x-content-type-options"] == "nosniff"


def test_html_claiming_to_be_png_is_served_as_a_text_download(client):
    chat = new_chat(client)
    html = b"<html><body><script>alert(document.cookie)</script></body></html>"
    assert send(client, chat, [("pic.png", html, "image/png")]).status_code == 303
    r = client.get(f"/files/{file_ids(client, chat)[0]}")
    assert r.headers["content-type"].split(";")[0] in ("text/plain", "application/octet-stream")
    assert r.headers["content-disposition"].startswith("attachment;")
    assert r.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("raw", ["0", "999999", "abc", "-1", "1.5", "9" * 40, "%2e%2e"])
def test_unknown_or_bad_file_ids_are_404(client, raw):
    assert client.get(f"/files/{raw}").status_code == 404


def test_an_empty_file_is_refused_and_nothing_is_written(client):
    chat = new_chat(client)
    before = counts(client)
    r = send(client, chat, [("ok.txt", b"fine", "text/plain"), ("empty.txt", b"", "text/plain")])
    assert r.status_code == 400 and "empty" in r.text
    assert counts(client) == before


def test_a_file_too_large_is_refused_with_413_and_nothing_is_written(make_client):
    with make_client(TABLETALK_UPLOAD_MAX="1000") as client:
        chat = new_chat(client)
        before = counts(client)
        r = send(client, chat, [("ok.txt", b"x" * 1000, "text/plain"), ("big.txt", b"x" * 1001, "text/plain")])
        assert r.status_code == 413 and "too large" in r.text and "1,000" in r.text
        assert counts(client) == before
        assert held(store_of(client)) == []


def test_too_many_files_are_refused_with_413_and_nothing_is_written(make_client):
    with make_client(TABLETALK_UPLOAD_COUNT="2") as client:
        chat = new_chat(client)
        before = counts(client)
        r = send(client, chat, [(f"{i}.txt", f"file {i}".encode(), "text/plain") for i in range(3)])
        assert r.status_code == 413 and "Too many files" in r.text and "2" in r.text
        assert counts(client) == before
        assert send(client, chat, [(f"{i}.txt", f"file {i}".encode(), "text/plain") for i in range(2)]).status_code == 303
        assert counts(client)[0] == before[0] + 2


def test_a_refused_message_writes_no_file(client):
    """An empty text is refused before any file is stored."""
    chat = new_chat(client)
    before = counts(client)
    r = send(client, chat, [("a.txt", b"hello", "text/plain")], text_="   ")
    assert r.status_code == 400 and counts(client) == before


def test_the_same_bytes_are_stored_once(client):
    chat = new_chat(client)
    data = b"the very same bytes"
    send(client, chat, [("one.txt", data, "text/plain")])
    send(client, chat, [("two.txt", data, "text/plain")])
    store = store_of(client)
    rows = store._all("SELECT name, sha256, size FROM files ORDER BY id")
    assert [r["name"] for r in rows] == ["one.txt", "two.txt"]
    assert rows[0]["sha256"] == rows[1]["sha256"] == filestore.digest(data)
    assert held(store) == [data]


@pytest.mark.parametrize("raw", [
    "../../etc/passwd",
    'a"\r\nX-Evil: 1.txt',
    "x" * 400 + ".txt",
    "résumé 📄 日本語.txt",
    "..\\..\\windows\\win.ini",
    ".",
])
def test_hostile_names_are_kept_harmless(client, raw):
    chat = new_chat(client)
    r = send(client, chat, [(raw, b"contents", "text/plain")])
    assert r.status_code == 303, r.text
    fid = file_ids(client, chat)[0]
    name = store_of(client).file(fid)["name"]
    assert 1 <= len(name) <= 255
    assert "/" not in name and "\\" not in name and '"' not in name and "\r" not in name and "\n" not in name
    assert name not in (".", "..")
    r = client.get(f"/files/{fid}")
    assert r.status_code == 200 and "x-evil" not in r.headers
    header = r.headers["content-disposition"]
    assert "\r" not in header and "\n" not in header
    assert header.startswith('attachment; filename="') and "filename*=UTF-8''" in header
    # nothing was written outside data/files (on PostgreSQL: nothing in the data folder at all)
    data = client.app.state.tabletalk.config.data
    store = store_of(client)
    made = [p for p in data.rglob("*") if p.is_file() and "files" in p.relative_to(data).parts[:1]]
    if store.blobs.transactional:
        assert made == [] and held(store) == [b"contents"]
    else:
        assert made and all(store.blobs.root in p.parents for p in made)


def test_names_keep_their_unicode_and_extension():
    assert filestore.clean_name("../../etc/passwd") == "passwd"
    assert filestore.clean_name("résumé 📄.txt") == "résumé 📄.txt"
    long = filestore.clean_name("y" * 400 + ".txt")
    assert len(long) == 255 and long.endswith(".txt")
    header = filestore.disposition("résumé.txt", inline=False)
    assert header == "attachment; filename=\"r_sum_.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt"
    assert "\r" not in filestore.disposition('a"\r\nX-Evil: 1.txt', inline=False)


def test_a_tool_made_file_shows_on_its_call(client):
    """A call item's `file` links to /files/{id}."""
    from app.tables import Item
    chat = new_chat(client)
    store = store_of(client)
    fid = store.add_file("chart.png", png())
    store.add(Item(kind="call", chat=int(chat.rsplit("/", 1)[1]), name="draw", input="{}", output="done",
                   state="done", done=True, file=fid))
    page = BeautifulSoup(client.get(chat).text, "html.parser")
    link = page.select_one(f'article.call a[href="/files/{fid}"]')
    assert link is not None and link.select_one("img")["src"] == f"/files/{fid}"


def test_an_upload_without_the_csrf_token_is_refused(client):
    chat = new_chat(client)
    before = counts(client)
    r = client.post(chat + "/ask", data={"text": "hi"}, files=[("file", ("a.txt", b"hello", "text/plain"))],
                    follow_redirects=False)
    assert r.status_code == 403 and counts(client) == before


@pytest.mark.browser
def test_in_the_browser_htmx_sends_the_files(browser, served, fake, tmp_path):
    fake.script([text("Read it.")])
    note = tmp_path / "note.txt"
    note.write_text("a line from the browser")
    context = served.context(browser)
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(served.empty_chat())  # open before its first message
        page.evaluate("window.__sameDocument = true")
        page.locator('#composer input[type="file"]').set_input_files([str(note)])
        box = page.locator("#composer textarea")
        box.fill("What does it say?")
        box.press("Enter")
        page.locator("article.user ul.attachments a").wait_for()
        assert page.evaluate("window.__sameDocument") is True, "htmx sent it, no reload"
        assert page.locator('#composer input[type="file"]').evaluate("e => e.files.length") == 0
        wait_for(lambda: fake.streamed)
        assert "a line from the browser" in fake.streamed[-1]["messages"][-1]["content"]
    finally:
        context.close()
    assert errors == []


def test_attachments_show_as_chips_with_name_and_size_and_images_as_thumbnails(client, fake):
    from bs4 import BeautifulSoup
    from tests.conftest import csrf, wait_for
    token = csrf(client)
    chat = start_chat(client, "see the notes", files=[("file", ("notes.txt", b"hello notes", "text/plain")),
                                                      ("file", ("dot.png", png(), "image/png"))], token=token)
    page = wait_for(lambda: (p := BeautifulSoup(client.get(chat).text, "html.parser")).select_one(".attachments a") and p)
    chip, thumb = page.select(".attachments a")
    assert "file-chip" in chip["class"] and chip.select_one(".name").text == "notes.txt"
    assert chip.select_one(".size").text == "11 B"
    img = thumb.select_one("img")
    assert "thumb" in thumb["class"] and img["alt"] == "dot.png" and img["src"] == thumb["href"], "it opens the file"


def test_a_deleted_conversations_files_go_and_bytes_another_names_stay(client, data):
    """Deleting a conversation deletes its attachments' rows, and their bytes once no other
    row names the same content."""
    from app.store import db as dbm

    def conversation_with(content: bytes) -> str:
        chat = start_chat(client, "keep this", files={"file": ("notes.txt", content, "text/plain")})
        return chat

    first, second = conversation_with(b"shared bytes"), conversation_with(b"shared bytes")
    only = conversation_with(b"bytes of the first alone")
    stored = lambda: held(store_of(client))  # noqa: E731
    db = dbm.connect(database(data))
    rows = lambda: db.conn.execute("SELECT count(*) FROM files").fetchone()[0]  # noqa: E731
    assert rows() == 3 and len(stored()) == 2
    client.post(first + "/delete", data={"_csrf_token": csrf(client)})
    assert rows() == 2 and len(stored()) == 2, "the other conversation still names the shared bytes"
    client.post(only + "/delete", data={"_csrf_token": csrf(client)})
    assert rows() == 1 and len(stored()) == 1
    client.post(second + "/delete", data={"_csrf_token": csrf(client)})
    assert rows() == 0 and stored() == []
    db.conn.close()


def test_a_file_at_the_limit_is_taken_whole_and_one_byte_more_is_refused_leaving_the_rest(make_client):
    """At TABLETALK_UPLOAD_MAX exactly (more than one 256 KB chunk): stored and served byte
    for byte. One byte over: 413 in words, no row and no bytes written, what was sent
    before untouched."""
    import os

    limit = 300_000
    with make_client(TABLETALK_UPLOAD_MAX=str(limit)) as client:
        store = store_of(client)
        chat = new_chat(client)
        whole = os.urandom(limit)
        assert send(client, chat, [("whole.bin", whole, "application/octet-stream")]).status_code == 303
        [fid] = file_ids(client, chat)
        got = client.get(f"/files/{fid}")
        assert got.content == whole and got.headers["content-length"] == str(limit)
        idle(client, chat)  # its answer written, so the counts below are the refusal's alone
        before = counts(client)
        r = send(client, chat, [("over.bin", os.urandom(limit + 1), "application/octet-stream")])
        assert r.status_code == 413 and "“over.bin” is too large: at most 300,000 bytes a file." in r.text
        assert counts(client) == before and held(store) == [whole]
        assert client.get(f"/files/{fid}").content == whole


def test_a_name_with_path_separators_keeps_its_last_part_only(client):
    chat = new_chat(client)
    assert send(client, chat, [("a/b\\c/../notes.txt", b"words", "text/plain")]).status_code == 303
    [fid] = file_ids(client, chat)
    store = store_of(client)
    assert store.file(fid)["name"] == "notes.txt" and held(store) == [b"words"]
    assert 'filename="notes.txt"' in client.get(f"/files/{fid}").headers["content-disposition"]


def test_bytes_are_examined_a_chunk_at_a_time_as_they_would_be_whole(tmp_path):
    """An upload is read through once in pieces (never held whole): its type, size and sha256
    are those of its bytes whole, wherever the pieces split it (a UTF-8 sequence or a magic
    number cut in two)."""
    import hashlib

    samples = [b"", b"plain words\n", "héllo wörld ✓".encode(), b"a\x00b", "é".encode()[:1] + b"tail",
               b"\x89PNG\r\n\x1a\n" + bytes(40), b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(20), b"%PDF-1.7\n" + bytes(9)]
    for data in samples:
        whole = filestore.examine([data])
        assert (whole.sha256, whole.size, whole.type) == (hashlib.sha256(data).hexdigest(), len(data),
                                                          filestore.sniff(data))
        for cut in range(len(data) + 1):
            assert filestore.examine([data[:cut], data[cut:]]) == whole, (data, cut)
    spooled = tmp_path / "spool"
    spooled.write_bytes(b"x" * (filestore.READ * 2 + 5))
    with open(spooled, "rb") as f:
        upload = filestore.spooled("spool.txt", f)
        assert upload.examined.size == filestore.READ * 2 + 5 and upload.head == b"x" * filestore.HEAD
        assert [len(c) for c in upload.chunks()] == [filestore.READ, filestore.READ, 5]
        assert [len(c) for c in upload.chunks()] == [filestore.READ, filestore.READ, 5]  # from the start again


def test_a_text_files_head_is_all_the_model_is_sent_of_it(store):
    data = ("é" * 300_000).encode()  # two bytes a character: longer than what a model is sent
    file_id = store.add_file("long.txt", data)
    row, head = store.file_bytes(file_id, most=1000)
    assert row["size"] == len(data) and head == data[:1000]
    assert store.file_bytes(file_id)[1] == data
