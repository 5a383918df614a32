"""The form of an MCP elicitation: the server's requested schema as fields, and the person's
answer checked against it.

The MCP spec restricts an elicitation's `requestedSchema` to a flat object of primitive
properties: strings (with `minLength`, `maxLength` and the formats email, uri, date and
date-time), numbers and integers (with `minimum` and `maximum`), booleans, single-choice
enums (`enum`, optionally with the older `enumNames`, or `oneOf` of `{const, title}`) and
multiple-choice enums (an array whose `items` have `enum` or `anyOf` of `{const, title}`,
with `minItems` and `maxItems`). Anything else is refused (`Unshowable`) in words the
person and the server read, rather than shown as a form that cannot say what is asked.

Fields are named by position (`f0`, `f1` ...), never by the server's property names: those
are arbitrary strings a page must not use as HTML names or ids.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

MAX_FIELDS = 40
MAX_OPTIONS = 200
MAX_TEXT = 10_000  # characters of one string answer, whatever the schema allows
MAX_LABEL = 300  # characters of a title or description shown
MAX_NUMBER_TEXT = 40
FORMATS = ("email", "uri", "date", "date-time")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Unshowable(ValueError):
    """A requested schema that is not a form Tabletalk can show (the reason, in words)."""


@dataclass(frozen=True)
class Option:
    value: str
    label: str


@dataclass(frozen=True)
class Field:
    """One property of the requested schema, as the form shows and checks it."""

    index: int
    key: str             # the server's property name (sent back; never used in the HTML)
    kind: str            # string, number, integer, boolean, choice, choices
    label: str
    description: str = ""
    required: bool = False
    format: str = ""     # a string's format
    min: float | None = None  # minLength / minimum / minItems
    max: float | None = None  # maxLength / maximum / maxItems
    options: tuple[Option, ...] = ()
    default: Any = None

    @property
    def name(self) -> str:
        return f"f{self.index}"

    @property
    def input_type(self) -> str:
        if self.kind in ("number", "integer"):
            return "number"
        return {"email": "email", "uri": "url", "date": "date"}.get(self.format, "text")

    @property
    def step(self) -> str:
        return "1" if self.kind == "integer" else "any"

    @property
    def hint(self) -> str:
        """What the field takes, in words, beside its label."""
        if self.kind == "string":
            parts = [{"email": "an email address", "uri": "a web address (https://…)", "date": "a date",
                      "date-time": "a date and time, like 2026-12-01T13:45:00Z"}.get(self.format, "")]
            if self.min and self.max is not None:
                parts.append(f"{self.min:g} to {self.max:g} characters")
            elif self.max is not None:
                parts.append(f"at most {self.max:g} characters")
            elif self.min:
                parts.append(f"at least {self.min:g} characters")
            return "; ".join(p for p in parts if p)
        if self.kind in ("number", "integer"):
            what = "a whole number" if self.kind == "integer" else "a number"
            if self.min is not None and self.max is not None:
                return f"{what} from {self.min:g} to {self.max:g}"
            if self.min is not None:
                return f"{what}, at least {self.min:g}"
            if self.max is not None:
                return f"{what}, at most {self.max:g}"
            return what
        if self.kind == "choices":
            if self.min and self.max is not None:
                return f"choose {self.min:g} to {self.max:g}"
            if self.max is not None:
                return f"choose at most {self.max:g}"
            if self.min:
                return f"choose at least {self.min:g}"
        return ""

    def shown(self, value: Any) -> str:
        """The person's answer for this field as the page shows it after it was sent."""
        if self.kind == "boolean":
            return "yes" if value else "no"
        labels = {o.value: o.label for o in self.options}
        if self.kind == "choice":
            return labels.get(value, str(value))
        if self.kind == "choices":
            return ", ".join(labels.get(v, str(v)) for v in value) or "none"
        if isinstance(value, float) and value.is_integer():
            return f"{value:g}"
        return str(value)


@dataclass(frozen=True)
class Form:
    fields: tuple[Field, ...]

    def by_name(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}


def _text(value: Any, limit: int = MAX_LABEL) -> str:
    if not isinstance(value, str):
        return ""
    value = _CONTROL.sub("", value).strip()
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _bound(schema: dict, key: str, integer: bool = False) -> float | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Unshowable(f"its {key} is not a number")
    if integer and (value < 0 or value != int(value)):
        raise Unshowable(f"its {key} is not a count")
    return float(value)


