"""granian, as `tabletalk serve` runs it: the ASGI app in worker processes, their limits."""
from __future__ import annotations

BACKLOG = 4096             # connections waiting to be accepted
BACKPRESSURE = 20_000      # concurrent requests per worker: open pages (SSE) included


def run(host: str, port: int, workers: int) -> None:
    import faulthandler
    import signal
    import sys

    from granian import Granian
    from granian.constants import Interfaces

    # `kill -USR2 PID` prints what each thread of a worker (or of serve itself) is doing to
    # the log, and it goes on: a worker that answers nothing says where it waits. Set here,
    # before granian forks its workers, which keep it (the Python API's `serve` and tests,
    # whose stderr may be no file, are left alone).
    faulthandler.register(signal.SIGUSR2, file=sys.__stderr__, all_threads=True)
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
