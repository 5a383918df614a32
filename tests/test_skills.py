"""Skills: the pages, SKILL.md import and export, and what agents are told and can load."""
from pathlib import Path

import pytest

from app.store import db as dbm
from app.skills import BadSkill, FILE_MAX, exported, parsed
from app.tables import Skill
from tests.conftest import csrf, database, soup, start_chat, wait_for
from tests.fakes.openai_server import tool_call

HOSTILE = '<script>alert("x")</script> & “quotes” \'single\' # not a comment: yes'
BODY = "# Filling PDF forms\n\n1. Read the form's fields.\n2. Fill them.\n\n```python\nprint('</textarea>')\n```"
SKILL_MD = b"""---
name: pdf-forms
description: >
  Fill in PDF forms.
  Use when the person sends a PDF with fields to fill.
license: Apache-2.0
metadata:
  author: example
  version: "1.0"
---

# Filling PDF forms

Read every field first.
"""


def rows(data):
    db = dbm.connect(database(data))
    try:
        return [dict(r) for r in db.conn.execute("SELECT name, description, body FROM skills ORDER BY id")]
    finally:
        db.conn.close()


def create(client, name="pdf-forms", description="Fill in PDF forms.", body=BODY, **kw):
    return client.post("/skills", data={"_csrf_token": csrf(client, "/skills"), "name": name,
                                        "description": description, "body": body}, follow_redirects=False, **kw)


def upload(client, content: bytes, filename="SKILL.md", type="text/markdown"):
    return client.post("/skills/import", data={"_csrf_token": csrf(client, "/skills")},
                       files={"file": (filename, content, type)}, follow_redirects=False)


def finished(client, chat):
    return wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and p)


def ask(client, text):
    token = csrf(client)
    return start_chat(client, text, token=token)


# --- the pages ------------------------------------------------------------------------------


def test_the_nav_links_to_skills_and_the_page_has_both_forms(client):
    page = soup(client.get("/"))
    assert page.select_one('nav.main a[href="/skills"]').text == "Skills"
    page = soup(client.get("/skills"))
    assert page.select_one("form#new-skill")["method"] == "post"
    assert {i["name"] for i in page.select("form#new-skill [name]")} == {"_csrf_token", "name", "description", "body"}
    imp = page.select_one("form#import-skill")
    assert imp["enctype"] == "multipart/form-data" and imp.select_one('input[type="file"]')["name"] == "file"
    assert "No skills yet" in page.text


