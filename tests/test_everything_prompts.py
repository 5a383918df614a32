"""A plugin's prompts and resources in a conversation (server-everything, npm, over
Streamable HTTP and SSE): the plain page linked from the composer lists them with the
skills; a prompt's arguments are filled in its small form and what the server makes of
them is sent as the person's message; ticked resources are attached to a message as files."""
from __future__ import annotations

import re

import pytest

from tests.conftest import csrf, idle, rows, soup, start_chat
from tests.fakes.everything import Everything
from tests.test_agents_tools import agent_url

pytestmark = pytest.mark.process  # tests/marks.py


@pytest.fixture(scope="module", params=["streamableHttp", "sse"])
def everything(request):
    with Everything(request.param) as server:
        yield server


@pytest.fixture
def chat_with_plugin(make_client, everything, fake):
    with make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "name": "ev", "address": everything.url})
        token = csrf(client)
        client.post("/skills", data={"_csrf_token": token, "name": "haiku", "description": "Answer in a haiku.",
                                     "body": "Three lines: 5, 7, 5 syllables."})
        fake.script("Hello.")
        chat = start_chat(client, "hi", token=token)
        idle(client, chat)
        yield client, chat


def test_the_composer_links_the_page_of_prompts_skills_and_resources(chat_with_plugin):
    client, chat = chat_with_plugin
    link = soup(client.get(chat)).select_one("#composer a.prompts-link")
    assert link["href"] == chat + "/prompts"
    page = soup(client.get(link["href"]))
    prompts = [c.text for c in page.select("details.prompt summary code")]
    assert {"/simple-prompt", "/args-prompt", "/haiku"} <= set(prompts), prompts
    args = next(d for d in page.select("details.prompt") if d.select_one("code").text == "/args-prompt")
    assert [i["name"] for i in args.select("input:not([type=hidden])")] == ["arg.city", "arg.state"]
    assert args.select_one('input[name="arg.city"]').has_attr("required")
    resources = [i["value"] for i in page.select('form.resources input[name="resource"]')]
    assert any(v.endswith("demo://resource/static/document/architecture.md") for v in resources), resources


def test_a_prompt_with_arguments_is_sent_as_the_message(chat_with_plugin, fake):
    client, chat = chat_with_plugin
    page = soup(client.get(chat + "/prompts"))
    form = next(d for d in page.select("details.prompt") if d.select_one("code").text == "/args-prompt").form
    fake.script("Mild.")
    r = client.post(form["action"], data={"_csrf_token": csrf(client, chat), "plugin": form.select_one(
        'input[name="plugin"]')["value"], "prompt": "args-prompt", "arg.city": "Paris", "arg.state": "IDF"},
        follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == chat + "#end"
    shown = idle(client, chat)
    assert "What's weather in Paris, IDF?" in shown.select("article.user")[-1].get_text(" ", strip=True)
    assert fake.streamed[-1]["messages"][-1]["content"] == "What's weather in Paris, IDF?"


def test_a_required_argument_left_empty_is_said_beside_the_form(chat_with_plugin):
    client, chat = chat_with_plugin
    page = soup(client.get(chat + "/prompts"))
    form = next(d for d in page.select("details.prompt") if d.select_one("code").text == "/args-prompt").form
    plugin = form.select_one('input[name="plugin"]')["value"]
    before = len(soup(client.get(chat)).select("article.user"))
    r = client.post(form["action"], data={"_csrf_token": csrf(client, chat), "plugin": plugin,
                                          "prompt": "args-prompt", "arg.city": " ", "arg.state": "IDF"})
    assert r.status_code == 400
    opened = soup(r).select_one("details.prompt[open]")
    assert opened.select_one("code").text == "/args-prompt"
    assert opened.select_one(".problem").text == "“city” is required."
    assert opened.select_one('input[name="arg.state"]')["value"] == "IDF", "as typed"
    assert len(soup(client.get(chat)).select("article.user")) == before, "nothing was sent"
    r = client.post(form["action"], data={"_csrf_token": csrf(client, chat), "plugin": plugin, "prompt": "nope"})
    assert r.status_code == 400 and "has no prompt “nope”" in r.text
    r = client.post(form["action"], data={"_csrf_token": csrf(client, chat), "plugin": "999", "prompt": "x"})
    assert r.status_code == 400


def test_resources_are_attached_to_a_message_as_files(chat_with_plugin, fake):
    client, chat = chat_with_plugin
    page = soup(client.get(chat + "/prompts"))
    chosen = [i["value"] for i in page.select('form.resources input[name="resource"]')
              if i["value"].endswith(("architecture.md", "features.md"))]
    assert len(chosen) == 2
    fake.script("Read them.")
    r = client.post(chat + "/resources", data={"_csrf_token": csrf(client, chat), "resource": chosen,
                                               "text": "Summarise these"}, follow_redirects=False)
    assert r.status_code == 303
    shown = idle(client, chat)
    message = shown.select("article.user")[-1]
    names = [a.get_text(strip=True) for a in message.select("a[href^='/files/']")]
    assert any("architecture.md" in n for n in names) and any("features.md" in n for n in names), names
    served = client.get(message.select_one("a[href^='/files/']")["href"])
    assert served.status_code == 200 and b"Everything Server" in served.content
    sent = fake.streamed[-1]["messages"][-1]
    told = sent["content"] if isinstance(sent["content"], str) else " ".join(
        p.get("text", "") for p in sent["content"])
    assert "Summarise these" in told and "Everything Server" in told, "the model reads the attached text"
    r = client.post(chat + "/resources", data={"_csrf_token": csrf(client, chat), "text": "nothing ticked"})
    assert r.status_code == 400 and "Tick at least one resource" in soup(r).select_one("form.resources .problem").text


def test_a_skill_is_sent_as_a_message_naming_it(chat_with_plugin, fake):
    client, chat = chat_with_plugin
    fake.script("Leaves fall.")
    r = client.post(chat + "/skills", data={"_csrf_token": csrf(client, chat), "skill": "haiku",
                                            "text": "about autumn"}, follow_redirects=False)
    assert r.status_code == 303
    assert "Use the skill “haiku”." in idle(client, chat).select("article.user")[-1].get_text(" ", strip=True)
    assert client.post(chat + "/skills", data={"_csrf_token": csrf(client, chat), "skill": "nope"}).status_code == 400


def test_the_composer_sends_resources_it_was_given_as_files(chat_with_plugin, fake):
    """What the "/" list puts into the composer with script: `resource` fields beside the
    message, read into files when the message is sent."""
    client, chat = chat_with_plugin
    page = soup(client.get(chat + "/prompts"))
    chosen = next(i["value"] for i in page.select('form.resources input[name="resource"]')
                  if i["value"].endswith("features.md"))
    fake.script("Noted.")
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": "Look at this", "when": "queue",
                                         "resource": chosen}, follow_redirects=False)
    assert r.status_code == 303
    message = idle(client, chat).select("article.user")[-1]
    assert "Look at this" in message.get_text(" ", strip=True)
    assert any("features.md" in a.get_text() for a in message.select("a[href^='/files/']"))
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": "And this", "when": "queue",
                                         "resource": chosen.split(" ")[0] + " demo://resource/nothing/here"})
    assert r.status_code == 502 and "Not sent:" in r.text


