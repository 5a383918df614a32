"""The composer in Debian's Chromium, with JavaScript on and off: it grows with its text, its
model pick sticks, Send becomes Stop while a run goes, picked files show as chips, reasoning
shows live, and without script a half-typed message survives the refreshing answer."""
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.conftest import Served, csrf, idle, shared_fixtures, wait_for
from tests.fakes.openai_server import delay, rate, reasoning, text
from tests.test_files import png

pytestmark = pytest.mark.browser


# One served app for the file (docs/testing.md, "Shared servers"): each test is someone new on
# it (the model last picked is a person's), writing in conversations of its own; a model it
# adds to the fake is taken off the list after it.
served, fake = shared_fixtures(newcomer=True)


@pytest.fixture
def page(browser, served: Served):
    with served.watched_page(browser) as p:
        yield p


@pytest.fixture
def plain(browser, served: Served):
    """A page without JavaScript."""
    context = served.context(browser, java_script_enabled=False)
    yield context.new_page()
    context.close()


def new_conversation(p, served: Served) -> str:
    """An empty conversation, open in `p`; its URL."""
    p.goto(served.empty_chat())
    return p.url.split("#")[0]


def another_model(served: Served, fake) -> None:
    """other-model, listed as one that thinks (the default fake-model is not)."""
    fake.models["other-model"] = 4096
    fake.thinkers.add("other-model")
    with served.client() as c:
        assert c.post("/models/refresh", data={"_csrf_token": csrf(c)}).status_code < 400


@pytest.mark.parametrize("script", [True, False], ids=["js", "no-js"])
def test_the_composer_grows_with_its_text_up_to_a_third_of_the_screen_then_scrolls(browser, served, script):
    context = served.context(browser, java_script_enabled=script, viewport={"width": 1280, "height": 800})
    p = context.new_page()
    try:
        new_conversation(p, served)
        box = p.locator("#composer textarea")
        one = box.bounding_box()["height"]
        box.fill("one\ntwo\nthree\nfour\nfive")
        five = box.bounding_box()["height"]
        assert five > one + 40, "it grew with its lines"
        box.fill("\n".join(f"line {n}" for n in range(60)))
        full = box.bounding_box()["height"]
        assert five < full <= 800 / 3 + 2, "at most a third of the screen"
        assert box.evaluate("e => e.scrollHeight > e.clientHeight + 100"), "the rest scrolls"
        box.fill("")
        assert box.bounding_box()["height"] == pytest.approx(one, abs=2), "and shrinks again"
    finally:
        context.close()


def test_the_placeholder_tells_the_truth_with_and_without_javascript(page, plain, served):
    new_conversation(plain, served)
    assert "Enter" not in plain.locator("#composer textarea").get_attribute("placeholder")
    new_conversation(page, served)
    assert "Enter sends" in page.locator("#composer textarea").get_attribute("placeholder")


@pytest.fixture
def own_served(data, env) -> Iterator[Served]:
    """A served app of the test's own, for a test that needs what no other test did there."""
    s = Served(data, env).start()
    yield s
    s.stop()


# its own app: fake-model must be one never seen to think, which the app learns from any answer
# of it with reasoning (test_reasoning_shows_thinking_then_thought_for's)
def test_the_model_picked_sticks_across_a_reload_and_is_used_by_later_messages(browser, own_served, fake):
    with own_served.watched_page(browser) as page:
        model_picked_sticks(page, own_served, fake)


