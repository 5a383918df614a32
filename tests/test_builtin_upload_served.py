"""A GGUF model uploaded to a running `tabletalk serve` (granian): a request cut off mid-body
leaves no model (its part kept for the page's script to go on from, or removed for a plain
form), anyone but the owner is refused before a byte of the body is read, two uploads of one
name at once end as one, and a disk without room refuses in words, before the upload and while
it runs (a small tmpfs of the test's own, as root)."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.builtin import brought, upload
from tests.conftest import COOKIE, csrf, signed_in, wait_for
from tests.fakes import gguf as made
from tests.test_builtin_upload import KEY, left

MODEL = made.gguf(made.model(), {"a": (1024, 1024, 8)})  # 32 MB


def raw_request(served, path: str, headers: dict[str, str], body: bytes, cookies: dict[str, str]) -> socket.socket:
    """A request whose body is sent in part: the socket, open, for the test to cut or read."""
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{served.port}",
             "Cookie: " + "; ".join(f"{k}={v}" for k, v in cookies.items())]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def status_of(sock: socket.socket) -> int:
    answer = sock.recv(4096)
    return int(answer.split(b" ", 2)[1])


def test_a_cut_upload_leaves_no_model_and_the_script_goes_on_from_its_part(served):
    with served.client(timeout=30) as c:
        token = csrf(c, "/model")
        # the page's script: cut halfway, its part kept
        sock = raw_request(served, f"/model/upload?file=Mine.gguf&key={KEY}", {
            "X-CSRFToken": token, "Content-Type": "application/octet-stream", "Content-Length": str(len(MODEL))},
            MODEL[:len(MODEL) // 2], served.cookies)
        wait_for(lambda: upload.have(served.data, "Mine.gguf", KEY) > 0, timeout=30)
        sock.close()
        part = upload.part_of(served.data, "Mine.gguf", KEY)
        wait_for(lambda: not_written_for(part, 1.0), timeout=30)
        assert brought.found(served.data) == [] and "Mine" not in c.get("/model").text
        have = c.get("/model/upload", params={"file": "Mine.gguf", "key": KEY, "size": len(MODEL)}).json()["have"]
        assert len(MODEL) // 4 < have <= len(MODEL) // 2
        assert have == part.stat().st_size
        r = c.post("/model/upload", params={"file": "Mine.gguf", "key": KEY}, content=MODEL[have:], headers={
            "X-CSRFToken": token, "Content-Type": "application/octet-stream",
            "Content-Range": f"bytes {have}-{len(MODEL) - 1}/{len(MODEL)}"})
        assert r.status_code == 200, r.text
        assert (brought.folder(served.data) / "Mine.gguf").read_bytes() == MODEL
        assert left(served.data) == ["Mine.gguf"]

        # the plain form: cut halfway, nothing kept (it cannot go on)
        boundary = "b0undary"
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"_csrf_token\"\r\n\r\n{token}\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"Plain.gguf\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + MODEL + f"\r\n--{boundary}--\r\n".encode()
        sock = raw_request(served, "/model/upload", {
            "Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(len(form))},
            form[:len(form) // 2], served.cookies)
        wait_for(lambda: any(n.startswith(".Plain.gguf.") for n in left(served.data)), timeout=30)
        sock.close()
        wait_for(lambda: left(served.data) == ["Mine.gguf"], timeout=30)
        assert c.get("/healthz").status_code == 200


def not_written_for(path: Path, seconds: float) -> bool:
    return time.time() - path.stat().st_mtime > seconds


def test_anyone_but_the_owner_is_refused_before_the_body_is_read(served):
    with served.client(timeout=30) as c:
        token = csrf(c, "/model")
    member = {COOKIE: signed_in(served.data, "bea", owner=False)}
    huge = {"Content-Type": "application/octet-stream", "Content-Length": str(20 * 10**9)}
    for cookies, headers in [(member, {"X-CSRFToken": token}), (served.cookies, {}),
                             (served.cookies, {"X-CSRFToken": "forged"}), ({}, {"X-CSRFToken": token})]:
        sock = raw_request(served, f"/model/upload?file=Mine.gguf&key={KEY}", headers | huge, b"GGUF", cookies)
        assert status_of(sock) in (303, 403), "answered with the body (20 GB) never sent"
        sock.close()
    assert left(served.data) == []


def test_two_uploads_of_one_name_at_once_end_as_one(served):
    with served.client(timeout=60) as c:
        token = csrf(c, "/model")
    started, go = threading.Event(), threading.Event()
    answers: dict[str, httpx.Response] = {}

    def slowly():
        yield MODEL[:2 * 1024 * 1024]
        started.set()
        go.wait(30)
        yield MODEL[2 * 1024 * 1024:]

    def send(key: str, body) -> None:
        with served.client(timeout=60) as c:
            answers[key] = c.post("/model/upload", params={"file": "Mine.gguf", "key": key}, content=body, headers={
                "X-CSRFToken": token, "Content-Type": "application/octet-stream",
                "Content-Range": f"bytes 0-{len(MODEL) - 1}/{len(MODEL)}"})

    first = threading.Thread(target=send, args=("firstfirst", slowly()))
    first.start()
    assert started.wait(30)
    wait_for(lambda: upload.have(served.data, "Mine.gguf", "firstfirst") > 0, timeout=30)
    send("secondsecond", MODEL)  # while the first is under way
    go.set()
    first.join(60)
    assert answers["firstfirst"].status_code == 200, answers["firstfirst"].text
    assert answers["secondsecond"].status_code == 409
    assert "being uploaded already" in answers["secondsecond"].json()["problem"]
    assert left(served.data) == ["Mine.gguf"]
    assert (brought.folder(served.data) / "Mine.gguf").read_bytes() == MODEL


@pytest.fixture
def small_models_disk(served):
    """data/models/ on a tmpfs of 100 MiB: 64 MB of it kept (upload.KEEP_LEAST), 41 MB of room."""
    folder = brought.folder(served.data)
    folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100m,mode=0755", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip()}): run the tests as root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_no_room_is_refused_before_the_upload_and_a_disk_that_fills_stops_it(served, small_models_disk):
    big = made.gguf(made.model(), {"a": (1024, 1024, 16)})  # 67 MB: more than the 41 MB of room
    with served.client(timeout=60) as c:
        token = csrf(c, "/model")
        headers = {"X-CSRFToken": token, "Content-Type": "application/octet-stream"}
        asked = c.get("/model/upload", params={"file": "Big.gguf", "key": KEY, "size": len(big)})
        assert asked.status_code == 507 and "There is no room for Big.gguf" in asked.json()["problem"]
        assert "it needs 67 MB, and 41 MB are free (besides 64 MB kept" in asked.json()["problem"], asked.json()
        r = c.post("/model/upload", params={"file": "Big.gguf", "key": KEY}, content=big,
                   headers=headers | {"Content-Range": f"bytes 0-{len(big) - 1}/{len(big)}"})
        assert r.status_code == 507 and "no room" in r.json()["problem"]
        assert left(served.data) == []
        r = c.post("/model/upload", data={"_csrf_token": token}, files={"file": ("Big.gguf", big)})
        assert r.status_code == 507 and "no room" in r.text
        assert left(served.data) == []

        # no length said: stopped once the room kept is reached
        chunks = (big[i:i + 1024 * 1024] for i in range(0, len(big), 1024 * 1024))
        r = c.post("/model/upload", params={"file": "Big.gguf", "key": KEY}, content=chunks, headers=headers)
        assert r.status_code == 507 and "The disk filled up while Big.gguf was uploading" in r.json()["problem"]
        assert left(served.data) == []

        # the disk filled by something else while it comes: the write fails (ENOSPC), said the same way
        started, go = threading.Event(), threading.Event()

        def filled_meanwhile():
            yield MODEL[:4 * 1024 * 1024]
            started.set()
            go.wait(30)
            yield from (MODEL[i:i + 1024 * 1024] for i in range(4 * 1024 * 1024, len(MODEL), 1024 * 1024))

        answers = []
        sending = threading.Thread(target=lambda: answers.append(c.post(
            "/model/upload", params={"file": "Mine.gguf", "key": KEY}, content=filled_meanwhile(),
            headers=headers | {"Content-Range": f"bytes 0-{len(MODEL) - 1}/{len(MODEL)}"})))
        sending.start()
        assert started.wait(30)
        filler = small_models_disk / "filler"
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 1024 * 1024)
            except OSError:
                pass
        go.set()
        sending.join(60)
        assert answers[0].status_code == 507
        assert "The disk filled up while Mine.gguf was uploading" in answers[0].json()["problem"]
        filler.unlink()
        assert left(served.data) == []
        assert c.get("/model").status_code == 200
