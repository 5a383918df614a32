"""A call's arguments checked against its tool's JSON schema, safely.

A plugin's schema is the plugin's to write, so checking it is checking untrusted input:
- it never reaches the network or the disk: `$ref`s resolve inside the schema only (a
  `referencing` registry with nothing in it and no retrieval), so a `$ref` to
  `http://...` or `file:///...` is a schema that cannot be used, never a fetch;
- its regular expressions (`pattern`, `patternProperties`, and the `additionalProperties`
  that consults them) run on the `regex` engine with a time budget for the whole check,
  not on `re` (which backtracks without bound and holds the GIL while it does);
- the whole check runs in a thread, with a deadline, so a slow one never holds the event
  loop.
A schema that cannot be used is `Unusable`: the call fails and the model reads why; it is
never an exception that ends a run.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import jsonschema
import regex
from jsonschema import validators
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable

REGEX_BUDGET = 0.5       # seconds of pattern matching one check may spend, all patterns together
CHECK_SECONDS = 5.0      # the whole check, in its thread
PATTERN_MAX = 1_000      # characters of one pattern; a longer one is refused, not compiled
ARGUMENTS_MAX = 1_000_000  # characters of a call's raw arguments

EMPTY = Registry()       # no resources and no `retrieve`: a $ref outside the schema is Unresolvable


class Unusable(Exception):
    """The tool's schema cannot be used to check arguments; the message says why."""


_budget = threading.local()


def _search(pattern: str, text: str) -> bool:
    if len(pattern) > PATTERN_MAX:
        raise Unusable(f"a pattern of {len(pattern):,} characters (at most {PATTERN_MAX:,})")
    left = _budget.deadline - time.monotonic()
    if left <= 0:
        raise Unusable("its patterns took too long to check")
    try:
        return regex.search(pattern, text, timeout=left, concurrent=True) is not None
    except TimeoutError:
        raise Unusable("its patterns took too long to check") from None
    except (regex.error, TypeError, ValueError) as e:
        raise Unusable(f"the pattern {pattern[:80]!r} is not valid ({e})") from None


def _pattern(validator, pattern, instance, schema) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance[:80]!r} does not match {pattern[:80]!r}")


def _pattern_properties(validator, patterns, instance, schema) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, extra_schema, instance, schema) -> Iterator[ValidationError]:
    # jsonschema's own consults patternProperties with `re`: the same, through _search.
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [k for k in instance if k not in known and not any(_search(p, k) for p in patterns)]
    if validator.is_type(extra_schema, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra_schema, path=key)
    elif not extra_schema and extras:
        listed = ", ".join(repr(k)[:80] for k in sorted(extras)[:10])
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


_SAFE = {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties}
_classes: dict[type, type] = {}


def _safe_class(base: type) -> type:
    if base not in _classes:
        _classes[base] = validators.extend(base, {k: v for k, v in _SAFE.items() if k in base.VALIDATORS})
    return _classes[base]


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                yield key, value
                stack.append(value)
        elif isinstance(current, list):
            stack.extend(current)


def problem(args: Any, schema: Any) -> str | None:
    """Why `args` do not fit `schema`, in one line, or None. Raises Unusable when the
    schema cannot be used. Blocking and bounded: call it through `check`."""
    if not isinstance(schema, dict):
        raise Unusable("the schema is not a JSON object")
    keys = list(_walk(schema))
    for key, value in keys:
        if key == "pattern" and isinstance(value, str) and len(value) > PATTERN_MAX:
            raise Unusable(f"a pattern of {len(value):,} characters (at most {PATTERN_MAX:,})")
        if key == "patternProperties" and isinstance(value, dict) and any(len(p) > PATTERN_MAX for p in value):
            raise Unusable(f"a pattern of more than {PATTERN_MAX:,} characters")
    if any(k == "unevaluatedProperties" for k, _ in keys) and any(k == "patternProperties" for k, _ in keys):
        # jsonschema finds the evaluated keys with `re` itself: not a check to run on a plugin's patterns
        raise Unusable("it combines unevaluatedProperties with patternProperties")
    _budget.deadline = time.monotonic() + REGEX_BUDGET
    try:
        cls = _safe_class(validators.validator_for(schema, default=jsonschema.Draft202012Validator))
        cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(cls(schema, registry=EMPTY).iter_errors(args))
    except SchemaError as e:
        raise Unusable(f"it is not a valid JSON schema ({e.message[:200]})") from None
    except Unresolvable as e:
        raise Unusable(f"it refers to {str(getattr(e, 'ref', '') or e)[:200]!r}, outside the schema "
                       "(only references inside it are followed)") from None
    except RecursionError:
        raise Unusable("it refers to itself without end") from None
    except Unusable:
        raise
    except Exception as e:  # whatever else a hostile schema makes the validator raise
        raise Unusable(f"it could not be used ({type(e).__name__})") from None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"[:300]


async def check(args: Any, schema: Any) -> str | None:
    """`problem`, in a thread, within CHECK_SECONDS (else Unusable). asyncio.timeout, not
    wait_for, which on Python 3.11 can lose a Stop that comes as the check ends."""
    try:
        async with asyncio.timeout(CHECK_SECONDS):
            return await asyncio.to_thread(problem, args, schema)
    except TimeoutError:
        raise Unusable(f"checking the arguments took more than {CHECK_SECONDS:g} s") from None
