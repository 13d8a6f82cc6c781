"""Keys that move (:mod:`posenc.rope_kinds.shift`, ``POST /v1/rope/shift``).

The reference for "a key at ``to``" is the rope kind's own float64 table
(:func:`posenc.rope.rope_cos_sin`, checked against transformers elsewhere) applied with
:func:`posenc.rope.apply_rope`: rotating at ``from`` and then shifting must equal rotating at
``to`` within float64 rounding, for Llama 3.1, a plain θ = 10000 model, Phi-3.5's LongRoPE
across its switch and dynamic NTK across its base change. The plain model's tables are checked
against the closed form written here.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc.core import slices
from posenc.core.errors import InvalidArgument
from posenc.resolve import compute, resolve_fields
from posenc.rope import RopeScaling, apply_rope, rope_cos_sin
from posenc.rope_kinds.shift import ROPE_SHIFT, given_key

DYNAMIC = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}

#: (name, rope settings, from positions, to positions)
CASES = (
    ("llama-3.1-8b", {"preset": "llama-3.1-8b"}, [0, 3, 500, 9000], [7, 100_000, 131_071, 2]),
    ("plain", {"head_dim": 64, "base": 10000.0}, [5, 6, 7, 8], [1, 2, 3, 4]),
    ("phi-3.5 short to long", {"preset": "phi-3.5-mini"}, [0, 10, 4000, 4095], [9, 5000, 8191, 70_000]),
    ("dynamic across its base", {"head_dim": 64, "scaling": DYNAMIC}, [0, 17, 2047, 1], [4000, 3, 9999, 2048]),
)  # fmt: skip


def _settings(fields: dict) -> dict:
    return resolve_fields(ROPE_SHIFT, {**fields, "positions": [0], "delta": 0})


def _rotated(k: torch.Tensor, positions: list[int], s: dict) -> torch.Tensor:
    """``k`` ``(T, H, D)`` float64 rotated at ``positions`` by the rope kind's float64 table
    (magnitude included), the sequence length being ``max + 1``."""
    scaling = RopeScaling.from_dict(s["scaling"]) if s["scaling"] is not None else None
    tables = rope_cos_sin(
        positions,
        rotary_dim=s["rotary_dim"],
        base=s["base"],
        layout=s["layout"],
        scaling=scaling,
        dtype=torch.float64,
    )
    x = k.permute(1, 0, 2)[None]  # (1, H, T, D)
    return apply_rope(x, tables.cos, tables.sin, layout=s["layout"])[0].permute(1, 0, 2)


@pytest.mark.parametrize(("name", "fields", "source", "target"), CASES, ids=[c[0] for c in CASES])
def test_rotate_then_shift_is_rotate_at_to(name: str, fields: dict, source: list, target: list) -> None:  # fmt: skip
    s = _settings(fields)
    g = torch.Generator().manual_seed(1)
    k0 = torch.randn(len(source), 2, s["head_dim"], generator=g, dtype=torch.float64)
    cached = _rotated(k0, source, s)
    p = resolve_fields(
        ROPE_SHIFT,
        {**fields, "from_positions": source, "to_positions": target, "k": cached.tolist(),
         "dtype": "float64"},
    )  # fmt: skip
    out = compute(ROPE_SHIFT, p)
    want = _rotated(k0, target, s)
    # float64 rounding of the angles: a few ulp of the largest angle (position x 1 rad)
    tol = 8 * torch.finfo(torch.float64).eps * (max(source + target) + 1)
    torch.testing.assert_close(out["k"], want, atol=tol, rtol=0)
    assert out["k"].dtype == torch.float64
    meta = ROPE_SHIFT.make_meta(p)
    assert meta["drift"] < tol
    # the ratio is the magnitudes' at to and from
    scaling = RopeScaling.from_dict(s["scaling"]) if s["scaling"] is not None else None
    a = [
        rope_cos_sin(
            [max(pos)], rotary_dim=s["rotary_dim"], base=s["base"], scaling=scaling
        ).attention_scaling
        for pos in (source, target)
    ]
    assert meta["attention_scaling_ratio"] == pytest.approx(a[1] / a[0], rel=1e-15)


def test_longrope_switch_turns_by_both_factor_sets() -> None:
    """Phi-3.5 from its short factors (within 4096) to its long ones: the angle is
    5000·θ_long − 10·θ_short (θ = 1 / (factor · 10000^(2i/96))); transformers applies the
    same magnitude to both, so the ratio is 1."""
    p = resolve_fields(
        ROPE_SHIFT, {"preset": "phi-3.5-mini", "from_positions": [10], "to_positions": [5000]}
    )
    meta = ROPE_SHIFT.make_meta(p)
    assert meta["from_seq_len"] == 11 and meta["to_seq_len"] == 5001
    assert meta["attention_scaling_ratio"] == 1.0
    scaling = p["scaling"]
    cos = compute(ROPE_SHIFT, {**p, "dtype": "float64"}, dtype=torch.float64)["cos"]
    for i in range(48):
        base = 10000.0 ** (2 * i / 96)
        angle = 5000 / (scaling["long_factor"][i] * base) - 10 / (scaling["short_factor"][i] * base)
        assert float(cos[0, i]) == pytest.approx(math.cos(angle), abs=1e-12)
    short = resolve_fields(
        ROPE_SHIFT,
        {"preset": "phi-3.5-mini", "from_positions": [10], "to_positions": [5000],
         "to_seq_len": 4096},
    )  # fmt: skip
    assert not torch.equal(compute(ROPE_SHIFT, short)["cos"], compute(ROPE_SHIFT, p)["cos"])


def test_plain_tables_are_the_closed_form() -> None:
    """θ_i = 10000^(−2i/64); the table holds cos and sin of (to − from)·θ_i in the half
    layout, within 1e-6 in float32 (positions up to 131,072)."""
    source, target = [0, 131_072, 65_000, 3], [131_072, 0, 65_001, 3]
    p = resolve_fields(
        ROPE_SHIFT, {"head_dim": 64, "from_positions": source, "to_positions": target}
    )
    out = compute(ROPE_SHIFT, p)
    for t, (m, n) in enumerate(zip(source, target, strict=True)):
        for i in range(32):
            angle = (n - m) * 10000.0 ** (-2 * i / 64)
            for col in (i, i + 32):
                assert abs(float(out["cos"][t, col]) - math.cos(angle)) <= 1e-6
                assert abs(float(out["sin"][t, col]) - math.sin(angle)) <= 1e-6


def test_delta_and_steps_move_to_from_plus_steps_delta() -> None:
    by_delta = resolve_fields(
        ROPE_SHIFT,
        {
            "head_dim": 16,
            "positions": [40, 41],
            "delta": -3,
            "steps": 10,
            "seed": 4,
            "num_heads": 2,
        },
    )
    explicit = resolve_fields(
        ROPE_SHIFT,
        {
            "head_dim": 16,
            "from_positions": [40, 41],
            "to_positions": [10, 11],
            "seed": 4,
            "num_heads": 2,
        },
    )
    a, b = compute(ROPE_SHIFT, by_delta), compute(ROPE_SHIFT, explicit)
    for name in ("cos", "sin", "k"):
        assert torch.equal(a[name], b[name]), name


def test_seeded_key_is_apply_s_k() -> None:
    """seed draws q (T, H, D) then k (T, H_kv, D) from one generator."""
    p = resolve_fields(
        ROPE_SHIFT,
        {
            "head_dim": 8,
            "positions": [1, 2, 3],
            "delta": 0,
            "seed": 7,
            "num_heads": 4,
            "num_kv_heads": 2,
        },
    )
    g = torch.Generator().manual_seed(7)
    torch.randn(3, 4, 8, generator=g)
    k = torch.randn(3, 2, 8, generator=g)
    assert torch.equal(compute(ROPE_SHIFT, p)["k"], k)  # delta 0: unchanged


def test_partial_rotary_keeps_the_other_channels_bit_for_bit() -> None:
    k = torch.randn(2, 1, 80, dtype=torch.float32)
    p = resolve_fields(
        ROPE_SHIFT,
        {"preset": "phi-2", "positions": [5, 9], "delta": 1000, "k": k.tolist()},
    )
    out = compute(ROPE_SHIFT, p)["k"]
    r = p["rotary_dim"]
    assert r < 80 and torch.equal(out[..., r:], k[..., r:])


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"positions": [1], "delta": -2}, "delta"),
        ({"positions": [1]}, "delta"),
        ({"from_positions": [1], "to_positions": [1, 2]}, "to_positions"),
        ({"positions": [1], "delta": 1, "from_positions": [1], "to_positions": [1]}, "from_positions"),
        ({"from_positions": [1], "to_positions": [2], "steps": 3}, "steps"),
        ({"positions": [1], "delta": 1, "k": [[[0.0] * 8]]}, "k"),
        ({"positions": [1, 2], "delta": 1, "k": [[[0.0] * 16]]}, "k"),
        ({"positions": [1], "delta": 1, "seed": 0}, "num_heads"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(fields: dict, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        resolve_fields(ROPE_SHIFT, {"head_dim": 16, **fields})
    assert err.value.field == field


def test_engine_precision_refuses_a_frequency_change() -> None:
    """transformers re-prefills at LongRoPE's switch: no engine shift across it."""
    with pytest.raises(InvalidArgument, match="differ") as err:
        resolve_fields(
            ROPE_SHIFT,
            {"preset": "phi-3.5-mini", "from_positions": [10], "to_positions": [5000],
             "precision": "engine"},
        )  # fmt: skip
    assert err.value.field == "precision"


