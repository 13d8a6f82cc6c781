"""llama.cpp's RoPE (:mod:`posenc.rope.llamacpp`) against libggml's own output.

The fixture (tests/fixtures/llamacpp/tables.json) holds ``ggml_rope_ext`` / ``ggml_rope_multi``
output on the CPU, recorded by scripts/record_llamacpp_tables.py from ``llama-cpp-python``'s
libggml, for published configs at positions up to 1,000,000. posenc's ``precision: "engine"``
(ggml's float32 arithmetic: ``theta *= theta_scale``, the YaRN mix, ``cosf``) must be within 2
float32 ulp of it; the exact table (float64) is checked to be closer to the float64 rule than
ggml is. A live test calls libggml where ``llama_cpp`` is importable.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.readers.hf.positions import read_positions
from posenc.readers.presets import PRESETS
from posenc.resolve import compute, resolve_fields
from posenc.rope.llamacpp import (
    LlamaCppRope,
    ggml_rope_tables,
    llama3_freq_factors,
    llamacpp_rope_for,
    llamacpp_rope_tables,
)
from posenc.rope.precision import model_type_of
from posenc.rope_kinds.kind import ROPE

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "llamacpp" / "tables.json").read_text())
CASES = {c["name"]: c for c in FIXTURE["cases"]}
POSITIONS = FIXTURE["positions"]


def _array(text: str, shape: tuple[int, int]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").reshape(shape)


def _rope(spec: dict) -> LlamaCppRope:
    d = dict(spec)
    sections, factors = d.pop("sections"), d.pop("freq_factors")
    return LlamaCppRope(
        **d,
        sections=tuple(sections) if sections is not None else None,
        freq_factors=tuple(factors) if factors is not None else None,
    )


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float32 values lie between ``a`` and ``b`` (0: bit for bit)."""
    ia = a.astype("<f4").view(np.int32).astype(np.int64)
    ib = b.astype("<f4").view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(2**31) - ia, ia)  # order negative floats below positive
    ib = np.where(ib < 0, -(2**31) - ib, ib)
    return np.abs(ia - ib)


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_precision_within_two_ulp_of_ggml(name: str) -> None:
    """ggml's float32 rope, recomputed by posenc, within 2 ulp of libggml's own output."""
    case = CASES[name]
    rope = _rope(case["rope"])
    half = rope.n_dims // 2
    want_cos = _array(case["cos"], (len(POSITIONS), half))
    want_sin = _array(case["sin"], (len(POSITIONS), half))
    cos, sin = ggml_rope_tables(torch.tensor(POSITIONS), rope)
    assert int(ulp_distance(cos.numpy(), want_cos).max()) <= 2
    assert int(ulp_distance(sin.numpy(), want_sin).max()) <= 2


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_recorded_arguments_are_posencs_reading(name: str) -> None:
    """The arguments each case was recorded with are what posenc reads for its preset now."""
    case = CASES[name]
    params = PRESETS[case["preset"]].params
    mp = read_positions(model_config(case["preset"]))
    rope = llamacpp_rope_for(
        model_type=model_type_of({"preset": case["preset"]}),
        rotary_dim=params["rotary_dim"],
        base=params["base"],
        layout=params["layout"],
        scaling=params["scaling"],
        max_position_embeddings=mp.max_position_embeddings,
        n_ctx=case["n_ctx"],
        mrope_section=mp.mrope_section,
    )
    assert rope.to_dict() == case["rope"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_table_is_the_float64_rule(name: str) -> None:
    """The exact table differs from ggml's by float32 angle error only: at most
    |p| · 2^-22 · (1 + R/2 · 2^-22)-ish, so 1e-7·(p+1)·magnitude bounds it generously."""
    case = CASES[name]
    rope = _rope(case["rope"])
    half = rope.n_dims // 2
    want = _array(case["cos"], (len(POSITIONS), half)).astype(np.float64)
    exact, _ = llamacpp_rope_tables(torch.tensor(POSITIONS), rope)
    bound = 1e-6 * (torch.tensor(POSITIONS, dtype=torch.float64)[:, None] + 1) * 2
    assert bool(((exact - torch.from_numpy(want)).abs() <= bound).all())


def test_theta_advances_by_repeated_multiplication() -> None:
    """Hand-worked: n_dims 6, base 100: theta_scale = powf(100, -1/3) in float32, and pair 2's
    angle at p = 7 is ((7 · s) · s) in float32, not 7 · 100^(-2/3)."""
    rope = LlamaCppRope(n_dims=6, mode="neox", freq_base=100.0)
    s = np.float32(math.pow(100.0, float(np.float32(-2.0) / np.float32(6))))
    angle = (np.float32(7) * s) * s
    cos, sin = ggml_rope_tables(torch.tensor([7]), rope)
    assert float(cos[0, 2]) == float(np.float32(math.cos(float(angle))))
    assert float(sin[0, 1]) == float(np.float32(math.sin(float(np.float32(7) * s))))


def test_yarn_ramp_ends_and_magnitude() -> None:
    """YaRN's ramp (ggml_rope_yarn_corr_dims) keeps the fast pairs, divides the slow ones by
    the factor, and the magnitude is attn_factor · (1 + 0.1 ln(1/freq_scale))."""
    rope = LlamaCppRope(
        n_dims=64, freq_base=10000.0, freq_scale=0.25, ext_factor=1.0, n_ctx_orig=4096
    )
    speed, scale = __import__("posenc.rope.llamacpp", fromlist=["x"]).llamacpp_inv_freq(rope)
    base = 10000.0 ** (-torch.arange(32, dtype=torch.float64) * 2 / 64)
    assert speed[0] == pytest.approx(base[0])
    assert speed[-1] == pytest.approx(base[-1] * 0.25)
    assert scale == pytest.approx(1 + 0.1 * math.log(4))


def test_llama3_factors_as_the_converter_writes_them() -> None:
    """Llama 3.1's rope_freqs: 1 for short wavelengths, factor 8 for long ones, smooth between;
    its inverse equals transformers' llama3 rule's ratio to the plain frequencies."""
    params = PRESETS["llama-3.1-8b"].params
    factors = torch.tensor(llama3_freq_factors(128, 500000.0, params["scaling"]))
    assert factors[0] == 1.0 and factors[-1] == 8.0
    from posenc.rope import RopeScaling, rope_inv_freq

    plain, _ = rope_inv_freq(128, 500000.0, None)
    scaled, _ = rope_inv_freq(128, 500000.0, RopeScaling.from_dict(params["scaling"]))
    torch.testing.assert_close(factors.double(), plain / scaled, rtol=1e-6, atol=0)


def test_the_rope_kind_with_engine_llamacpp() -> None:
    """``engine: "llama.cpp"``: Llama's table in the interleaved layout (normal mode), the
    engine precision equal to ggml's arithmetic, with the arguments in meta."""
    fields = {"preset": "llama-3.1-8b", "positions": POSITIONS, "engine": "llama.cpp"}
    p = resolve_fields(ROPE, {**fields, "precision": "engine"})
    meta = ROPE.meta(p)  # type: ignore[misc]
    assert meta["layout"] == "interleaved" and meta["llamacpp"]["mode"] == "normal"
    assert meta["precision"] == "engine"
    out = dict(compute(ROPE, p))
    want = _array(CASES["llama-3.1-8b"]["cos"], (len(POSITIONS), 64))
    assert int(ulp_distance(out["cos"][:, 0::2].numpy(), want).max()) <= 2
    assert torch.equal(out["cos"][:, 0::2], out["cos"][:, 1::2])
    exact = dict(compute(ROPE, resolve_fields(ROPE, fields)))
    assert not torch.equal(exact["cos"], out["cos"])


def test_longrope_follows_the_context_size() -> None:
    """Phi-3.5 in llama.cpp: long factors for every position when n_ctx (max_model_len) passes
    4,096, short ones otherwise, whatever the positions."""
    base = {"preset": "phi-3.5-mini", "seq_len": 8, "engine": "llama.cpp"}
    long = ROPE.meta(resolve_fields(ROPE, base))  # type: ignore[misc]
    short = ROPE.meta(resolve_fields(ROPE, {**base, "max_model_len": 4096}))  # type: ignore[misc]
    scaling = PRESETS["phi-3.5-mini"].params["scaling"]
    assert long["llamacpp"]["freq_factors"] == [
        float(np.float32(f)) for f in scaling["long_factor"]
    ]
    assert short["llamacpp"]["freq_factors"] == [
        float(np.float32(f)) for f in scaling["short_factor"]
    ]


def test_gptj_has_no_rope_in_llamacpp() -> None:
    with pytest.raises(InvalidArgument) as err:
        resolve_fields(ROPE, {"preset": "gpt-j-6b", "seq_len": 4, "engine": "llama.cpp"})
    assert "without RoPE" in str(err.value)


def test_blocks_equal_the_whole_table() -> None:
    from posenc.engines import ENGINES

    p = resolve_fields(
        ROPE,
        {"preset": "qwen2.5-7b", "seq_len": 3000, "engine": "llama.cpp", "precision": "engine"},
    )
    whole = dict(compute(ROPE, p))
    for name, blocks in ENGINES[p["engine"]].blocks(p, device=None, dtype=torch.float32).items():
        out = torch.empty(blocks.shape).reshape(-1, blocks.row_elements)
        for start in range(0, blocks.rows, 701):
            blocks.fill_rows(start, min(start + 701, blocks.rows), out[start : start + 701])
        assert torch.equal(out.reshape(blocks.shape), whole[name]), name


def test_live_libggml_where_importable() -> None:
    """Where llama-cpp-python is installed (or ``POSENC_GGML_LIB`` names a folder with its
    libggml): libggml's output at fresh positions."""
    if not os.environ.get("POSENC_GGML_LIB"):
        pytest.importorskip("llama_cpp")
    sys.path.insert(0, str(ROOT / "scripts"))
    from record_llamacpp_tables import ggml_rope  # type: ignore[import-not-found]

    g = torch.Generator().manual_seed(3)
    positions = torch.randint(0, 131_073, (64,), generator=g).tolist()
    for case in CASES.values():
        want_cos, want_sin = ggml_rope(positions, case["rope"])
        cos, sin = ggml_rope_tables(torch.tensor(positions), _rope(case["rope"]))
        assert int(ulp_distance(cos.numpy(), want_cos).max()) <= 2, case["name"]
        assert int(ulp_distance(sin.numpy(), want_sin).max()) <= 2, case["name"]
