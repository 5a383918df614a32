"""granian, as `tabletalk serve` runs it: the ASGI app in worker processes, their limits."""
from __future__ import annotations

BACKLOG = 4096             # connections waiting to be accepted
BACKPRESSURE = 20_000      # concurrent requests per worker: open pages (SSE) included


def run(host: str, port: int, workers: int) -> None:
    from granian import Granian
    from granian.constants import Interfaces

    Granian(
        target="app.web.app:create_app",
        factory=True,
        interface=Interfaces.ASGI,
        address=host,
        port=port,
        workers=workers,
        # Every open page holds one streaming response. granian's default caps a worker at
        # backlog / workers concurrent requests (1,024): past that it served nothing at all.
        backlog=BACKLOG,
        backpressure=BACKPRESSURE,
        workers_kill_timeout=5,
        # A worker that dies (killed, out of memory) is started again; the others go on, and
        # the runs it held resume once their leases expire. Without this granian stopped the
        # whole server when one worker died.
        respawn_failed_workers=True,
        log_access=False,
    ).serve()
