"""`tabletalk backup` and `tabletalk restore`: a consistent copy taken while serving, and back, checked."""
import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from app.admin import backup
from app.store import Store, db as dbm, schema
from app.store.blobs import Disk
from app.config import load
from app.tables import asked, item
from tests.conftest import ROOT, Served, sqlite_only, wait_for, whole_texts
from tests.fakes.openai_server import hold, rate, text


def install(data: Path) -> tuple[Store, int, int]:
    """A data folder with a conversation, an answer and two attached files."""
    db = dbm.connect(data / "tabletalk.db")
    schema.migrate(db)
    store = Store(db)
    chat = store.new_conversation(store.default_agent().id).id
    a = store.add_file("notes.txt", b"first file\n")
    b = store.add_file("pic.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)
    user = store.ask(chat, "Look at these", files=(a, b))
    store.add(item("text", chat, "Both seen.", turn=user.id, done=True))
    (data / "secret.key").write_text("k" * 64)
    return store, chat, b


def settings(monkeypatch, data: Path):
    monkeypatch.setenv("TABLETALK_DATA", str(data))
    return load()


def test_backup_then_restore_gives_the_same_rows_and_files(tmp_path, monkeypatch):
    store, chat, pic = install(tmp_path / "data")
    summary = backup.backup(settings(monkeypatch, tmp_path / "data"), tmp_path / "b1")
    assert summary.files == 2 and summary.counts["items"] == 2 and summary.counts["conversations"] == 1
    manifest = json.loads((tmp_path / "b1" / "manifest.json").read_text())
    assert manifest["format"] == "tabletalk-backup" and len(manifest["files"]) == 2
    assert not list(tmp_path.glob(".b1.partial-*")), "the work folder became the backup"
    one = sqlite3.connect(tmp_path / "b1" / "tabletalk.db")
    assert one.execute("PRAGMA journal_mode").fetchone()[0] == "delete", "a backup is one file"
    one.close()

    restored = settings(monkeypatch, tmp_path / "again")
    done = backup.restore(restored, tmp_path / "b1")
    assert done.counts == summary.counts and done.files == 2
    again = Store(dbm.connect(restored.database))
    assert [i.text for i in again.items(chat)] == ["Look at these", "Both seen."]
    row, data = again.file_bytes(pic)
    assert row["name"] == "pic.png" and data == store.file_bytes(pic)[1]
    assert (restored.data / "secret.key").read_text() == "k" * 64


def test_backup_refuses_a_folder_that_is_not_empty_and_restore_a_data_folder_that_is_not(tmp_path, monkeypatch):
    install(tmp_path / "data")
    config = settings(monkeypatch, tmp_path / "data")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(backup.BackupError, match="is not empty"):
        backup.backup(config, tmp_path / "full")
    with pytest.raises(backup.BackupError, match="inside the data folder"):
        backup.backup(config, tmp_path / "data" / "b")
    backup.backup(config, tmp_path / "b")
    with pytest.raises(backup.BackupError, match="data folder .* is not empty"):
        backup.restore(config, tmp_path / "b")
    with pytest.raises(backup.BackupError, match="not a Tabletalk backup"):
        backup.restore(settings(monkeypatch, tmp_path / "new"), tmp_path / "full")
    with pytest.raises(backup.BackupError, match="no database to back up"):
        backup.backup(settings(monkeypatch, tmp_path / "nothing"), tmp_path / "b2")


def test_restore_checks_the_backup_and_leaves_the_folder_empty_when_it_is_damaged(tmp_path, monkeypatch):
    install(tmp_path / "data")
    backup.backup(settings(monkeypatch, tmp_path / "data"), tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    sha = sorted(manifest["files"])[0]
    Disk(tmp_path / "b" / "files").path(sha).write_bytes(b"not what it was")
    target = settings(monkeypatch, tmp_path / "new")
    with pytest.raises(backup.BackupError, match=f"file {sha} does not hold the bytes"):
        backup.restore(target, tmp_path / "b")
    assert not target.data.exists() or not any(target.data.iterdir())
    Disk(tmp_path / "b" / "files").path(sha).unlink()
    with pytest.raises(backup.BackupError, match=f"file {sha} is missing"):
        backup.restore(target, tmp_path / "b")
    manifest["counts"]["items"] += 1
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(backup.BackupError, match="not those the backup counted"):
        backup.restore(target, tmp_path / "b")


def test_a_backup_of_a_damaged_file_is_refused_and_leaves_no_backup(tmp_path, monkeypatch):
    """Each file is hashed as it is copied: bytes that are not their name's stop the backup,
    and neither the copy nor the backup folder is left behind."""
    install(tmp_path / "data")
    config = settings(monkeypatch, tmp_path / "data")
    held = sorted(p for p in config.files.rglob("*") if p.is_file())[0]
    held.write_bytes(b"not what it was")
    with pytest.raises(backup.BackupError, match=f"{held} does not hold the bytes its name says"):
        backup.backup(config, tmp_path / "b")
    assert not (tmp_path / "b").exists() and not list(tmp_path.glob(".b.partial-*"))


def test_a_backup_waits_for_no_writer_and_holds_none_up(tmp_path, monkeypatch):
    """The snapshot is one read transaction: a write open in another connection neither
    blocks it nor gets into it, and a writer commits while the backup is being taken."""
    store, chat, _ = install(tmp_path / "data")
    config = settings(monkeypatch, tmp_path / "data")
    other = dbm.connect(config.database)
    other.conn.execute("BEGIN IMMEDIATE")
    Store(other).add(item("text", chat, "uncommitted", turn=chat, done=True))
    backup.backup(config, tmp_path / "b")  # would wait busy_timeout (10 s) and fail if it needed the lock
    other.conn.execute("COMMIT")
    copy = sqlite3.connect(tmp_path / "b" / "tabletalk.db")
    assert [r[0] for r in copy.execute("SELECT text FROM items ORDER BY id")] == ["Look at these", "Both seen."]


def test_a_file_deleted_during_the_backup_is_left_out_with_its_rows(tmp_path, monkeypatch):
    """forget_files removes bytes with their rows: a snapshot that still names them is taken again."""
    store, chat, _ = install(tmp_path / "data")
    config = settings(monkeypatch, tmp_path / "data")
    real = backup.backup_sql.snapshot
    taken = []

    def snapshot_then_delete(db, target):
        real(db, target)
        if not taken:
            store.delete_conversation(chat)  # after the snapshot, before its files are copied
        taken.append(target)

    monkeypatch.setattr(backup.backup_sql, "snapshot", snapshot_then_delete)
    summary = backup.backup(config, tmp_path / "b")
    assert len(taken) == 2 and summary.files == 0 and summary.counts["conversations"] == 0
    backup.restore(settings(monkeypatch, tmp_path / "new"), tmp_path / "b")


ANSWER = " ".join(f"w{i}" for i in range(160))


@sqlite_only("`tabletalk backup` copies SQLite's file and refuses on PostgreSQL (pg_dump does it there)")
@pytest.mark.process
def test_a_running_server_is_backed_up_while_it_streams_and_the_restore_serves_it(data, env, fake, tmp_path):
    # The answer is held after its first half until the backup has ended: mid-stream while it
    # runs, however long the backup's own start takes on a loaded machine (at 40 tokens a
    # second, 160 of them were all written once before the backup's snapshot was taken).
    backed_up = threading.Event()
    first, rest = ANSWER[:ANSWER.index(" w80 ") + 1], ANSWER[ANSWER.index(" w80 ") + 1:]
    fake.script([rate(40), text(first), hold(backed_up), text(rest)], [rate(400), text(ANSWER)])
    served = Served(data, env).start()
    try:
        db = dbm.connect(data / "tabletalk.db")
        store = Store(db)
        chat = store.new_conversation(store.default_agent().id, person=store.owner()).id
        attached = store.add_file("a.txt", b"attached bytes\n", person=store.owner())
        store.add(asked(chat, "Say the words", files=[attached]))

        def growing():
            return next(iter(whole_texts(db)), None)

        wait_for(lambda: (r := growing()) and len(r["text"]) > 40, timeout=20)
        # While the backup runs the server keeps answering: every read of /healthz is answered
        # and the answer keeps growing.
        answered, stop = [], threading.Event()

        def poll():
            with httpx.Client(base_url=served.url, timeout=5) as c:
                while not stop.is_set():
                    answered.append(c.get("/healthz").status_code)

        poller = threading.Thread(target=poll)
        poller.start()
        before = len(growing()["text"])
        out = subprocess.run([sys.executable, "-m", "app.admin.cli", "backup", str(tmp_path / "bk")], cwd=ROOT,
                             env=served.env, capture_output=True, text=True, timeout=60)
        backed_up.set()
        wait_for(lambda: len(growing()["text"]) > before + 20, timeout=20)
        stop.set()
        poller.join()
        assert out.returncode == 0, out.stderr
        assert "backed up" in out.stdout and "1 files" in out.stdout
        assert answered and set(answered) == {200}
        snap = sqlite3.connect(f"file:{tmp_path / 'bk' / 'tabletalk.db'}?mode=ro", uri=True)
        # the growing text whole: its item's text (empty while it grows), then its chunks (m035), in order
        cut = snap.execute("SELECT text || coalesce((SELECT group_concat(c.text, '') FROM (SELECT text FROM text_chunks "
                           "WHERE item = items.id ORDER BY n) c), ''), done FROM items WHERE kind = 'text'").fetchone()
        snap.close()
        assert cut[1] == 0 and 0 < len(cut[0]) < len(ANSWER), "the snapshot caught the answer mid-stream"
        db.conn.close()
    finally:
        backed_up.set()
        served.stop()

    new = tmp_path / "restored"
    out = subprocess.run([sys.executable, "-m", "app.admin.cli", "restore", str(tmp_path / "bk")], cwd=ROOT,
                         env={**served.env, "TABLETALK_DATA": str(new)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "restored and checked" in out.stdout
    again = Served(new, {**env, "TABLETALK_DATA": str(new)}).start()
    try:
        page = wait_for(lambda: (r := again.client().get(f"/c/{chat}")).status_code == 200
                        and "w159" in r.text and r, timeout=30)
        assert "Say the words" in page.text and "a.txt" in page.text
        rows = sqlite3.connect(new / "tabletalk.db").execute(
            "SELECT text, done FROM items WHERE kind = 'text'").fetchall()
        assert rows == [(ANSWER, 1)], "the restored server finished the answer the backup caught mid-stream"
        assert again.client().get(f"/files/{attached}").content == b"attached bytes\n"
    finally:
        again.stop()
