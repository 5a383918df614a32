"""An elicitation's form (app/plugins/forms.py): which schemas become forms, and the person's
answer checked against them, with empty, huge, malformed and hostile values."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from app.plugins.forms import MAX_TEXT, Unshowable, answer, form_of, initial

SCHEMA = {"type": "object", "required": ["name", "age"], "properties": {
    "name": {"type": "string", "title": "Name", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "ratio": {"type": "number"},
    "ok": {"type": "boolean", "default": True},
    "when": {"type": "string", "format": "date-time"},
    "site": {"type": "string", "format": "uri"},
    "color": {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"]},
    "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"anyOf": [
        {"const": "a", "title": "A"}, {"const": "b", "title": "B"}, {"const": "c", "title": "C"}]}},
}}
FORM = form_of(SCHEMA)
F = {f.key: f.name for f in FORM.fields}


def sent(**values):
    return answer(FORM, {F[k]: v if isinstance(v, list) else [v] for k, v in values.items()})


def test_a_good_answer_is_sent_as_the_schema_types_it():
    content, errors, _ = sent(name="Ada", age="36", ratio="0.5", ok="on", when="2026-12-01T13:45:00Z",
                              site="https://example.org/", color="g", tags=["c", "a"])
    assert errors == {}
    assert content == {"name": "Ada", "age": 36, "ratio": 0.5, "ok": True, "when": "2026-12-01T13:45:00Z",
                       "site": "https://example.org/", "color": "g", "tags": ["a", "c"]}


def test_optional_fields_left_empty_are_left_out_and_an_unticked_box_is_no():
    content, errors, _ = sent(name="Ada", age="1")
    assert errors == {} and content == {"name": "Ada", "age": 1, "ok": False}


@pytest.mark.parametrize("field,value,error", [
    ("name", "", "This is required."),
    ("name", "x" * 21, "It must be at most 20 characters."),
    ("name", "x" * (MAX_TEXT + 50), "That is too long (at most 10,000 characters)."),
    ("name", "a\x00b", "That holds control characters a form does not send."),
    ("age", "1.5", "That is not a whole number."),
    ("age", "-1", "It must be at least 0."),
    ("age", "NaN", "That is not a number."),
    ("age", "9" * 400, "That is not a number."),
    ("ratio", "inf", "That is not a number."),
    ("ratio", "twelve", "That is not a number."),
    ("when", "2026-12-01T13:45:00", "Give the time zone too (2026-12-01T13:45:00Z, or +01:00 at the end)."),
    ("when", "tomorrow", "That is not a date and time (2026-12-01T13:45:00Z)."),
    ("site", "not a url", "That is not a web address (it starts with https:// or another scheme)."),
    ("color", "blue", "Choose one of the listed options."),
    ("tags", ["a", "b", "c"], "Choose at most 2."),
    ("tags", ["<img src=x onerror=alert(1)>"], "Choose from the listed options."),
])
def test_each_bad_value_has_its_own_words(field, value, error):
    values = {"name": "Ada", "age": "3", field: value}
    content, errors, typed = sent(**values)
    assert errors == {F[field]: error}
    assert field not in content


@pytest.mark.parametrize("schema,why", [
    ([], "what it asks for is not an object of fields"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}},
     "the field 'a' lists no choices"),
    ({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "x"]}}}, "the field 'a' lists a choice twice"),
    ({"type": "object", "properties": {"a": {"type": "number", "minimum": 5, "maximum": 1}}},
     "the field 'a' allows no number (its minimum is above its maximum)"),
    ({"type": "object", "properties": {"a": {"type": "string", "maxLength": 1e309}}}, "its maxLength is not a number"),
    ({"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(41)}}, "it asks for more than 40 fields"),
    ({"type": "object", "properties": {"a": {"type": "string", "enum": [str(i) for i in range(201)]}}},
     "the field 'a' has more than 200 choices"),
])
def test_schemas_that_are_not_a_flat_form_are_refused_in_words(schema, why):
    with pytest.raises(Unshowable, match="^" + __import__("re").escape(why) + "$"):
        form_of(schema)


def test_defaults_fill_the_form_and_titles_are_kept_plain():
    form = form_of({"type": "object", "properties": {
        "n": {"type": "integer", "default": 42, "title": "Number\x07 <b>bold</b>"},
        "s": {"type": "string", "default": 7}}})
    assert initial(form) == {"f0": 42}, "a default of the wrong type is ignored"
    assert form.fields[0].label == "Number <b>bold</b>", "control characters go; markup stays text (escaped on the page)"


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(list(F.values()) + ["f99", "x"]),
                       st.lists(st.text(max_size=50), max_size=4), max_size=10))
def test_any_posted_values_give_an_answer_or_errors_never_an_exception(posted):
    content, errors, typed = answer(FORM, posted)
    assert set(errors) <= set(F.values())
    assert set(content) <= set(F)
    if not errors:
        assert isinstance(content["name"], str) and isinstance(content["age"], int)
