"""One worker's moving parts, started and stopped together: the database connection, the
change feed, the model clients, the plugin sessions, the runner and the reader of documents.
The web app's lifespan and the Python API's `serve` both run a worker this way."""
from __future__ import annotations

import asyncio
import gc
import logging
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from ..accounts import setup
from ..plugins import tools as mcp_tools
from ..plugins.sessions import Sessions
from ..store import Store, db as dbm, outage, schema
from ..config import Config
from ..feed.dispatch import Feed, Render, RenderBuiltin, RenderDocuments, RenderGrown, RenderList, RenderOutage
from . import keeper
from ..providers.client import Providers
from ..run.ingest import Ingest
from ..run.embedding import Embedding
from ..run.runner import Runner
from ..run.choices import refresh_choices

log = logging.getLogger(__name__)


@dataclass
class Worker:
    config: Config
    store: Store
    feed: Feed
    providers: Providers
    sessions: Sessions  # the plugin sessions its conversations hold (closed when it stops)
    runner: Runner
    key: bytes  # signs forms (web/csrf.py): the database's, the same on every server of it
    # who is sending files to this worker now, and how many requests each (web/uploads.py)
    receiving: Counter[int] = field(default_factory=Counter)


@asynccontextmanager
async def running(config: Config, render: Render | None = None,
                  render_list: RenderList | None = None,
                  render_builtin: RenderBuiltin | None = None,
                  render_outage: RenderOutage | None = None,
                  render_documents: RenderDocuments | None = None,
                  render_grown: RenderGrown | None = None) -> AsyncIterator[Worker]:
    def opened() -> tuple[Store, Feed, bytes]:
        db = dbm.connect(config.database, pool_size=config.pg_pool)  # first: it opens the process's pool
        feed = None
        try:
            schema.migrate(db)
            feed = Feed(config.database, render=render, render_list=render_list, render_builtin=render_builtin,
                        render_outage=render_outage, render_documents=render_documents, render_grown=render_grown)
            store = Store(db, notify=feed.notify)
            setup.set_up_from_settings(store, config)
            key = setup.secret_key(store, config.data)
            store.seal_plugin_secrets()  # those stored as typed before they were sealed: with the key just read
            store.seal_plugin_tokens()
            return store, feed, key
        except BaseException:
            if feed is not None:
                feed.db.conn.close()
            db.conn.close()
            raise

    # A worker that starts while the database cannot be reached (granian starting one again
    # during an outage) waits for it, as serve does, instead of failing its start: granian
    # would start it again, and again, and then stop the whole server ("crash loop").
    store, feed, key = await outage.awaited(opened, say=log.warning)
    db = store.db
    providers = Providers(config, store.connections)  # the owner's connections, read from rows at each use
    sessions = Sessions()
    runner = Runner(config, store, feed, providers, sessions)
    ingest = Ingest(config, store, feed, runner.owner)
    embedding = Embedding(config.embeddings, store, feed, providers) if config.embeddings else None
    providers.lessons.keep(store, runner.turn_setup.window_of)  # what servers teach is kept in rows (providers/limits.py)
    worker = Worker(config, store, feed, providers, sessions, runner, key)
    feed.start()
    watching: asyncio.Task | None = None
    try:
        try:
            await refresh_choices(store, providers)
        except Exception as e:  # a model server that cannot be read must not stop the worker
            if not outage.unavailable(e):  # (the database gone meanwhile: the runner's scan says it)
                log.exception("reading the model list failed")
        runner.start()
        ingest.start()
        if embedding is not None:
            embedding.start()
        # the built-in model's supervisor, started when the row comes to ask for one (serve's workers only)
        watching = asyncio.get_running_loop().create_task(keeper.watch(config.data, store, feed), name="builtin-watch")
        # What was made at start (imports: hundreds of thousands of objects) lives as long as
        # the worker: out of the collector's way, so a full collection, which pauses every
        # open page's stream, stays short with thousands of pages open (benchmarks/feed.py,
        # 1,000 followers: p99 ~200 -> ~55 ms). Frozen, the full collections come more often
        # (they are scheduled by the size of what is not frozen), so the thresholds go up to
        # keep a busy runner's collector work where it was (benchmarks/runs.py: same CPU).
        gc.freeze()
        gc.set_threshold(10_000, 20, 100)
        yield worker
    finally:
        if watching is not None:
            # waited for, not only cancelled: a supervisor's start under way (a thread) ends
            # before the database it reads is closed, and no task of the worker outlives it
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        feed.close()
        await ingest.stop()
        if embedding is not None:
            await embedding.stop()
        await runner.stop()
        await mcp_tools.stop_listings()  # a listing a run left running for the next run
        await sessions.close_all()  # the runs are over: their sessions go (kept rows stay)
        await feed.aclose()
        await providers.close()
        db.conn.close()
