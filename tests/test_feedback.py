"""Every form that saves says so beside itself, every refusal is said beside the field with
the form kept as typed, and an error page keeps the header and leads back (issue 13)."""
from __future__ import annotations

import pytest

from tests.conftest import csrf, rows, soup, store_of

LONG = "n" * 81  # one past NAME_MAX


def post(client, path: str, page: str, **fields):
    return client.post(path, data={"_csrf_token": csrf(client, page), **fields}, follow_redirects=False)


def saved(client, location: str, where: str) -> str:
    """The status text beside the form `where` on the page a save led to."""
    note = soup(client.get(location)).select_one(f"{where} .saved[role=status]")
    assert note is not None, f"no saved note in {where} at {location}"
    return note.get_text(strip=True)


def problem(response, where: str) -> str:
    note = soup(response).select_one(f"{where} .problem[role=alert]")
    assert note is not None, f"no problem beside {where}: {response.text[:300]}"
    return note.get_text(" ", strip=True)


def agent_id(client) -> int:
    return int(soup(client.get("/agents")).select_one(".agent-list a")["href"].rsplit("/", 1)[1])


# --- agent settings, tools, plugins, memory, the list --------------------------------------


def test_agent_settings_say_saved(client):
    agent = agent_id(client)
    r = post(client, f"/agents/{agent}", f"/agents/{agent}", name="Helper", instructions="Be brief.", model="",
             thinking="")
    assert r.status_code == 303 and r.headers["location"] == f"/agents/{agent}?tab=settings&saved=settings"
    assert saved(client, r.headers["location"], f'form[action="/agents/{agent}"]') == "Saved."
    assert soup(client.get(f"/agents/{agent}")).select_one(".saved").get_text() == "", "only right after a save"


@pytest.mark.parametrize("name,says", [("   ", "a name is required"), (LONG, "at most 80 characters")])
def test_agent_settings_refused_beside_the_name_with_the_form_as_typed(client, name, says):
    agent = agent_id(client)
    r = post(client, f"/agents/{agent}", f"/agents/{agent}", name=name, instructions="Typed instructions.",
             model="", thinking="high")
    assert r.status_code == 400
    form = f'form[action="/agents/{agent}"]'
    assert says in problem(r, f"{form} label:has(input[name=name])")
    page = soup(r)
    field = page.select_one(f"{form} input[name=name]")
    assert field["value"] == name.strip() and field["aria-invalid"] == "true"
    assert page.select_one(f"{form} textarea[name=instructions]").text == "Typed instructions."
    assert page.select_one(f'{form} select[name=thinking] option[value="high"]').has_attr("selected")
    assert page.select_one("h1").text == "Assistant", "the heading keeps the saved name"
    assert rows(client.app.state.tabletalk.config.data,
                "SELECT name, instructions FROM assistants")[0]["instructions"] != "Typed instructions."


def test_a_model_not_offered_is_refused_beside_the_model(client):
    agent = agent_id(client)
    r = post(client, f"/agents/{agent}", f"/agents/{agent}", name="Helper", instructions="Kept.",
             model="nowhere:none", thinking="")
    assert r.status_code == 400 and "nowhere:none" in problem(r, "label:has(select[name=model])")
    assert soup(r).select_one("textarea[name=instructions]").text == "Kept."


def test_agent_tools_say_saved(client):
    agent = agent_id(client)
    tools = ["fetch_page", "update_plan"]
    r = post(client, f"/agents/{agent}/tools", f"/agents/{agent}?tab=tools", shown=tools, use=tools,
             approve=["update_plan"])
    assert r.status_code == 303
    assert saved(client, r.headers["location"], f'form[action="/agents/{agent}/tools"]') == "Saved."


