"""Tabletalk: people talk to AI agents; every conversation is rows of SQLite tables."""
