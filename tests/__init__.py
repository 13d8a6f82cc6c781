"""posenc's tests.

pytest imports this package before ``tests/conftest.py``, so what is set here is set before any
test module imports torch (which loads libgomp, which reads its environment once):

- ``GOMP_SPINCOUNT=1000``, as ``python -m service`` sets for the service: after each parallel
  region, libgomp's threads spin about a thousand times, not 300,000, before they sleep. Under
  pytest-xdist each worker runs torch on both cores, and its spinning threads took the core on
  which the other worker computed. ``tests/lib/test_hf_rope.py`` and
  ``test_vision_learned_tables.py`` on two workers took 105 s (193 CPU-s) with the default and
  47 s (78 CPU-s) with this. A caller's ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` wins.
"""

import os

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")