def test_plugins_say_added_and_refuse_beside_the_field(client):
    agent = agent_id(client)
    page = f"/agents/{agent}?tab=plugins"
    r = post(client, f"/agents/{agent}/plugins", page, address="ftp://example.org/mcp", header="X-Key", secret="s")
    assert r.status_code == 400
    assert "http:// or https://" in problem(r, "label:has(input[name=address])")
    form = soup(r).select_one(f'form[action="/agents/{agent}/plugins"]')
    assert form.select_one("input[name=address]")["value"] == "ftp://example.org/mcp"
    assert form.select_one("input[name=header]")["value"] == "X-Key"
    assert not form.select_one("input[name=secret]").get("value"), "a secret is never written back into a page"
    r = post(client, f"/agents/{agent}/plugins", page, address="https://example.org/mcp", header="bad header")
    assert r.status_code == 400 and "letters, digits" in problem(r, "label:has(input[name=header])")
    assert soup(r).select_one("input[name=address]")["value"] == "https://example.org/mcp"
    r = post(client, f"/agents/{agent}/plugins", page, address="http://127.0.0.1:9/mcp")
    assert r.status_code == 303 and "saved=added" in r.headers["location"]
    assert saved(client, r.headers["location"], ".agent") == "Plugin added."
    plugin = soup(client.get(page)).select_one(".plugin form")["action"]
    r = post(client, plugin, page, action="disable")
    assert saved(client, r.headers["location"], ".agent") == "Plugin disabled."


def test_a_deleted_memory_says_so(client):
    agent = agent_id(client)
    store_of(client).add_memory(agent, "Likes tea.")
    action = soup(client.get(f"/agents/{agent}?tab=memory")).select_one('.memories form[action$="/delete"]')["action"]
    r = post(client, action, f"/agents/{agent}?tab=memory")
    assert saved(client, r.headers["location"], ".agent") == "Memory deleted."


def test_a_new_agent_is_refused_beside_its_name_or_made(client):
    r = post(client, "/agents", "/agents", name=LONG)
    assert r.status_code == 400 and "at most 80" in problem(r, 'form[action="/agents"]')
    assert soup(r).select_one('form[action="/agents"] input[name=name]')["value"] == LONG
    r = post(client, "/agents", "/agents", name="Researcher")
    assert r.status_code == 303
    assert saved(client, r.headers["location"], ".agent").startswith("Agent created")


def test_the_only_agent_is_not_deleted_and_the_page_says_why(client):
    agent = agent_id(client)
    r = post(client, f"/agents/{agent}/delete", f"/agents/{agent}/delete")
    assert r.status_code == 409 and "only agent" in problem(r, ".confirm")
    assert soup(r).select_one(".confirm form")["action"] == f"/agents/{agent}/delete"
    post(client, "/agents", "/agents", name="Second")
    r = post(client, f"/agents/{agent}/delete", f"/agents/{agent}/delete")
    assert r.headers["location"] == "/agents?saved=agent-deleted"
    assert saved(client, r.headers["location"], ".agents") == "Agent deleted."


# --- skills ------------------------------------------------------------------------------


def test_a_new_skill_refused_keeps_what_was_typed(client):
    r = post(client, "/skills", "/skills", name="  ", description="Typed description.", body="Typed *body*.")
    assert r.status_code == 400 and "name" in problem(r, "form#new-skill")
    form = soup(r).select_one("form#new-skill")
    assert form.select_one("textarea[name=description]").text == "Typed description."
    assert form.select_one("textarea[name=body]").text == "Typed *body*."
    r = post(client, "/skills", "/skills", name="pdf-forms", description="d", body="b")
    assert saved(client, r.headers["location"], "#edit-skill") == "Skill created."


def test_a_duplicate_import_ends_on_the_skills_page_beside_the_import_form(client):
    post(client, "/skills", "/skills", name="pdf-forms", description="d", body="b")
    r = client.post("/skills/import", data={"_csrf_token": csrf(client, "/skills")},
                    files={"file": ("SKILL.md", b"---\nname: PDF-forms\ndescription: x\n---\nbody", "text/markdown")},
                    follow_redirects=False)
    assert r.status_code == 409
    assert "already exists" in problem(r, "form#import-skill")
    page = soup(r)
    assert page.select_one("h1").text == "Skills" and page.select_one("form#new-skill"), "the skills page, not a dead end"
    assert page.select_one("form#import-skill input[type=file]")["aria-invalid"] == "true"


