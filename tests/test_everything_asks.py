"""server-everything (npm, the MCP reference server) asking the person during a call, through
the app, over Streamable HTTP and SSE: its elicitation (`trigger-elicitation-request`) as a
form in the conversation, its sampling request (`trigger-sampling-request`) answered by the
agent's model once the person approves. What a person sees, and what the server is told."""
from __future__ import annotations

import json

import pytest

from tests.conftest import csrf, idle, soup, start_chat, wait_for
from tests.fakes.openai_server import text, tool_call

pytestmark = pytest.mark.process  # tests/marks.py

ELICIT = "127_0_0_1_trigger-elicitation-request"
SAMPLE = "127_0_0_1_trigger-sampling-request"



async def test_the_client_declares_form_elicitation_and_sampling_only(everything):
    """server-everything offers a tool for each capability a client declares."""
    from app.plugins.tools import list_tools
    from app.tables import plugin

    listing = await list_tools(plugin(1, everything.url, name="ev"), private_ok=True)
    names = {t.name for t in listing.tools}
    assert {"ev_trigger-elicitation-request", "ev_trigger-sampling-request"} <= names
    assert "ev_trigger-url-elicitation" not in names, "URL mode is not declared"


def waiting(client, chat, kind="ask"):
    """The page once a plugin's request waits for the person: (page, the item)."""
    def shown():
        page = soup(client.get(chat))
        it = page.select_one(f"article.{kind}")
        return it is not None and it.select_one(".state").text.startswith("waiting") and (page, it)
    return wait_for(shown, timeout=20)


def names(item) -> dict[str, str]:
    """The form's field names by the label the person reads."""
    out = {}
    for field in item.select(".ask-field"):
        legend = field.select_one("legend")
        label = (legend or field.select_one("label")).text.replace("(required)", "").strip()
        control = field.select_one("input, select")
        out[label] = control["name"]
    return out


def call_output(client, chat) -> str:
    page = wait_for(lambda: (c := soup(client.get(chat)).select_one("article.call")) and
                    c.select_one(".state").text in ("done", "failed") and c, timeout=20)
    return page.select_one("pre.output").text


def test_the_form_shows_every_field_the_server_asks_for(with_plugin, fake):
    client = with_plugin
    fake.script([tool_call(ELICIT, {})], "Thanks.")
    chat = start_chat(client, "ask me things")
    page, item = waiting(client, chat)
    assert item.select_one(".who").text.startswith("127_0_0_1 asks you")
    assert item.select_one(".ask-message").text == "Please provide inputs for the following fields:"
    fields = names(item)
    assert list(fields) == ["String", "Boolean", "String with default", "String with email format",
                            "String with uri format", "String with date format", "Integer",
                            "Number in range 1-1000", "Untitled Single Select Enum", "Untitled Multiple Select Enum",
                            "Titled Single Select Enum", "Titled Multiple Select Enum",
                            "Legacy Titled Single Select Enum"]
    by_label = {label: item.select_one(f'[name="{name}"]') for label, name in fields.items()}
    assert by_label["String"].has_attr("required") and by_label["String"]["form"] == "decide"
    assert by_label["String with email format"]["type"] == "email"
    assert by_label["String with uri format"]["type"] == "url"
    assert by_label["String with date format"]["type"] == "date"
    assert (by_label["Integer"]["type"], by_label["Integer"]["min"], by_label["Integer"]["max"],
            by_label["Integer"]["value"]) == ("number", "1", "100", "42")
    assert by_label["String with default"]["value"] == "It was a dark and stormy night."
    hero = by_label["Titled Single Select Enum"]
    assert [o.text for o in hero.select("option")] == ["—", "Superman", "Green Lantern", "Wonder Woman"], \
        "not required: it may be left unset"
    assert hero.select_one("option[selected]")["value"] == "hero-1", "the default is chosen"
    pets = by_label["Legacy Titled Single Select Enum"]
    assert [o.text for o in pets.select("option")] == ["—", "Cats", "Dogs", "Birds", "Fish", "Reptiles"]
    fish = [lab.text.strip() for lab in item.select("fieldset.choices")[1].select("label")]
    assert fish == ["Tuna", "Salmon", "Trout"]
    assert "choose 1 to 3" in item.select("fieldset.choices")[1].parent.select_one(".hint").text
    assert [b.text for b in item.select(".decide button")] == [
        "Accept and send to 127_0_0_1", "Decline", "Cancel"]
    assert page.select_one("noscript iframe") is None, "without script the form is on the page, not in a frame"


