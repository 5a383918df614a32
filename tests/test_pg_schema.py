"""The PostgreSQL schema (app/store/schema/pg_migrations.py) against SQLite's migrations: the same tables
with the same columns in the same order, the same NOT NULLs, defaults and primary keys, so a
SQLite migration without its PostgreSQL twin fails here."""
from app import api
from app.store import db as dbm, schema
from app.store.schema import pg_migrations

TYPES = {"INTEGER": "bigint", "REAL": "double precision", "TEXT": "text", "BLOB": "bytea"}


def pg_shapes(db) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    keys = {(r[0], r[1]) for r in db.execute(
        """SELECT c.table_name, k.column_name FROM information_schema.table_constraints c
           JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)
           WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = current_schema()""")}
    for r in db.execute("SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity "
                        "FROM information_schema.columns WHERE table_schema = current_schema() "
                        "ORDER BY table_name, ordinal_position"):
        out.setdefault(r[0], []).append({"name": r[1], "type": r[2], "notnull": r[3] == "NO",
                                         "default": r[4], "pk": (r[0], r[1]) in keys})
    return out


def test_postgresql_has_sqlites_tables_columns_and_keys(pg_url):
    db = dbm.connect(pg_url)
    try:
        assert schema.migrate(db) == [fn.__name__ for fn in pg_migrations.MIGRATIONS]
        assert schema.migrate(db) == []
        theirs, ours = api.shapes(), pg_shapes(db)
    finally:
        db.conn.close()
    # PostgreSQL's own: its full text and its words' counts (SQLite's is FTS5) and files' bytes
    # (SQLite's are in files/)
    own = {"search", "search_passages", "search_passage_words", "search_passages_counted", "blobs", "chunks"}
    assert set(ours) - own == set(theirs) | {"migrations"}
    for table, columns in theirs.items():
        got = ours[table]
        assert [c["name"] for c in got] == [c["name"] for c in columns], table
        for want, have in zip(columns, got):
            where = f"{table}.{want['name']}"
            assert have["type"] == TYPES[want["type"]], where
            assert have["pk"] == want["pk"], where
            # SQLite's INTEGER PRIMARY KEY may be NULL on paper; PostgreSQL's keys never are
            assert have["notnull"] == (want["notnull"] or want["pk"]), where
            if want["default"] is not None:
                assert have["default"] is not None and have["default"].split("::")[0].strip("'") == \
                    want["default"].strip("'"), where

