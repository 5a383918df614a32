"""Search: what a person types, as a query FTS5 can never refuse; FTS5's hits, as safe HTML.

The words are never FTS5 syntax: each becomes a quoted string, so `AND`, `NEAR(`, `col:x`,
`^`, parentheses and stray quotes are only words (punctuation inside a quoted string just
separates tokens). A trailing `*` keeps its meaning, a prefix search, since we add it
ourselves after the closing quote. A conversation matches when it holds every word,
in its title or anywhere in what was said.

Snippets come back from SQLite as the stored Markdown with marks around the hits. They are
read as Markdown and only their text kept (`plain`: no `**`, no link targets, code as its
text), so a result reads as the conversation does. The marks are random strings no stored
text can contain, so everything between them is escaped and only the marks become `<mark>`.
"""
from __future__ import annotations

import secrets
import unicodedata
from dataclasses import dataclass
from datetime import datetime

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from ..store import Store

QUERY_MAX = 500  # characters of a query that are read: more is not a search, it is a paste
TERMS_MAX = 12
RESULTS_MAX = 50
MARKS = (f"\x02{secrets.token_hex(8)}\x03", f"\x02{secrets.token_hex(8)}\x04")


@dataclass(frozen=True)
class Hit:
    chat: int
    title: Markup    # the title, its hits marked
    snippet: Markup  # the best matching message or answer around its hits ('' if only the title matched)
    item: int | None
    when: datetime | None = None  # the conversation's last message
    agent: str = ""               # the name of the agent it is with


def clean(query: str) -> str:
    """The query as text SQLite and the page can take: no control characters (NUL included),
    no lone surrogates, at most QUERY_MAX characters."""
    kept = []
    for ch in query[: QUERY_MAX * 2]:
        category = unicodedata.category(ch)
        if category == "Cs":
            continue
        kept.append(" " if category == "Cc" else ch)
    return "".join(kept)[:QUERY_MAX].strip()


def searchable(ch: str) -> bool:
    # What FTS5's unicode61 tokenizer keeps as part of a token: letters, numbers, private use.
    return unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Co"


def terms(query: str) -> list[str]:
    """The person's words as FTS5 strings, each quoted; words with nothing searchable are
    dropped (a lone `"` or `*` is no word), as are repeats."""
    out: list[str] = []
    for word in clean(query).split():
        core = word.rstrip("*")
        if not any(searchable(ch) for ch in core):
            continue
        term = '"' + core.replace('"', '""') + '"' + ("*" if core != word else "")
        if term not in out:
            out.append(term)
        if len(out) == TERMS_MAX:
            break
    return out


_reader = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def plain(markdown: str) -> str:
    """The text a Markdown snippet shows, its syntax gone: inline text and code, image
    descriptions, code blocks as their lines; blocks joined by a space."""
    out: list[str] = []
    for token in _reader.parse(markdown):
        if token.type in ("fence", "code_block"):
            out.append(token.content)
        for child in token.children or ():
            if child.type in ("text", "code_inline"):
                out.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                out.append(" ")
            elif child.type == "image":
                out.append("".join(c.content for c in child.children or ()))
        if token.block and token.type.endswith("_close") or token.type in ("fence", "code_block"):
            out.append(" ")
    return " ".join("".join(out).split())


def marked(text: str) -> Markup:
    """FTS5 output with MARKS around its hits, as HTML: escaped, hits in `<mark>`."""
    opening, closing = MARKS
    pieces = text.split(opening)
    html = [escape(pieces[0].replace(closing, ""))]
    for piece in pieces[1:]:
        hit, _, rest = piece.partition(closing)
        html.append(Markup("<mark>") + escape(hit.replace(closing, "")) + Markup("</mark>")
                    + escape(rest.replace(closing, "")))
    return Markup("").join(html)


def find(store: Store, query: str, person: int | None, limit: int = RESULTS_MAX) -> list[Hit]:
    """`person`'s conversations that match `query`, newest first."""
    return [
        Hit(chat=h["chat"],
            title=marked(h["title_marked"]) if h["title_marked"] else escape(h["title"] or "New conversation"),
            snippet=marked(plain(h["snippet"])) if h["snippet"] else Markup(""),
            item=h["item"],
            when=datetime.fromtimestamp(h["active"] / 1000) if h.get("active") else None,
            agent=h.get("agent") or "")
        for h in store.search(terms(query), MARKS, person, limit)
    ]
