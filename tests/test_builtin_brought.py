"""A GGUF model the owner brings (app/builtin/gguf.py, brought.py; the page of app/web/builtin.py):
its header read and checked before it is offered, the files under data/models/ on the
built-in model's page, the owner's choice of the one served, and its removal. Serving one
for real, and giving up on one that stops the runtime: test_builtin_serve.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from app import builtin
from app.builtin import brought, gguf
from tests.conftest import COOKIE, ROOT, app_client, csrf, signed_in, soup, store_of
from tests.fakes import gguf as made

SMOLLM2 = sorted((ROOT / ".cache/llama").glob(f"lib/python*/site-packages/{builtin.GGUF}"))


def test_a_model_files_header_says_what_it_is(tmp_path):
    path = made.write(tmp_path / "tiny.gguf", made.gguf(made.model(window=4096), {"a": (8, 4), "b": (16,)}))
    header = gguf.read(path)
    assert (header.version, header.architecture, header.name, header.window) == (3, "llama", "Tiny", 4096)
    assert header.quantization == "Q4_K_M" and header.parameters == 8 * 4 + 16
    assert header.size == path.stat().st_size


@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF in .cache/llama: `make llama`")
def test_smollm2s_header_is_read_as_llama_cpp_reads_it():
    header = gguf.read(SMOLLM2[0])
    assert (header.architecture, header.window, header.quantization) == ("llama", 8192, "Q4_1")
    assert header.parameters == 134_515_008  # llama.cpp's /v1/models says n_params 134515008
    assert header.size == SMOLLM2[0].stat().st_size


@pytest.mark.parametrize("data, says", [
    (b"just some text, not a model at all", "not a GGUF model file"),
    (b"GG", "not a GGUF model file"),
    (made.gguf(made.model(), version=1), "GGUF version 1, which llama.cpp does not read"),
    (made.gguf(made.model(), magic=b"GGML"), "not a GGUF model file"),
    (made.gguf({"general.name": "x"}), "names no architecture"),
    (made.gguf(made.model() | {"llama.context_length": 0}), "claims no usable window"),
    (made.gguf({k: v for k, v in made.model().items() if k != "llama.context_length"}), "claims no usable window"),
    (made.gguf(made.model(window=1 << 30)), "claims no usable window"),
    (made.gguf(made.model(), {"a": (1024, 1024)})[:4096], "it is cut off: its tensors need 4,194,"),
    (made.gguf(made.model())[:60], "it is cut off: its header runs past the file's end"),
])
def test_a_file_that_cannot_be_served_says_why(tmp_path, data, says):
    path = made.write(tmp_path / "bad.gguf", data)
    with pytest.raises(gguf.NotAModel, match=says):
        gguf.read(path)


def test_the_models_folder_is_read_and_each_file_checked(tmp_path):
    models = brought.folder(tmp_path)
    made.write(models / "Good-1.5B.Q4_K_M.gguf", made.gguf(made.model(window=32768)))
    made.write(models / "broken.gguf", b"nope")
    made.write(models / f"{builtin.NAME}.gguf", made.gguf(made.model()))
    made.write(models / "notes.txt", b"not a model")
    found = {m.file: m for m in brought.found(tmp_path)}
    assert sorted(found) == sorted([f"{builtin.NAME}.gguf", "Good-1.5B.Q4_K_M.gguf", "broken.gguf"])
    good = found["Good-1.5B.Q4_K_M.gguf"]
    assert good.problem == "" and good.name == "Good-1.5B.Q4_K_M" and good.window == brought.WINDOW_MAX
    assert "not a GGUF" in found["broken.gguf"].problem
    assert "name of the built-in model" in found[f"{builtin.NAME}.gguf"].problem
    assert brought.one(tmp_path, "../broken.gguf") is None and brought.one(tmp_path, "notes.txt") is None
    assert brought.one(tmp_path, "missing.gguf") is None
    assert brought.remove(tmp_path, "broken.gguf") and not (models / "broken.gguf").exists()
    assert not brought.remove(tmp_path, "broken.gguf")


# --- the page ---------------------------------------------------------------------------------


def installed(c) -> None:
    store_of(c).set_builtin(state="ready", serving="up")


def test_the_page_is_the_owners_and_offers_the_install_until_there_is_one(env, data):
    with app_client(data) as c:
        page = soup(c.get("/model"))
        assert page.select_one("#builtin") is not None and page.select_one("table.models") is None
        assert page.select_one("form#builtin-form")["action"] == "/model/builtin"
        c.cookies.set(COOKIE, signed_in(data, "bea", owner=False))
        assert c.get("/model").status_code == 403
        assert c.post("/model/use", data={"_csrf_token": csrf(c), "model": ""}).status_code == 403


def test_installed_it_lists_the_models_here_and_serves_the_one_chosen(env, data):
    made.write(brought.folder(data) / "Qwen-Tiny.gguf", made.gguf(made.model(window=2048, architecture="qwen2")))
    made.write(brought.folder(data) / "cut.gguf", made.gguf(made.model(), {"a": (1024, 1024)})[:4096])
    with app_client(data) as c:
        store = store_of(c)
        assert c.post("/model/use", data={"_csrf_token": csrf(c), "model": "Qwen-Tiny.gguf"},
                      follow_redirects=False).status_code == 409, "not installed: nothing serves it"
        installed(c)
        page = soup(c.get("/model"))
        rows = {r.select_one("th").get_text(" ", strip=True): r for r in page.select("table.models tbody tr")}
        assert set(rows) == {"SmolLM2-135M-Instruct (built in)", "Qwen-Tiny", "cut"}
        assert "Served" in rows["SmolLM2-135M-Instruct (built in)"].get_text()
        assert "2,048" in rows["Qwen-Tiny"].get_text() and "qwen2, Q4_K_M" in rows["Qwen-Tiny"].get_text()
        assert "cut off" in rows["cut"].get_text() and rows["cut"].select_one('input[name="model"][value="cut.gguf"]') is None

        r = c.post("/model/use", data={"_csrf_token": csrf(c), "model": "Qwen-Tiny.gguf"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/model?saved=used"
        assert store.builtin().model == "Qwen-Tiny.gguf"
        assert "Served" in soup(c.get("/model")).select("table.models tbody tr")[1].get_text()

        r = c.post("/model/use", data={"_csrf_token": csrf(c), "model": "cut.gguf"}, follow_redirects=False)
        assert r.status_code == 400 and "cut off" in soup(r).select_one('.model-page p.problem').get_text()
        r = c.post("/model/use", data={"_csrf_token": csrf(c), "model": "../tabletalk.db"}, follow_redirects=False)
        assert r.status_code == 400
        assert store.builtin().model == "Qwen-Tiny.gguf", "a refused choice changes nothing"


def test_removing_the_served_model_serves_smollm2_and_deletes_only_that_file(env, data):
    path = made.write(brought.folder(data) / "Mine.gguf", made.gguf(made.model()))
    with app_client(data) as c:
        store = store_of(c)
        installed(c)
        store.use_builtin_model("Mine.gguf")
        asked = soup(c.get("/model/remove", params={"model": "Mine.gguf"}))
        assert "SmolLM2 is served instead" in asked.select_one("section.confirm").get_text()
        assert c.get("/model/remove", params={"model": "../tabletalk.db"}).status_code == 404
        r = c.post("/model/remove", data={"_csrf_token": csrf(c), "model": "Mine.gguf"}, follow_redirects=False)
        assert r.status_code == 303 and not path.exists()
        assert store.builtin().model == ""
        assert (data / "tabletalk.db").exists()
        r = c.post("/model/remove", data={"_csrf_token": csrf(c), "model": "../tabletalk.db"}, follow_redirects=False)
        assert r.status_code == 404 and (data / "tabletalk.db").exists()


def test_the_page_says_why_a_brought_model_is_not_served(env, data):
    with app_client(data) as c:
        installed(c)
        store_of(c).set_builtin(error="Mine.gguf stopped llama.cpp's server 3 times before it answered")
        assert "3 times" in soup(c.get("/model")).select_one('#builtin .problem').get_text()


def test_two_choices_at_once_end_as_one(env, data):
    with app_client(data) as c:
        store = store_of(c)
        installed(c)
        assert store.use_builtin_model("A.gguf") and store.use_builtin_model("B.gguf")
        assert not store.use_builtin_model("B.gguf"), "chosen already: nothing changes"
        assert store.builtin().model == "B.gguf"


def test_a_path_elsewhere_is_never_a_model(tmp_path: Path):
    outside = made.write(tmp_path / "outside.gguf", made.gguf(made.model()))
    assert brought.one(tmp_path / "data", str(outside)) is None
    assert brought.one(tmp_path / "data", ".hidden.gguf") is None
