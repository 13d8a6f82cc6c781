"""``posenc.rope_kinds.rotate.rotate`` (``POST /v1/rope/apply``'s library call) against the models' own code.

- ``precision: "engine"`` with engine transformers equals, bit for bit, the model's modeling
  file's apply function (``apply_rotary_pos_emb``, GPT-J's ``apply_rotary_pos_emb(tensor, sin,
  cos)`` on ``create_sinusoidal_positions``, DeepSeek-V3's ``apply_rotary_pos_emb_interleave``,
  Qwen2-VL's multimodal rotary module) on the cos and sin of the model's own rotary module, built
  from the published config with no weights.
- ``exact`` is within 1e-6 of a float64 rotation written here from the closed form.
- Channels past ``rotary_dim`` come back bit for bit; D other than the head dim is a 422 that
  names both.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.rope.llamacpp_rotate import llamacpp_apply
from posenc.rope_kinds.rotate import apply_fields, rotate, seeded_vectors
from tests.fixtures.apply.configs import COHERE, QWEN2_VL, QWEN_YARN
from tests.references import transformers_rotation

transformers = pytest.importorskip("transformers")


def _qwen_yarn() -> dict[str, Any]:
    """Qwen2.5-7B with the YaRN block its model card gives for 128K."""
    cfg = dict(model_config("qwen2.5-7b"))
    cfg["rope_scaling"] = dict(QWEN_YARN)
    return cfg


POSITIONS = [0, 1, 2, 7, 100, 2000]  # GPT-J's table has 2048 rows
LONG = [0, 5, 4095, 4096, 9000, 20000]  # past Phi-3.5's 4096: the long factors

# (case id, config, positions, layer_type)
CASES: list[tuple[str, dict[str, Any], Any, str | None]] = [
    ("llama-3.1", model_config("llama-3.1-8b"), [0, 1, 2, 7, 100, 9000], None),
    ("gpt-j", model_config("gpt-j-6b"), POSITIONS, None),
    ("pythia", model_config("pythia-1b"), POSITIONS, None),
    ("cohere", COHERE, POSITIONS, None),
    ("qwen2.5-yarn", _qwen_yarn(), [0, 1, 40000, 90000], None),
    ("phi-3.5-short", model_config("phi-3.5-mini"), POSITIONS, None),
    ("phi-3.5-long", model_config("phi-3.5-mini"), LONG, None),
    ("gemma-3-sliding", model_config("gemma-3-1b"), POSITIONS, "sliding_attention"),
    ("gemma-3-full", model_config("gemma-3-1b"), POSITIONS, "full_attention"),
    ("deepseek-v3", model_config("deepseek-v3"), [0, 1, 9, 5000], None),
    ("qwen2-vl", QWEN2_VL, [[0, 1, 2, 2, 2, 5], [0, 1, 2, 3, 3, 5], [0, 1, 2, 3, 4, 5]], None),
]


def _request(config: dict[str, Any], positions: Any, layer_type: str | None) -> dict[str, Any]:
    req: dict[str, Any] = {"config": config, "positions": positions}
    if layer_type is not None:
        req["layer_type"] = layer_type
    return req


def _vectors(head_dim: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    return seeded_vectors(t, 3, 2, head_dim, seed=7)


@pytest.mark.parametrize(
    ("name", "config", "positions", "layer_type"), CASES, ids=[c[0] for c in CASES]
)
def test_engine_precision_is_transformers_apply_bit_for_bit(
    name: str, config: dict[str, Any], positions: Any, layer_type: str | None
) -> None:
    """transformers' own rotary module and apply function, on the same q and k."""
    req = _request(config, positions, layer_type)
    seeded = rotate({**req, "seed": 7, "num_heads": 1}, None, precision="engine")
    d = seeded["meta"]["head_dim"]
    t = len(positions[0]) if isinstance(positions[0], list) else len(positions)
    q, k = _vectors(d, t)
    got = rotate(req, q, k, engine="transformers", precision="engine")
    want_q, want_k = transformers_rotation(config, positions, q, k, layer_type)
    assert got["q"].dtype == q.dtype and got["q"].shape == q.shape
    assert torch.equal(got["q"], want_q), (got["q"] - want_q).abs().max()
    assert torch.equal(got["k"], want_k), (got["k"] - want_k).abs().max()
    assert not torch.equal(got["q"], q)


