"""posenc on Ray Serve (``deploy/ray/app.py``, ``deploy/ray/serve.yaml``; docs/deployment.md)."""
