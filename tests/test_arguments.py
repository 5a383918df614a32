"""Checking a call's arguments against a plugin's schema: never the network or the disk,
bounded in time, and a schema that cannot be used is a failed call, never an exception."""
from __future__ import annotations

import asyncio
import json

import pytest

from app import agent as loop
from app.tools import Result, Tool
from app.tools.arguments import PATTERN_MAX, Unusable, check, problem


def unusable(args, schema) -> str:
    with pytest.raises(Unusable) as caught:
        problem(args, schema)
    return str(caught.value)


@pytest.mark.parametrize("ref", ["http://127.0.0.1:9/x.json", "https://example.com/s.json", "file:///etc/passwd",
                                 "urn:x", "other.json#/defs/a", "#/$defs/missing"])
def test_a_ref_outside_the_schema_is_not_followed(ref):
    assert "outside the schema" in unusable({}, {"type": "object", "$ref": ref}) or ref.startswith("#")


def test_refs_inside_the_schema_and_its_id_are_followed():
    schema = {"$id": "https://plugin.example/s.json", "$defs": {"n": {"type": "integer"}},
              "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "https://plugin.example/s.json#/$defs/n"}}}
    assert problem({"a": 1, "b": 2}, schema) is None
    assert problem({"a": 1, "b": "x"}, schema) == "b: 'x' is not of type 'integer'"


def test_patterns_that_backtrack_are_cut_off_in_time():
    for schema, args in [
        ({"properties": {"t": {"type": "string", "pattern": "^(a|a)+$"}}}, {"t": "a" * 60 + "!"}),
        ({"patternProperties": {"^(a|a)+$": {}}}, {"a" * 60 + "!": 1}),
        ({"patternProperties": {"^(a|a)+$": {}}, "additionalProperties": False}, {"a" * 60 + "!": 1}),
        ({"propertyNames": {"pattern": "^(a|a)+$"}}, {"a" * 60 + "!": 1}),
    ]:
        assert "too long to check" in unusable(args, schema)


def test_patterns_still_check():
    schema = {"properties": {"t": {"type": "string", "pattern": "^[a-z]+$"}}, "additionalProperties": False,
              "patternProperties": {"^x-": {"type": "integer"}}}
    assert problem({"t": "abc", "x-1": 2}, schema) is None
    assert "does not match" in problem({"t": "ABC"}, schema)
    assert "x-1" in problem({"x-1": "s"}, schema)
    assert "'y' unexpected" in problem({"y": 1}, schema)


def test_schemas_that_cannot_be_used_say_why():
    assert "not a valid JSON schema" in unusable({}, {"type": "nope"})
    assert "itself without end" in unusable({}, {"$ref": "#"})
    assert "characters" in unusable({"t": "a"}, {"properties": {"t": {"pattern": "a" * (PATTERN_MAX + 1)}}})
    assert "is not a 'regex'" in unusable({"t": "a"}, {"properties": {"t": {"type": "string", "pattern": "(unclosed"}}})
    assert "unevaluatedProperties" in unusable({}, {"patternProperties": {"a": {}}, "unevaluatedProperties": False})
    assert "not a JSON object" in unusable({}, ["type"])


async def test_the_check_does_not_hold_the_event_loop():
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    with pytest.raises(Unusable):
        await check({"t": "a" * 60 + "!"}, {"properties": {"t": {"type": "string", "pattern": "^(a|a)+$"}}})
    ticker.cancel()
    assert ticks >= 5  # the loop went on while the half-second pattern budget was spent


def tool(schema) -> Tool:
    async def run(args, ctx):
        return Result("ran")

    return Tool("t", "", schema, run)


async def call(arguments: str, schema) -> tuple[str, bool]:
    ended = []
    await loop.run_tool(loop.ToolCall("c", "t", arguments), {"t": tool(schema)},
                        lambda e: ended.append(e) if isinstance(e, loop.ToolEnd) else None, None)
    return ended[0].output, ended[0].ok


async def test_a_schema_that_cannot_be_used_is_a_failed_call():
    output, ok = await call("{}", {"type": "object", "$ref": "file:///etc/passwd"})
    assert not ok and "cannot be used, so the call was not made" in output and "root:" not in output


async def test_arguments_nested_too_deeply_or_too_long_are_failed_calls():
    output, ok = await call("[" * 100_000 + "]" * 100_000, {"type": "object"})
    assert not ok and "not valid JSON" in output
    output, ok = await call(json.dumps({"t": "x" * 1_000_001}), {"type": "object"})
    assert not ok and "too long" in output
