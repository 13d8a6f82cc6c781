"""Loopback benchmark of the posenc service: ``python -m bench`` (``./run.sh bench``).

Never imported by the test suite. ``bench.baseline`` is the seed-tutorial baseline and the
transport ceiling; ``bench.__main__`` starts the servers, measures and writes the results.
"""
