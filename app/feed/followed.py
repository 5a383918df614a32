"""What the feed keeps of one followed conversation between two dispatches.

The pages that follow a conversation in step with the feed all have the same thing (the page
as first rendered, then every message since): `Followed` says what that is, so that the next
message is only the difference (app/web/live.py makes it and brings this up to date). A page
that has just caught up from the database has something the feed does not know: it is sent
whole elements, made as the difference from `Followed.nothing()`, which knows nothing. It
also holds the renders of the conversation's answers, so that each render of a growing
answer goes on from the last one: the feed follows the answer, so the feed keeps them, and
drops them with the conversation when no page follows it any more.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..branches import Path
from ..markdown import Block, Rendering


@dataclass
class Sent:
    """What the pages have of one item: its shell, its state span and its body's blocks, and
    the length of the text those show (for a text growing in this process, what the frames
    sent: ahead of its row, or behind it until the next frame, Feed.grew)."""

    shell: str
    state: str
    blocks: tuple[Block, ...]
    length: int = 0


@dataclass
class Followed:
    """One followed conversation: what the pages in step have of it, and the renders of its
    answers still growing."""

    # The conversation's state (Store.chat_state: is a run going, the context meter ...) as
    # the pages were last sent it. None: read it again (none read yet, the context meter's row
    # moved, or #items was sent whole).
    state: dict[str, Any] | None = None
    # The path of items the pages show (app/branches.py); None: not known.
    path: Path | None = None
    # Each item they have that may change but in a new version: not done, or a call; by id.
    items: dict[int, Sent] = field(default_factory=dict)
    # The actions under each answer they have ("" none yet), by the turn's user item id.
    answers: dict[int, str] = field(default_factory=dict)
    # The marker where the model's view starts (templates/_cut.html; "" none). None: not
    # known, so it is sent whatever it is.
    cut: str | None = ""
    # The turn that was being answered when they were last sent the state: when it is no
    # longer, its end is announced to a screen reader. None: none.
    turn: int | None = None
    # #status as sent (templates/_status.html); None: not known, so it is sent.
    status: str | None = None
    # The Markdown items' renders (app/markdown's Rendering: a growing one goes on from the
    # last one's head and blocks, a finished one is made once), by item id: those still
    # growing, and the last few finished (app/web/live.py drops the older ones). Shared with
    # `nothing()`: a page that catches up renders the same texts in the same dispatch.
    renders: dict[int, Rendering] = field(default_factory=dict)

    def nothing(self) -> Followed:
        """What a page that caught up from the database is known to have: nothing (but the
        renders of this conversation's answers, which any page's render may go on from)."""
        return Followed(cut=None, renders=self.renders)
