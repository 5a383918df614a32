"""A full disk: the answer being written ends in plain words, what was committed stays, uploads
are refused with words, pages are still served, and everything goes on once there is room."""
import errno
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from app.run import space
from tests.conftest import Served, csrf, idle, rows, soup, sqlite_only, wait_for
from tests.fakes.openai_server import rate, text

LONG = " ".join(f"word{i}" for i in range(60_000))  # ~470 KB: more than the disk has left


def test_is_full_knows_sqlite_full_and_enospc_and_nothing_else():
    assert space.is_full(sqlite3.OperationalError("database or disk is full"))
    assert space.is_full(OSError(errno.ENOSPC, "No space left on device"))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("saving failed") from e
    except RuntimeError as e:
        assert space.is_full(e)
    assert not space.is_full(sqlite3.OperationalError("database is locked"))
    assert not space.is_full(OSError(errno.EACCES, "Permission denied"))
    assert not space.is_full(None)


def test_the_reserve_is_made_only_with_room_twice_over(tmp_path, monkeypatch):
    reserve = space.Reserve(tmp_path)
    assert reserve.ensure() and reserve.path.stat().st_size == reserve.size() <= space.MOST
    assert reserve.release() and not reserve.held() and not reserve.release()

    class Usage:
        total, free = 10 * 2**20, space.LEAST  # room for it once, not twice

    monkeypatch.setattr(space.shutil, "disk_usage", lambda _: Usage)
    assert not reserve.ensure() and not reserve.held()


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MB file system of the test's own (tmpfs; as root, which this machine's tests are)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip()}): run the tests as root")
    try:
        yield disk
    finally:
        if not os.environ.get("KEEP_DISK"):
            subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Take the disk's free space but `leave` bytes."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        while True:
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            if free <= leave:
                break
            try:
                f.write(b"\0" * min(65536, free - leave))
                f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
    return filler


@sqlite_only("a full disk under SQLite's file in the data folder; PostgreSQL's disk is its server's")
@pytest.mark.process
@pytest.mark.browser
def test_a_full_disk_ends_the_answer_in_plain_words_and_it_recovers_by_itself(small_disk, env, fake, browser):
    env = {**env, "TABLETALK_DATA": str(small_disk)}
    fake.script([text("The first answer, kept.")], [rate(4000), text(LONG)], [text("Back to normal.")])
    served = Served(small_disk, env).start()
    try:
        client = served.client(timeout=15, follow_redirects=True)
        chat = served.empty_chat()
        token = csrf(client, chat)
        assert client.post(chat + "/ask", data={"_csrf_token": token, "text": "First"}).status_code == 200
        idle(client, chat)
        assert (small_disk / space.NAME).exists(), "the server keeps a reserve"

        filler = fill(small_disk, leave=160 * 1024)
        assert client.post(chat + "/ask", data={"_csrf_token": token, "text": "Write a lot"}).status_code == 200
        page = wait_for(lambda: space.ANSWER_CUT in soup(r := client.get(chat)).get_text(" ") and r, timeout=60)
        assert not (small_disk / space.NAME).exists(), "the reserve was spent on ending the answer"
        found = rows(small_disk)
        texts = [r for r in found if r["kind"] == "text"]
        assert texts[0]["text"] == "The first answer, kept." and texts[0]["done"]
        if len(texts) > 1:  # what of the long answer was committed stays, marked done
            assert LONG.startswith(texts[1]["text"]) and texts[1]["done"] and len(texts[1]["text"]) < len(LONG)
        errors = [r for r in found if r["kind"] == "error"]
        assert [e["text"] for e in errors] == [space.ANSWER_CUT]
        assert all(r["done"] for r in found if r["kind"] == "user"), "the question is handled, not left pending"
        assert 'data-running="0"' in page.text

        # Reads go on: the page, the list, the health check.
        assert client.get("/").status_code == 200 and client.get("/healthz").status_code == 200
        # An upload is refused in words (no JavaScript: the error page).
        refused = client.post(chat + "/ask", data={"_csrf_token": token, "text": "With a file"},
                              files={"file": ("notes.txt", b"some notes\n", "text/plain")})
        assert refused.status_code == 507
        assert "files cannot be uploaded now" in soup(refused).get_text(" ")
        assert not any(r["text"] == "With a file" for r in rows(small_disk))
        # With script the composer says it above itself and keeps what was written.
        context = served.context(browser)
        tab = context.new_page()
        tab.goto(chat)
        tab.fill("#composer textarea", "With a file")
        tab.set_input_files("#composer input[type=file]", files=[
            {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"some notes\n"}])
        tab.click("#composer button[value=queue]")
        tab.wait_for_selector("#composer-error")
        assert "files cannot be uploaded now" in tab.inner_text("#composer-error")
        assert tab.input_value("#composer textarea") == "With a file"
        if os.environ.get("SHOTS"):
            for name, size, scheme in (("desktop", (1280, 800), "light"), ("phone", (390, 844), "dark")):
                tab.set_viewport_size({"width": size[0], "height": size[1]})
                tab.emulate_media(color_scheme=scheme)
                tab.screenshot(path=f"{os.environ['SHOTS']}-full-disk-{name}-{scheme}.png", full_page=False)
        context.close()

        filler.unlink()  # room again: nothing to restart
        wait_for(lambda: (small_disk / space.NAME).exists(), timeout=20)
        assert client.post(chat + "/ask", data={"_csrf_token": token, "text": "Again"}).status_code == 200
        wait_for(lambda: any(r["text"] == "Back to normal." and r["done"] for r in rows(small_disk)), timeout=30)
        ok = client.post(chat + "/ask", data={"_csrf_token": token, "text": "With a file"},
                         files={"file": ("notes.txt", b"some notes\n", "text/plain")})
        assert ok.status_code == 200
    finally:
        served.stop()
    assert "Traceback" not in served.log.read_text()