def test_an_edited_skill_says_saved_or_keeps_what_was_typed(client):
    url = post(client, "/skills", "/skills", name="one", description="d", body="b").headers["location"].split("?")[0]
    post(client, "/skills", "/skills", name="two", description="d", body="b")
    r = post(client, url, url, name="TWO", description="New description.", body="New body.")
    assert r.status_code == 409 and "already exists" in problem(r, "#edit-skill")
    form = soup(r).select_one("#edit-skill")
    assert form.select_one("input[name=name]")["value"] == "TWO"
    assert form.select_one("textarea[name=body]").text == "New body."
    r = post(client, url, url, name="one", description="New description.", body="New body.")
    assert saved(client, r.headers["location"], "#edit-skill") == "Saved."


def test_a_deleted_skill_says_so(client):
    url = post(client, "/skills", "/skills", name="one", description="d", body="b").headers["location"].split("?")[0]
    r = post(client, url + "/delete", url + "/delete")
    assert saved(client, r.headers["location"], ".skills") == "Skill deleted."


# --- account and people ------------------------------------------------------------------


def test_the_account_says_saved_for_the_theme_and_refuses_a_wrong_password_inline(client):
    r = post(client, "/account/theme", "/account", theme="light")
    assert saved(client, r.headers["location"], 'form[action="/account/theme"]').startswith("Saved")
    r = post(client, "/account", "/account", current="wrong password", password="a new long one",
             again="a new long one")
    assert r.status_code == 400 and "not right" in soup(r).select_one(".problem[role=alert]").text


def test_people_say_added_and_refuse_beside_the_form_with_the_name_kept(client):
    r = post(client, "/people", "/people", name="Sam", password="short")
    assert r.status_code == 400
    page = soup(r)
    assert page.select_one(".problem[role=alert]") and page.select_one("input[name=name]")["value"] == "Sam"
    r = post(client, "/people", "/people", name="Sam", password="a long enough password")
    assert r.headers["location"] == "/people?saved=added"
    assert saved(client, r.headers["location"], ".people").startswith("Added")
    person = soup(client.get("/people")).select_one('a[href$="/delete"]')["href"]
    r = post(client, person, person, conversations="delete")
    assert saved(client, r.headers["location"], ".people") == "Removed."


def test_a_saved_key_that_is_not_ours_says_nothing(client):
    page = soup(client.get("/people?saved=<script>alert(1)</script>"))
    assert page.select_one(".saved").get_text() == "" and "alert(1)" not in str(page.select_one("main"))


# --- error pages -------------------------------------------------------------------------


def test_a_404_keeps_the_signed_in_header_and_says_it_once(client):
    r = client.get("/no/such/page")
    assert r.status_code == 404
    page = soup(r)
    assert page.select_one('nav.me a[href="/account"]').text == "owner", "signed in, as on every page"
    assert page.select_one("h1").text == "Not found"
    assert page.select_one(".error-page p").text == "There is no page at this address."
    assert page.select_one(".error-page a")["href"] == "/"


@pytest.mark.parametrize("path,back", [("/agents/99999", "/agents"), ("/skills/99999", "/skills"),
                                       ("/c/99999", "/"), ("/people/99999/delete", "/people")])
def test_an_error_leads_to_the_page_above(client, path, back):
    r = client.get(path)
    assert r.status_code == 404 and soup(r).select_one(".error-page a")["href"] == back


def test_an_error_leads_back_to_the_page_the_person_came_from(client):
    here = str(client.base_url)
    r = client.get("/agents/99999", headers={"Referer": here + "/skills?x=1"})
    link = soup(r).select_one(".error-page a")
    assert link["href"] == "/skills?x=1" and "came from" in link.text
    r = client.get("/agents/99999", headers={"Referer": "https://elsewhere.example/page"})
    assert soup(r).select_one(".error-page a")["href"] == "/agents", "never to another site"


def test_a_signed_out_404_leads_to_sign_in(client):
    client.cookies.clear()
    r = client.get("/no/such/page", follow_redirects=False)
    assert r.status_code == 404
    page = soup(r)
    assert page.select_one("nav.me") is None and page.select_one(".error-page a")["href"] == "/signin"
