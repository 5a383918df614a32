"""Reading and writing rows. The one package that knows ids, revs and SQL: every statement
outside the connection and migrations (db.py, migrations.py) is a Store method here, one module per family of rows.

Conversations, agents and files belong to a person (`person`); every question a page asks
for a list is asked for one person, and the web layer checks the owner of every row it is
given by id.

Every write of a row a page shows takes a new rev in the same transaction (db.bump) and,
once committed, wakes this process's followers (`notify`); other processes see the commit
through the feed's poll.
"""
from __future__ import annotations

from .agents import Agents
from .api_chats import ApiChats, NotWritten
from .api_keys import ApiAccess
from .asks import Asks
from .plugin_auth import PluginAuth
from .branches import Branches
from .changes import Changed, Changes
from .chats import ITEM_COLUMNS, Chats
from .connections import Connections
from .invitations import InvitationRows
from .context import Context
from .files import Files
from .knowledge import Knowledge
from ..knowledge.vectors import Codes
from ..tables import Scope
from .pages import Pages
from .people import People
from .builtin import LocalModel
from .plugins import Plugins, plugin_from_row
from .runs import Runs
from .search import Search
from .secrets import Secrets
from .usage import TokenUsage
from .web_search import WebSearch


class Store(Chats, Changes, Search, Branches, Agents, Plugins, Context, Files, Pages, People, LocalModel, Runs,
            Asks, PluginAuth, Secrets, Knowledge, ApiAccess, ApiChats, WebSearch, Connections,
            InvitationRows, TokenUsage):
    """Every read and write of rows, by family (one module each); see Base for the common ground."""

    def __init__(self, db, notify=lambda: None):
        super().__init__(db, notify)
        # What this process keeps of the rows between searches (a fenced view shares them):
        self.word_counts: dict[str, tuple[int, float]] = {}  # SQLite: passages holding a word, when counted (store/knowledge.py)
        self.codes: dict[str, Codes] = {}  # the embedding model's vectors' sign bits: a search's first look


__all__ = ["Store", "Changed", "ITEM_COLUMNS", "NotWritten", "Scope", "plugin_from_row"]
