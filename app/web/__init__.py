"""Routes: one module per page family, the SSE endpoint, rendering helpers."""