def _options(schema: dict, *, where: str) -> tuple[Option, ...]:
    """A single or multiple choice's options: `enum` (with `enumNames`), or `oneOf`/`anyOf`
    of {const, title}."""
    found: list[Option] = []
    if isinstance(schema.get("enum"), list):
        names = schema.get("enumNames") if isinstance(schema.get("enumNames"), list) else []
        for i, value in enumerate(schema["enum"]):
            if not isinstance(value, str):
                raise Unshowable(f"{where} has a choice that is not text")
            label = names[i] if i < len(names) and isinstance(names[i], str) else value
            found.append(Option(value, _text(label) or value))
    else:
        listed = schema.get("oneOf", schema.get("anyOf"))
        if not isinstance(listed, list):
            raise Unshowable(f"{where} lists no choices")
        for entry in listed:
            if not isinstance(entry, dict) or not isinstance(entry.get("const"), str):
                raise Unshowable(f"{where} has a choice that is not text")
            found.append(Option(entry["const"], _text(entry.get("title")) or entry["const"]))
    if not found:
        raise Unshowable(f"{where} lists no choices")
    if len(found) > MAX_OPTIONS:
        raise Unshowable(f"{where} has more than {MAX_OPTIONS} choices")
    if len({o.value for o in found}) != len(found):
        raise Unshowable(f"{where} lists a choice twice")
    return tuple(found)


def form_of(schema: Any) -> Form:
    """The requested schema as a form; raises Unshowable (why, in words) for a schema that is
    not the flat object of primitive properties the spec allows."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise Unshowable("what it asks for is not an object of fields")
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise Unshowable("it asks for no fields")
    if len(properties) > MAX_FIELDS:
        raise Unshowable(f"it asks for more than {MAX_FIELDS} fields")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise Unshowable("its list of required fields is not a list of names")
    unknown = [r for r in required if r not in properties]
    if unknown:
        raise Unshowable(f"it requires a field it does not describe ({_text(unknown[0], 60)})")
    fields_: list[Field] = []
    for index, (key, prop) in enumerate(properties.items()):
        if not isinstance(key, str) or not key or len(key) > 200:
            raise Unshowable("a field's name is empty or too long")
        fields_.append(_field(index, key, prop, key in required))
    return Form(tuple(fields_))


def _field(index: int, key: str, prop: Any, required: bool) -> Field:
    where = f"the field {_text(key, 60)!r}"
    if not isinstance(prop, dict):
        raise Unshowable(f"{where} is not described")
    kind = prop.get("type")
    label = _text(prop.get("title")) or _text(key, 80)
    common = dict(index=index, key=key, label=label, description=_text(prop.get("description")), required=required)
    if kind == "string" and ("enum" in prop or "oneOf" in prop or "anyOf" in prop):
        options = _options(prop, where=where)
        default = prop.get("default") if prop.get("default") in {o.value for o in options} else None
        return Field(kind="choice", options=options, default=default, **common)
    if kind == "string":
        fmt = prop.get("format", "")
        if fmt and fmt not in FORMATS:
            raise Unshowable(f"{where} asks for the format {_text(fmt, 40)!r}, which is not one MCP allows")
        low, high = _bound(prop, "minLength", integer=True), _bound(prop, "maxLength", integer=True)
        default = prop.get("default") if isinstance(prop.get("default"), str) else None
        return Field(kind="string", format=fmt, min=low, max=high, default=default, **common)
    if kind in ("number", "integer"):
        low, high = _bound(prop, "minimum"), _bound(prop, "maximum")
        if low is not None and high is not None and low > high:
            raise Unshowable(f"{where} allows no number (its minimum is above its maximum)")
        default = prop.get("default")
        if isinstance(default, bool) or not isinstance(default, int | float):
            default = None
        return Field(kind=kind, min=low, max=high, default=default, **common)
    if kind == "boolean":
        default = prop.get("default") if isinstance(prop.get("default"), bool) else None
        return Field(kind="boolean", default=default, **common)
    if kind == "array" and isinstance(prop.get("items"), dict):
        options = _options(prop["items"], where=where)
        low, high = _bound(prop, "minItems", integer=True), _bound(prop, "maxItems", integer=True)
        default = prop.get("default")
        default = [v for v in default if v in {o.value for o in options}] if isinstance(default, list) else None
        return Field(kind="choices", options=options, min=low, max=high, default=default, **common)
    raise Unshowable(f"{where} is of a kind a form cannot ask for ({_text(str(kind), 40)})")


# --------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------


def initial(form: Form) -> dict[str, Any]:
    """What the form shows before the person typed anything: the schema's defaults."""
    return {f.name: f.default for f in form.fields if f.default is not None}


