"""The routers of the v1 HTTP contract: one module per topic."""