def test_accepting_sends_the_answer_to_the_server_and_the_model_reads_its_result(with_plugin, fake, data):
    client = with_plugin
    fake.script([tool_call(ELICIT, {})], "Thanks.")
    chat = start_chat(client, "ask me things")
    _, item = waiting(client, chat)
    fields = names(item)
    ask_id = item["id"][1:]
    r = client.post(f"{chat}/asks/{ask_id}", follow_redirects=False, data={
        "_csrf_token": csrf(client, chat), "action": "accept", fields["String"]: "Ada Lovelace",
        fields["Boolean"]: "on", fields["String with email format"]: "ada@example.org",
        fields["Integer"]: "7", fields["Titled Multiple Select Enum"]: ["fish-2", "fish-3"]})
    assert r.status_code == 303 and r.headers["location"] == f"{chat}#i{ask_id}", soup(r).select(".field-error")
    output = call_output(client, chat)
    assert "✅ User provided the requested information!" in output
    assert "- Name: Ada Lovelace" in output and "- Email: ada@example.org" in output
    assert "- Favorite Integer: 7" in output and "- Agreed to terms: true" in output
    raw = json.loads(output.split("Raw result: ", 1)[1])
    assert raw["content"]["titledMultipleSelectEnum"] == ["fish-2", "fish-3"]
    page = idle(client, chat)
    answered = page.select_one("article.ask")
    assert answered.select_one(".state").text == "answered" and answered.select_one("form, input") is None
    shown = dict(zip([d.text for d in answered.select("dt")], [d.text for d in answered.select("dd")]))
    assert shown["String"] == "Ada Lovelace" and shown["Boolean"] == "yes"
    assert shown["Titled Multiple Select Enum"] == "Salmon, Trout"
    told = [m for m in fake.streamed[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "Name: Ada Lovelace" in told


def test_a_refused_answer_shows_each_error_beside_its_field_and_keeps_what_was_typed(with_plugin, fake):
    client = with_plugin
    fake.script([tool_call(ELICIT, {})], "Thanks.")
    chat = start_chat(client, "ask me things")
    _, item = waiting(client, chat)
    fields, ask_id = names(item), item["id"][1:]
    r = client.post(f"{chat}/asks/{ask_id}", data={
        "_csrf_token": csrf(client, chat), "action": "accept", fields["String"]: "   ",
        fields["String with email format"]: "not an address", fields["Integer"]: "500",
        fields["String with date format"]: "31/12/2026", fields["Number in range 1-1000"]: "1e400",
        fields["String with uri format"]: "x" * 20_000,
        fields["Untitled Single Select Enum"]: "<script>alert(1)</script>"})
    assert r.status_code == 400
    page = soup(r)
    assert page.select_one("p.problem[role=alert]").text == "7 answers could not be sent: see them below."
    errors = {f.select_one("label, legend").text.replace("(required)", "").strip(): f.select_one(".field-error").text
              for f in page.select(".ask-field.invalid")}
    assert errors == {"String": "This is required.", "String with email format": "That is not an email address.",
                      "String with uri format": "That is too long (at most 10,000 characters).",
                      "String with date format": "That is not a date (2026-12-01).",
                      "Integer": "It must be at most 100.", "Number in range 1-1000": "That is not a number.",
                      "Untitled Single Select Enum": "Choose one of the listed options."}
    email = page.select_one(f'[name="{fields["String with email format"]}"]')
    assert email["value"] == "not an address" and email["form"] == f"ask-{ask_id}"
    assert email["aria-invalid"] == "true" and email["aria-describedby"].endswith("-e")
    assert page.select_one(f"form#ask-{ask_id} input[name=_csrf_token]") is not None
    assert "<script>" not in r.text.split("<main", 1)[1].split("Choose one")[0].replace("&lt;script&gt;", "")
    assert soup(client.get(chat)).select_one("article.ask .state").text == "waiting for your answer", \
        "nothing was sent: the server still waits"
    r = client.post(f"{chat}/asks/{ask_id}", data={"_csrf_token": csrf(client, chat), "action": "accept",
                                                    fields["String"]: "Grace"}, follow_redirects=False)
    assert r.status_code == 303
    assert "- Name: Grace" in call_output(client, chat)


@pytest.mark.parametrize("action,server_says,page_says", [
    ("decline", "❌ User declined to provide the requested information.", "You declined: 127_0_0_1 was told you will not answer."),
    ("cancel", "⚠️ User cancelled the elicitation dialog.", "You cancelled: 127_0_0_1 was told you did not answer."),
])
def test_decline_and_cancel(with_plugin, fake, action, server_says, page_says):
    client = with_plugin
    fake.script([tool_call(ELICIT, {})], "Alright.")
    chat = start_chat(client, "ask me things")
    _, item = waiting(client, chat)
    fields = names(item)
    r = client.post(f"{chat}/asks/{item['id'][1:]}", follow_redirects=False,
                    data={"_csrf_token": csrf(client, chat), "action": action, fields["String"]: "ignored"})
    assert r.status_code == 303
    assert server_says in call_output(client, chat)
    after = idle(client, chat).select_one("article.ask")
    assert after.select_one(".note").text == page_says
    r = client.post(f"{chat}/asks/{item['id'][1:]}", data={"_csrf_token": csrf(client, chat), "action": "accept"})
    assert r.status_code == 409, "an answer is given once"


def test_sampling_waits_for_approval_then_the_agents_model_answers(with_plugin, fake):
    client = with_plugin
    sampled = []

    def side(body):
        if body["messages"][0]["content"] == "You are a helpful test server.":
            sampled.append(body)
            return [text("Roses are red.")]
        return [text("A fitting title")]

    fake.plain_default = side
    fake.script([tool_call(SAMPLE, {"prompt": "a short poem", "maxTokens": 30})], "The plugin got its poem.")
    chat = start_chat(client, "sample something")
    page, item = waiting(client, chat, "sample")
    assert item.select_one(".who").text.startswith("127_0_0_1 asks for the model’s words")
    request = [(p.select_one(".label").text if p.select_one(".label") else "", p.text)
               for p in item.select(".sample-request p")]
    assert request == [("Its instructions", "Its instructionsYou are a helpful test server."),
                       ("Its message", "Its messageResource trigger-sampling-request context: a short poem"),
                       ("", "At most 30 tokens, by fake-model.")]
    assert not sampled, "nothing is sent to the model before the person approves"
    r = client.post(f"{chat}/asks/{item['id'][1:]}", follow_redirects=False,
                    data={"_csrf_token": csrf(client, chat), "action": "approve"})
    assert r.status_code == 303
    output = call_output(client, chat)
    result = json.loads(output.split("LLM sampling result: ", 1)[1])
    assert result["content"] == {"type": "text", "text": "Roses are red."} and result["model"] == "fake-model"
    assert sampled[0]["max_tokens"] == 30
    assert [m["role"] for m in sampled[0]["messages"]] == ["system", "user"]
    answered = idle(client, chat).select_one("article.sample")
    assert answered.select_one(".state").text == "answered"
    assert answered.select_one(".sample-answer .label").text == "fake-model answered"
    assert answered.select_one(".sample-answer .body").text == "Roses are red."


def test_declining_sampling_tells_the_server_no(with_plugin, fake):
    client = with_plugin
    fake.script([tool_call(SAMPLE, {"prompt": "a short poem"})], "It was declined.")
    chat = start_chat(client, "sample something")
    _, item = waiting(client, chat, "sample")
    client.post(f"{chat}/asks/{item['id'][1:]}", data={"_csrf_token": csrf(client, chat), "action": "decline"})
    output = call_output(client, chat)
    assert "The person declined the request for the model’s words" in output
    assert idle(client, chat).select_one("article.sample .note").text == "You declined: 127_0_0_1 was told no."
