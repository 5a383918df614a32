"""Help pages: the keyboard shortcuts (what "?" shows on any page, as a page of its own too,
so the list is there without JavaScript)."""
from __future__ import annotations

from litestar import Request, Response, get

from . import render

# (keys, what they do); the keys are shown as <kbd> each, joined by "+". static/app.js does them.
SHORTCUTS = [
    (("Esc",), "Stop the answer being written (in the message box too)."),
    (("Ctrl", "Shift", "O"), "A new conversation (⌘ instead of Ctrl on a Mac)."),
    (("/",), "Go to the message box; on a page without one, to the search box."),
    (("Shift", "Esc"), "Go to the message box, from anywhere (a text field too)."),
    (("?",), "This list."),
    (("Enter",), "In the message box: send. Shift+Enter makes a new line."),
]


@get("/help/keys")
async def keys(request: Request) -> Response:
    return render.page(request, "help_keys.html", shortcuts=SHORTCUTS)


routes = [keys]
