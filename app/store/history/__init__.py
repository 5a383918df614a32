"""The schema's history, in parts by era, each part's MIGRATIONS in the order they are
applied. Frozen: nothing here changes, nothing is added here. SQLite's up to m027
(m001_to_m010.py, m011_to_m027.py): app/store/migrations.py joins these lists, in this order,
ahead of the later migrations it holds itself. PostgreSQL's first step (pg_m001_to_m022.py):
app/store/pg_schema.py lists it first. New migrations are appended at the end of those two
files."""
