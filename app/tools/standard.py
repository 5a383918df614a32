"""The standard tools: the ones built into Tabletalk, which every agent can be given."""
from __future__ import annotations

from . import Tool
from .fetch_page import fetch_page_tool
from .memory import remember
from .plan import update_plan
from .skills import load_skill

FETCH_PAGE = fetch_page_tool()


def builtin_tools() -> list[Tool]:
    """In the order the agent page lists them."""
    return [FETCH_PAGE, update_plan, load_skill, remember]
