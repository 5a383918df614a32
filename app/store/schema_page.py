"""docs/schema.md, made from both engines' migrations: the order each applies them in, and every
table's columns on SQLite and on PostgreSQL side by side. `python -m app.store.schema_page URL`
(URL: an empty PostgreSQL database, which it migrates) prints the page; tests/test_docs.py
makes it again and compares, so the page cannot drift from the schema."""
from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from typing import Any

from . import Store, db as dbm, schema
from .schema import migrations, pg_migrations

Columns = dict[str, list[dict[str, Any]]]  # table -> its columns in order


def sqlite_tables() -> Columns:
    """Every table a new SQLite database has after its migrations (FTS5's own tables aside)."""
    db = dbm.connect(":memory:")
    try:
        schema.migrate(db)
        return Store(db).shapes()
    finally:
        db.conn.close()


def postgres_tables(db: Any) -> Columns:
    """Every table of a migrated PostgreSQL database (`db`, a connection of dbm.connect)."""
    keys = {(r[0], r[1]) for r in db.execute(
        """SELECT c.table_name, k.column_name FROM information_schema.table_constraints c
           JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)
           WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = current_schema()""")}
    out: Columns = {}
    for r in db.execute("SELECT table_name, column_name, data_type, is_nullable, column_default "
                        "FROM information_schema.columns WHERE table_schema = current_schema() "
                        "ORDER BY table_name, ordinal_position"):
        out.setdefault(r[0], []).append({"name": r[1], "type": r[2], "notnull": r[3] == "NO",
                                         "default": r[4], "pk": (r[0], r[1]) in keys})
    return out


def what(fn: Callable) -> str:
    """A migration's first sentence: its docstring's, else its first comment's."""
    doc = inspect.getdoc(fn)
    if not doc:
        comments = [line.strip()[1:].strip() for line in inspect.getsource(fn).splitlines()
                    if line.strip().startswith("#")]
        doc = " ".join(comments)
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z(`])", " ".join(doc.split()), maxsplit=1)[0] if doc else ""
    return sentence.rstrip(".").replace("|", "\\|")


def pg_what(fn: Callable, sqlite_names: set[str]) -> str:
    """A PostgreSQL migration's line: the SQLite migration it is the twin of, and its own words."""
    if fn is pg_migrations.MIGRATIONS[0]:
        return "SQLite's m001 to m022 as they end, in one step (frozen)"
    own = what(fn)
    if fn.__name__ in sqlite_names:
        return f"SQLite's `{fn.__name__}`" + (f"; {own[0].lower()}{own[1:]}" if own and not own.startswith("SQLite") else "")
    return own


def cell(column: dict[str, Any] | None) -> str:
    if column is None:
        return "-"
    words = [column["type"]]
    if column["pk"]:
        words.append("primary key")
    elif column["notnull"]:
        words.append("not null")
    if column["default"] is not None:
        words.append(f"default {column['default']}")
    return "`" + " ".join(words).replace("|", "\\|").replace("`", "'") + "`"


def columns_table(name: str, sqlite: list[dict] | None, postgres: list[dict] | None) -> list[str]:
    lines = [f"### {name}", "", "| column | SQLite | PostgreSQL |", "| --- | --- | --- |"]
    ours = {c["name"]: c for c in sqlite or []}
    theirs = {c["name"]: c for c in postgres or []}
    order = [c["name"] for c in sqlite or []] + [c["name"] for c in postgres or [] if c["name"] not in ours]
    lines += [f"| `{col}` | {cell(ours.get(col))} | {cell(theirs.get(col))} |" for col in order]
    return lines + [""]


def page(sqlite: Columns, postgres: Columns) -> str:
    out = ["# The schema", "",
           "Made from the migrations by `python -m app.store.schema_page URL` (an empty PostgreSQL",
           "database it migrates); tests/test_docs.py makes it again and compares. Do not edit it by hand.",
           "",
           "## The migrations, in the order each engine applies them", "",
           "A migration's name is its key in the `migrations` table of every install, so it never changes.",
           "The numbers were given out when the work began and land in another order; those missing",
           "never landed. PostgreSQL's first step is SQLite's history up to m022 in one migration.", "",
           "| # | SQLite (app/store/schema/migrations.py, app/store/schema/) | what it does |", "| --- | --- | --- |"]
    out += [f"| {n} | `{fn.__name__}` | {what(fn)} |" for n, fn in enumerate(migrations.MIGRATIONS, 1)]
    out += ["", "| # | PostgreSQL (app/store/schema/pg_migrations.py, app/store/schema/) | what it does |", "| --- | --- | --- |"]
    names = {fn.__name__ for fn in migrations.MIGRATIONS}
    out += [f"| {n} | `{fn.__name__}` | {pg_what(fn, names)} |" for n, fn in enumerate(pg_migrations.MIGRATIONS, 1)]
    out += ["", "## The tables", "",
            "Each table's columns in order: type, key or not null, default. `-`: the engine has no such",
            "table or column (SQLite's full text is FTS5's own tables, PostgreSQL's a `search` table; files'",
            "bytes are rows only on PostgreSQL).", ""]
    for name in sorted(set(sqlite) | set(postgres)):
        out += columns_table(name, sqlite.get(name), postgres.get(name))
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m app.store.schema_page POSTGRESQL_URL  (an empty database; it is migrated)",
              file=sys.stderr)
        return 2
    db = dbm.connect(argv[0])
    try:
        schema.migrate(db)
        sys.stdout.write(page(sqlite_tables(), postgres_tables(db)))
    finally:
        db.conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
