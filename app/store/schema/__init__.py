"""Both engines' schema as their histories, each a list of migrations in the order they
are applied. SQLite's is migrations.py: its MIGRATIONS joins the frozen eras
(m001_to_m010.py, then m011_to_m027.py) ahead of the later migrations it holds itself.
PostgreSQL's is pg_migrations.py: its frozen first step (pg_m001_to_m022.py, SQLite's m001 to
m022 at once), then the twins of SQLite's later ones. The eras are frozen: nothing in them
changes; a new migration is appended at the end of migrations.py and of pg_migrations.py."""
