"""What a worker holds while it serves: the store, the feed, the runner, the model clients."""
from __future__ import annotations

from dataclasses import dataclass

from litestar import Request

from ..config import Config
from ..feed import Feed
from ..providers.client import Providers
from ..runner import Runner
from ..store import Store


@dataclass
class State:
    config: Config
    store: Store
    feed: Feed
    providers: Providers
    runner: Runner


def state(request: Request) -> State:
    return request.app.state.tabletalk