def answer(form: Form, posted: dict[str, list[str]]) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """The person's posted values checked against the form: (content for the server, errors
    by field name, the values as typed, to show again when refused). `posted` maps each form
    name to the values sent under it."""
    content: dict[str, Any] = {}
    errors: dict[str, str] = {}
    typed: dict[str, Any] = {}
    for f in form.fields:
        values = posted.get(f.name, [])
        if f.kind == "choices":
            typed[f.name] = [v for v in values if isinstance(v, str)][:MAX_OPTIONS]
        elif f.kind == "boolean":
            typed[f.name] = bool(values) and values[-1] in ("on", "true", "yes", "1")
        else:
            raw = values[-1] if values else ""
            typed[f.name] = raw[:MAX_TEXT + 1] if isinstance(raw, str) else ""
        try:
            value = _checked(f, typed[f.name])
        except ValueError as e:
            errors[f.name] = str(e)
            continue
        if value is not None:
            content[f.key] = value
    return content, errors, typed


def _checked(f: Field, raw: Any) -> Any:
    """One field's value as the server gets it (None: left out), or ValueError in words."""
    if f.kind == "boolean":
        return raw
    if f.kind == "choices":
        allowed = {o.value for o in f.options}
        if any(v not in allowed for v in raw):
            raise ValueError("Choose from the listed options.")
        chosen = [o.value for o in f.options if o.value in raw]
        if not chosen and not f.required:
            return None  # left out: minItems bounds an answer that is given
        if f.min is not None and len(chosen) < f.min:
            raise ValueError(f"Choose at least {f.min:g}.")
        if f.max is not None and len(chosen) > f.max:
            raise ValueError(f"Choose at most {f.max:g}.")
        return chosen
    text = raw.strip() if f.kind != "string" else raw
    if not text.strip():
        if f.required:
            raise ValueError("This is required.")
        return None
    if f.kind == "choice":
        if text not in {o.value for o in f.options}:
            raise ValueError("Choose one of the listed options.")
        return text
    if f.kind in ("number", "integer"):
        return _number(f, text)
    return _string(f, text)


def _number(f: Field, text: str) -> int | float:
    if len(text) > MAX_NUMBER_TEXT:
        raise ValueError("That is not a number.")
    try:
        value = float(text)
    except ValueError:
        raise ValueError("That is not a number." if f.kind == "number" else "That is not a whole number.") from None
    if not math.isfinite(value):
        raise ValueError("That is not a number.")
    if f.kind == "integer":
        if not value.is_integer():
            raise ValueError("That is not a whole number.")
        value = int(value)
    if f.min is not None and value < f.min:
        raise ValueError(f"It must be at least {f.min:g}.")
    if f.max is not None and value > f.max:
        raise ValueError(f"It must be at most {f.max:g}.")
    return value


def _string(f: Field, text: str) -> str:
    if len(text) > MAX_TEXT:
        raise ValueError(f"That is too long (at most {MAX_TEXT:,} characters).")
    if _CONTROL.search(text):
        raise ValueError("That holds control characters a form does not send.")
    if f.min is not None and len(text) < f.min:
        raise ValueError(f"It must be at least {f.min:g} characters.")
    if f.max is not None and len(text) > f.max:
        raise ValueError(f"It must be at most {f.max:g} characters.")
    if f.format == "email" and not _EMAIL.fullmatch(text.strip()):
        raise ValueError("That is not an email address.")
    if f.format == "uri":
        try:
            parts = urlsplit(text.strip())
        except ValueError:
            parts = None
        if parts is None or not parts.scheme or not (parts.netloc or parts.path):
            raise ValueError("That is not a web address (it starts with https:// or another scheme).")
    if f.format == "date":
        try:
            date.fromisoformat(text.strip())
        except ValueError:
            raise ValueError("That is not a date (2026-12-01).") from None
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
            raise ValueError("That is not a date (2026-12-01).")
    if f.format == "date-time":
        try:
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("That is not a date and time (2026-12-01T13:45:00Z).") from None
        if when.tzinfo is None:
            raise ValueError("Give the time zone too (2026-12-01T13:45:00Z, or +01:00 at the end).")
    return text.strip() if f.format else text
