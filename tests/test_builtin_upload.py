"""A GGUF model uploaded on /model (app/builtin/upload.py, app/web/model_upload.py): written to a
part file as it comes, checked whole, renamed, listed; refused with its reason and nothing left
when it is not a model, cut short, too large, of a name taken or being uploaded, or from anyone
but the owner; a part of an upload that was cut is gone on from. A real cut, a full disk and two
uploads at once on a running server: test_builtin_upload_served.py; in a browser:
test_browser_model_upload.py."""
from __future__ import annotations

import os
import time

import pytest

from app import builtin
from app.builtin import brought, upload
from tests.conftest import COOKIE, csrf, signed_in, soup, store_of
from tests.fakes import gguf as made

MODEL = made.gguf(made.model(), {"a": (1024, 1024)})  # 4 MB of tensors: more than one write
KEY = "k3y0f7h1s8p4g3"


def sent(c, data: bytes, file: str = "Mine.gguf", key: str = KEY, start: int = 0, total: int | None = None, **headers):
    """The page's script's request: the file from `start` as the body, where it starts in Content-Range."""
    total = len(data) + start if total is None else total
    return c.post("/model/upload", params={"file": file, "key": key}, content=data, headers={
        "X-CSRFToken": csrf(c, "/model"), "Content-Type": "application/octet-stream",
        "Content-Range": f"bytes {start}-{total - 1}/{total}"} | headers)


def posted(c, data: bytes, name: str = "Mine.gguf", token: str | None = None):
    """The plain form's request (multipart: the token first, then the file)."""
    return c.post("/model/upload", data={"_csrf_token": token or csrf(c, "/model")}, files={"file": (name, data)},
                  follow_redirects=False)


def left(data) -> list[str]:
    """Every file in data/models/, parts included."""
    folder = brought.folder(data)
    return sorted(os.listdir(folder)) if folder.exists() else []


def installed(c) -> None:
    store_of(c).set_builtin(state="ready", serving="up")


def listed(c) -> list[str]:
    return [r.select_one("th").get_text(" ", strip=True) for r in soup(c.get("/model")).select("table.models tbody tr")]


def test_the_scripts_upload_is_asked_first_written_checked_and_listed(client, data):
    installed(client)
    asked = client.get("/model/upload", params={"file": "My Model (Q4).gguf", "key": KEY, "size": len(MODEL)})
    assert asked.status_code == 200 and asked.json() == {"file": "My-Model-Q4.gguf", "have": 0}
    r = sent(client, MODEL, file="My-Model-Q4.gguf")
    assert r.status_code == 200 and r.json() == {"file": "My-Model-Q4.gguf", "go": "/model?saved=uploaded"}
    assert left(data) == ["My-Model-Q4.gguf"], "no part is left"
    assert (brought.folder(data) / "My-Model-Q4.gguf").read_bytes() == MODEL
    page = soup(client.get("/model?saved=uploaded"))
    assert "Uploaded" in page.select_one(".saved").get_text()
    assert "My-Model-Q4" in listed(client)
    again = client.get("/model/upload", params={"file": "My-Model-Q4.gguf", "key": KEY, "size": len(MODEL)})
    assert again.status_code == 409 and "already" in again.json()["problem"], "a name is never taken twice"
    assert sent(client, MODEL, file="My-Model-Q4.gguf").status_code == 409
    assert (brought.folder(data) / "My-Model-Q4.gguf").read_bytes() == MODEL


def test_the_plain_form_reads_its_token_first_and_comes_back_with_the_model_listed(client, data):
    installed(client)
    r = posted(client, MODEL, "Plain.gguf")
    assert r.status_code == 303 and r.headers["location"] == "/model?saved=uploaded"
    assert left(data) == ["Plain.gguf"] and "Plain" in listed(client)

    r = posted(client, MODEL, "Forged.gguf", token="forged")
    assert r.status_code == 403 and "expired" in soup(r).select_one("#model-upload .upload-status").get_text()
    # the file before the token: not this app's form
    r = client.post("/model/upload", files=[("file", ("Early.gguf", MODEL)), ("_csrf_token", (None, csrf(client)))],
                    follow_redirects=False)
    assert r.status_code == 403
    r = client.post("/model/upload", data={"_csrf_token": csrf(client)}, files={"file": ("", b"")},
                    follow_redirects=False)
    assert r.status_code == 400 and "Choose a .gguf file" in r.text
    assert left(data) == ["Plain.gguf"], "nothing of the refused ones"


@pytest.mark.parametrize("raw, kept", [
    ("Qwen2.5-0.5B-Instruct.Q4_K_M.gguf", "Qwen2.5-0.5B-Instruct.Q4_K_M.gguf"),
    ("../../etc/passwd.gguf", "passwd.gguf"),
    ("C:\\Users\\me\\My Model (Q4).GGUF", "My-Model-Q4.gguf"),
    ("..hidden.gguf", "hidden.gguf"),
    ("modèle été.gguf", "mod-le-t.gguf"),
])
def test_a_name_is_made_safe_and_kept_in_the_folder(raw, kept):
    assert upload.file_name(raw) == kept


