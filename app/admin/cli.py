"""`tabletalk serve|migrate|backup|restore|move-to|reset-link`: the command line."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .. import builtin, config as configuration
from ..store import Store, db as dbm, outage, schema
from ..serve.granian import run
from ..builtin import asks
from ..accounts.passwords import AccountError
from ..accounts.rules import RESET_SECONDS, Accounts, loopback
from ..accounts.setup import set_up_from_settings, setup_code
from ..serve import datalock, keeper
from ..builtin.install import Installer, InstallError, Progress
from . import backup


def migrate(config: configuration.Config) -> list[str]:
    db = dbm.connect(config.database)
    try:
        return schema.migrate(db)
    finally:
        db.conn.close()


NO_ACCOUNT = """Tabletalk will not serve on {host} before its owner's account exists: the first
person to open it would set it up and own it. Either
  - start it on 127.0.0.1 once (tabletalk serve), open the setup address it prints and set
    the owner up there, then serve on {host}; or
  - set TABLETALK_PASSWORD (and TABLETALK_OWNER, the name, default "owner") to set the owner
    up at start."""


def serve(host: str, port: int, workers: int) -> None:

    config = configuration.load()
    try:
        datalock.serving(config.data)  # held until this server exits: move-to waits for it to stop
    except datalock.Busy:
        raise SystemExit(f"tabletalk move-to is copying {config.data}: start the server when it has ended") from None
    def prepared():
        migrate(config)
        db = dbm.connect(config.database)
        try:
            store = Store(db)
            # On SQLite this server owns the data folder: leases left by a process that died are
            # void, so the conversations they held resume at once instead of after expiry. On
            # PostgreSQL other servers may hold live ones: they expire (TABLETALK_LEASE_SECONDS) instead.
            if not dbm.postgres(db):
                store.void_leases()
            try:
                set_up_from_settings(store, config)  # once, before the workers start
            except AccountError as e:
                raise SystemExit(f"TABLETALK_PASSWORD: {e}") from None
            nobody = Accounts(store).count() == 0
            return nobody, setup_code(store, config.data, fresh=True) if nobody else "", store.builtin()
        finally:
            db.conn.close()

    # A database that cannot be reached yet (a restart, a failover, started after this server)
    # is waited for, a line every few seconds; one that refuses (no such database or user, a
    # wrong password) is said at once.
    try:
        nobody, code, builtin = outage.waited(prepared, say=lambda line: print(line, file=sys.stderr, flush=True))
    except Exception as e:
        if why := outage.refusal(e):
            raise SystemExit(f"tabletalk serve: the database refused: {why}") from None
        raise
    if nobody and not loopback(host):
        raise SystemExit(NO_ACCOUNT.format(host=host, port=port))
    # The app is not imported here but in each worker granian forks: imported before the fork
    # it was shared only until the worker's gc.freeze() (app/serve/worker.py) wrote to every object,
    # so serve's copy (~20 MB) was memory for nothing (benchmarks/start.py: serve 64 -> 45 MB;
    # a worker granian starts again imports it itself, ~0.4-0.6 s).
    print(f"Tabletalk on http://{host}:{port} (data in {config.data})", file=sys.stderr, flush=True)
    if nobody:
        print(f"No account yet: set the owner up at http://{host}:{port}/setup?code={code}\n"
              "(that code is needed to set up; it changes at every start)", file=sys.stderr, flush=True)
    # The built-in model (app/builtin): its install when the owner chooses it on a page, its
    # server while it is installed, in a process of its own (keeper.py), which runs only while
    # the row asks for one: started here when it does at start, else by the worker that sees
    # it come to that (app/serve/worker.py); stopped with the app.

    os.environ[keeper.SERVE_PID] = str(os.getpid())  # the workers', forked from here
    if asks(builtin):
        keeper.start(config.data, os.getpid())
    try:
        run(host, port, workers)
    finally:
        keeper.stop_ours(config.data)


def model_install(config: configuration.Config) -> None:
    """`tabletalk model install`: the built-in model installed here, its progress printed; a
    running `tabletalk serve` starts it once it is ready (it follows the same row)."""

    migrate(config)
    db = dbm.connect(config.database)
    store = Store(db)
    try:
        row = store.builtin()
        if row.state == "installing" and builtin.alive(row.pid):
            raise SystemExit(f"tabletalk model install: it is being installed already (process {row.pid}).")
        paths = builtin.Paths(config.data)
        store.set_builtin(state="installing", pid=os.getpid(), started=dbm.now(), error="", step=0, steps=0,
                          what="", percent=-1, line="")
        shown = [0, -1]

        def report(p: Progress) -> None:
            store.set_builtin(step=p.step, steps=p.steps, what=p.what, percent=p.percent, line=p.line)
            if p.step != shown[0]:
                print(f"[{p.step}/{p.steps}] {p.what}", flush=True)
                shown[:] = [p.step, -1]
            if p.percent >= 0 and p.percent // 10 != shown[1] // 10 and p.percent < 100:
                print(f"      {p.percent}%  {p.line[:100]}", flush=True)
                shown[1] = p.percent

        started = time.monotonic()
        try:
            Installer(paths, report, config.model_wheels).run()
        except (InstallError, KeyboardInterrupt) as e:
            message = str(e) if isinstance(e, InstallError) else "Stopped (Ctrl-C)."
            store.set_builtin(state="failed", error=message, pid=0, finished=dbm.now())
            raise SystemExit(f"tabletalk model install: {message}") from None
        store.set_builtin(state="ready", pid=0, finished=dbm.now(), serving="", restarts=0)
        print(f"Installed in {time.monotonic() - started:.0f} s into {paths.root}: "
              f"`tabletalk serve` runs it and offers it as local:{builtin.NAME}.", flush=True)
    finally:
        db.conn.close()


def reset_link(config: configuration.Config, name: str, base: str) -> str:
    """`tabletalk reset-link [NAME]`: a one-time link that sets the password of NAME (the
    owner when none is named), for an owner who forgot theirs: whoever can run this command
    on the server's machine could read its database anyway. The same link the People page
    makes (its token's hash kept, one a person, RESET_SECONDS)."""
    migrate(config)
    db = dbm.connect(config.database)
    try:
        store = Store(db)
        people = Accounts(store)
        found = people.hash_of(name) if name else None
        person = found[0] if found else people.get(store.owner()) if not name and store.owner() else None
        if person is None:
            raise SystemExit(f"tabletalk reset-link: nobody is called “{name}”." if name else
                             "tabletalk reset-link: there is no owner yet: set Tabletalk up first (tabletalk serve).")
        token = people.reset_link(person.id)
    finally:
        db.conn.close()
    return (f"A link that sets {person.name}'s password, once, within {RESET_SECONDS // 86_400} days "
            f"(it signs them out everywhere):\n{base.rstrip('/')}/reset?token={token}")


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
    mv = sub.add_parser("move-to", help="copy this install's SQLite rows into an empty PostgreSQL database")
    mv.add_argument("url", metavar="DATABASE_URL", help="postgresql://user:password@host:5432/name, empty")
    m = sub.add_parser("model", help="the built-in model (a tiny one that runs on this computer)")
    m.add_argument("action", choices=["install"], help="install it into the data folder (minutes)")
    rl = sub.add_parser("reset-link", help="print a one-time link that sets a password (the owner's by default)")
    rl.add_argument("name", nargs="?", default="", help="whose password (default: the owner's)")
    rl.add_argument("--url", default="http://127.0.0.1:8000", help="this Tabletalk's address, as its people open it")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.host, args.port, args.workers)
    elif args.command == "migrate":
        applied = migrate(configuration.load())
        print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    elif args.command == "move-to":
        from . import move  # psycopg with it: only this command pays for it on SQLite

        config = configuration.load()
        try:
            moved = move.move(config, args.url)
        except move.MoveError as e:
            raise SystemExit(f"tabletalk move-to: {e}") from None
        except KeyboardInterrupt:  # the copy's transaction rolled back, the snapshot removed
            raise SystemExit("tabletalk move-to: stopped (Ctrl-C); nothing was kept, run it again to move") from None
        print(move.next_steps(config, moved))
    elif args.command == "reset-link":
        print(reset_link(configuration.load(), args.name.strip(), args.url))
    elif args.command == "model":
        model_install(configuration.load())
    elif args.command in ("backup", "restore"):
        try:
            summary = getattr(backup, args.command)(configuration.load(), args.path)
        except backup.BackupError as e:
            raise SystemExit(f"tabletalk {args.command}: {e}") from None
        print(("backed up " if args.command == "backup" else "restored and checked ") + str(summary))


if __name__ == "__main__":
    main()
