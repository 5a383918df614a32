"""SQLite's schema history up to m027, in parts by era, each part's MIGRATIONS in the order
they are applied. Frozen: nothing here changes, nothing is added here. app/store/migrations.py
joins these lists, in this order, ahead of the later migrations it holds itself, and new
migrations are appended at the end of that file."""
