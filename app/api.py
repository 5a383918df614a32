"""Tabletalk as a Python library: the seed's functions in one place, no HTTP needed.

    import asyncio
    from app import api

    store = api.open("data")                      # the database, migrated
    agent = store.default_agent()
    chat = store.new_conversation(agent.id)
    store.add(api.asked(chat.id, "Hello"))        # what a page's form would write
    asyncio.run(api.serve(until=lambda: ...))     # answer it, as `tabletalk serve` does

Rows are made by the constructors (`item`, `asked`, `retried`, `stopped`, `decided`,
`assistant`, `plugin`, `skill`) and stored through the `Store`; `serve` runs the runner and
the change feed on the same database; `keyed`, `chips`, `choice_of`, `in_use` and `groups`
are the rendering and model helpers; `shapes` describes every table.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import config as configuration
from . import db as dbm
from .markdown import keyed
from .store import Store
from .tables import (
    asked, assistant, chips, choice_of, decided, groups, in_use, item, plugin, retried, skill, stopped,
)
from .worker import running

__all__ = [
    "item", "asked", "retried", "stopped", "decided", "assistant", "plugin", "skill",
    "serve", "choice_of", "in_use", "chips", "keyed", "groups", "shapes", "open",
]


def open(data: str | Path | None = None) -> Store:  # noqa: A001 - the natural name here
    """The store of a data folder (default: TABLETALK_DATA), its database migrated."""
    config = configuration.load()
    folder = Path(data).expanduser().resolve() if data is not None else config.data
    db = dbm.connect(folder / "tabletalk.db")
    dbm.migrate(db)
    return Store(db)


async def serve(config: configuration.Config | None = None,
                until: Callable[[], bool] | None = None, every: float = 0.05) -> None:
    """Answer what is waiting in the database, as `tabletalk serve` does without the pages.

    Runs until cancelled, or until `until()` is true (checked every `every` seconds). The
    model servers come from the settings (AI_URL and the rest).
    """
    async with running(config or configuration.load()):
        while until is None or not until():
            await asyncio.sleep(every)


def shapes(db: Any = None) -> dict[str, list[dict[str, Any]]]:
    """Every table's columns (name, type, not null, default, primary key), from the
    migrations themselves, so this description cannot drift from the schema."""
    own = db is None
    db = db if db is not None else dbm.connect(":memory:")
    try:
        if own:
            dbm.migrate(db)
        out = {}
        for table in sorted(db.table_names()):
            if table.startswith(("search", "sqlite_")):
                continue  # the FTS index's own tables
            out[table] = [
                {"name": r[1], "type": r[2], "notnull": bool(r[3]), "default": r[4], "pk": bool(r[5])}
                for r in db.conn.execute(f'PRAGMA table_info("{table}")')
            ]
        return out
    finally:
        if own:
            db.conn.close()
