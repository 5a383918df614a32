"""What a model's answer to "name this conversation" becomes: a title of at most six words,
cut on a word boundary, or nothing (the conversation keeps its first words) when the answer
is not a title at all. Small models answer with a whole sentence, a heading ("SECTION 1") or
a reply to the conversation itself; none of those is a name for it. (Whether a title fits
the conversation is not judged: a good one need share no word with it.)"""
from __future__ import annotations

import re

TITLE_WORDS = 6
TITLE_CHARS = 80
SENTENCE_WORDS = 12  # an answer this long is a sentence someone would say, not a name
_WORD = re.compile(r"[^\W\d_]{4,}")
_NOT_TITLES = re.compile(
    r"^(?:section|chapter|part|step|title|heading|introduction|summary|conversation|untitled|none|n/?a)\b[\s\d.:-]*$"
    r"|^(?:sure|certainly|of course|here is|here's|i am|i'm|i can|as an ai|hello|hi)\b", re.I)


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
    for word in words[:TITLE_WORDS]:
        if len(" ".join([*kept, word])) > TITLE_CHARS:
            break
        kept.append(word)
    if len(kept) < len(words):  # cut: end at the last clause in it, not in the middle of the next
        ends = [i for i, w in enumerate(kept[:-1]) if i >= 1 and w[-1] in ",;:–—"]
        if ends:
            kept = kept[:ends[-1] + 1]
    return " ".join(kept).rstrip(",;:-–—")
