"""Each engine's own shift of cached keys (:mod:`posenc.engines.key_shift`), hook by hook: the
delta per step, the sign of the sines, transformers' and vLLM's float32 tables at the delta
(``cos``/``sin`` of ``delta · base^(−2i/R)``, written here with ``math`` in float64), and
transformers' shift of a key rotated at ``from`` landing on the key rotated at ``to`` within
float32 rounding. (The shift endpoint as a whole: tests/lib/test_shift.py.)"""

from __future__ import annotations

import math

import torch

from posenc.engines.key_shift import (
    rotation_sign,
    step_deltas,
    transformers_delta_tables,
    transformers_shift,
    vllm_delta_tables,
)
from posenc.resolve import resolve_fields
from posenc.rope_kinds.shift import ROPE_SHIFT

BASE, R = 10000.0, 8


def _fields(**given: object) -> dict:
    return resolve_fields(ROPE_SHIFT, {"head_dim": R, "base": BASE, **given})


def _angles(positions: list[int]) -> list[list[float]]:
    return [[p * BASE ** (-2 * i / R) for i in range(R // 2)] for p in positions]


def _rotate_half(k: list[float], position: int) -> list[float]:
    """``k`` (``R`` channels, half layout: channel ``i`` pairs with ``i + R/2``) at ``position``."""
    out = list(k)
    for i, a in enumerate(_angles([position])[0]):
        x, y = k[i], k[i + R // 2]
        out[i] = x * math.cos(a) - y * math.sin(a)
        out[i + R // 2] = y * math.cos(a) + x * math.sin(a)
    return out


def test_the_delta_per_step_and_the_steps() -> None:
    p = _fields(positions=[3, 5], delta=4, steps=2)
    delta, steps = step_deltas(torch.tensor([3, 5]), torch.tensor([11, 13]), p)
    assert delta.tolist() == [4, 4] and steps == 2  # 8 in all, 4 a step
    q = _fields(from_positions=[3, 5], to_positions=[0, 105])
    delta, steps = step_deltas(torch.tensor([3, 5]), torch.tensor([0, 105]), q)
    assert delta.tolist() == [-3, 100] and steps == 1  # explicit positions: one step


def test_negative_rotation_negates_the_sines() -> None:
    assert rotation_sign({"rotation": "negative"}) == -1.0
    assert rotation_sign({"rotation": "positive"}) == rotation_sign({}) == 1.0


def test_transformers_and_vllm_tables_at_the_delta_are_the_closed_form() -> None:
    p = _fields(positions=[3, 5], delta=4)
    delta = torch.tensor([4, -3, 1000])
    want = _angles([4, -3, 1000])
    cos_want = torch.tensor([[math.cos(a) for a in row] for row in want])
    sin_want = torch.tensor([[math.sin(a) for a in row] for row in want])
    for tables in (transformers_delta_tables, vllm_delta_tables):
        cos, sin = tables(p, delta)
        assert cos.dtype == torch.float32 and cos.shape == (3, R // 2)
        # float32 angles: |Δ| ≤ a few ulp of the angle (1000 rad at most)
        torch.testing.assert_close(cos, cos_want, rtol=0, atol=2e-4)
        torch.testing.assert_close(sin, sin_want, rtol=0, atol=2e-4)


def test_transformers_shift_moves_a_key_from_from_to_to() -> None:
    source, target = [2, 40, 7], [9, 3, 7]
    gen = torch.Generator().manual_seed(4)
    k0 = torch.randn(3, 1, R, generator=gen, dtype=torch.float64)
    cached = torch.tensor([[_rotate_half(k0[t, 0].tolist(), source[t])] for t in range(3)])
    p = _fields(
        from_positions=source, to_positions=target, engine="transformers", precision="engine"
    )
    out = transformers_shift(cached.float(), torch.tensor(source), torch.tensor(target), p)
    want = torch.tensor(
        [[_rotate_half(k0[t, 0].tolist(), target[t])] for t in range(3)], dtype=torch.float64
    )
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, rtol=0, atol=1e-5)
    assert torch.equal(out[2], cached[2].float())  # delta 0: cos 1, sin 0, the key unchanged