def test_transformers_engine_shift_is_its_float32_rotation() -> None:
    """transformers has no shift: its float32 ``apply_rotary_pos_emb`` (``k·cos +
    rotate_half(k)·sin``) by its float32 table at the delta (``inv_freq`` as its init function
    writes it, ``delta.float() · inv_freq``), bit for bit, and within 1e-5 of exact."""
    g = torch.Generator().manual_seed(2)
    k = torch.randn(3, 2, 16, generator=g)
    fields = {"head_dim": 16, "positions": [10, 20, 30], "delta": 70_000, "k": k.tolist()}
    p = resolve_fields(ROPE_SHIFT, {**fields, "precision": "engine"})
    engine = compute(ROPE_SHIFT, p)["k"]
    inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.int64).float() / 16))
    freqs = torch.full((3,), 70_000).float()[:, None] * inv
    emb = torch.cat((freqs, freqs), -1)[:, None, :]
    rotate_half = torch.cat((-k[..., 8:], k[..., :8]), -1)
    assert torch.equal(engine, k * emb.cos() + rotate_half * emb.sin())
    exact = compute(ROPE_SHIFT, resolve_fields(ROPE_SHIFT, fields))["k"]
    assert float((engine - exact).abs().max()) < 1e-1  # float32 angles at 70,000: 1e-2 off
    assert ROPE_SHIFT.make_meta(p)["drift"] == pytest.approx(
        float(
            (
                engine.double()
                - compute(ROPE_SHIFT, resolve_fields(ROPE_SHIFT, {**fields, "dtype": "float64"}))[
                    "k"
                ]
            )
            .abs()
            .max()
        ),
        rel=1e-9,
    )


