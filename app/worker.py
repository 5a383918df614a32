"""One worker's moving parts, started and stopped together: the database connection, the
change feed, the model clients and the runner. The web app's lifespan and the Python API's
`serve` both run a worker this way."""
from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from . import accounts
from . import db as dbm
from .config import Config
from .feed import Feed, Render, RenderList
from .providers import Providers
from .runner import Runner
from .store import Store

log = logging.getLogger(__name__)


@dataclass
class Worker:
    config: Config
    store: Store
    feed: Feed
    providers: Providers
    runner: Runner


@asynccontextmanager
async def running(config: Config, render: Render | None = None,
                  render_list: RenderList | None = None) -> AsyncIterator[Worker]:
    db = dbm.connect(config.database)
    dbm.migrate(db)
    feed = Feed(config.database, render=render, render_list=render_list)
    store = Store(db, notify=feed.notify)
    providers = Providers(config)
    runner = Runner(config, store, feed, providers)
    accounts.set_up_from_settings(store, config)
    worker = Worker(config, store, feed, providers, runner)
    feed.start()
    try:
        try:
            await runner.refresh_choices()
        except Exception:  # a model server that cannot be read must not stop the worker
            log.exception("reading the model list failed")
        runner.start()
        # What was made at start lives as long as the worker: out of the collector's way, so
        # its full collections (which walk every live object, and pause every open page's
        # stream while they do) stay short with thousands of pages open.
        gc.freeze()
        yield worker
    finally:
        feed.close()
        await runner.stop()
        await feed.aclose()
        await providers.close()
        db.conn.close()
