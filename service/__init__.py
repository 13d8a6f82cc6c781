"""posenc service: the FastAPI layer over the posenc library (formats, cache, metrics, routes)."""
