"""A throwaway PostgreSQL cluster for the tests that run the store on PostgreSQL.

Started once per test session, only when a test asks for it: initdb in a temporary folder,
the server on a port of its own on 127.0.0.1 with its unix socket in that folder, never a
server that may already be running. Each test gets a fresh database (`database`). The
binaries are Debian's (`make postgres` installs them); initdb refuses to run as root, so as
root the cluster runs as Debian's unprivileged `postgres` user, via runuser.

Durability is off (fsync, synchronous_commit): a test cluster is thrown away, and the
machine is a loaded 2-core one.
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from app.store import schema

USER = "tabletalk"  # the cluster's superuser, the one the tests connect as


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (TABLETALK_PG_BIN overrides)."""
    if os.environ.get("TABLETALK_PG_BIN"):
        return Path(os.environ["TABLETALK_PG_BIN"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, durable: bool = False, crash_safe: bool = False) -> None:
        # durable (benchmarks): fsync on, commits not waited for, as SQLite's WAL with synchronous=NORMAL
        self.durable = durable
        # crash_safe: each commit waited for in the WAL (synchronous_commit on), so a crash of
        # the server (`down("immediate")`) keeps what was committed; without it the last
        # fraction of a second of commits may be gone after one (fsync off loses nothing here:
        # the machine does not crash, the OS keeps what was written)
        self.crash_safe = crash_safe
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL's server binaries are missing: run `make postgres`")
        self.bin = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="tabletalk-pg-"))
        self.data = self.folder / "data"
        self.port = _port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")  # Debian's package makes this unprivileged user
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.names = itertools.count(1)
        self.template = ""  # the migrated database new ones may copy (`database(migrated=True)`)

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.as_user, *args], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> "Cluster":
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                  "--locale=C.UTF-8", "--no-sync")
        self._start()
        return self

    def _start(self) -> None:
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.folder} -c max_connections=200"
                   f" -c synchronous_commit={'on' if self.crash_safe else 'off'}"
                   + ("" if self.durable else " -c fsync=off -c full_page_writes=off"))
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"), "-w",
                  "-t", "60", "-o", options, "start")

    def restart(self) -> None:
        """The server stopped (its connections cut) and started again, on the same port."""
        self.down()
        self._start()

    def down(self, mode: str = "fast") -> None:
        """The server stopped (its connections cut, nothing listening on its port): an outage.
        `mode` is pg_ctl's: fast (sessions ended, a checkpoint) or immediate (a crash: what
        was committed is replayed from the WAL at the next start)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def up(self) -> None:
        """The server started again after `down`, on the same port (nothing when it runs)."""
        if subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "status"],
                          capture_output=True).returncode != 0:
            self._start()

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def database(self, migrated: bool = False) -> str:
        """A new database's URL: empty, or `migrated` (a copy of one the app's migrations
        made once for the cluster, which is what they would make there, ~0.1-0.2 s less)."""
        name = f"t{next(self.names)}"
        self._admin(f"CREATE DATABASE {name}" + (f" TEMPLATE {self._migrated()}" if migrated else ""))
        return self.url(name)

    def _migrated(self) -> str:
        if not self.template:
            from app.store import db as dbm

            name = "migrated"
            self._admin(f"CREATE DATABASE {name}")
            db = dbm.connect(self.url(name))
            try:
                schema.migrate(db)
            finally:
                db.conn.close()
            # a template takes no connection (CREATE DATABASE refuses one with any open, and
            # the pool may keep one a moment after the close)
            self._admin(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false")
            self._admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            self.template = name
        return self.template

    def drop(self, url: str) -> None:
        self._admin(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")
