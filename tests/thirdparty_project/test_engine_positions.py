"""The engine's positions, checked with posenc's fixture: no conftest, no configuration."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import my_engine
import numpy as np
import pytest
import torch

from posenc.testing import assert_rope_table, reference_table


def test_rope_tables(posenc_reference) -> None:
    cos, sin = my_engine.rope_tables(4096)
    posenc_reference.assert_rope_table(cos, sin, config=my_engine.CONFIG_PATH, seq_len=4096)
    posenc_reference.assert_rope_table(
        torch.from_numpy(cos),
        torch.from_numpy(sin),
        config=my_engine.CONFIG,
        seq_len=4096,
        engine="vllm",
    )


def test_reference_table_is_the_engines_to_float32_rounding(posenc_reference) -> None:
    cos, sin = posenc_reference.reference_table(config=my_engine.CONFIG, seq_len=64)
    assert cos.dtype == np.float64 and cos.shape == (64, my_engine.HEAD_DIM)
    mine = my_engine.rope_tables(64)
    np.testing.assert_allclose(cos, mine[0], rtol=0, atol=1e-7)
    np.testing.assert_allclose(sin, mine[1], rtol=0, atol=1e-7)


def test_imported_directly_too() -> None:
    cos, sin = my_engine.rope_tables(128)
    assert_rope_table(cos, sin, config=my_engine.CONFIG_PATH, positions=list(range(128)))
    want = reference_table(config=my_engine.CONFIG, seq_len=128, engine="llama.cpp")
    np.testing.assert_allclose(want[0], cos, rtol=0, atol=1e-6)


def test_rotations(posenc_reference) -> None:
    q = np.random.default_rng(0).standard_normal((256, 4, my_engine.HEAD_DIM)).astype(np.float32)
    out = my_engine.rotate(q)
    posenc_reference.assert_rotated(q, out, config=my_engine.CONFIG, seq_len=256, atol=1e-5)
    want = posenc_reference.reference_rotation(q, config=my_engine.CONFIG, seq_len=256)
    assert want.shape == q.shape
    np.testing.assert_allclose(want, out, rtol=0, atol=1e-5)


@pytest.mark.parametrize("window", [1, 4, 16])
def test_masks(posenc_reference, window: int) -> None:
    mask = my_engine.sliding_mask(32, window)
    posenc_reference.assert_mask(mask, kind="sliding", window=window)
    posenc_reference.assert_mask(np.where(mask, 0.0, -np.inf)[None], kind="sliding", window=window)


def _posenc_command() -> str:
    found = shutil.which("posenc", path=str(Path(sys.executable).parent))
    assert found is not None, "the posenc command next to this Python"
    return found


def test_posenc_check_exits_0_and_1(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, **dict(zip(("cos", "sin"), my_engine.rope_tables(512), strict=True)))
    np.savez(bad, **dict(zip(("cos", "sin"), my_engine.rope_tables(512, "wrong_base"), strict=True)))  # fmt: skip
    args = ["--config", str(my_engine.CONFIG_PATH)]
    ok = subprocess.run([_posenc_command(), "check", str(good), *args], capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    failed = subprocess.run([_posenc_command(), "check", str(bad), *args], capture_output=True, text=True)  # fmt: skip
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "wrong_base" in failed.stdout
