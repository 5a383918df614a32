"""Edits and versions: a conversation is a tree of rows, and one rule says which branch is current.

- A *version head* is a turn's user item (its answer's first version) or one of that
  turn's `retry` items (versions 2, 3 ...).
- A person's message that starts a turn (`Item.starts_turn`) has a `parent`: the version
  head it follows, 0 at the start. An edit is a new user item with the same parent as the
  message it edits: the two are siblings at a fork, and the current one is the one with the
  greatest `chosen` (the rev it was written at, or picked at with the pager).
- A turn's current answer version is the head its user item's `answer` names, else the
  newest (its last retry, or the user item itself when there is none).
- The current path: the root's current child, then down through each turn's current
  version to that version's current child, and so on.
- Any other item of a turn belongs to the version whose head is the greatest head id not
  above its own id: a version's items are written after its head (Again is refused while
  an answer is being written).

Pure: no rows are read here. The page, the feed, the runner (the lineage of the message it
answers), the export all ask this module.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from .tables import Item, order


@dataclass(frozen=True)
class Step:
    """One turn on a path: its message, the edits at its fork and its answer's versions."""

    user: Item
    siblings: tuple[int, ...]  # the messages at this fork, oldest first (an edit makes one more)
    heads: tuple[int, ...]     # the turn's answer versions: its user item's id, then its retries'
    head: int                  # the version on this path

    @property
    def turn(self) -> int:
        return self.user.id or 0

    @property
    def key(self) -> tuple:
        return self.turn, self.head, self.siblings, self.heads

    def near(self, ids: tuple[int, ...], current: int) -> tuple[int, int, int | None, int | None]:
        """(n, of, previous, next) for a pager over `ids` standing at `current`."""
        at = ids.index(current) if current in ids else len(ids) - 1
        return (at + 1, len(ids), ids[at - 1] if at > 0 else None, ids[at + 1] if at + 1 < len(ids) else None)

    @property
    def message_pager(self) -> tuple[int, int, int | None, int | None]:
        return self.near(self.siblings, self.turn)

    @property
    def answer_pager(self) -> tuple[int, int, int | None, int | None]:
        return self.near(self.heads, self.head)


@dataclass(frozen=True)
class Path:
    steps: tuple[Step, ...]

    @property
    def heads(self) -> dict[int, Step]:
        return {s.turn: s for s in self.steps}

    @property
    def last(self) -> int:
        """The head a new message follows (0 in an empty conversation)."""
        return self.steps[-1].head if self.steps else 0

    def extends(self, other: Path) -> bool:
        """Whether this path is `other` with turns added at its end (nothing above changed)."""
        n = len(other.steps)
        return len(self.steps) >= n and all(a.key == b.key for a, b in zip(self.steps, other.steps))

    def holds(self, it: Item) -> bool:
        """Whether an item is on this path (a plan item, or one written outside any turn, is
        on every path)."""
        if it.kind == "plan" or (not it.turn and it.kind != "user"):
            return True
        step = self.heads.get(it.turn or it.id or 0)
        if step is None:
            return False
        if it.id == step.turn:
            return True
        return it.kind != "retry" and version_of(step.heads, it) == step.head


def version_of(heads: tuple[int, ...] | list[int], it: Item) -> int:
    """The head of the version an item of the turn with these `heads` belongs to."""
    at = bisect_right(heads, it.id or 0)
    return heads[max(at - 1, 0)]


class Tree:
    """The heads of a conversation (its user and retry items; other items are ignored)."""

    def __init__(self, items: Iterable[Item]):
        self.users: dict[int, Item] = {}
        self.heads: dict[int, list[int]] = {}
        self.turn_of: dict[int, int] = {}  # head id -> its turn
        retries = []
        for it in sorted(items, key=lambda it: it.id or 0):
            if it.kind == "user" and it.starts_turn:
                self.users[it.id] = it
                self.heads[it.id] = [it.id]
                self.turn_of[it.id] = it.id
            elif it.kind == "retry":
                retries.append(it)
        for r in retries:
            if r.turn in self.heads:
                self.heads[r.turn].append(r.id)
                self.turn_of[r.id] = r.turn
        self.children: dict[int, list[Item]] = defaultdict(list)
        for u in self.users.values():
            if u.parent < u.id:  # a head is always older than what follows it: no cycles
                self.children[u.parent].append(u)

    def current_head(self, user: Item) -> int:
        heads = self.heads[user.id]
        return user.answer if user.answer in heads else heads[-1]

    def step(self, user: Item, head: int) -> Step:
        siblings = tuple(u.id for u in self.children.get(user.parent, [user]))
        return Step(user, siblings if user.id in siblings else (user.id,), tuple(self.heads[user.id]), head)

    def path(self) -> Path:
        """The current path, from the start."""
        steps, head = [], 0
        while self.children.get(head):
            user = max(self.children[head], key=lambda u: (u.chosen, u.id))
            head = self.current_head(user)
            steps.append(self.step(user, head))
        return Path(tuple(steps))

    def lineage(self, user_id: int) -> Path:
        """The path that leads to message `user_id` (its own turn at its newest version: the
        one being answered), whichever branch is current: what the model is sent for it."""
        user = self.users.get(user_id)
        if user is None:
            return Path(())
        steps = [self.step(user, self.heads[user.id][-1])]
        seen = {user.id}
        head = user.parent
        while head and head in self.turn_of:
            above = self.users[self.turn_of[head]]
            if above.id in seen:
                break
            seen.add(above.id)
            steps.append(self.step(above, head))
            head = above.parent
        return Path(tuple(reversed(steps)))


def on_path(items: Iterable[Item], path: Path | None = None) -> list[Item]:
    """The items on `path` (by default the current one) in page order, without retry items."""
    items = list(items)
    path = path if path is not None else Tree(items).path()
    return sorted((it for it in items if path.holds(it) and it.kind != "retry"), key=order)


def turn_heads(turn: int, items: Iterable[Item]) -> list[int]:
    """The heads of turn `turn` among its items: the user item, then its retries, oldest first."""
    return [turn, *sorted(it.id for it in items if it.kind == "retry" and it.turn == turn)]


def answered(turn: int, items: Iterable[Item]) -> list[Item]:
    """The version of turn `turn` being answered, from the turn's items: its newest (Again is
    refused while an answer is written, so a new version is always the one being written)."""
    items = list(items)
    return versions(turn_heads(turn, items), items)[-1]


def finished(version: list[Item]) -> bool:
    """Whether this answer version already ended (a crash may come between its end and `done`)."""
    settled = [it for it in version if not (it.kind == "error" and it.state != "failed")]
    if not settled:
        return False
    last = settled[-1]
    return (last.kind == "text" and last.done) or (last.kind == "error") or last.kind == "stop"


def versions(heads: tuple[int, ...] | list[int], items: Iterable[Item]) -> list[list[Item]]:
    """A turn's items (its user item and retry items left out) by answer version, in page order."""
    out: dict[int, list[Item]] = {h: [] for h in heads}
    for it in sorted(items, key=order):
        if it.kind == "retry" or it.id == heads[0]:
            continue
        out[version_of(heads, it)].append(it)
    return list(out.values())
