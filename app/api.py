"""Tabletalk as a Python library: the seed's functions as the seed gives them, no HTTP needed.

    store = api.open("data")                              # the database, migrated
    chat = store.new_conversation(store.default_agent().id)
    store.add(api.asked("Hello", chat.id))                # what the page's form writes
    asyncio.run(api.serve(until=lambda: store.items(chat.id)[0].done))

The constructors (`item`, `asked`, `retried`, `stopped`, `decided`, `assistant`, `plugin`,
`skill`) return rows not stored yet: `Store.add` stores an item (`add_agent`, `add_plugin`
and `add_skill` the others) and `serve` answers what waits. `keyed`, `chips`, `choice_of`,
`in_use` and `groups` are the rendering and model helpers; `shapes` describes every table.
The README's "Python" section is a whole conversation.

The app's own helpers keep the shapes its pages need under their own names in app/tables.py
(`tables.asked(chat, text, ...)`, ...), app/providers/ids.py (`choice_of(id, accounts) -> (where, name)`)
and app/markdown (`markdown.keyed(text, key) -> [Block]`, ids KEY-N); this module is the
seed's surface over them.
"""
from __future__ import annotations

import asyncio
import dataclasses
import html
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from . import config as configuration, markdown, tables
from .store import Store, db as dbm, schema
from .providers.client import Providers
from .providers import ids
from .providers.ids import GROUP_LOCAL, GROUP_SERVER, Choice
from .config import LOCAL
from .tables import Assistant, Item, Skill, chips, plugin
from .serve.worker import running

__all__ = [
    "item", "asked", "retried", "stopped", "decided", "assistant", "plugin", "skill",
    "serve", "choice_of", "in_use", "chips", "keyed", "groups", "shapes", "open",
]

Chat = int | str | None  # a conversation's id; "" (the seed's "none") and None are no conversation


def _chat(chat: Chat) -> int | None:
    if chat is None or chat == "":
        return None
    if isinstance(chat, int) or (isinstance(chat, str) and chat.isdigit()):
        return int(chat)
    raise ValueError(f"a conversation's id is a number, not {chat!r}")


# --- rows ------------------------------------------------------------------------------


def item(kind: str, text: str, chat: Chat = "", **values: Any) -> Item:
    """Any item of a conversation's log: KIND (user, text, reasoning, call, plan, error, retry,
    stop) with TEXT, in CHAT. Other columns (name, input, state ...) by keyword."""
    return tables.item(kind, _chat(chat), text, **values)


def asked(text: str, chat: Chat, model: str = "", files: str | Iterable[int] = "") -> Item:
    """The person's message TEXT in CHAT, for MODEL ("" the agent's) with FILES attached (file
    ids, comma-separated): a `user` item, not done until it is answered."""
    if isinstance(files, str):
        parts = [f.strip() for f in files.split(",") if f.strip()]
        if not all(p.isdigit() for p in parts):
            raise ValueError(f"files are file ids separated by commas, not {files!r}")
        files = [int(p) for p in parts]
    return tables.asked(_chat(chat), text, model=model, files=tuple(files))


def retried(chat: Chat, model: str = "") -> Item:
    """The person's "again" in CHAT: the last answer made anew, from MODEL if named."""
    return tables.retried(_chat(chat), model)


def stopped(chat: Chat) -> Item:
    """The person's "stop" in CHAT: the run going ends, and what it wrote stays."""
    return tables.stopped(_chat(chat))


def decided(c: Item, yes: bool) -> Item:
    """The person's decision on the call C waiting for approval: approved when YES, else
    declined. Stored with `Store.add`, it is written over the call's row."""
    if not isinstance(yes, bool):
        raise TypeError(f"a decision is True (approve) or False (decline), not {yes!r}")
    return tables.decided(c, "approve" if yes else "decline")


def assistant(id: int | None, name: str, **values: Any) -> Assistant:  # noqa: A002 - the seed's name
    """An agent ID (None: the store numbers it) called NAME, with no instructions, the default
    model and every tool unless given (instructions, model, tools, approve by keyword)."""
    return tables.assistant(id, name, **values)


def skill(name: str = "new-skill", description: str = "", body: str = "") -> Skill:
    """A skill: instructions (BODY, Markdown) an agent loads by NAME when its DESCRIPTION fits
    the task. Called bare, a new one to fill in."""
    return tables.skill(name, description, body)


# --- models ----------------------------------------------------------------------------


def choice_of(id: str, fallback: bool = False) -> Choice:  # noqa: A002 - the seed's name
    """The model choice ID names: "local:NAME" on this computer, "ACCOUNT:NAME" on a hosted
    account (one of AI_ACCOUNTS), another on the server at AI_URL. FALLBACK: it is the model
    used because none was chosen (its note says "the default")."""
    if not id:
        raise ValueError("a model id is required")
    where, name = ids.choice_of(id, [a.name for a in configuration.load().accounts])
    group = GROUP_LOCAL if where == LOCAL else where or GROUP_SERVER
    return Choice(id, name, group, note="the default" if fallback else "")


def in_use(models: Iterable[Choice], agents: Sequence[Assistant], agent: int | str) -> str:
    """The name (id) of the model the agent AGENT ("" the first of AGENTS) answers with when
    the person chooses none: its own, else the default (AI_MODEL, else the first of MODELS
    the server at AI_URL offers, else this computer's, else an account's), as the runner does."""
    if agent == "":
        chosen = agents[0] if agents else None
    else:
        chosen = next((a for a in agents if str(a.id) == str(agent)), None)
        if chosen is None:
            raise ValueError(f"there is no agent {agent!r} among the agents given")
    return (chosen.model if chosen else "") or configuration.load().ai_model or Providers.preferred(list(models))


def groups(models: Iterable[Choice]) -> list[str]:
    """The groups of MODELS in the order they first come."""
    return list(dict.fromkeys(m.group for m in models))


# --- rendering -------------------------------------------------------------------------


def keyed(text: str, key: str) -> str:
    """Markdown TEXT as safe HTML blocks keyed KEY.N: each top-level block (a paragraph, a
    heading, a fence, a whole list ...) is a `<div class="md" id="KEY.N">`, N from 0.

    The live page keys the same blocks KEY-N (in a CSS selector a dot starts a class)."""
    out = []
    for n, block in enumerate(markdown.keyed(text, key)):
        page_id = f'id="{html.escape(block.id, quote=True)}"'
        if page_id not in block.html:
            raise RuntimeError(f"a block of markdown.keyed carries no {page_id}")
        out.append(block.html.replace(page_id, f'id="{html.escape(f"{key}.{n}", quote=True)}"', 1))
    return "".join(out)


# --- the database and the runner ---------------------------------------------------------


def open(data: str | Path | None = None) -> Store:  # noqa: A001 - the natural name here
    """The app's store, its database migrated, as `tabletalk serve` would open it with the
    data folder `data` (default: TABLETALK_DATA): DATABASE_URL's PostgreSQL database when
    that is set, whatever the folder (it keeps everything there but the built-in model),
    else the folder's SQLite file."""
    config = configuration.load()
    if data is not None:
        config = dataclasses.replace(config, data=Path(data).expanduser().resolve())
    db = dbm.connect(config.database)
    schema.migrate(db)
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
            schema.migrate(db)
        return Store(db).shapes()
    finally:
        if own:
            db.conn.close()
