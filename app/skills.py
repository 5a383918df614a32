"""Skills: instructions every agent can load by name, and the SKILL.md files they travel in.

A SKILL.md (the Agent Skills convention) is YAML front matter between `---` lines with at
least `name` and `description`, then the Markdown body. The front matter is read by the
small, strict parser below rather than a YAML library: it takes `key: value` lines, quoted
values and `|`/`>` blocks, which is all the convention uses, and refuses what it does not
understand with a message a person can act on. Other keys (license, metadata ...) are
read past and not kept.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence

from .tables import NAME_MAX, Skill

DESCRIPTION_MAX = 2_000
FILE_MAX = 256 * 1024  # bytes of a SKILL.md, imported or exported
PROMPT_MAX = 20_000    # characters of the skills list in a system prompt
NAMES_MAX = 500        # names listed when load_skill is asked for an unknown one


class BadSkill(ValueError):
    """A skill (or a SKILL.md) that cannot be stored; the message says why, for a person."""


# --- values -------------------------------------------------------------------------------


def lines_of(text: str) -> str:
    """Line ends as \n: browsers send form text with \r\n."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def checked(name: str, description: str = "", body: str = "") -> Skill:
    """A skill from what a person (or a file) gave, tidied, or BadSkill saying what is wrong."""
    name = lines_of(name).strip()
    description = lines_of(description).strip()
    body = lines_of(body).strip("\n").rstrip()
    if not name:
        raise BadSkill("A skill needs a name.")
    if len(name) > NAME_MAX:
        raise BadSkill(f"A skill's name is at most {NAME_MAX} characters (this one has {len(name)}).")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BadSkill("A skill's name is one line of text, without tabs or control characters.")
    if len(description) > DESCRIPTION_MAX:
        raise BadSkill(f"A skill's description is at most {DESCRIPTION_MAX:,} characters "
                       f"(this one has {len(description):,}).")
    if "\x00" in description or "\x00" in body:
        raise BadSkill("A skill's description and body are text, without NUL characters.")
    skill = Skill(name=name, description=description, body=body)
    size = len(exported(skill).encode())
    if size > FILE_MAX:
        # so every stored skill exports to a file that imports again
        raise BadSkill(f"A skill is at most {FILE_MAX // 1024} KB as a SKILL.md file (this one would be "
                       f"{size / 1024:,.0f} KB).")
    return skill


def same_name(a: str, b: str) -> bool:
    """Names that a model (or a person) would take for the same skill."""
    return a.strip().casefold() == b.strip().casefold()


def find(skills: Sequence[Skill], name: str) -> Skill | None:
    """The skill a model means by `name`: exactly, else ignoring case and spaces around it."""
    for s in skills:
        if s.name == name:
            return s
    for s in skills:
        if same_name(s.name, name):
            return s
    return None


# --- SKILL.md -----------------------------------------------------------------------------

_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*))?$")
_BLOCK = re.compile(r"([|>])([+-]?)([1-9]?)([+-]?)$")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
            "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
            "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_HEX = {"x": 2, "u": 4, "U": 8}
_PLAIN_SAFE = re.compile(r"[A-Za-z][A-Za-z0-9 _.,;()/+-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "none", "nan", "inf"}


def parsed(data: bytes) -> Skill:
    """The skill in a SKILL.md file, or BadSkill saying what is wrong with the file."""
    if not data.strip():
        raise BadSkill("The file is empty.")
    if len(data) > FILE_MAX:
        raise BadSkill(f"The file is too large: a SKILL.md is at most {FILE_MAX // 1024} KB "
                       f"(this one is {len(data) / 1024:,.0f} KB).")
    if b"\x00" in data:
        raise BadSkill("This is not a text file (it holds NUL bytes): a SKILL.md is Markdown text.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BadSkill(f"The file is not UTF-8 text (byte {e.start + 1} cannot be read): "
                       "save it as UTF-8 and try again.") from None
    lines = lines_of(text).split("\n")  # not splitlines(): it also splits at \x85, \u2028 ...
    if lines[0].rstrip() != "---":
        raise BadSkill("The file has no front matter: a SKILL.md starts with a line “---”, then "
                       "“name: …” and “description: …”, then “---”, then the instructions.")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() == "---")
    except StopIteration:
        raise BadSkill("The front matter never ends: put a line “---” after “description: …”.") from None
    meta = front_matter(lines[1:end])
    for key in ("name", "description"):
        if key in meta and not isinstance(meta[key], str):
            raise BadSkill(f"“{key}” in the front matter must be text.")
    name = meta.get("name")
    if not name or not str(name).strip():
        raise BadSkill("The front matter has no “name: …” line: every skill needs a name.")
    return checked(str(name), str(meta.get("description") or ""), "\n".join(lines[end + 1:]))


