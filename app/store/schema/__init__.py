"""Both engines' schema as their histories, each a list of migrations in the order they
are applied. SQLite's is migrations.py: its MIGRATIONS joins the frozen eras
(m001_to_m010.py, then m011_to_m027.py) ahead of the later migrations it holds itself.
PostgreSQL's is pg_migrations.py: its frozen first step (pg_m001_to_m022.py, SQLite's m001 to
m022 at once), then the twins of SQLite's later ones. The eras are frozen: nothing in them
changes; a new migration is appended at the end of migrations.py and of pg_migrations.py."""
import sqlite_utils

from . import migrations, pg_migrations
from ..db import now, postgres, write


def migrate(db: sqlite_utils.Database) -> list[str]:
    """Apply the migrations not applied yet; returns their names."""
    if postgres(db):
        return pg_migrations.migrate(db)
    db.conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)"
    )
    applied = {row[0] for row in db.conn.execute("SELECT name FROM migrations")}
    done = []
    for fn in migrations.MIGRATIONS:  # the list as it is at the call: a test leaves one out
        if fn.__name__ in applied:
            continue
        with write(db):
            # Another process may have applied it while we waited for the write lock.
            if db.conn.execute("SELECT 1 FROM migrations WHERE name = ?", [fn.__name__]).fetchone():
                continue
            fn(db)
            db.conn.execute("INSERT INTO migrations (name, applied) VALUES (?, ?)", [fn.__name__, now()])
        done.append(fn.__name__)
    return done
