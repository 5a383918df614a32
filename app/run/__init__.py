"""Answering: the runner (scheduling and leases), the write buffer, turn setup, one turn as
rows and each of its steps' requests, and titles. The agent loop it drives is app/agent/
(pure); the rows it reads and writes are the store's (app/store/runs.py for its own)."""
