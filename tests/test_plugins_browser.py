"""The plugins tab and the composer's "/" in Debian's Chromium, with the real
server-everything (npm) as the plugin: what a person sees, with script on."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.tables import plugin
from tests.conftest import SHOTS, Served, light_and_dark, shared_fixtures
from tests.fakes.everything import Everything

pytestmark = pytest.mark.browser


# One served app and one server-everything for the file (docs/testing.md, "Shared servers"):
# the owner's default agent has it as its plugin "everything"; each test writes in a
# conversation of its own, and a test that renames the plugin puts its name back.
@pytest.fixture(scope="module")
def served_settings() -> dict[str, str]:
    return {"CHAT_PRIVATE_PLUGINS": "1"}


@pytest.fixture(scope="module")
def module_everything(module_served: Served) -> Iterator[Everything]:
    with Everything("streamableHttp") as everything:
        with module_served.store() as store:
            agent = store.default_agent(store.owner())
            store.add_plugin(plugin(agent.id, everything.url, name="everything"))
            module_served.agent = agent.id
        yield everything


@pytest.fixture
def served_with_plugin(shared_served: Served, module_everything: Everything) -> Served:
    return shared_served


fake = shared_fixtures(newcomer=False)[1]


def shots(page, name: str) -> None:
    for width, height, size in ((1280, 800, "desk"), (390, 844, "phone")):
        page.set_viewport_size({"width": width, "height": height})
        light_and_dark(page, f"{SHOTS}/mcp-a-{name}-{size}-{{scheme}}.png")
    page.set_viewport_size({"width": 1280, "height": 800})


def test_slash_lists_prompts_and_a_prompt_is_sent_from_its_form(browser, served_with_plugin, fake):
    served = served_with_plugin
    fake.script("It is mild in Paris.")
    with served.watched_page(browser, viewport={"width": 1280, "height": 800}) as page:
        page.goto(served.empty_chat())
        box = page.locator("#composer textarea")
        box.click()
        page.keyboard.type("/")
        popover = page.locator(".prompt-popover")
        popover.locator("summary code", has_text="/args-prompt").wait_for(timeout=15_000)
        names = popover.locator("details.prompt:not([hidden]) summary code").all_text_contents()
        assert {"/simple-prompt", "/args-prompt", "/resource-prompt"} <= set(names), names
        assert popover.locator("form.resources input[name=resource]").count() >= 2, "resources to attach"
        shots(page, "slash")
        page.keyboard.type("args")
        assert popover.locator("details.prompt:not([hidden]) summary code").all_text_contents() == ["/args-prompt"]
        page.keyboard.press("Enter")
        city = popover.locator('input[name="arg.city"]')
        assert city.evaluate("el => el === document.activeElement"), "Enter opens its form at the first field"
        city.fill("Paris")
        popover.locator('input[name="arg.state"]').fill("IDF")
        shots(page, "slash-form")
        popover.locator("details.prompt[open] button[type=submit]").click()
        page.locator("article.user", has_text="What's weather in Paris, IDF?").wait_for(timeout=15_000)
        page.locator("article.text", has_text="It is mild in Paris.").wait_for(timeout=15_000)
        assert page.locator(".prompt-popover").count() == 0
        box = page.locator("#composer textarea")
        box.click()
        page.keyboard.type("/")
        page.locator(".prompt-popover").wait_for()
        page.keyboard.press("Escape")
        assert page.locator(".prompt-popover").count() == 0, "Escape closes it"


def test_a_resource_picked_with_slash_is_attached_to_the_message(browser, served_with_plugin, fake):
    served = served_with_plugin
    fake.script("I read it.")
    with served.watched_page(browser, viewport={"width": 1280, "height": 800}) as page:
        page.goto(served.empty_chat())
        page.locator("#composer textarea").click()
        page.keyboard.type("/")
        popover = page.locator(".prompt-popover")
        popover.locator("input[name=resource][data-name='features.md']").check(timeout=15_000)
        popover.locator("form.resources button[type=submit]").click()
        chip = page.locator("#composer ul.picked-resources li", has_text="features.md")
        chip.wait_for()
        assert page.locator("#composer textarea").input_value() == "", "the / is gone"
        page.locator("#composer textarea").fill("What does this say?")
        shots(page, "resource-chip")
        page.locator("#composer textarea").press("Enter")
        message = page.locator("article.user", has_text="What does this say?")
        message.wait_for(timeout=15_000)
        assert message.locator("a[href^='/files/']", has_text="features.md").count() == 1
        page.locator("article.text", has_text="I read it.").wait_for(timeout=15_000)
        assert page.locator("#composer ul.picked-resources").count() == 0, "sent: the chips are gone"


def test_the_plugins_tab_as_it_looks(browser, served_with_plugin):
    served = served_with_plugin
    with served.watched_page(browser, viewport={"width": 1280, "height": 800}) as page:
        page.goto(f"/agents/{served.agent}?tab=plugins")
        page.locator("li.plugin details.plugin-tools summary").click()
        text = page.locator("li.plugin").inner_text()
        assert "over Streamable HTTP" in text and "(read " in text
        assert "not offered: it runs only as an MCP task" in text
        page.evaluate("window.scrollTo(0, 0)")
        shots(page, "plugins-tab")
        page.locator("li.plugin details.plugin-edit summary").click()
        page.locator("li.plugin details.plugin-edit summary").scroll_into_view_if_needed()
        shots(page, "plugins-edit")


def test_without_script_a_bad_name_is_said_beside_the_field_and_a_rename_works(browser, served_with_plugin):
    served = served_with_plugin
    # console=False: the refusal is a 400 page, which Chromium logs as a failed load
    with served.watched_page(browser, console=False, viewport={"width": 1280, "height": 800},
                             java_script_enabled=False) as page:
        page.goto(f"/agents/{served.agent}?tab=plugins")
        edit = page.locator("li.plugin details.plugin-edit")
        edit.locator("summary").click()
        edit.locator('input[name="name"]').fill("<b>two words</b>")
        edit.locator('button[value="save"]').click()
        note = page.locator("li.plugin details.plugin-edit[open] #problem-name")
        assert "letters, digits, - and _ only" in note.inner_text()
        assert page.locator("li.plugin strong").inner_text() == "everything", "nothing changed"
        note.scroll_into_view_if_needed()
        page.screenshot(path=f"{SHOTS}/mcp-a-plugins-refused-nojs-desk-light.png")
        page.locator('li.plugin details.plugin-edit input[name="name"]').fill("ev")
        page.locator('li.plugin details.plugin-edit button[value="save"]').click()
        assert page.locator(".saved").inner_text().strip() == "Plugin saved."
        assert page.locator("li.plugin strong").inner_text() == "ev"
        # its name put back, as the next test finds it
        page.goto(f"/agents/{served.agent}?tab=plugins")
        page.locator("li.plugin details.plugin-edit summary").click()
        page.locator('li.plugin details.plugin-edit input[name="name"]').fill("everything")
        page.locator('li.plugin details.plugin-edit button[value="save"]').click()
        assert page.locator("li.plugin strong").inner_text() == "everything"


@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["desk", "phone"])
def test_slash_on_a_new_conversations_empty_composer_begins_it_with_a_prompt(browser, served_with_plugin, fake,
                                                                             size):
    """On "/" nothing is written yet: the list is the agent's (the one picked there), and the
    prompt sent from it makes the conversation with the prompt's words as its first message."""
    served = served_with_plugin
    fake.script("It is mild in Paris.")
    width, height = size
    with served.watched_page(browser, viewport={"width": width, "height": height}) as page:
        page.goto("/")
        page.locator("#composer textarea").click()
        page.keyboard.type("/")
        popover = page.locator(".prompt-popover")
        popover.locator("summary code", has_text="/args-prompt").wait_for(timeout=15_000)
        names = popover.locator("details.prompt:not([hidden]) summary code").all_text_contents()
        assert {"/simple-prompt", "/args-prompt", "/resource-prompt"} <= set(names), names
        page.keyboard.type("args")
        page.keyboard.press("Enter")
        popover.locator('input[name="arg.city"]').fill("Paris")
        popover.locator('input[name="arg.state"]').fill("IDF")
        light_and_dark(page, f"{SHOTS}/tidy-new-slash-{'desk' if width > 800 else 'phone'}-{{scheme}}.png")
        popover.locator("details.prompt[open] button[type=submit]").click()
        page.wait_for_url("**/c/*")
        page.locator("article.user", has_text="What's weather in Paris, IDF?").wait_for(timeout=15_000)
        page.locator("article.text", has_text="It is mild in Paris.").wait_for(timeout=15_000)
        assert page.locator("#items > article.user").count() == 1, "the prompt is the first message"