@pytest.mark.parametrize("raw, says", [
    ("notes.txt", "not a .gguf file"),
    ("model.gguf.part", "not a .gguf file"),
    ("/", "not a .gguf file"),
    ("...gguf", "nothing a model can be called by"),
    (f"{builtin.NAME}.gguf", "the built-in model's name"),
])
def test_a_name_that_cannot_be_a_models_is_refused(raw, says):
    with pytest.raises(upload.NotTaken, match=says):
        upload.file_name(raw)


def test_a_traversing_name_is_written_inside_the_folder_only(client, data):
    r = sent(client, MODEL, file="../../tabletalk.gguf")
    assert r.status_code == 200 and r.json()["file"] == "tabletalk.gguf"
    assert left(data) == ["tabletalk.gguf"] and not (data.parent / "tabletalk.gguf").exists()
    r = sent(client, MODEL, file="../tabletalk.db")
    assert r.status_code == 400 and "not a .gguf file" in r.json()["problem"]


CUT = made.gguf(made.model(), {"a": (1024, 1024)})[:3_000_000]


@pytest.mark.parametrize("body, says", [
    (b"just some text, not a model at all" * 40_000, "not a GGUF model file"),
    (made.gguf(made.model(), version=1), "GGUF version 1"),
    (made.gguf({"general.name": "x"}), "names no architecture"),
    (CUT, "it is cut off: its tensors need 4,194,"),  # sent whole, the file itself cut off
])
def test_what_is_not_a_model_fails_with_its_reason_and_leaves_nothing(client, data, body, says):
    r = sent(client, body)
    assert r.status_code == 400 and says in r.json()["problem"], r.text
    assert left(data) == [], "no model, no part"
    r = posted(client, body)
    assert r.status_code == 400 and says in soup(r).select_one(".problem").get_text()
    assert left(data) == []


def test_a_request_shorter_than_the_file_it_said_leaves_nothing(client, data):
    r = client.post("/model/upload", params={"file": "Mine.gguf", "key": KEY}, content=iter([MODEL[:2_000_000]]),
                    headers={"X-CSRFToken": csrf(client), "Content-Type": "application/octet-stream",
                             "Content-Range": f"bytes 0-{len(MODEL) - 1}/{len(MODEL)}"})  # no length: it ends short
    assert r.status_code == 400
    assert f"ended after 2,000,000 bytes of the {len(MODEL):,} it said" in r.json()["problem"]
    assert left(data) == []


def test_bytes_past_the_size_said_are_refused(tmp_path):
    up = upload.Upload(tmp_path, "Mine.gguf", KEY, len(MODEL), 1 << 30)
    up.claim(0)
    with pytest.raises(upload.NotTaken, match=f"longer than the {len(MODEL):,} bytes"):
        up.write(MODEL + b"more")
    up.close()
    assert left(tmp_path) == []


def test_a_length_that_lies_about_the_range_is_refused_before_anything_is_written(client, data):
    r = sent(client, MODEL, total=len(MODEL) * 2)
    assert r.status_code == 400 and "Content-Range" in r.json()["problem"]
    r = sent(client, MODEL, **{"Content-Range": "bytes 0-10/5"})
    assert r.status_code == 400
    assert left(data) == []


def test_a_file_past_the_limit_is_refused_before_a_byte_is_written(make_client, data):
    with make_client(TABLETALK_MODEL_UPLOAD_MAX="1000000") as c:
        asked = c.get("/model/upload", params={"file": "Big.gguf", "key": KEY, "size": len(MODEL)})
        assert asked.status_code == 413 and "at most 1 MB" in asked.json()["problem"]
        assert sent(c, MODEL, file="Big.gguf").status_code == 413
        r = c.post("/model/upload", params={"file": "Big.gguf", "key": KEY}, content=iter([MODEL]),
                   headers={"X-CSRFToken": csrf(c), "Content-Type": "application/octet-stream"})  # no length said
        assert r.status_code == 413 and "TABLETALK_MODEL_UPLOAD_MAX" in r.json()["problem"]
        assert posted(c, MODEL, "Big.gguf").status_code == 413
        assert left(data) == []