def _angles(inv: torch.Tensor, positions: list[int]) -> torch.Tensor:
    return torch.tensor(positions, dtype=torch.float64)[:, None] * inv[None, :]


def test_exact_is_a_float64_rotation_llama2() -> None:
    """Llama 2 (base 10000, no scaling, halves): the closed form x·cos θ ± x'·sin θ in float64,
    θ = p · 10000^(−2i/128), and the exact answer within 1e-6 of it, at positions to 2^20."""
    positions = [0, 1, 17, 4096, 100_000, 2**20 - 1]
    q, _k = _vectors(128, len(positions))
    got = rotate({"preset": "llama-2-7b", "positions": positions}, q)["q"]
    inv = 10000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    a = _angles(inv, positions)[:, None, :]  # (T, 1, 64)
    x1, x2 = q[..., :64].double(), q[..., 64:].double()
    want = torch.cat([x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()], -1)
    assert (got.double() - want).abs().max() <= 1e-6


def test_exact_gptj_partial_rotary_keeps_the_rest_bit_for_bit() -> None:
    """GPT-J: adjacent pairs of the first 64 of 256 channels; the other 192 untouched."""
    positions = [3, 50, 2047]
    q, _k = _vectors(256, len(positions))
    out = rotate({"config": model_config("gpt-j-6b"), "positions": positions}, q)
    assert out["meta"]["layout"] == "gptj" and out["meta"]["rotary_dim"] == 64
    assert torch.equal(out["q"][..., 64:], q[..., 64:])
    inv = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    a = _angles(inv, positions)[:, None, :]
    x1, x2 = q[..., 0:64:2].double(), q[..., 1:64:2].double()
    want = torch.stack([x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()], -1).flatten(-2)
    assert (out["q"][..., :64].double() - want).abs().max() <= 1e-6


@pytest.mark.parametrize(
    ("name", "config", "positions", "layer_type"), CASES, ids=[c[0] for c in CASES]
)
def test_exact_within_1e6_of_transformers_in_its_order(
    name: str, config: dict[str, Any], positions: Any, layer_type: str | None
) -> None:
    """exact answers in transformers' channel order (DeepSeek-V3: evens, then odds), within the
    float32 angle error of transformers' own rotation (its angles are float32)."""
    req = _request(config, positions, layer_type)
    d = rotate({**req, "seed": 0, "num_heads": 1}, None)["meta"]["head_dim"]
    t = len(positions[0]) if isinstance(positions[0], list) else len(positions)
    q, k = _vectors(d, t)
    got = rotate(req, q, k)
    want_q, _ = transformers_rotation(config, positions, q, k, layer_type)
    biggest = max(max(p) if isinstance(p, list) else p for p in positions)
    # transformers' float32 angle p·w is off by up to ~p·2^-24 radians
    assert (got["q"] - want_q).abs().max() <= 1e-5 + 8 * biggest * 2**-24


def test_deepseek_v3_transformers_order_is_evens_then_odds() -> None:
    """With rope_interleave, transformers returns the rotated even channels, then the odd ones;
    at position 0 (no rotation) that is the input's evens, then its odds."""
    q, _k = _vectors(64, 2)
    out = rotate({"config": model_config("deepseek-v3"), "positions": [0, 0]}, q)
    assert out["meta"]["channel_order"] == "evens_then_odds"
    scale = out["meta"]["attention_scaling"]
    want = torch.cat([q[..., 0::2], q[..., 1::2]], -1).double() * scale
    assert (out["q"].double() - want).abs().max() <= 1e-6


def test_head_dim_mismatch_names_both() -> None:
    q = torch.zeros(2, 1, 64)
    with pytest.raises(InvalidArgument) as info:
        rotate({"preset": "llama-3.1-8b", "seq_len": 2}, q)
    assert "64" in info.value.message and "128" in info.value.message


