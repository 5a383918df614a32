"""A conversation's title, the one rule of it: at first the person's first words
(`first_words`, what Store.add gives a new conversation), then what a model's answer to
"name this conversation" becomes (`title_from`): at most six words, cut on a word boundary,
or nothing (the conversation keeps its first words) when the answer is not a title at all.
Small models answer with a whole sentence, a heading ("SECTION 1") or a reply to the
conversation itself; none of those is a name for it. (Whether a title fits the conversation
is not judged: a good one need share no word with it.) Either is at most TITLE_MAX
characters, what a person may rename one to as well."""
from __future__ import annotations

import re

TITLE_MAX = 80       # characters of any title: the first words', a model's, a person's rename
FIRST_WORDS = 8      # the first title: this many of the person's words, then "…"
NAMED_WORDS = 6      # a model's title: a name, shorter than the first words it replaces
SENTENCE_WORDS = 12  # an answer this long is a sentence someone would say, not a name
_WORD = re.compile(r"[^\W\d_]{4,}")
_NOT_TITLES = re.compile(
    r"^(?:section|chapter|part|step|title|heading|introduction|summary|conversation|untitled|none|n/?a)\b[\s\d.:-]*$"
    r"|^(?:sure|certainly|of course|here is|here's|i am|i'm|i can|as an ai|hello|hi)\b", re.I)


def first_words(text: str) -> str:
    """A conversation's first title: the person's first words."""
    words = text.split()
    title = " ".join(words[:FIRST_WORDS])
    if len(title) > TITLE_MAX:
        title = title[: TITLE_MAX - 1].rstrip() + "…"
    elif len(words) > FIRST_WORDS:
        title += "…"
    return title


def title_from(raw: str) -> str:
    """The title `raw` (the model's answer) gives a conversation; '' when it is not a title
    (the conversation keeps its first words)."""
    line = next((ln for ln in raw.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^\s*(?:#+\s*|[-*]\s+|\d+[.)]\s+)", "", line)
    line = line.strip().strip("#*_`\"'“”‘’«» ").strip()
    line = re.sub(r"^(?:title|name)\s*:\s*", "", line, flags=re.I).strip().strip("\"'“”‘’«» ")
    line = line.rstrip(".!?;:,").strip()
    words = line.split()
    if not words or len(words) > SENTENCE_WORDS or not _WORD.search(line) or _NOT_TITLES.search(line):
        return ""
    kept: list[str] = []
    for word in words[:NAMED_WORDS]:
        if len(" ".join([*kept, word])) > TITLE_MAX:
            break
        kept.append(word)
    if len(kept) < len(words):  # cut: end at the last clause in it, not in the middle of the next
        ends = [i for i, w in enumerate(kept[:-1]) if i >= 1 and w[-1] in ",;:–—"]
        if ends:
            kept = kept[:ends[-1] + 1]
    return " ".join(kept).rstrip(",;:-–—")
