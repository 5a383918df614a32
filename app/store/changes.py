"""What the feed reads first at each dispatch: the current rev, and which families of rows
changed since its cursor, in one statement (app/feed/dispatch.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .rows import Base


@dataclass(frozen=True)
class Changed:
    """The current rev, and whether each family the feed reads besides items has a row
    with a rev after the cursor (up to it): the feed reads only those that do."""

    rev: int
    conversations: bool = False
    tombstones: bool = False
    builtin: bool = False
    contexts: bool = False  # of the conversations asked about
    documents: bool = False  # a document's reading (its page follows it)


class Changes(Base):
    def changed_since(self, rev: int, chats: list[int] = ()) -> Changed:
        """The current rev and which of conversations, tombstones, the built-in model's row,
        documents and the contexts of `chats` changed after `rev`. While an answer grows only its item
        does: one statement instead of a rev read and four reads that find nothing. Each
        EXISTS stops at its first row (an index on rev, or the ids asked about)."""
        sql = ("SELECT r.rev,"
               " EXISTS (SELECT 1 FROM conversations WHERE rev > ? AND rev <= r.rev),"
               " EXISTS (SELECT 1 FROM tombstones WHERE rev > ? AND rev <= r.rev),"
               " EXISTS (SELECT 1 FROM builtin_model WHERE id = 1 AND rev > ? AND rev <= r.rev),"
               " EXISTS (SELECT 1 FROM documents WHERE rev > ? AND rev <= r.rev)")
        params: list[int] = [rev, rev, rev, rev]
        if chats:
            marks = ",".join("?" * len(chats))
            sql += f", EXISTS (SELECT 1 FROM contexts WHERE id IN ({marks}) AND rev > ? AND rev <= r.rev)"
            params += [*chats, rev]
        row = self._one(sql + " FROM revs r WHERE r.id = 1", params)
        return Changed(row[0], bool(row[1]), bool(row[2]), bool(row[3]), bool(row[5]) if chats else False,
                       bool(row[4]))