@pytest.fixture
def home_with_plugin(make_client, everything):
    """The owner's agent with the plugin and a skill, and no conversation yet."""
    with make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "name": "ev", "address": everything.url})
        client.post("/skills", data={"_csrf_token": csrf(client), "name": "haiku", "description": "Answer in a haiku.",
                                     "body": "Three lines: 5, 7, 5 syllables."})
        yield client, url.rsplit("/", 1)[1]


def conversations(data) -> int:
    return rows(data, "SELECT count(*) AS n FROM conversations")[0]["n"]


def begun(r) -> str:
    """The conversation a form of the new conversation's list began (303 to it)."""
    assert r.status_code == 303 and re.fullmatch(r"/c/\d+", r.headers["location"]), (r.status_code, r.text[:300])
    return r.headers["location"]


def test_a_new_conversation_offers_the_list_and_each_form_begins_the_conversation(home_with_plugin, fake, data):
    """The empty composer of a new conversation links the same list, for the agent picked
    there; looking writes nothing, and a prompt, a skill or resources sent from it make the
    conversation with that as its first message (as the composer's first message does)."""
    client, agent = home_with_plugin
    link = soup(client.get("/")).select_one("#composer a.prompts-link")
    assert (link["href"], link["data-prompts"]) == (f"/new/{agent}/prompts", f"/new/{agent}/prompts?part=1")
    page = soup(client.get(link["href"]))
    assert page.select_one(".crumbs a")["href"] == f"/?agent={agent}"
    assert {"/simple-prompt", "/args-prompt", "/haiku"} <= {c.text for c in page.select("details.prompt summary code")}
    assert soup(client.get(link["data-prompts"])).select_one("header") is None, "the list alone, for the popover"
    assert conversations(data) == 0, "nothing is written until something is sent"

    form = next(d for d in page.select("details.prompt") if d.select_one("code").text == "/args-prompt").form
    assert form["action"] == f"/new/{agent}/prompts"
    fields = {"_csrf_token": csrf(client), "plugin": form.select_one('input[name="plugin"]')["value"],
              "prompt": "args-prompt", "arg.state": "IDF"}
    r = client.post(form["action"], data={**fields, "arg.city": " "})
    assert r.status_code == 400 and soup(r).select_one("details.prompt[open] .problem").text == "“city” is required."
    assert conversations(data) == 0, "a refused prompt begins nothing"
    fake.script("Mild.", "Leaves fall.", "Read it.", "Noted.")
    chat = begun(client.post(form["action"], data={**fields, "arg.city": "Paris"}, follow_redirects=False))
    assert idle(client, chat).select_one("article.user .body").text == "What's weather in Paris, IDF?"
    assert fake.streamed[-1]["messages"][-1]["content"] == "What's weather in Paris, IDF?"

    chat = begun(client.post(f"/new/{agent}/skills", data={"_csrf_token": csrf(client), "skill": "haiku",
                                                           "text": "about autumn"}, follow_redirects=False))
    assert "Use the skill “haiku”." in idle(client, chat).select("article.user")[0].get_text(" ", strip=True)

    chosen = next(i["value"] for i in page.select('form.resources input[name="resource"]')
                  if i["value"].endswith("features.md"))
    assert page.select_one("form.resources")["action"] == f"/new/{agent}/resources"
    chat = begun(client.post(f"/new/{agent}/resources", data={"_csrf_token": csrf(client), "resource": chosen,
                                                              "text": "Summarise it"}, follow_redirects=False))
    message = idle(client, chat).select("article.user")[0]
    assert any("features.md" in a.get_text() for a in message.select("a[href^='/files/']"))

    # with script the list puts `resource` fields into the composer, which sends them with POST /c
    chat = begun(client.post("/c", data={"_csrf_token": csrf(client), "agent": agent, "text": "Look at this",
                                         "resource": chosen}, follow_redirects=False))
    message = idle(client, chat).select("article.user")[0]
    assert any("features.md" in a.get_text() for a in message.select("a[href^='/files/']"))
    assert conversations(data) == 4