def test_command_plugins_on_the_tabs_as_a_person_adds_them(browser, data, env, tmp_path):
    """server-filesystem (npm) and a raw server of ours added with the stdio form: named after
    the package, their left-out tools named with why, destructive tools marked and waiting for
    approval, and the warning when the tools take more than half the window."""
    import sys
    from pathlib import Path

    from tests.conftest import Served
    from tests.test_plugins_npm_servers import FILESYSTEM

    if not FILESYSTEM.exists():
        pytest.skip("make npm-tools installs server-filesystem")
    raw = Path(__file__).resolve().parent / "fakes" / "raw_stdio_server.py"
    served = Served(data, {**env, "TABLETALK_STDIO_PLUGINS": "1", "TABLETALK_CONTEXT_WINDOW": "4096"}).start()
    try:
        with served.watched_page(browser, viewport={"width": 1280, "height": 800}) as page:
            page.goto("/agents")
            page.locator(".agent-list a").first.click()
            page.goto(page.url.split("?")[0] + "?tab=plugins")
            agent = page.url.split("?")[0]
            for program, args in ((str(FILESYSTEM), str(tmp_path)), (sys.executable, str(raw))):
                form = page.locator("form", has=page.locator('input[name="kind"][value="stdio"]'))
                form.locator('input[name="command"]').fill(program)
                form.locator('textarea[name="args"]').fill(args)
                form.locator("button[type=submit]").click()
                page.wait_for_load_state()
            names = page.locator("li.plugin strong").all_text_contents()
            assert names == ["filesystem", "raw_stdio_server"], names
            assert "more than half" in page.locator("p.problem").first.text_content()
            raw_item = page.locator("li.plugin", has_text="raw_stdio_server")
            raw_item.locator("details.plugin-tools summary").click()
            assert "not offered: it has no inputSchema" in raw_item.text_content()
            shots(page, "stdio-plugins")
            page.goto(agent + "?tab=tools")
            row = page.locator("table.tools tr", has=page.locator("code", has_text="filesystem_write_file"))
            assert "may delete or overwrite" in row.text_content()
            assert row.locator('input[name="approve"]').is_checked()
            row.scroll_into_view_if_needed()
            shots(page, "stdio-tools")
    finally:
        served.stop()