def model_picked_sticks(page, served: Served, fake) -> None:
    another_model(served, fake)
    fake.script("First.", "Second.", "Third.")
    chat = new_conversation(page, served)
    model = page.get_by_role("combobox", name="Model", exact=True)
    expect(model.locator("option").first).to_have_text("fake-model (default)")  # what answers, unpicked
    thinking = page.get_by_role("combobox", name="Thinking")
    expect(thinking).to_be_hidden()  # fake-model does not think: no Thinking picker, a mark instead
    expect(page.locator("#composer .no-thinking")).to_have_text("No thinking")
    model.select_option("other-model")
    expect(page.locator("#composer .no-thinking")).to_be_hidden()
    thinking.select_option("high")
    box = page.locator("#composer textarea")
    box.fill("first")
    box.press("Enter")
    expect(page.locator("article.text").last).to_have_text("First.", timeout=15_000)
    assert fake.streamed[0]["model"] == "other-model"
    assert model.input_value() == "other-model", "still picked after sending"
    expect(page.locator("#picked")).to_contain_text("Model: other-model")
    page.reload()
    model = page.get_by_role("combobox", name="Model", exact=True)
    assert model.input_value() == "other-model" and page.get_by_role("combobox", name="Thinking").input_value() == "high"
    expect(page.locator("#picked")).to_have_text("Model: other-modelThinking: high")
    page.locator("#composer textarea").fill("second")
    page.locator("#composer textarea").press("Enter")
    expect(page.locator("article.text").last).to_have_text("Second.", timeout=15_000)
    assert fake.streamed[1]["model"] == "other-model"
    # a pick without a message sticks too (app.js posts it); a model that does not think keeps
    # no thinking level
    model.select_option("")
    expect(page.locator("#picked")).to_have_text("")
    expect(page.get_by_role("combobox", name="Thinking")).to_be_hidden()
    page.reload()
    assert page.get_by_role("combobox", name="Model", exact=True).input_value() == ""
    expect(page.get_by_role("combobox", name="Thinking")).to_be_hidden()
    page.locator("#composer textarea").fill("third")
    page.locator("#composer textarea").press("Enter")
    expect(page.locator("article.text").last).to_have_text("Third.", timeout=15_000)
    assert fake.streamed[2]["model"] == "fake-model"


def test_without_javascript_the_model_sent_with_a_message_sticks(plain, served, fake):
    another_model(served, fake)
    fake.script("First.")
    new_conversation(plain, served)
    plain.get_by_role("combobox", name="Model", exact=True).select_option("other-model")
    plain.locator("#composer textarea").fill("first")
    plain.get_by_role("button", name="Send", exact=True).click()
    plain.wait_for_url("**/c/*#end")
    assert plain.get_by_role("combobox", name="Model", exact=True).input_value() == "other-model"
    wait_for(lambda: fake.streamed)
    assert fake.streamed[0]["model"] == "other-model"


def test_again_without_a_model_uses_the_conversations_pick(client, fake):
    from tests.conftest import new_chat
    fake.script("One.", "Two.")
    fake.models["m-one"] = 4096
    fake.models["m-two"] = 4096
    client.post("/models/refresh", data={"_csrf_token": csrf(client)})
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "hi", "model": "m-one"})
    # its run ended, not only its words shown: "again" while it is written is refused (409)
    assert "One." in idle(client, chat).text
    assert fake.streamed[0]["model"] == "m-one"
    assert client.post(chat + "/choice", data={"_csrf_token": csrf(client), "model": "m-three", "thinking": ""},
                       follow_redirects=False).status_code == 400, "only a model the list has"
    assert client.post(chat + "/choice", data={"_csrf_token": csrf(client), "model": "m-two", "thinking": "low"},
                       follow_redirects=False).status_code == 303
    assert client.post(chat + "/retry", data={"_csrf_token": csrf(client)}, follow_redirects=False).status_code == 303
    wait_for(lambda: len(fake.streamed) == 2)
    assert fake.streamed[1]["model"] == "m-two"
    assert client.post(chat + "/choice", data={"_csrf_token": csrf(client), "thinking": "loud"}).status_code == 400


@pytest.mark.parametrize("script", [True, False], ids=["js", "no-js"])
def test_send_becomes_stop_while_a_run_goes_and_stop_stops_it(browser, served, fake, script):
    fake.script([text("Starting"), delay(30), text(" never")])
    context = served.context(browser, java_script_enabled=script)
    p = context.new_page()
    try:
        new_conversation(p, served)
        send = p.get_by_role("button", name="Send", exact=True)
        stop = p.get_by_role("button", name="Stop")
        expect(stop).to_have_count(0)
        p.locator("#composer textarea").fill("go")
        send.click()
        expect(stop).to_be_visible(timeout=10_000)
        expect(send).to_have_count(0)
        # with text there, it can still be queued or sent now
        p.locator("#composer textarea").fill("and then")
        expect(p.get_by_role("button", name="Queue")).to_be_visible()
        expect(p.get_by_role("button", name="Send now")).to_be_visible()
        stop.click()
        if not script:  # the page after the stop may still see the run going: its frame says when it ended
            p.wait_for_load_state()
            if p.locator("iframe.watch-frame").count():
                link = p.frame_locator("iframe.watch-frame").get_by_role("link", name="Show the whole conversation")
                link.wait_for(timeout=15_000)
                with p.expect_navigation():
                    link.click()
        expect(p.locator("article.stop")).to_have_text("Stopped.", timeout=15_000)
        expect(p.get_by_role("button", name="Send", exact=True)).to_be_visible()
        expect(p.get_by_role("button", name="Stop")).to_have_count(0)
    finally:
        context.close()


