"""`tabletalk serve|migrate|backup|restore`: the command line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import config as configuration
from . import db as dbm

BACKLOG = 4096             # connections waiting to be accepted
BACKPRESSURE = 20_000      # concurrent requests per worker: open pages (SSE) included


def migrate(config: configuration.Config) -> list[str]:
    db = dbm.connect(config.database)
    try:
        return dbm.migrate(db)
    finally:
        db.conn.close()


NO_ACCOUNT = """Tabletalk will not serve on {host} before its owner's account exists: the first
person to open it would set it up and own it. Either
  - start it on 127.0.0.1 once (tabletalk serve), open the setup address it prints and set
    the owner up there, then serve on {host}; or
  - set TABLETALK_PASSWORD (and TABLETALK_OWNER, the name, default "owner") to set the owner
    up at start."""


def serve(host: str, port: int, workers: int) -> None:
    from granian import Granian
    from granian.constants import Interfaces

    from .accounts import AccountError, People, loopback, set_up_from_settings, setup_code
    from .store import Store

    config = configuration.load()
    migrate(config)
    db = dbm.connect(config.database)
    with dbm.write(db):
        # This server owns the data folder: leases left by a process that died are void,
        # so the conversations they held resume at once instead of after expiry.
        db.conn.execute("DELETE FROM runs")
    try:
        set_up_from_settings(Store(db), config)  # once, before the workers start
    except AccountError as e:
        raise SystemExit(f"TABLETALK_PASSWORD: {e}") from None
    nobody = People(Store(db)).count() == 0
    db.conn.close()
    if nobody and not loopback(host):
        raise SystemExit(NO_ACCOUNT.format(host=host, port=port))
    # Import the app (and openai, jinja2 ...) once, before granian forks its workers, so each
    # worker starts (and a restarted server resumes its runs) sooner.
    import app.web.app  # noqa: F401

    print(f"Tabletalk on http://{host}:{port} (data in {config.data})", file=sys.stderr, flush=True)
    if nobody:
        code = setup_code(config.data, fresh=True)
        print(f"No account yet: set the owner up at http://{host}:{port}/setup?code={code}\n"
              "(that code is needed to set up; it changes at every start)", file=sys.stderr, flush=True)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tabletalk", description="People talk to AI agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the app (and answer conversations)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--workers", type=int, default=1)
    sub.add_parser("migrate", help="apply database migrations")
    b = sub.add_parser("backup", help="copy the database and its files into PATH (while serving)")
    b.add_argument("path", type=Path, help="a new (or empty) folder")
    r = sub.add_parser("restore", help="copy the backup at PATH into the (empty) data folder, checked")
    r.add_argument("path", type=Path, help="a folder made by tabletalk backup")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.host, args.port, args.workers)
    elif args.command == "migrate":
        applied = migrate(configuration.load())
        print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    elif args.command in ("backup", "restore"):
        from . import backup

        try:
            summary = getattr(backup, args.command)(configuration.load(), args.path)
        except backup.BackupError as e:
            raise SystemExit(f"tabletalk {args.command}: {e}") from None
        print(("backed up " if args.command == "backup" else "restored and checked ") + str(summary))


if __name__ == "__main__":
    main()
