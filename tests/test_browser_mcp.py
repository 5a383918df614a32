"""A plugin's image and its progress on the live page, in Debian's Chromium, with the real
server-everything (npm) as the plugin."""
from __future__ import annotations

import pytest

from tests.conftest import SHOTS, light_and_dark
from tests.fakes.openai_server import text, tool_call

pytestmark = pytest.mark.browser




def test_an_image_from_a_plugin_appears_live_under_its_call(browser, served_with_plugin, fake):
    served = served_with_plugin
    fake.script([tool_call("everything_get-tiny-image", {})], [text("That is the MCP logo.")])
    context = served.context(browser, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served.empty_chat())
    page.locator("#composer textarea").fill("Show me the logo")
    page.locator("#composer textarea").press("Enter")
    image = page.locator("article.call p.file img")
    image.wait_for(timeout=15_000)
    page.locator("article.text .state.done").wait_for(state="attached", timeout=15_000)
    assert page.evaluate("document.querySelector('article.call p.file img').naturalWidth") == 20
    light_and_dark(page, f"{SHOTS}/mcp-image-desk-{{scheme}}.png")
    page.set_viewport_size({"width": 390, "height": 844})
    light_and_dark(page, f"{SHOTS}/mcp-image-phone-{{scheme}}.png")
    context.close()
    assert errors == []