def front_matter(lines: list[str]) -> dict[str, str | None]:
    """`key: value` lines as a dict; a key whose value is a nested block maps to None."""
    meta: dict[str, str | None] = {}
    i = 0
    while i < len(lines):
        line, n = lines[i], i + 1
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t":
            raise BadSkill(f"Line {n} of the front matter is indented but follows no key; "
                           "each line is “key: value”.")
        m = _KEY.match(line.rstrip())
        if not m:
            raise BadSkill(f"Line {n} of the front matter is not “key: value”: {line[:60]!r}.")
        key, raw = m.group(1), (m.group(2) or "").strip()
        if key in meta:
            raise BadSkill(f"“{key}” appears twice in the front matter.")
        more = []  # the indented (or blank) lines that belong to this key
        while i < len(lines) and (not lines[i].strip() or lines[i][0] in " \t"):
            if lines[i].startswith("\t") and lines[i].strip():
                raise BadSkill(f"Line {i + 1} of the front matter is indented with a tab; use spaces.")
            more.append(lines[i])
            i += 1
        while more and not more[-1].strip():
            more.pop()
        try:
            meta[key] = value(raw, more)
        except BadSkill as e:
            raise BadSkill(f"“{key}” (line {n} of the front matter): {e}") from None
    return meta


def value(raw: str, more: list[str]) -> str | None:
    """One key's value: plain, quoted, or a `|`/`>` block made of the lines in `more`."""
    block = _BLOCK.match(raw.split(" #")[0].rstrip())
    if block:
        indent = int(block.group(3)) if block.group(3) else None
        return block_scalar(more, folded=block.group(1) == ">", indent=indent)
    if raw.startswith("#"):
        raw = ""  # only a comment
    if not raw:
        return None if more else ""  # None: a nested mapping or list (metadata: ...), not text
    if raw[0] == '"':
        text, rest = double_quoted(raw)
    elif raw[0] == "'":
        text, rest = single_quoted(raw)
    elif raw[0] in "[{&*!%@`|>" or raw == "-" or raw.startswith(("- ", "? ", ": ")):
        raise BadSkill("write the value as plain text or in quotes (lists, maps, anchors and tags are not read).")
    else:
        text, rest = raw.split(" #")[0].rstrip(), ""
        if more:  # a plain value may go on over indented lines, folded into one
            text = " ".join([text, *(m.strip() for m in more if m.strip())])
            more = []
    if rest and not rest.lstrip().startswith("#"):
        raise BadSkill(f"unexpected text after the closing quote: {rest.strip()[:40]!r}.")
    if more:
        raise BadSkill("a quoted value is one line; use “|” or “>” for text over several lines.")
    return text


def double_quoted(raw: str) -> tuple[str, str]:
    out, i = [], 1
    while i < len(raw):
        c = raw[i]
        if c == '"':
            return "".join(out), raw[i + 1:]
        if c == "\\":
            e = raw[i + 1:i + 2]
            if e in _HEX:
                digits = raw[i + 2:i + 2 + _HEX[e]]
                if len(digits) != _HEX[e] or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise BadSkill(f"“\\{e}” needs {_HEX[e]} hex digits.")
                code = int(digits, 16)
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise BadSkill(f"“\\{e}{digits}” is not a character.")
                out.append(chr(code))
                i += 2 + _HEX[e]
                continue
            if e not in _ESCAPES:
                raise BadSkill(f"“\\{e}” is not an escape a double-quoted value can hold.")
            out.append(_ESCAPES[e])
            i += 2
            continue
        out.append(c)
        i += 1
    raise BadSkill("the closing quote (\") is missing.")