def test_only_the_owner_uploads_and_only_from_this_apps_page(client, data):
    r = client.post("/model/upload", params={"file": "Mine.gguf", "key": KEY}, content=MODEL,
                    headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 403, "the script's request carries its token in its header"
    r = sent(client, MODEL, **{"Sec-Fetch-Site": "same-site"})
    assert r.status_code == 403 and "another site" in r.text
    r = client.post("/model/upload", data={"_csrf_token": csrf(client)}, files={"file": ("Mine.gguf", MODEL)},
                    headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    client.cookies.set(COOKIE, signed_in(data, "bea", owner=False))
    r = sent(client, MODEL)
    assert r.status_code == 403 and "Only the owner" in r.text
    r = posted(client, MODEL)
    assert r.status_code == 403
    assert client.get("/model/upload", params={"file": "Mine.gguf", "key": KEY}).status_code == 403
    assert left(data) == []


# --- the files underneath ---------------------------------------------------------------------


def test_a_cut_upload_keeps_its_part_unlisted_and_goes_on_from_it(tmp_path):
    up = upload.Upload(tmp_path, "Mine.gguf", KEY, len(MODEL), 1 << 30)
    up.claim(0)
    up.write(MODEL[:1_500_000])
    up.close(resumable=True)  # cut: the page's script goes on later
    assert upload.have(tmp_path, "Mine.gguf", KEY) == 1_500_000
    assert brought.found(tmp_path) == [] and left(tmp_path) == [f".Mine.gguf.{KEY}.part"]

    behind = upload.Upload(tmp_path, "Mine.gguf", KEY, len(MODEL), 1 << 30)
    with pytest.raises(upload.NotTaken) as e:
        behind.claim(2_000_000)
    assert e.value.kind == "behind" and e.value.have == 1_500_000
    assert upload.have(tmp_path, "Mine.gguf", KEY) == 1_500_000, "a wrong start loses nothing"

    rest = upload.Upload(tmp_path, "Mine.gguf", KEY, len(MODEL), 1 << 30)
    assert rest.ask() == 1_500_000
    rest.claim(1_000_000)  # from before the part's end: what came after it comes again
    rest.write(MODEL[1_000_000:])
    found = rest.finish()
    rest.close()
    assert found.problem == "" and (brought.folder(tmp_path) / "Mine.gguf").read_bytes() == MODEL
    assert left(tmp_path) == ["Mine.gguf"]


def test_two_uploads_of_one_name_end_as_one(tmp_path):
    first = upload.Upload(tmp_path, "Mine.gguf", "first0000", len(MODEL), 1 << 30)
    first.claim(0)
    second = upload.Upload(tmp_path, "Mine.gguf", "second000", len(MODEL), 1 << 30)
    with pytest.raises(upload.NotTaken, match="being uploaded already") as e:
        second.claim(0)
    assert e.value.kind == "busy"
    with pytest.raises(upload.NotTaken, match="being uploaded already"):
        second.ask()
    again = upload.Upload(tmp_path, "Mine.gguf", "first0000", len(MODEL), 1 << 30)
    with pytest.raises(upload.NotTaken, match="still being written") as e:
        again.claim(0)  # the same upload's request that was cut, not yet ended on this side
    assert e.value.kind == "again"
    first.write(MODEL)
    first.finish()
    first.close()
    with pytest.raises(upload.NotTaken, match="here already") as e:
        second.claim(0)
    assert e.value.kind == "taken"
    assert left(tmp_path) == ["Mine.gguf"]


def test_a_part_nobody_goes_on_with_is_given_up(tmp_path):
    old = upload.Upload(tmp_path, "Old.gguf", "abandoned1", len(MODEL), 1 << 30)
    old.claim(0)
    old.write(MODEL[:1_000])
    old.close(resumable=True)
    replaced = upload.Upload(tmp_path, "Mine.gguf", "abandoned2", len(MODEL), 1 << 30)
    replaced.claim(0)
    replaced.close(resumable=True)
    newer = upload.Upload(tmp_path, "Mine.gguf", "newer0000", len(MODEL), 1 << 30)
    newer.claim(0)  # a new upload of the name replaces the one nobody goes on with
    assert upload.have(tmp_path, "Mine.gguf", "abandoned2") == 0
    newer.close()
    day_ago = time.time() - upload.STALE - 60
    os.utime(upload.part_of(tmp_path, "Old.gguf", "abandoned1"), (day_ago, day_ago))
    assert upload.sweep(tmp_path) == 1 and left(tmp_path) == []


def test_no_room_is_refused_before_a_byte_and_a_disk_that_fills_stops_the_upload(tmp_path):
    """The disk as its free space says it (a running server's: test_builtin_upload_served.py)."""
    disk = {"free": upload.KEEP_LEAST + 3_000_000}  # room for 3 MB past what is kept
    free = lambda folder: (10**9, disk["free"])  # noqa: E731
    up = upload.Upload(tmp_path, "Mine.gguf", KEY, len(MODEL), 1 << 30, free)
    with pytest.raises(upload.NotTaken, match="no room for Mine.gguf.*it needs 4 MB, and 3 MB are free") as e:
        up.ask()
    assert e.value.kind == "room"
    with pytest.raises(upload.NotTaken, match="no room"):
        up.claim(0)
    assert left(tmp_path) == []
    up = upload.Upload(tmp_path, "Mine.gguf", KEY, None, 1 << 30, free)  # its size unknown: it goes on while there is room
    up.claim(0)
    up.write(MODEL[:upload.CHECK_EVERY // 2])
    disk["free"] = upload.KEEP_LEAST - 1  # something else took the room meanwhile
    with pytest.raises(upload.NotTaken, match="The disk filled up while Mine.gguf was uploading"):
        up.write(b"\0" * (upload.CHECK_EVERY // 2))
    up.close()
    assert left(tmp_path) == []


def test_the_room_kept_is_a_fiftieth_of_the_disk_within_bounds():
    assert upload.keep(10 * 10**9) == 200_000_000
    assert upload.keep(10**9) == upload.KEEP_LEAST
    assert upload.keep(10**13) == upload.KEEP_MOST
