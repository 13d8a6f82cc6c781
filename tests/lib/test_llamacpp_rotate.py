"""llama.cpp's rotation of vectors and its K-shift (:mod:`posenc.rope.llamacpp_rotate`) against
libggml's own output.

The fixture (tests/fixtures/llamacpp/shift.json) holds libggml's ``ggml_rope_ext`` /
``ggml_rope_multi`` on F32 vectors (CPU), recorded by scripts/record_llamacpp_shift.py from
``llama-cpp-python``'s libggml for published configs: one rotation at positions up to 131,072,
and the K-shift repeated 1 and 10 times. posenc must be within 2 float32 ulp of each rotated
pair's magnitude per step. A live test calls libggml where ``llama_cpp`` is importable (or
``POSENC_GGML_LIB`` names a folder with its libraries).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.resolve import compute, resolve_fields
from posenc.rope.llamacpp_rotate import (
    ggml_rotate,
    llamacpp_apply,
    llamacpp_kshift,
    rope_from_dict,
)
from posenc.rope_kinds.shift import ROPE_SHIFT
from tests.lib.llamacpp_vectors import CASES, pair_ulps
from tests.lib.llamacpp_vectors import fixture_array as _array

ROOT = Path(__file__).resolve().parents[2]


def _positions(case: dict) -> torch.Tensor:
    pos = torch.tensor(case["positions"], dtype=torch.int64)
    return pos[None].expand(4, -1) if case["rope"]["sections"] is not None else pos


@pytest.mark.skipif(not CASES, reason="no recorded fixture")
@pytest.mark.parametrize("name", sorted(CASES))
def test_within_two_ulp_of_libggml_per_step(name: str) -> None:
    case = CASES[name]
    x = torch.from_numpy(_array(case["x"], case["shape"]))
    want = _array(case["out"], case["shape"])
    rope = rope_from_dict(case["rope"])
    if case["what"] == "apply":
        got = ggml_rotate(x, _positions(case), rope).numpy()
    else:
        got = llamacpp_kshift(x, case["positions"], rope, steps=case["steps"]).numpy()
    assert pair_ulps(got, want, case["rope"]) <= 2 * case["steps"], name


@pytest.mark.skipif("llama-3.1-8b apply" not in CASES, reason="no recorded fixture")
def test_apply_reads_the_model_as_llamacpp_does() -> None:
    """``llamacpp_apply`` with the rope kind's resolved fields (a preset) gives libggml's."""
    case = CASES["llama-3.1-8b apply"]
    fields = resolve_fields(
        ROPE_SHIFT, {"preset": "llama-3.1-8b", "positions": [0], "delta": 0, "engine": "llama.cpp"}
    )
    x = torch.from_numpy(_array(case["x"], case["shape"]))
    got = llamacpp_apply(x, torch.tensor(case["positions"]), fields).numpy()
    assert pair_ulps(got, _array(case["out"], case["shape"]), case["rope"]) <= 2


@pytest.mark.skipif("llama-3.1-8b kshift x10" not in CASES, reason="no recorded fixture")
def test_endpoint_kshift_is_libggml_s() -> None:
    """``/v1/rope/shift`` with engine llama.cpp and precision engine: the recorded K-shift."""
    case = CASES["llama-3.1-8b kshift x10"]
    x = torch.from_numpy(_array(case["x"], case["shape"]))
    fields = {
        "preset": "llama-3.1-8b", "positions": [20_000 + i for i in range(x.shape[0])],
        "delta": case["positions"][0], "steps": 10, "k": x, "engine": "llama.cpp",
        "precision": "engine",
    }  # fmt: skip
    p = resolve_fields(ROPE_SHIFT, fields)
    got = compute(ROPE_SHIFT, p)["k"].numpy()
    assert pair_ulps(got, _array(case["out"], case["shape"]), case["rope"]) <= 20
    meta = ROPE_SHIFT.make_meta(p)
    assert 0 < meta["drift"] < 1e-2  # 10,000 positions in float32 angles


def test_normal_mode_turns_adjacent_pairs_and_neox_halves() -> None:
    """Hand-worked: a unit vector on the first pair, turned by 1 rad at position 1."""
    for mode, other in (("normal", 1), ("neox", 2)):
        rope = rope_from_dict({"n_dims": 4, "mode": mode, "freq_base": 10000.0})
        x = torch.zeros(1, 1, 6)
        x[0, 0, 0] = 1.0
        out = ggml_rotate(x, [1], rope)[0, 0]
        assert abs(float(out[0]) - np.cos(1.0)) < 1e-7
        assert abs(float(out[other]) - np.sin(1.0)) < 1e-7
        assert float(out.abs().sum() - out[0].abs() - out[other].abs()) == 0.0


def test_live_libggml_where_importable() -> None:
    """libggml itself, at fresh positions and deltas: apply and a 10-step K-shift."""
    if not os.environ.get("POSENC_GGML_LIB"):
        pytest.importorskip("llama_cpp")
    sys.path.insert(0, str(ROOT / "scripts"))
    from record_llamacpp_shift import case_rope, ggml_kshift  # type: ignore[import-not-found]
    from record_llamacpp_shift import ggml_rotate as libggml_rotate

    g = torch.Generator().manual_seed(5)
    positions = torch.randint(0, 131_073, (16,), generator=g)
    for preset in ("llama-3.1-8b", "qwen2.5-7b", "phi-3.5-mini", "gpt-oss-20b"):
        rope, _model = case_rope(preset, None, "apply")
        x = torch.randn(16, 2, int(rope["n_dims"]), generator=g)
        want = libggml_rotate(x.numpy(), positions.numpy(), rope)
        got = ggml_rotate(x, positions, rope_from_dict(rope)).numpy()
        assert pair_ulps(got, want, rope) <= 2, preset
        shift, _model = case_rope(preset, None, "kshift")
        deltas = torch.randint(-5000, 5000, (16,), generator=g)
        want = ggml_kshift(x.numpy(), deltas.numpy(), shift, 10)
        got = llamacpp_kshift(x, deltas, rope_from_dict(shift), steps=10).numpy()
        assert pair_ulps(got, want, shift) <= 20, preset
        # the endpoint's own answer: the seeded key, its K-shift arguments as meta gives them
        fields = {"preset": preset, "positions": list(range(6000, 6016)), "delta": -123,
                  "steps": 10, "seed": 2, "num_heads": 2, "engine": "llama.cpp",
                  "precision": "engine"}  # fmt: skip
        p = resolve_fields(ROPE_SHIFT, fields)
        meta = ROPE_SHIFT.make_meta(p)
        seeded = torch.Generator().manual_seed(2)
        torch.randn(16, 2, int(p["head_dim"]), generator=seeded)
        key = torch.randn(16, 2, int(p["head_dim"]), generator=seeded).numpy()
        want = ggml_kshift(key, np.full(16, -123, dtype=np.int32), meta["llamacpp_kshift"], 10)
        got = compute(ROPE_SHIFT, p)["k"].numpy()
        assert pair_ulps(got, want, meta["llamacpp_kshift"]) <= 20, preset