def single_quoted(raw: str) -> tuple[str, str]:
    out, i = [], 1
    while i < len(raw):
        if raw[i] == "'":
            if raw[i + 1:i + 2] == "'":  # '' is a quote inside single quotes
                out.append("'")
                i += 2
                continue
            return "".join(out), raw[i + 1:]
        out.append(raw[i])
        i += 1
    raise BadSkill("the closing quote (') is missing.")


def block_scalar(more: list[str], folded: bool, indent: int | None) -> str:
    """A `|` (lines kept) or `>` (lines folded into paragraphs) block, as YAML reads it.

    Chomping indicators (`|-`, `>+`) are accepted; the value is trimmed when stored anyway.
    """
    if indent is None:
        firsts = [len(m) - len(m.lstrip(" ")) for m in more if m.strip()]
        indent = firsts[0] if firsts else 1
    lines = []
    for m in more:
        if m.strip() and len(m) - len(m.lstrip(" ")) < indent:
            raise BadSkill("a line of the block is indented less than its first line.")
        lines.append(m[indent:] if m.strip() else "")
    if not folded:
        return "\n".join(lines)
    # Folded: lines of a paragraph join with a space, a blank line is a line break, and
    # more-indented lines (code, say) keep their breaks.
    text, previous, blanks = "", None, 0
    for line in lines:
        if not line:
            blanks += 1
            continue
        kind = "more" if line[0] in " \t" else "text"
        if previous is None:
            text = "\n" * blanks + line
        elif previous == kind == "text":
            text += ("\n" * blanks or " ") + line
        else:
            text += "\n" * (blanks + 1) + line
        previous, blanks = kind, 0
    return text


def plain_ok(text: str) -> bool:
    """Whether `text` reads back as itself without quotes, here and in any YAML reader."""
    return bool(_PLAIN_SAFE.fullmatch(text)) and not text.endswith(" ") and text.lower() not in _YAML_WORDS


def scalar(text: str) -> str:
    if plain_ok(text):
        return text
    quoted = json.dumps(text, ensure_ascii=False)  # JSON strings are YAML double-quoted scalars
    for c in ("\x7f", "\x85", "\u2028", "\u2029", "\ufeff"):
        quoted = quoted.replace(c, f"\\u{ord(c):04x}")
    return quoted


def exported(skill: Skill) -> str:
    """The skill as a SKILL.md file that `parsed` reads back to the same skill."""
    head = f"---\nname: {scalar(skill.name)}\ndescription: {scalar(skill.description)}\n---\n"
    return head + (f"\n{skill.body}\n" if skill.body else "")


# --- the system prompt ----------------------------------------------------------------------


def prompt_section(skills: Sequence[Skill]) -> str:
    """What every agent is told about the skills: each one's name and when to use it."""
    if not skills:
        return ""
    lines, size, left = [], 0, 0
    for s in skills:
        about = " ".join(s.description.split()) or "(no description)"
        line = f"- {s.name}: {about}"
        if size + len(line) > PROMPT_MAX:
            left += 1
            continue
        lines.append(line)
        size += len(line) + 1
    if left:
        lines.append(f"- ({left} more not listed here; calling load_skill with a name that does not exist "
                     "lists every name)")
    return ("## Skills\n\n"
            "Skills are instructions for particular tasks. Before you start a task that a skill's "
            "description fits, call `load_skill` with the skill's name to read it, then follow it. "
            "Load a skill only when you need it, once per conversation.\n\n" + "\n".join(lines))


def unknown(skills: Sequence[Skill], name: str) -> str:
    """The answer to load_skill for a name no skill has: what there is instead."""
    if not skills:
        return f"There is no skill named {name!r}: there are no skills."
    names = [s.name for s in skills]
    listed = ", ".join(json.dumps(n, ensure_ascii=False) for n in names[:NAMES_MAX])
    if len(names) > NAMES_MAX:
        listed += f" and {len(names) - NAMES_MAX} more"
    return f"There is no skill named {name!r}. The skills are: {listed}."
