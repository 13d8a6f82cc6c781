"""``posenc.testing`` as a package (docs/testing.md): the fixture object holds the assertions a
caller's own tests use, importing it imports no web framework, loading the pytest plugin
imports nothing of posenc, and a project without a conftest gets the fixture.

The assertions themselves are tested beside their modules: test_testing_tables.py,
test_testing_masks.py and test_testing_rotations.py."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.testing import Reference, assert_rope_table, reference_rotation

ROOT = Path(__file__).resolve().parents[2]


def test_the_fixture_object_holds_the_functions() -> None:
    ref = Reference()
    assert ref.assert_rope_table is assert_rope_table
    assert ref.reference_rotation is reference_rotation
    assert {"assert_mask", "assert_rotated", "reference_table"} <= set(dir(ref))


def test_importing_posenc_testing_imports_no_web_framework() -> None:
    code = (
        "import sys, posenc.testing\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'starlette', 'pydantic', 'service', 'httpx', 'pytest'))\n"
        "assert not bad, bad\n"
        "import pytest_posenc\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_loading_the_plugin_imports_nothing_of_posenc() -> None:
    """pytest imports every plugin at start-up: the plugin must not import torch or posenc
    (time, and coverage that starts after plugins load)."""
    code = (
        "import sys, pytest_posenc\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('posenc', 'torch', 'numpy'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.slow
def test_the_fixture_in_a_project_without_conftest(tmp_path: Path) -> None:
    """A pytest run with the plugin (``-p pytest_posenc``, what the ``pytest11`` entry point
    loads once installed: scripts/wheel_check runs it that way) gives ``posenc_reference``
    with no conftest: a correct table passes, a shifted one fails naming the mistake."""
    (tmp_path / "test_mine.py").write_text(
        "import numpy as np\n"
        "def _table(shift):\n"
        "    inv = 1.0 / 1e6 ** (np.arange(0, 128, 2) / 128)\n"
        "    a = (np.arange(16) + shift)[:, None] * inv\n"
        "    a = np.concatenate([a, a], 1)\n"
        "    return np.cos(a).astype(np.float32), np.sin(a).astype(np.float32)\n"
        "def test_good(posenc_reference):\n"
        "    posenc_reference.assert_rope_table(*_table(0), preset='qwen2.5-7b', seq_len=16)\n"
        "def test_shifted(posenc_reference):\n"
        "    posenc_reference.assert_rope_table(*_table(1), preset='qwen2.5-7b', seq_len=16)\n"
    )
    # the entry point loads the plugin where posenc is installed (./run.sh, the wheel); a
    # checkout on PYTHONPATH alone names it with -p
    installed = any(ep.name == "posenc" for ep in importlib.metadata.entry_points(group="pytest11"))
    load = [] if installed else ["-p", "pytest_posenc"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *load, "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 1 passed" in run.stdout
    assert "diagnosis (/v1/configs/check): positions_off_by_one" in run.stdout
