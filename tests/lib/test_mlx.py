"""MLX's RoPE (:mod:`posenc.rope.mlx`) against MLX's own output.

The fixture (tests/fixtures/mlx/tables.json) holds ``mx.fast.rope`` output on the CPU through
mlx-lm's ``initialize_rope``, recorded by scripts/record_mlx_tables.py, at positions up to
1,000,000. posenc's float32 replay must be within 2 float32 ulp of it; MLX's ``exp`` is replayed
bit for bit (checked live where ``mlx`` is importable).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.errors import InvalidArgument
from posenc.resolve import compute, resolve_fields
from posenc.rope import ROPE
from posenc.rope.mlx import mlx_exact_tables, mlx_exp, mlx_rope_for, mlx_rope_tables

FIXTURE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "mlx" / "tables.json").read_text()
)
CASES = {c["name"]: c for c in FIXTURE["cases"]}
POSITIONS = FIXTURE["positions"]


def _array(text: str, half: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").reshape(len(POSITIONS), half)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia = a.astype("<f4").view(np.int32).astype(np.int64)
    ib = b.astype("<f4").view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(2**31) - ia, ia)
    ib = np.where(ib < 0, -(2**31) - ib, ib)
    return np.abs(ia - ib)


def _rope(case: dict):  # type: ignore[no-untyped-def]
    return mlx_rope_for(
        rotary_dim=case["dims"],
        base=case["base"],
        layout="interleaved" if case["traditional"] else "half",
        scaling=case["scaling"] and {"type": "linear", "factor": case["scaling"]["factor"]},
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_precision_within_two_ulp_of_mlx(name: str) -> None:
    case = CASES[name]
    rope = _rope(case)
    cos, sin = mlx_rope_tables(torch.tensor(POSITIONS), rope)
    half = case["dims"] // 2
    assert int(ulp_distance(cos.numpy(), _array(case["cos"], half)).max()) <= 2
    assert int(ulp_distance(sin.numpy(), _array(case["sin"], half)).max()) <= 2


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_is_the_float64_rule(name: str) -> None:
    """MLX's float32 angles drift from the float64 rule by about p · 2^-23 at most here."""
    case = CASES[name]
    cos, _ = mlx_exact_tables(torch.tensor(POSITIONS), _rope(case))
    got = torch.from_numpy(_array(case["cos"], case["dims"] // 2).astype(np.float64))
    bound = 4e-7 * (torch.tensor(POSITIONS, dtype=torch.float64)[:, None] + 1)
    assert bool(((cos - got).abs() <= bound).all())


def test_the_rope_kind_with_engine_mlx() -> None:
    case = CASES["gemma-3-4b full_attention linear 8"]
    fields = {"preset": "gemma-3-4b", "positions": POSITIONS, "engine": "mlx"}
    p = resolve_fields(ROPE, {**fields, "precision": "engine"})
    out = dict(compute(ROPE, p))
    half = 128
    assert int(ulp_distance(out["cos"][:, :half].numpy(), _array(case["cos"], half)).max()) <= 2
    meta = ROPE.meta(p)  # type: ignore[misc]
    assert meta["engine"] == "mlx" and meta["mlx"]["scale"] == 0.125
    exact = dict(compute(ROPE, resolve_fields(ROPE, fields)))
    assert not torch.equal(exact["cos"], out["cos"])


def test_other_types_are_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        resolve_fields(ROPE, {"preset": "llama-3.1-8b", "seq_len": 4, "engine": "mlx"})
    assert err.value.field == "engine" and "llama3" in str(err.value)


def test_mlx_exp_live_where_importable() -> None:
    """MLX's own exp, bit for bit."""
    mx = pytest.importorskip("mlx.core")
    x = np.random.default_rng(0).uniform(-87, 10, 100_000).astype(np.float32)
    assert np.array_equal(np.array(mx.exp(mx.array(x))), mlx_exp(x))