def test_create_edit_and_delete_a_skill_with_hostile_values(client, data):
    r = create(client, name=HOSTILE[:80], description=HOSTILE, body=BODY + "\n<img src=x onerror=alert(1)>")
    assert r.status_code == 303
    url, saved = r.headers["location"].split("?")
    assert saved == "saved=created"
    page = soup(client.get(url))
    assert page.select_one("h1").text == HOSTILE[:80]
    assert page.select_one("input[name=name]")["value"] == HOSTILE[:80]
    assert page.select_one("textarea[name=description]").text == HOSTILE
    assert page.select_one("textarea[name=body]").text == BODY + "\n<img src=x onerror=alert(1)>"
    assert all(s.has_attr("src") for s in page.select("script")), "no script of the skill's runs"
    assert page.select(".preview img") == [] and page.select_one(".preview pre code"), "the preview is safe Markdown"
    listed = soup(client.get("/skills")).select_one(".skill-list li")
    assert listed.select_one("a").text == HOSTILE[:80] and listed.select_one("a")["href"] == url

    token = csrf(client, url)
    r = client.post(url, data={"_csrf_token": token, "name": "  pdf forms  ", "description": "line 1\r\nline 2",
                               "body": "\r\n\r\nStep one\r\nStep two\r\n  \r\n"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == url + "?saved=1"
    assert rows(data) == [{"name": "pdf forms", "description": "line 1\nline 2", "body": "Step one\nStep two"}]
    assert soup(client.get(url + "?saved=1")).select_one("#edit-skill .saved[role=status]").text == "Saved."

    confirm = soup(client.get(url + "/delete"))
    assert confirm.select_one("h1").text == "Delete pdf forms?"
    assert confirm.select_one("main form")["action"] == url + "/delete" and rows(data), "asking deletes nothing"
    r = client.post(url + "/delete", data={"_csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/skills?saved=deleted"
    assert rows(data) == [] and client.get(url).status_code == 404


def test_htmx_forms_get_204_and_a_redirect_header(client):
    r = create(client, headers={"HX-Request": "true"})
    assert r.status_code == 204 and r.headers["hx-redirect"].startswith("/skills/")


@pytest.mark.parametrize("name,description,body,status,says", [
    ("", "d", "b", 400, "needs a name"),
    ("   \t ", "d", "b", 400, "needs a name"),
    ("x" * 81, "d", "b", 400, "at most 80 characters (this one has 81)"),
    ("two\nlines", "d", "b", 400, "one line"),
    ("ok", "d" * 2_001, "b", 400, "at most 2,000 characters"),
    ("ok", "d", "b" * 300_000, 413, "too long"),
    ("ok", "d", "é" * 200_000, 400, "at most 256 KB as a SKILL.md"),
    ("ok", "d", "nul\x00byte", 400, "NUL"),
])
def test_bad_values_are_refused_with_a_clear_message(client, data, name, description, body, status, says):
    r = create(client, name=name, description=description, body=body)
    assert r.status_code == status and says in soup(r).select_one("main").text
    assert rows(data) == []


def test_a_name_is_taken_once_whatever_its_case(client, data):
    assert create(client, name="pdf-forms").status_code == 303
    for name in ("pdf-forms", "PDF-Forms", " pdf-forms "):
        r = create(client, name=name)
        assert r.status_code == 409 and "A skill named “pdf-forms” already exists" in r.text
    other = create(client, name="other").headers["location"]
    r = client.post(other, data={"_csrf_token": csrf(client, other), "name": "Pdf-Forms", "description": "",
                                 "body": ""})
    assert r.status_code == 409
    r = client.post(other, data={"_csrf_token": csrf(client, other), "name": "OTHER", "description": "", "body": ""},
                    follow_redirects=False)
    assert r.status_code == 303, "a skill may change the case of its own name"
    assert [s["name"] for s in rows(data)] == ["pdf-forms", "OTHER"]


@pytest.mark.parametrize("path", ["/skills/abc", "/skills/99", "/skills/999999999999999999999999",
                                  "/skills/99/SKILL.md", "/skills/99/delete"])
def test_unknown_skills_are_404(client, path):
    r = client.get(path)
    assert r.status_code == 404 and "No such skill" in r.text


def test_forms_need_the_csrf_token(client, data):
    assert client.post("/skills", data={"name": "x"}).status_code == 403
    assert client.post("/skills/import", files={"file": ("SKILL.md", SKILL_MD, "text/markdown")}).status_code == 403
    assert rows(data) == []


# --- SKILL.md ---------------------------------------------------------------------------------


def test_an_imported_skill_exports_and_imports_elsewhere_the_same(client, make_client, elsewhere, data):
    r = upload(client, SKILL_MD)
    assert r.status_code == 303
    url, saved = r.headers["location"].split("?")
    assert saved == "saved=imported"
    first = rows(data)
    assert first == [{"name": "pdf-forms",
                      "description": "Fill in PDF forms. Use when the person sends a PDF with fields to fill.",
                      "body": "# Filling PDF forms\n\nRead every field first."}]
    export = client.get(url + "/SKILL.md")
    assert export.status_code == 200 and export.headers["content-type"].startswith("text/markdown")
    assert export.headers["content-disposition"] == 'attachment; filename="SKILL.md"'
    assert export.text.startswith("---\nname: pdf-forms\ndescription: ")
    with make_client(**elsewhere) as other:
        assert upload(other, export.content).status_code == 303
        assert rows(Path(elsewhere["TABLETALK_DATA"])) == first


def test_any_skill_made_on_the_page_round_trips(client, make_client, elsewhere, data):
    description = 'Use for "quoted: things" # and hashes\n\n  indented\tand tabbed, é 中 \u2028 —'
    body = "---\nnot front matter\n---\n\n  indented code\n\n\\ back\\slash"
    url = create(client, name=HOSTILE[:80], description=description, body=body).headers["location"].split("?")[0]
    first = rows(data)
    export = client.get(url + "/SKILL.md").content
    with make_client(**elsewhere) as other:
        assert upload(other, export, type="application/octet-stream").status_code == 303
        assert rows(Path(elsewhere["TABLETALK_DATA"])) == first == [{"name": HOSTILE[:80], "description": description, "body": body}]


def test_importing_a_name_that_exists_is_a_conflict(client, data):
    upload(client, SKILL_MD)
    r = upload(client, SKILL_MD.replace(b"name: pdf-forms", b"name: PDF-forms"))
    assert r.status_code == 409 and "already exists" in r.text and len(rows(data)) == 1


NO_NAME = b"---\ndescription: x\n---\nbody"
BAD_FILES = [
    ("empty", b"", "text/markdown", 400, "empty"),
    ("blank", b"\n\n  \n", "text/markdown", 400, "empty"),
    ("too large", b"---\nname: big\n---\n" + b"x" * FILE_MAX, "text/markdown", 413, "too large"),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "image/png", 400, "not a text file"),
    ("binary claiming Markdown", b"---\nname: x\n---\n\x00\x01\x02", "text/markdown", 400, "not a text file"),
    ("latin-1", "---\nname: café\n---\nbody".encode("latin-1"), "text/markdown", 400, "not UTF-8"),
    ("no front matter", b"# Just Markdown\n\nname: x", "text/markdown", 400, "no front matter"),
    ("front matter not first", b"\n---\nname: x\n---\n", "text/markdown", 400, "no front matter"),
    ("unclosed front matter", b"---\nname: x\ndescription: y\n", "text/markdown", 400, "never ends"),
    ("missing name", NO_NAME, "text/markdown", 400, "no “name: …” line"),
    ("empty name", b"---\nname: ''\ndescription: x\n---\n", "text/markdown", 400, "no “name: …” line"),
    ("name of 81", b"---\nname: " + b"n" * 81 + b"\n---\n", "text/markdown", 400, "at most 80 characters"),
    ("a list for a name", b"---\nname: [a, b]\n---\n", "text/markdown", 400, "plain text or in quotes"),
    ("a map for a name", b"---\nname:\n  first: a\n---\n", "text/markdown", 400, "must be text"),
    ("not key: value", b"---\nname: x\njust words\n---\n", "text/markdown", 400, "Line 2 of the front matter"),
    ("a key twice", b"---\nname: x\nname: y\n---\n", "text/markdown", 400, "appears twice"),
    ("an open quote", b'---\nname: "x\n---\n', "text/markdown", 400, "closing quote"),
    ("a bad escape", b'---\nname: "a\\qb"\n---\n', "text/markdown", 400, "escape"),
    ("tab indent", b"---\nname: x\ndescription: |\n\tindented\n---\n", "text/markdown", 400, "tab"),
]


@pytest.mark.parametrize("content,type,status,says", [f[1:] for f in BAD_FILES], ids=[f[0] for f in BAD_FILES])
def test_bad_uploads_are_refused_and_write_nothing(client, data, content, type, status, says):
    r = upload(client, content, type=type)
    assert r.status_code == status, r.text
    problem = soup(r).select_one("form#import-skill .problem[role=alert]")
    assert says in problem.text, "said beside the import form, on the skills page"
    assert rows(data) == []


def test_an_import_form_without_a_file_says_so(client, data):
    r = client.post("/skills/import", data={"_csrf_token": csrf(client, "/skills"), "file": "not a file"})
    assert r.status_code == 400 and "Choose a SKILL.md file" in r.text
    r = upload(client, b"", filename="")
    assert r.status_code == 400 and rows(data) == []


def test_a_good_file_sent_with_any_content_type_is_read_by_its_bytes(client, data):
    crlf_bom = b"\xef\xbb\xbf" + SKILL_MD.replace(b"\n", b"\r\n")
    assert upload(client, crlf_bom, filename="whatever.bin", type="application/octet-stream").status_code == 303
    assert rows(data)[0]["body"] == "# Filling PDF forms\n\nRead every field first."


@pytest.mark.parametrize("front,name,description", [
    ("name: plain\ndescription: C# and F# # a comment", "plain", "C# and F#"),
    ("name: 'it''s'\ndescription: \"tab\\there \\u00e9\\x41 \\\"q\\\"\"", "it's", 'tab\there éA "q"'),
    ("name: x\ndescription: |\n  kept\n    indented\n\n  lines", "x", "kept\n  indented\n\nlines"),
    ("name: x\ndescription: >-\n  folded\n  into one\n\n  paragraph two", "x", "folded into one\nparagraph two"),
    ("name: x\ndescription: a plain value\n  going on", "x", "a plain value going on"),
    ("# a comment\nname: x   \n\ndescription:", "x", ""),
    ("name: x\nallowed-tools: Bash(git:*) Read\nmetadata:\n  a: [1, 2]", "x", ""),
])
def test_front_matter_as_the_convention_writes_it(front, name, description):
    skill = parsed(f"---\n{front}\n---\nbody".encode())
    assert (skill.name, skill.description, skill.body) == (name, description, "body")


def test_an_exported_file_reads_back_for_odd_values():
    for name in ["yes", "123", "- dash", "a: b", "  spaced  ".strip(), "trailing\\", "null", "#hash", "é"]:
        s = Skill(name=name, description=name, body="")
        assert parsed(exported(s).encode()) == s
    with pytest.raises(BadSkill):
        parsed(b"---\nname: x\n---\n\xff")


# --- what agents are told -------------------------------------------------------------------


def test_the_system_prompt_lists_the_skills_after_the_instructions(client, fake):
    create(client, name="pdf-forms", description="Fill in PDF forms.\nUse when a PDF has fields.")
    create(client, name="release-notes", description="")
    chat = ask(client, "hi")
    finished(client, chat)
    system = fake.streamed[0]["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a helpful assistant in Tabletalk"), "the instructions come first"
    skills_part = system["content"].split("## Skills", 1)[1]
    assert "load_skill" in skills_part
    assert "- pdf-forms: Fill in PDF forms. Use when a PDF has fields." in skills_part
    assert "- release-notes: (no description)" in skills_part
    assert BODY not in system["content"], "bodies are loaded, not listed"


def test_no_skills_no_section(client, fake):
    finished(client, ask(client, "hi"))
    assert "## Skills" not in fake.streamed[0]["messages"][0]["content"]


def test_an_agent_that_may_not_load_skills_is_not_told_about_them(client, fake):
    create(client)
    agent = soup(client.get("/agents")).select_one(".agent-list a")["href"]
    client.post(agent + "/tools", data={"_csrf_token": csrf(client, agent),
                                        "shown": ["fetch_page", "update_plan", "load_skill", "remember"],
                                        "use": ["update_plan"]})
    finished(client, ask(client, "hi"))
    assert "## Skills" not in fake.streamed[0]["messages"][0]["content"]
    assert [t["function"]["name"] for t in fake.streamed[0]["tools"]] == ["update_plan"]


def test_load_skill_gives_the_model_the_body(client, fake):
    create(client, name="pdf-forms", body=BODY)
    fake.script([tool_call("load_skill", {"name": "pdf-forms"})], "Done.")
    page = finished(client, ask(client, "fill this form"))
    assert "load_skill" in [t["function"]["name"] for t in fake.streamed[0]["tools"]]
    assert fake.streamed[1]["messages"][-1]["role"] == "tool"
    assert fake.streamed[1]["messages"][-1]["content"] == BODY
    assert page.select_one("article.call .state").text == "done"


def test_load_skill_forgives_case_and_lists_the_names_for_an_unknown_one(client, fake):
    create(client, name="pdf-forms", body=BODY)
    create(client, name="release-notes", body="Write notes.")
    fake.script([tool_call("load_skill", {"name": " PDF-Forms "})], [tool_call("load_skill", {"name": "nope"})],
                "Done.")
    page = finished(client, ask(client, "go"))
    assert fake.streamed[1]["messages"][-1]["content"] == BODY
    failed = fake.streamed[2]["messages"][-1]["content"]
    assert "no skill named 'nope'" in failed and '"pdf-forms", "release-notes"' in failed
    assert [s.text for s in page.select("article.call .state")] == ["done", "failed"]


def test_the_skills_list_in_a_prompt_is_capped_and_says_what_it_left_out():
    from app.skills import PROMPT_MAX, prompt_section, unknown

    many = [Skill(name=f"skill-{n}", description="d" * 1_000) for n in range(50)]
    section = prompt_section(many)
    assert len(section) < PROMPT_MAX + 1_000
    assert "more not listed here" in section and "- skill-0: " in section
    assert prompt_section([]) == ""
    assert unknown([], "x") == "There is no skill named 'x': there are no skills."