def test_llama_cpp_engine_precision_is_its_apply_hook() -> None:
    """llama.cpp's engine apply is its registry hook, ``ggml_rope_ext`` on F32 vectors
    (:func:`posenc.rope.llamacpp_rotate.llamacpp_apply`, checked against libggml's recorded
    rows in tests/lib/test_llamacpp_rotate.py), within float32 rounding of the exact rotation
    where both turn the halves (Qwen2.5)."""
    request = {"preset": "qwen2.5-7b", "positions": [0, 1, 2, 3]}  # float32 angles: ~1e-7 off
    q, k = seeded_vectors(4, 2, 1, 128, seed=3)
    got = rotate(request, q, k, engine="llama.cpp", precision="engine")
    fields = apply_fields(request, engine="llama.cpp", precision="engine")
    positions = torch.tensor(fields["positions"])
    assert torch.equal(got["q"], llamacpp_apply(q, positions, fields))
    assert torch.equal(got["k"], llamacpp_apply(k, positions, fields))
    exact = rotate(request, q.double(), k.double(), engine="llama.cpp", precision="exact")
    assert float((got["q"].double() - exact["q"]).abs().max()) < 1e-5
    assert not torch.equal(got["q"], q)  # rotated: position 1's pairs moved


def test_offset_and_seeded_vectors_follow_the_contract() -> None:
    """seq_len with offset is positions offset … offset+T−1; the seeded q and k come from one
    generator in that order."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 2, 128, generator=g)
    k = torch.randn(3, 1, 128, generator=g)
    seeded = rotate(
        {"preset": "llama-3.1-8b", "seq_len": 3, "offset": 10, "seed": 5, "num_heads": 2,
         "num_kv_heads": 1},
        None,
    )  # fmt: skip
    given = rotate({"preset": "llama-3.1-8b", "positions": [10, 11, 12]}, q, k)
    assert torch.equal(seeded["q"], given["q"]) and torch.equal(seeded["k"], given["k"])


def test_rotation_keeps_norms_and_relative_positions() -> None:
    """<rope(q, m), rope(k, n)> depends only on m − n (exact, float64 inputs)."""
    q = torch.randn(1, 1, 128, dtype=torch.float64)
    k = torch.randn(1, 1, 128, dtype=torch.float64)
    dots = []
    for m, n in ((5, 2), (1003, 1000)):
        a = rotate({"preset": "llama-2-7b", "positions": [m]}, q)["q"]
        b = rotate({"preset": "llama-2-7b", "positions": [n]}, k)["q"]
        dots.append(float((a * b).sum()))
        assert math.isclose(float(a.norm()), float(q.norm()), rel_tol=1e-12)
    assert math.isclose(dots[0], dots[1], rel_tol=1e-9)


@pytest.mark.parametrize(
    ("config", "positions"),
    [
        (model_config("llama-3.1-8b"), [0, 1, 7, 9000]),
        (COHERE, [0, 1, 7, 8000]),
        (model_config("gpt-j-6b"), [0, 1, 7, 2000]),
        (model_config("deepseek-v3"), [0, 3, 7000]),
    ],
    ids=["llama-3.1", "cohere", "gpt-j", "deepseek-v3"],
)
def test_engine_precision_in_bfloat16_is_transformers_apply(
    config: dict[str, Any], positions: list[int]
) -> None:
    """bfloat16 q and k: the rotary module casts cos and sin to bfloat16 and the products are
    bfloat16 (Cohere: float32, cast back), bit for bit."""
    req = _request(config, positions, None)
    d = rotate({**req, "seed": 0, "num_heads": 1}, None)["meta"]["head_dim"]
    q, k = (v.to(torch.bfloat16) for v in _vectors(d, len(positions)))
    got = rotate(req, q, k, precision="engine")
    want_q, want_k = transformers_rotation(config, positions, q, k, None)
    assert got["q"].dtype == torch.bfloat16
    assert torch.equal(got["q"], want_q.to(torch.bfloat16))
    assert torch.equal(got["k"], want_k.to(torch.bfloat16))
