"""Passages made vectors: every worker, when AI_EMBEDDINGS names a model, embeds the passages that
have no vector of it yet, a batch at a time, beside its readings (docs/knowledge.md).

The work is its rows: a passage without a vector of the model is what is left to do, so a
kill -9 loses at most the batch in flight, a model changed since is caught up by itself, and
a passage's search by words never waits for it (a document is `ready` once read; its
passages are found by meaning as their vectors come). Writing a vector is idempotent: two
workers that embed the same batch write the same rows, and each starts at a place of its own
(a random passage) to make that rare. A model server that fails is said in the log once a
minute while the work waits for it, longer and longer (up to a minute) between tries.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time

from ..agent import ModelError
from ..feed.dispatch import Feed
from ..providers.client import Providers
from ..providers.embeddings import TEXTS_MAX
from ..store import Store
from ..store.outage import unavailable

log = logging.getLogger(__name__)

IDLE_SECONDS = 60.0  # a look for passages without vectors at least this often (new passages wake it sooner)
GAP_SECONDS = 0.25  # ... and at most this often
RETRY_SECONDS = (1.0, 60.0)  # the wait after a failure: from the first, doubling, to the last
SAY_EVERY_SECONDS = 60.0
REFUSED_MAX = 1000  # passages a server refused that are passed over by id (beyond, tried again)


def refused(e: ModelError) -> bool:
    """Whether the server refused the text itself (a 4xx other than 429), so that trying it
    again would fail again, not the server being away or busy."""
    status = getattr(e.__cause__, "status_code", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429)


class Embedding:
    def __init__(self, model: str, store: Store, feed: Feed, providers: Providers):
        self.model = model
        self.store = store
        self.feed = feed
        self.providers = providers
        self.after = 0  # the last passage looked at: the next batch is of those after it
        self.embedded = 0  # vectors written by this worker (for the log and the tests)
        self.singly = 0  # after a batch failed: this many passages are embedded one at a time
        self.refused: set[int] = set()  # passages the server refused to embed (their text)
        self._task: asyncio.Task | None = None
        self._said = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="embedding")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _forever(self) -> None:
        wait = 0.0
        try:
            self.after = random.randrange(self.store.last_passage() + 1)
        except Exception:
            self.after = 0
        while True:
            try:
                if await self.step():
                    wait = 0.0
                    await asyncio.sleep(0)
                    continue
                wait = 0.0
                await self._idle()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                wait = min(RETRY_SECONDS[1], max(RETRY_SECONDS[0], wait * 2))
                self._say(e, wait)
                await asyncio.sleep(wait)

    async def _idle(self) -> None:
        """Until a passage may wait for a vector: one newer than the newest when none waited
        (a look at the index, not a scan, for each commit that wakes it)."""
        newest, begun = self.store.last_passage(), time.monotonic()
        while True:
            started = time.monotonic()
            changed = self.feed.next_change()
            if not changed.done():
                await asyncio.wait([changed], timeout=IDLE_SECONDS)
            await asyncio.sleep(max(0.0, started + GAP_SECONDS - time.monotonic()))
            if self.store.last_passage() > newest or time.monotonic() - begun >= IDLE_SECONDS:
                return

    async def step(self) -> bool:
        """One batch embedded and written: False when no passage waits for a vector (from the
        start, after the last one was reached)."""
        size = 1 if self.singly else TEXTS_MAX
        batch = self._batch(size)
        if not batch:
            return False
        try:
            vectors = await self.providers.embed(self.model, [text for _, text in batch])
        except ModelError as e:
            if len(batch) > 1:
                self.singly = TEXTS_MAX  # the next ones one by one, to find the one refused
            elif refused(e):
                log.warning("passage %s is left without a vector: %s", batch[0][0], e)
                self.refused.add(batch[0][0])  # (by this worker, until it starts again)
                self.after = batch[0][0]
                return True
            raise
        self.singly = max(0, self.singly - 1)
        self.embedded += self.store.write_vectors(self.model, [(p, v) for (p, _), v in zip(batch, vectors)])
        self.after = batch[-1][0]
        return True

    def _batch(self, size: int) -> list[tuple[int, str]]:
        """The next passages without a vector, after the last one looked at; from the first
        once the last was reached (those before the place this worker began)."""
        skip = sorted(self.refused)[:REFUSED_MAX]
        batch = self.store.passages_to_embed(self.model, self.after, size, skip)
        if not batch and self.after:
            self.after = 0
            batch = self.store.passages_to_embed(self.model, 0, size, skip)
        return batch

    def _say(self, e: Exception, wait: float) -> None:
        now = time.monotonic()
        if now - self._said < SAY_EVERY_SECONDS:
            return
        self._said = now
        if why := unavailable(e):
            log.warning("passages wait for their vectors: %s", why)
        elif isinstance(e, ModelError):
            log.warning("passages wait for their vectors: %s (%s, tried again in %.0f s)", e, self.model, wait)
        else:
            log.exception("embedding passages failed (tried again in %.0f s)", wait)
