"""The seed's constructors return what the seed says they return."""
import pytest

from app.tables import (
    Assistant, Item, asked, assistant, decided, item, plugin, retried, site_name, skill, stopped,
)


def test_item_is_any_kind_of_log_entry():
    it = item("text", 3, "Hello")
    assert (it.kind, it.chat, it.text, it.done, it.id) == ("text", 3, "Hello", False, None)
    with pytest.raises(ValueError):
        item("chat", 3)
    with pytest.raises(ValueError):
        item("call", 3, state="pending")


def test_asked_is_the_persons_message_not_done_yet():
    it = asked(7, "What is WAL?", model="fake-model", files=[4, 9])
    assert it.kind == "user" and it.chat == 7 and it.text == "What is WAL?"
    assert it.model == "fake-model" and it.files == "4,9" and it.file_ids == [4, 9]
    assert it.done is False


def test_retried_and_stopped_are_the_persons_wishes():
    again = retried(7, model="other-model")
    assert (again.kind, again.chat, again.model, again.done) == ("retry", 7, "other-model", False)
    assert retried(7).model == ""
    stop = stopped(7)
    assert (stop.kind, stop.chat, stop.done) == ("stop", 7, False)


def test_decided_approves_or_declines_a_waiting_call():
    call = item("call", 7, name="fetch_page", input='{"url": "https://example.org"}', state="approval", id=12)
    assert decided(call, "approve").state == "approved"
    assert decided(call, "decline").state == "declined"
    assert decided(call, "approve").id == 12
    with pytest.raises(ValueError):
        decided(call, "maybe")
    with pytest.raises(ValueError):
        decided(item("call", 7, state="running"), "approve")
    with pytest.raises(ValueError):
        decided(item("text", 7), "approve")


def test_assistant_has_defaults_and_a_bounded_name():
    a = assistant(5, "Researcher")
    assert isinstance(a, Assistant)
    assert (a.id, a.name, a.instructions, a.model, a.tools, a.approve) == (5, "Researcher", "", "", "", "")
    assert assistant(None, "x" * 80).name == "x" * 80
    with pytest.raises(ValueError, match="at most 80"):
        assistant(None, "x" * 81)
    with pytest.raises(ValueError):
        assistant(None, "   ")


@pytest.mark.parametrize("address,name", [
    ("https://mcp.example.com/mcp", "example"),
    ("https://example.com", "example"),
    ("http://127.0.0.1:8931/sse", "127_0_0_1"),
    ("http://[::1]:9000/mcp", "__1"),
    ("https://tools.example.co.uk/mcp", "example"),
    ("mcp.github.com", "github"),
    ("http://localhost:3000", "localhost"),
])
def test_plugin_is_named_after_its_site(address, name):
    p = plugin(2, address, header="Authorization", secret="s3cret")
    assert p.name == name == site_name(address)
    assert (p.agent, p.address, p.header, p.secret, p.enabled) == (2, address, "Authorization", "s3cret", True)


def test_skill():
    s = skill("pdf", "Use for PDF files", "# Steps")
    assert (s.name, s.description, s.body) == ("pdf", "Use for PDF files", "# Steps")
    with pytest.raises(ValueError):
        skill("")


def test_item_round_trips_through_a_row():
    it = item("call", 1, name="t", input="{}", state="done", done=True, id=3, turn=2)
    assert Item.from_row({**it.to_dict(), "done": 1}) == it


def test_chips_are_one_per_site_six_at_most_http_only():
    from app.tables import chips
    sources = [
        {"url": "https://www.example.org/a", "title": "Example A"},
        {"url": "https://example.org/b", "title": "Example B"},        # same site: the first page wins
        {"url": "javascript:alert(1)", "title": "bad"},
        {"url": "http://docs.python.org/3/", "title": ""},
        *({"url": f"https://site{i}.test/", "title": f"S{i}"} for i in range(10)),
    ]
    got = chips(sources)
    assert len(got) == 6
    assert (got[0].letter, got[0].site, got[0].title) == ("E", "example.org", "Example A")
    assert (got[1].site, got[1].title) == ("docs.python.org", "docs.python.org")
    assert all(c.url.startswith(("http://", "https://")) for c in got)
    assert chips("not json") == [] and chips("") == []
    # a passage of the person's knowledge: its document's name once, then its page
    [doc, old] = chips([{"url": "/knowledge/passages/7", "title": "libtasn1.md, page 5", "document": "libtasn1.md"},
                        {"url": "/knowledge/passages/8", "title": "An older title", "document": "tides.csv"}])
    assert (doc.site, doc.title, doc.url, doc.document) == ("libtasn1.md", "page 5", "/knowledge/passages/7#passage", True)
    assert (old.site, old.title) == ("tides.csv", "An older title")


def test_pretty_json_is_one_rule_for_the_page_and_the_export():
    from app import export
    from app.tables import pretty_json
    from app.web import templating
    assert pretty_json('{"cmd":"ls","é":[1]}') == '{\n  "cmd": "ls",\n  "é": [\n    1\n  ]\n}'
    assert pretty_json("not json") is None and pretty_json("") is None
    shown = templating.env.globals["input_shown"]
    assert shown('{"a":1}') == export.pretty('{"a":1}')[0] == '{\n  "a": 1\n}'
    assert (shown("not json"), export.pretty("not json")) == ("not json", ("not json", ""))


def test_input_too_deep_or_long_to_parse_shows_as_it_came_cut():
    """~1,000 levels of `{"a":` made json raise RecursionError on every render of the page."""
    from app import export
    from app.tables import DEPTH_MAX, INPUT_SHOWN, PARSED_MAX, input_shown, nesting, pretty_json

    deep = '{"a":' * 1_000 + "1" + "}" * 1_000
    assert pretty_json(deep) is None and input_shown(deep) == deep and export.pretty(deep) == (deep, "")
    assert nesting('{"a": "[[[{{", "b": [1, [2, {"c": "\\"]"}]]}') == 4
    at_the_bound = "[" * DEPTH_MAX + "]" * DEPTH_MAX
    assert pretty_json(at_the_bound) is not None and pretty_json("[" + at_the_bound + "]") is None
    long = '"' + "x" * PARSED_MAX + '"'
    assert pretty_json(long) is None
    endless = "[" * (INPUT_SHOWN + 500)
    shown = input_shown(endless)
    assert shown.startswith("[" * INPUT_SHOWN) and shown.endswith("500 more characters not shown")
