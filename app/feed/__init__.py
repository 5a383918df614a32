"""The change feed: rows changed since a rev, wake-ups within and across processes."""
