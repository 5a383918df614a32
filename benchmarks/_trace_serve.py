"""`tabletalk serve` with a timestamp at each hop of an answer's first token, for
benchmarks/first_token.py --trace. Not a benchmark itself (`make bench` skips "_" files).

    python benchmarks/_trace_serve.py serve --host ... --port ... --workers 1

Wraps, in serve's process before granian forks its worker (so the worker has them too), the
functions each hop goes through, and prints `TRACE <hop> <time.monotonic()>` to stderr the
first time each hop happens after a `user` item is committed (CLOCK_MONOTONIC is shared by
every process on Linux, so the script compares them with its own times)."""
from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import app.web.app  # noqa: E402,F401  (what serve imports before the fork)
from app.admin import cli
from app.feed import dispatch
from app.netguard import sockets  # noqa: E402
from app.providers import asking, wire  # noqa: E402
from app.run import runner, writes  # noqa: E402
from app.store import Store  # noqa: E402
from app.web import stream  # noqa: E402

seen: set[str] = set()


def hop(name: str) -> None:
    if name not in seen:
        seen.add(name)
        print(f"TRACE {name} {time.monotonic():.6f}", file=sys.stderr, flush=True)


def after(cls, attr: str, name: str, when=lambda *a, **k: True):
    f = getattr(cls, attr)

    @functools.wraps(f)
    def wrapped(*a, **k):
        out = f(*a, **k)
        if when(out, *a, **k):
            hop(name)
        return out

    setattr(cls, attr, wrapped)


def before(cls, attr: str, name: str):
    f = getattr(cls, attr)

    @functools.wraps(f)
    def wrapped(*a, **k):
        if "committed" in seen:
            hop(name)
        return f(*a, **k)

    setattr(cls, attr, wrapped)


def _user_added(out, self, it, *a, **k):
    if getattr(it, "kind", "") == "user":
        seen.clear()
        return True
    return False


after(Store, "add", "committed", _user_added)  # the form's message (its transaction's commit follows)
before(dispatch.Feed, "dispatch", "feed dispatch (1st after the message)")
after(runner.Runner, "lease", "runner leased", lambda out, *a, **k: out is True and "committed" in seen)
before(runner.Runner, "_turn", "turn set up begins")

_one = asking._one


async def traced_one(*a, **k):
    hop("request sent")
    first = True
    async for delta in _one(*a, **k):
        if first and (delta.text or delta.reasoning):
            first = False
            hop("first delta parsed")
        yield delta


asking._one = traced_one
before(writes.Writes, "flush", "growth flush called")
after(Store, "grow_items", "growth committed", lambda out, *a, **k: "first delta parsed" in seen)
_dispatch = dispatch.Feed.dispatch


def traced_dispatch(self, *a, **k):
    out = _dispatch(self, *a, **k)
    if "growth committed" in seen:
        hop("feed dispatched the growth")
    return out


dispatch.Feed.dispatch = traced_dispatch
_follow = stream.follow


async def traced_follow(*a, **k):
    async for data in _follow(*a, **k):
        if "growth committed" in seen and b"w0000" in data:
            hop("sent to the follower (first text)")
        yield data


stream.follow = traced_follow
del sockets, wire

if __name__ == "__main__":
    cli.main(sys.argv[1:])
