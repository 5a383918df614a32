"""The model list the turns choose from, kept in rows: every provider's models read at start
and on demand, and again every few seconds while a listed server is down (the runner's), so
one that comes up later than Tabletalk shows in the pickers without a restart.
"""
from __future__ import annotations

import asyncio
import logging

from ..providers.client import Providers
from ..store import Store
from ..store.outage import unavailable

RELIST_SECONDS = 5.0  # how often the servers are listed again while one of them is down

log = logging.getLogger(__name__)


async def refresh_choices(store: Store, providers: Providers) -> None:
    """The model list, read at start and on demand (POST /models/refresh): every provider's
    models; one that is down is a row saying so and keeps none of its old models."""
    store.replace_choices(await providers.choices())


async def relist_forever(store: Store, providers: Providers, every: float = RELIST_SECONDS) -> None:
    """While a listed server is down, list them all again every few seconds (the runner's):
    one that comes up later than Tabletalk shows in the pickers without a restart."""
    while True:
        await asyncio.sleep(every)
        try:
            if any(not c.up for c in store.choices()):
                found = await providers.choices()
                if found != store.choices():
                    store.replace_choices(found)
        except Exception as e:
            if not unavailable(e):  # (the database unreachable: the runner's scan says it)
                log.exception("listing the model servers again failed")
