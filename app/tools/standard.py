"""The standard tools: the ones built into Tabletalk, which every agent can be given."""
from __future__ import annotations

from .. import netguard
from . import Tool
from .fetch_page import fetch_page_tool
from .memory import remember
from .plan import update_plan
from .search_providers import SearchProvider
from .skills import load_skill
from .web_search import web_search_tool

FETCH_PAGE = fetch_page_tool()


def builtin_tools(search: SearchProvider | None = None, guard: netguard.Guard | None = None) -> list[Tool]:
    """In the order the agent page lists them. `search` is the owner's web search provider
    (None: web_search says none is set); `guard` stands in for the public-address guard's
    defaults (tests: a fake resolver); web_search is made afresh, its count of queries a run's."""
    fetch = fetch_page_tool(guard) if guard is not None else FETCH_PAGE
    return [fetch, web_search_tool(search, guard=guard), update_plan, load_skill, remember]
