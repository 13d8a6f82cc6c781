"""The live parity lane: vLLM itself, run in its own virtual environment, against the fixture.

Skipped unless ``POSENC_VLLM_PYTHON`` names the Python of a venv with vLLM (see
``docs/engines.md``, "Parity lanes")::

    POSENC_VLLM_PYTHON=/work/venv-vllm/bin/python .venv/bin/python -m pytest \\
        tests/lib/test_engines_live.py -q

It runs ``scripts/record_vllm_tables.py --check``: every case's rows, magnitude, softmax scale
and recorded cos rows from that vLLM must equal ``tests/fixtures/vllm/tables.json``, which the
default lane (``tests/lib/test_rope_vllm.py``) checks posenc against.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = os.environ.get("POSENC_VLLM_PYTHON")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLM_PYTHON, reason="set POSENC_VLLM_PYTHON to the python of a venv with vLLM"
    ),
]


def test_vllm_gives_the_recorded_tables() -> None:
    assert VLLM_PYTHON is not None
    run = subprocess.run(
        [VLLM_PYTHON, str(ROOT / "scripts" / "record_vllm_tables.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "matches the fixture" in run.stdout
