"""The built-in model (app/builtin): the offer on the page, the owner's choice, the row every
page follows, the progress the installer reads from pip and the build, which runtime a
computer gets and how it is started, and the pins the Makefile shares with the app. The real
install, server and supervisor: test_builtin_serve.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app import builtin
from app.builtin import runtime
from app.builtin.install import Installer, InstallError, Progress, percent_in, readable
from tests.conftest import COOKIE, ROOT, app_client, csrf, signed_in, soup, store_of

NO_SERVER = {"AI_URL": "", "OLLAMA_HOST": "", "LOCAL_AI_URL": "", "AI_ACCOUNTS": ""}


@pytest.fixture
def bare(monkeypatch, data):
    """Settings with no model server set up or found."""
    monkeypatch.setenv("TABLETALK_DATA", str(data))
    for k, v in NO_SERVER.items():
        monkeypatch.setenv(k, v)
    return data


def test_the_home_page_offers_the_built_in_model_when_no_server_is_set_up(bare):
    with app_client(bare) as c:
        page = soup(c.get("/"))
        offer = page.select_one("#connect #builtin")
        assert offer is not None
        assert "tiny" in offer.get_text() and "trying Tabletalk" in offer.get_text()
        button = offer.select_one('button[form="builtin-form"]')
        assert button is not None and button.get_text() == "Use the built-in model"
        form = page.select_one("form#builtin-form")
        assert form["action"] == "/model/builtin" and form["method"] == "post"
        assert form.select_one('input[name="_csrf_token"]')["value"]


def test_a_conversation_page_offers_it_too(bare):
    with app_client(bare) as c:
        store = store_of(c)
        chat = store.new_conversation(None, person=store.owner())
        assert soup(c.get(f"/c/{chat.id}")).select_one('#builtin button[form="builtin-form"]') is not None


def test_no_offer_when_a_model_server_is_set_up(env, data):
    with app_client(data) as c:  # env: AI_URL is the fake model server
        page = soup(c.get("/"))
        assert page.select_one("#builtin") is None and page.select_one("#builtin-form") is None


def test_only_the_owner_may_choose_it(bare):
    with app_client(bare) as c:
        c.cookies.set(COOKIE, signed_in(bare, "bea", owner=False))
        page = soup(c.get("/"))
        offer = page.select_one("#builtin")
        assert offer is not None and offer.select_one("button") is None and page.select_one("#builtin-form") is None
        assert "owner" in offer.get_text()
        r = c.post("/model/builtin", data={"_csrf_token": csrf(c)}, follow_redirects=False)
        assert r.status_code == 403 and "owner of this Tabletalk only" in r.text
        assert store_of(c).builtin().state == ""


def test_choosing_it_writes_the_wish_and_the_page_shows_progress(bare):
    with app_client(bare) as c:
        store = store_of(c)
        before = store.rev()
        r = c.post("/model/builtin", data={"_csrf_token": csrf(c)}, headers={"referer": "http://testserver/"},
                   follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/"
        row = store.builtin()
        assert row.state == "wanted" and row.rev > before
        assert not store.want_builtin()  # a second choice changes nothing while it is on its way
        offer = soup(c.get("/")).select_one("#builtin")
        assert "Installing the built-in model" in offer.get_text() and offer.select_one("button") is None
        # without a CSRF token: refused like every form
        assert c.post("/model/builtin", data={}, follow_redirects=False).status_code == 403


def test_the_page_shows_each_state_of_the_row(bare):
    with app_client(bare) as c:
        store = store_of(c)
        store.want_builtin()
        store.set_builtin(state="installing", step=2, steps=5, what="Building llama.cpp for this computer",
                          percent=45, line="[ 45%] Building C object ggml.c.o")
        offer = soup(c.get("/")).select_one("#builtin")
        assert "Step 2 of 5: Building llama.cpp for this computer (45%)" in offer.get_text()
        assert offer.select_one("progress")["value"] == "45"
        assert "[ 45%] Building C object" in offer.select_one(".builtin-line").get_text()
        store.set_builtin(percent=-1)
        assert not soup(c.get("/")).select_one("#builtin progress").has_attr("value")  # not known: indeterminate
        store.set_builtin(state="failed", error="Building llama.cpp failed: no compiler")
        offer = soup(c.get("/")).select_one("#builtin")
        assert offer.select_one('[role="alert"]').get_text() == "Building llama.cpp failed: no compiler"
        assert offer.select_one("button").get_text() == "Try again"
        assert store.want_builtin()  # and trying again is taken


def test_a_stream_brings_the_row_live_and_to_a_page_that_reconnects(bare):
    from app.web.builtin import builtin_catch_up, builtin_changes

    with app_client(bare) as c:
        store = store_of(c)
        owner = store.owner()
        at = store.rev()
        assert builtin_catch_up(store, owner, at) == ""  # nothing changed since the page was made
        store.want_builtin()
        html = builtin_catch_up(store, owner, at)
        assert 'id="builtin"' in html and 'hx-swap-oob="true"' in html and "Installing" in html
        row = store.builtin_since(at, store.rev())
        assert row is not None and store.builtin_since(store.rev(), store.rev()) is None
        # the owner's fragment has the button (posting the page's form), anyone else's not
        store.set_builtin(state="failed", error="no")
        row = store.builtin()
        assert 'form="builtin-form"' in builtin_changes(store, row, owner)
        assert "button" not in builtin_changes(store, row, owner + 1)


def test_progress_is_read_from_the_build_and_from_pip():
    assert percent_in(b"[ 45%] Building C object vendor/llama.cpp/ggml/src/ggml.c.o") == 45
    assert percent_in(b"  [12/48] Building CXX object src/llama.cpp.o") == 25
    assert percent_in(b"Progress 5000000 of 10000000") == 50
    assert percent_in(b"[100%] Linking CXX shared library") == 100
    assert percent_in(b"Collecting numpy>=1.20.0") is None
    assert percent_in(b"[0/0] nothing") is None


def test_the_build_shows_as_a_person_reads_it():
    assert readable("  [34/193] /usr/bin/c++ -DGGML_BUILD -O3 -o src/CMakeFiles/llama.dir/llama.cpp.o "
                    "-c /tmp/pip-wheel-x/vendor/llama.cpp/src/llama.cpp") == "[34/193] compiling llama.cpp"
    assert readable("[35/193] : && /usr/bin/g++ -fPIC -O3 -shared -Wl,-soname,libggml.so.0 -o bin/libggml.so.0.25.3 "
                    "a.o b.o") == "[35/193] linking libggml.so.0.25.3"
    assert readable("  Collecting numpy>=1.20.0 ") == "Collecting numpy>=1.20.0"
    assert readable("Progress 21757952 of 92871040") == "21.8 of 92.9 MB"


@pytest.mark.process
def test_a_step_that_fails_says_which_and_why(tmp_path):
    paths = builtin.Paths(tmp_path)
    seen: list[Progress] = []
    installer = Installer(paths, seen.append)
    installer._at = Progress(1, 1, "Doing a thing")
    paths.root.mkdir(parents=True)
    with open(paths.install_log, "ab") as installer._log, pytest.raises(InstallError) as e:
        installer._command(["sh", "-c", "echo working; echo 'ERROR: no matching distribution' ; exit 3"])
    assert str(e.value).startswith("Doing a thing failed: ERROR: no matching distribution")
    assert str(paths.install_log) in str(e.value)
    assert "working" in paths.install_log.read_text()


def test_the_prebuilt_wheel_is_four_steps_and_compiles_nothing(tmp_path):
    paths = builtin.Paths(tmp_path)
    steps = [what for what, _ in Installer(paths, lambda p: None, runtime=runtime.XLLAMACPP).steps()]
    assert len(steps) == 4 and "xllamacpp" in steps[1]
    assert not any("Building" in what for what in steps)


def test_where_no_wheel_fits_llama_cpp_is_built_saying_why_and_how_long_unless_built_before(tmp_path):
    paths = builtin.Paths(tmp_path)
    steps = [what for what, _ in Installer(paths, lambda p: None, runtime=runtime.LLAMA_CPP_PYTHON).steps()]
    build = next(what for what in steps if "Building llama.cpp" in what)
    assert "about 10 minutes on 2 cores" in build and len(steps) == 5
    paths.wheels.mkdir(parents=True)
    (paths.wheels / f"llama_cpp_python-{runtime.LLAMA_VERSION}-py3-none-linux_x86_64.whl").write_bytes(b"")
    assert runtime.LLAMA_CPP_PYTHON.wheel_in(paths.wheels) is not None
    steps = [what for what, _ in Installer(paths, lambda p: None, runtime=runtime.LLAMA_CPP_PYTHON).steps()]
    assert not any("Building" in what for what in steps) and len(steps) == 4


def test_which_computers_a_wheel_fits():
    assert runtime.no_wheel_fits("linux", "x86_64", ("glibc", "2.36")) == ""
    assert runtime.no_wheel_fits("linux", "aarch64", ("glibc", "2.17")) == ""
    assert runtime.no_wheel_fits("darwin", "arm64", ("", ""), "14.1") == ""
    assert "musl" in runtime.no_wheel_fits("linux", "x86_64", ("musl", "1.2.4"))
    assert "2.17 or newer" in runtime.no_wheel_fits("linux", "x86_64", ("glibc", "2.12"))
    assert "riscv64" in runtime.no_wheel_fits("linux", "riscv64", ("glibc", "2.36"))
    assert "13 or newer" in runtime.no_wheel_fits("darwin", "x86_64", ("", ""), "12.7")
    assert runtime.no_wheel_fits("freebsd14", "amd64", ("", "")) != ""


def test_a_computer_without_libgomp_is_told_before_anything_is_installed(tmp_path):
    """The Linux wheel links GNU's OpenMP without carrying it (Debian's libgomp1)."""
    def lacking(name: str) -> None:
        return None

    words = runtime.missing_libraries(runtime.XLLAMACPP, "linux", find=lacking)
    assert "libgomp.so.1" in words and "apt-get install libgomp1" in words
    assert runtime.missing_libraries(runtime.XLLAMACPP, "linux", find=lambda name: "libgomp.so.1") == ""
    assert runtime.missing_libraries(runtime.XLLAMACPP, "darwin", find=lacking) == ""
    assert runtime.missing_libraries(runtime.LLAMA_CPP_PYTHON, "linux", find=lacking) == ""
    with pytest.raises(InstallError, match="libgomp1"):
        Installer(builtin.Paths(tmp_path), lambda p: None, runtime=runtime.XLLAMACPP, find=lacking).run()
    assert not builtin.Paths(tmp_path).root.exists()  # nothing begun


def test_a_disk_without_room_is_told_before_anything_is_installed(tmp_path):
    paths = builtin.Paths(tmp_path)
    with pytest.raises(InstallError, match=r"needs about 400 MB free .* and it has 12 MB"):
        Installer(paths, lambda p: None, runtime=runtime.XLLAMACPP, find=lambda name: "libgomp.so.1",
                  free=lambda path: 12_000_000).run()
    assert not paths.venv.exists() and not paths.install_log.exists()


def test_the_server_is_started_with_the_window_the_threads_and_loopback(tmp_path):
    python, gguf = tmp_path / "python", tmp_path / "m.gguf"
    argv = runtime.server_argv(runtime.XLLAMACPP, python, gguf, 8123, 1)
    assert argv[:2] == [str(python), "-c"] and "xllamacpp.Server(params)" in argv[2]
    assert argv[3:] == [str(gguf), builtin.NAME, "8123", str(builtin.WINDOW), "1", "chat"]
    assert 'params.hostnames = ["127.0.0.1"]' in argv[2] and 'params.cors_origins = ""' in argv[2]
    compiled = runtime.server_argv(runtime.LLAMA_CPP_PYTHON, python, gguf, 8123, 2)
    assert compiled[1:3] == ["-m", "llama_cpp.server"] and ["--n_threads", "2"] == compiled[-4:-2]
    assert compiled[compiled.index("--host") + 1] == "127.0.0.1"


def test_the_runtime_installed_is_recognised_from_the_venv(tmp_path):
    paths = builtin.Paths(tmp_path)
    assert runtime.installed(paths) is None
    for found in runtime.RUNTIMES:
        package = paths.venv / "lib/python3.11/site-packages" / found.package
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        assert runtime.installed(paths) is found
        (package / "__init__.py").unlink()


def test_the_makefile_pins_what_the_app_installs_and_compiles_nothing():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^XLLAMACPP_VERSION\s*:= {re.escape(runtime.XLLAMACPP_VERSION)}$", makefile, re.M)
    assert re.search(rf"^SMOLLM2_VERSION\s*:= {re.escape(builtin.SMOLLM2_VERSION)}$", makefile, re.M)
    assert "--only-binary=:all:" in makefile
    assert "CMAKE_ARGS" not in makefile and "llama-cpp-python" not in makefile and "build-essential" not in makefile
    assert re.search(r"^test: .*\bllama\b", makefile, re.M) and re.search(r"^llama: libgomp\b", makefile, re.M)


def test_the_address_of_a_server_that_is_gone_is_not_used(tmp_path: Path):
    paths = builtin.Paths(tmp_path)
    paths.root.mkdir(parents=True)
    assert builtin.url_of(tmp_path) == ""
    paths.address.write_text('{"url": "http://127.0.0.1:1/v1", "pid": 999999999}')
    assert builtin.url_of(tmp_path) == ""  # its process is gone (killed with its app)
    import os

    paths.address.write_text(f'{{"url": "http://127.0.0.1:1/v1", "pid": {os.getpid()}}}')
    assert builtin.url_of(tmp_path) == "http://127.0.0.1:1/v1"


def test_once_installed_it_counts_as_a_server_and_is_sent_no_tools(bare, monkeypatch):
    """A 135M model cannot use tools, and their definitions would fill most of its 2048-token
    window and its first token's time: the built-in model is sent none."""
    import os

    from app import config as configuration
    from app.providers.client import BUILTIN, Providers

    paths = builtin.Paths(bare)
    gguf = paths.venv / "lib/python3.11/site-packages" / builtin.GGUF
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"")
    paths.python.parent.mkdir(parents=True)
    paths.python.write_text("")
    providers = Providers(configuration.load())
    assert not providers.configured  # files without the stamp: an install that did not finish
    paths.stamp.write_text("")
    assert providers.configured
    paths.address.write_text(f'{{"url": "http://127.0.0.1:9/v1", "pid": {os.getpid()}}}')
    providers._local[BUILTIN] = {builtin.NAME}
    endpoint = providers.endpoint(f"local:{builtin.NAME}")
    assert endpoint.base_url == "http://127.0.0.1:9/v1" and endpoint.tools is False
    paths.address.unlink()
    from app.agent import ModelError

    with pytest.raises(ModelError, match="starting again"):
        providers.endpoint(f"local:{builtin.NAME}")
