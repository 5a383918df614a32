"""The sidebar: a person's conversations, grouped by when they last said something, on every
signed-in page (its "More" pages, renaming and pinning are in conversations.py).

Rows and group headings are siblings in one list (`#conversations`), each with a `data-key`
that sorts descending: a row's is (pinned, active, id), a heading's sits just above the rows
of its group. A row that arrives live (upsert, sort:desc) therefore lands under the right
heading, and the heading comes with it (an upsert of an element already there replaces it in
place). A heading left with no rows under it is hidden by CSS.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup

from ..store import Store
from ..tables import Conversation
from .templating import fragment, removal

PAGE = 50  # rows the sidebar (and each "More") brings
TOP = 10 ** 15 - 1  # the end of the newest group: later than any time a row can have


@dataclass(frozen=True)
class Group:
    id: str     # the heading's DOM id
    label: str
    end: int    # milliseconds: every row of the group is older; the next newer group starts here
    pinned: bool = False

    @property
    def key(self) -> str:
        if self.pinned:
            return f"1-{TOP:015d}-{10 ** 10 - 1:010d}"
        return f"0-{self.end:015d}-{0:010d}"


PINNED = Group("g-pinned", "Pinned", TOP, pinned=True)


def row_key(c: Conversation) -> str:
    """Where a row sorts (descending): pinned ones first, then by the last message."""
    return f"{int(c.pinned)}-{max(0, min(c.active, TOP)):015d}-{c.id or 0:010d}"


def parse_key(raw: str | None) -> tuple[int, int, int] | None:
    """A row's key from a "More" link, else None (a bad one starts from the top)."""
    parts = (raw or "").split("-")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 15 for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def group_of(c: Conversation, now: datetime) -> Group:
    """Today, Yesterday, Previous 7 days, Previous 30 days, then by month (the server's time zone)."""
    if c.pinned:
        return PINNED
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    bounds = [("g-today", "Today", TOP, today), ("g-yesterday", "Yesterday", ms(today), today - timedelta(days=1)),
              ("g-7", "Previous 7 days", ms(today - timedelta(days=1)), today - timedelta(days=7)),
              ("g-30", "Previous 30 days", ms(today - timedelta(days=7)), today - timedelta(days=30))]
    for gid, label, end, start in bounds:
        if c.active >= ms(start):
            return Group(gid, label, end)
    at = datetime.fromtimestamp(c.active / 1000)
    month = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (month + timedelta(days=32)).replace(day=1)
    end = min(ms(following), ms(today - timedelta(days=30)))
    return Group(f"g-{month:%Y-%m}", f"{month:%B %Y}", end)


def rows_html(convos: list[Conversation], current: int | None = None, now: datetime | None = None,
              prefix: str = "") -> Markup:
    """Rows in list order, each group's heading before its first row; no whitespace between
    (a live upsert keeps elements only, and a fresh render must be the same DOM). `prefix`
    sets apart the ids of a list shown beside the sidebar's (the "More" page)."""
    now = now or datetime.now()
    out, seen = [], set()
    for c in convos:
        g = group_of(c, now)
        if g.id not in seen:
            seen.add(g.id)
            out.append(fragment("_group.html", g=g, prefix=prefix))
        out.append(fragment("_convo.html", convo=c, key=row_key(c), current=current, prefix=prefix))
    return Markup("".join(out))


def more_html(convos: list[Conversation], oob: bool = False) -> Markup:
    """The "More" link after a full page of rows (an empty placeholder after the last)."""
    last = row_key(convos[-1]) if len(convos) == PAGE else ""
    return Markup(fragment("_more.html", after=last, oob=oob))


def listing(store: Store, person: int, current: int | None = None) -> dict:
    """What base.html's sidebar shows: the first rows, their "More" link and the rev the list
    stream follows from."""
    with store.snapshot():
        rev = store.rev()
        convos = store.conversations(person, limit=PAGE)
    return {"rows": rows_html(convos, current), "more": more_html(convos), "rev": rev}


def list_changes(store: Store, convos: list[Conversation], gone: list[str] = ()) -> str:
    """One feed message for the sidebar: changed rows taken out and upserted where they now
    sort (with their group's heading), deleted ones removed."""
    removed = "".join(removal(dom) for dom in gone)
    if not convos:
        return removed
    ordered = sorted(convos, key=row_key, reverse=True)
    moved = "".join(removal(f"c{c.id}") for c in ordered)
    return (removed + moved + '<hx-partial hx-target="#conversations" hx-swap="upsert key:data-key sort:desc">'
            + str(rows_html(ordered)) + "</hx-partial>")


__all__ = ["PAGE", "Group", "group_of", "list_changes", "listing", "more_html", "parse_key", "row_key", "rows_html"]
