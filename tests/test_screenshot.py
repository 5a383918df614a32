"""The README's picture is made from the running app by docs/screenshot.py: running it here
keeps the script working, so `make screenshot` can always make the picture again."""
from __future__ import annotations

import importlib.util
import struct

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.process]


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_the_readmes_screenshot_is_made_from_the_running_app(tmp_path):
    spec = importlib.util.spec_from_file_location("screenshot", ROOT / "docs" / "screenshot.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    made = script.made(tmp_path / "shot.png")
    assert png_size(made) == (script.SIZE["width"], script.SIZE["height"])
    assert png_size(script.OUT) == png_size(made), "docs/screenshot.png is the script's picture"
    assert "(docs/screenshot.png)" in (ROOT / "README.md").read_text(), "the README shows it"
