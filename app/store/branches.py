"""Edits and answer versions as rows (the rule of which is current: app/branches.py)."""
from __future__ import annotations

from dataclasses import replace

from . import db as dbm
from ..branches import Path, Tree, turn_heads, versions
from ..tables import Item, asked, order, retried
from .rows import Base

# What the tree needs of a head: never the texts (a message may be 100,000 characters).
HEAD_COLUMNS = "id, chat, kind, turn, parent, chosen, answer, steer, read_after, done, model, thinking, files"


class Branches(Base):
    def tree(self, chat: int) -> Tree:
        """The conversation's heads (its user and retry items) as a tree."""
        return Tree(Item.from_row(r) for r in self._all(
            f"SELECT {HEAD_COLUMNS} FROM items WHERE chat = ? AND kind IN ('user', 'retry')", [chat]))

    def path(self, chat: int) -> Path:
        return self.tree(chat).path()

    def path_items(self, chat: int, path: Path | None = None) -> list[Item]:
        """The items on the current path (or `path`), in page order; the plan item is not among them."""
        path = path if path is not None else self.path(chat)
        first, last = (path.steps[0].turn, path.steps[-1].turn) if path.steps else (1, 0)
        return self.on(path, self._all("SELECT * FROM items WHERE chat = ? AND (turn BETWEEN ? AND ? OR turn = 0) "
                                      "AND kind != 'plan'", [chat, first, last]))

    def lineage_items(self, chat: int, path: Path, start: int = 0) -> list[Item]:
        """The items of `path` (a lineage: Tree.lineage) from turn `start` on, without reading
        the turns before it: what the model is sent when it answers the path's last message."""
        if not path.steps:
            return []
        rows = self._all("SELECT * FROM items WHERE chat = ? AND turn BETWEEN ? AND ? AND kind != 'plan'",
                        [chat, start, path.steps[-1].turn])
        return self.on(path, rows)

    def on(self, path: Path, rows) -> list[Item]:
        turns = path.heads
        items = self._items(r for r in rows if r["turn"] in turns or not r["turn"])
        return sorted((it for it in items if path.holds(it) and it.kind != "retry"), key=order)

    def answer_items(self, head: Item) -> list[Item]:
        """The items of the answer version `head` starts (a turn's user item or a retry), in page order."""
        turn = head.turn or head.id
        rows = self._items(self._all("SELECT * FROM items WHERE chat = ? AND turn = ?", [head.chat, turn]))
        heads = turn_heads(turn, rows)
        return versions(heads, rows)[heads.index(head.id)] if head.id in heads else []

    def head(self, chat: int) -> int:
        """The head a new message follows: the end of the current path."""
        return self.path(chat).last

    # --- the person's edits and choices -----------------------------------------------

    def edit(self, original: Item, text: str) -> Item:
        """A new version of a message: a sibling of `original` (same parent, same files, picks,
        model, outside mark and search switch), current from now on; the original and what followed it stay."""
        if original.kind != "user" or not original.starts_turn:
            raise ValueError("only a message that began a turn can be edited")
        with self.write() as db:
            made = self.add(replace(asked(original.chat, text, model=original.model, thinking=original.thinking),
                                    files=original.files, knowledge=original.knowledge, parent=original.parent,
                                    outside=original.outside,  # begun from a plugin's words, it is still outside text
                                    search_web=original.search_web))
            if made.parent != original.parent:  # parent 0 (the start) reads as "follow the path" in add
                db.conn.execute("UPDATE items SET parent = ? WHERE id = ?", [original.parent, made.id])
                made = replace(made, parent=original.parent)
        return made

    def again(self, user: Item, model: str = "") -> Item:
        """A new version of `user`'s answer (current from now on: Store.add sets its `answer` back to the newest)."""
        return self.add(replace(retried(user.chat, model), turn=user.id))

    def choose_message(self, user: Item) -> None:
        """Make a message current among the edits at its fork: the greatest `chosen` wins, so
        it takes the rev of this write."""
        with self.write() as db:
            rev = dbm.bump(db)
            db.conn.execute("UPDATE items SET chosen = ?, rev = ?, updated = ? WHERE id = ?",
                            [rev, rev, dbm.now(), user.id])

    def choose_answer(self, user: Item, head: int) -> None:
        """Make version `head` (the user item itself or one of its turn's retries) its answer."""
        self.update(user.id, answer=head)