def test_picked_files_show_as_chips_and_only_the_kept_ones_are_sent(page, fake, tmp_path, served):
    fake.script([text("Read them.")])
    (tmp_path / "dot.png").write_bytes(png())
    (tmp_path / "keep.txt").write_text("the kept words")
    (tmp_path / "drop.txt").write_text("the removed words")
    new_conversation(page, served)
    files = page.locator('#composer input[type="file"]')
    files.set_input_files([str(tmp_path / "dot.png"), str(tmp_path / "keep.txt")])
    files.set_input_files([str(tmp_path / "drop.txt")])  # a second pick adds to the first
    chips = page.locator("#composer .picked-files li")
    expect(chips).to_have_count(3)
    expect(chips.locator(".name")).to_have_text(["dot.png", "keep.txt", "drop.txt"])
    expect(chips.nth(1).locator(".size")).to_have_text("14 B")
    assert chips.first.locator("img").get_attribute("src").startswith("blob:")
    assert chips.first.locator("img").evaluate("i => i.complete && i.naturalWidth") == 1, "the thumbnail loads (CSP)"
    page.get_by_role("button", name="Remove drop.txt").click()
    expect(chips).to_have_count(2)
    assert files.evaluate("e => [...e.files].map(f => f.name)") == ["dot.png", "keep.txt"]
    page.locator("#composer textarea").fill("What do they say?")
    page.locator("#composer textarea").press("Enter")
    message = page.locator("article.user")
    message.locator("ul.attachments a.thumb img").wait_for()
    expect(chips).to_have_count(0)
    expect(message.locator(".file-chip .name")).to_have_text("keep.txt")
    page.wait_for_function("() => document.querySelector('article.user a.thumb img').naturalWidth === 1")
    wait_for(lambda: fake.streamed)
    sent = str(fake.streamed[-1]["messages"][-1]["content"])
    assert "the kept words" in sent and "the removed words" not in sent


def test_a_file_dropped_on_the_composer_is_added(page, served):
    new_conversation(page, served)
    page.evaluate("""() => {
        const dt = new DataTransfer();
        dt.items.add(new File(["dropped bytes"], "dropped.txt", {type: "text/plain"}));
        const box = document.querySelector("#composer .box");
        for (const type of ["dragenter", "dragover", "drop"])
            box.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""")
    expect(page.locator("#composer .picked-files .name")).to_have_text(["dropped.txt"])
    assert page.locator('#composer input[type="file"]').evaluate("e => e.files[0].name") == "dropped.txt"
    expect(page.locator("#composer.dropping")).to_have_count(0)


def test_a_file_pasted_into_the_message_is_added_and_text_still_pastes(page, served):
    new_conversation(page, served)
    page.evaluate("""() => {
        const dt = new DataTransfer();
        dt.items.add(new File(["pasted bytes"], "pasted.png", {type: "image/png"}));
        document.querySelector("#composer textarea").dispatchEvent(
            new ClipboardEvent("paste", {clipboardData: dt, bubbles: true, cancelable: true}));
    }""")
    expect(page.locator("#composer .picked-files .name")).to_have_text(["pasted.png"])
    page.get_by_role("button", name="Remove pasted.png").click()
    expect(page.locator("#composer .picked-files li")).to_have_count(0)
    assert page.locator('#composer input[type="file"]').evaluate("e => e.files.length") == 0


def test_reasoning_shows_thinking_then_thought_for(page, fake, served):
    fake.script([rate(12), reasoning("Weighing one thing against another. " * 6), text("So: this. " * 12)])
    new_conversation(page, served)
    page.locator("#composer textarea").fill("think")
    page.locator("#composer textarea").press("Enter")
    summary = page.locator("details.reasoning > summary")
    expect(summary).to_have_text("Thinking…", timeout=10_000)
    expect(page.locator("details.reasoning")).to_have_attribute("open", "")
    expect(page.locator("#status .typing")).to_have_text("Thinking…")
    body = page.locator("details.reasoning > .body")
    expect(body).to_contain_text("against another", timeout=10_000)
    expect(page.locator("#status .typing")).to_have_text("Answering…", timeout=20_000)
    expect(summary).to_have_text(re.compile(r"^Thought for \d+ s$"))
    expect(page.locator("details.reasoning")).not_to_have_attribute("open", "")
    page.locator("article.text .state.done").wait_for(state="attached", timeout=20_000)
    assert int(summary.inner_text().split()[2]) >= 2, "about as long as it reasoned (~3 s at this rate)"