def test_vllm_engine_shift_keeps_longrope_s_magnitude_once() -> None:
    """vLLM's cache rows at the delta, without the magnitude its cache multiplies in: a key
    moved within one factor set stays within float32 rounding of exact (the keys carry the
    magnitude from their first rotation)."""
    fields = {"preset": "phi-3.5-mini", "positions": [100, 200], "delta": 30, "seed": 3,
              "num_heads": 2, "engine": "vllm", "precision": "engine"}  # fmt: skip
    p = resolve_fields(ROPE_SHIFT, fields)
    assert ROPE_SHIFT.make_meta(p)["drift"] < 1e-5


def test_llamacpp_kshift_applies_its_attn_factor_again() -> None:
    """llama.cpp's K-shift passes the model's attn_factor again: Phi-3.5's LongRoPE magnitude
    (1.19) multiplies the keys at every shift, which meta.drift shows."""
    fields = {"preset": "phi-3.5-mini", "positions": [100], "delta": 30, "k": [[[1.0] + [0.0] * 95]],
              "engine": "llama.cpp", "precision": "engine"}  # fmt: skip
    p = resolve_fields(ROPE_SHIFT, fields)
    k = compute(ROPE_SHIFT, p)["k"]
    magnitude = math.sqrt(1 + math.log(32) / math.log(4096))
    assert float(k[0, 0].norm()) == pytest.approx(magnitude, rel=1e-6)
    assert ROPE_SHIFT.make_meta(p)["drift"] > 0.1


def test_mlx_engine_shift_is_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        resolve_fields(
            ROPE_SHIFT,
            {"head_dim": 8, "positions": [1], "delta": 1, "engine": "mlx", "precision": "engine"},
        )
    assert err.value.field == "precision"


@pytest.mark.parametrize("precision", ["exact", "engine"])
def test_a_key_read_in_slices_shifts_as_the_key_read_whole(
    monkeypatch: pytest.MonkeyPatch, precision: str
) -> None:
    """Issue 39: the JSON key and the positions are made into tensors a slice at a time (16
    numbers here, so this small key is cut): the answer is the one of one ``torch.tensor``."""
    k = torch.randn(40, 2, 8, dtype=torch.float64).tolist()
    fields = {"head_dim": 8, "positions": list(range(40)), "delta": 3, "k": k,
              "precision": precision}  # fmt: skip
    whole = compute(ROPE_SHIFT, resolve_fields(ROPE_SHIFT, fields))
    monkeypatch.setattr(slices, "SLICE_ITEMS", 16)
    assert torch.equal(given_key(resolve_fields(ROPE_SHIFT, fields)), torch.tensor(k).float())
    sliced = compute(ROPE_SHIFT, resolve_fields(ROPE_SHIFT, fields))
    for name in ("k", "cos", "sin"):
        assert torch.equal(sliced[name], whole[name]), name