def test_without_javascript_a_half_typed_message_survives_while_the_answer_streams(plain, fake, served):
    fake.script([rate(6), text("Slowly, word by word, the answer comes in while you type. " * 2)])
    new_conversation(plain, served)
    plain.locator("#composer textarea").fill("Tell me slowly")
    plain.get_by_role("button", name="Send", exact=True).click()
    plain.wait_for_url("**/c/*#end")
    plain.locator("#composer textarea").fill("half a thought")
    frame = plain.frame_locator("iframe.watch-frame")
    frame.locator("article.text .state.growing").wait_for(state="attached", timeout=10_000)
    frame.get_by_role("link", name="Show the whole conversation").wait_for(timeout=30_000)
    expect(frame.locator("article.text")).to_contain_text("while you type")
    assert plain.locator("#composer textarea").input_value() == "half a thought", "the page itself never reloaded"
    with plain.expect_navigation():
        frame.get_by_role("link", name="Show the whole conversation").click()
    expect(plain.locator("article.text")).to_contain_text("while you type")
    expect(plain.locator("iframe")).to_have_count(0)


@pytest.mark.parametrize("script", [True, False], ids=["js", "no-js"])
def test_a_long_conversation_opens_at_its_newest_message(browser, served, fake, script):
    fake.script("\n\n".join(f"Paragraph {n} of a long answer." for n in range(80)))
    context = served.context(browser, java_script_enabled=script, viewport={"width": 1280, "height": 800})
    p = context.new_page()
    try:
        chat = new_conversation(p, served)
        p.locator("#composer textarea").fill("long, please")
        p.get_by_role("button", name="Send", exact=True).click()
        wait_for(lambda: fake.streamed)
        with served.client() as c:
            wait_for(lambda: 'data-running="0"' in (t := c.get(chat).text) and "Paragraph 79" in t, timeout=15)
        p.goto("/")
        p.goto(chat + "#end" if not script else chat)  # a redirect's address, or the bare one
        p.locator("article.text .state.done").wait_for(state="attached")
        wait_for(lambda: p.evaluate("window.scrollY + innerHeight >= document.body.scrollHeight - 150"), timeout=5)
        assert p.evaluate("window.scrollY") > 1000
    finally:
        context.close()


def test_the_composer_renders_without_a_conversation_for_a_new_conversations_page():
    from bs4 import BeautifulSoup
    from app.providers.thinking import THINKING
    from app.web.templating import fragment
    html = fragment("_composer.html", ask_url="/c", choices=[], model="", thinking_levels=THINKING,
                    text_max=100, csrf="token")
    form = BeautifulSoup(html, "html.parser").select_one("form#composer")
    assert form["action"] == "/c" and form.get("data-choice-url") is None
    assert form.select_one(".stop") is None, "no Stop where nothing can run"
    assert form.select_one("button.now").has_attr("hidden")
    assert [o["value"] for o in form.select("select[name=thinking] option")] == ["", *THINKING]
    assert form.select_one('input[type="file"][name="file"][multiple]') is not None


def test_a_new_conversations_first_message_keeps_its_pick(client, fake, data):
    from tests.conftest import rows, start_chat
    fake.script("Hello.")
    fake.models["m-one"] = 4096
    client.post("/models/refresh", data={"_csrf_token": csrf(client)})
    chat = start_chat(client, "hi", model="m-one", thinking="low")
    assert rows(data, "SELECT model, thinking FROM conversations") == [{"model": "m-one", "thinking": "low"}]
    from tests.conftest import soup
    page = soup(client.get(chat))
    assert page.select_one("#picked").text == "Model: m-oneThinking: low"
    assert page.select_one('#composer select[name=model] option[selected]')["value"] == "m-one"
    assert page.select_one('#composer select[name=thinking] option[selected]')["value"] == "low"
