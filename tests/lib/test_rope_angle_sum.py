"""RoPE's tables by angle addition (posenc.rope.tables.write_rope_rows over
posenc.core.angles.sin_cos_rows) are the cosines and sines of the float64 angles of the direct
formula, times the attention scaling, and an element's value does not depend on the rows around
it (whole table, row blocks, explicit positions in any order).

The reference is independent of the angle addition: ``cos`` and ``sin`` of ``fl(p·w_i)`` taken
element by element with Python's ``math``.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc.rope import RopeScaling, rope_blocks, rope_cos_sin, rope_inv_freq

F64 = torch.float64
# around the groups of 64, 2**20, the 2**26 switch to the direct formula (max w = 1), and beyond
STARTS = [0, 1, 63, 64, 65, 12_345, 2**20 - 70, 2**26 - 100, 3 * 2**26 - 7, 2**40 + 5]


def direct(positions: list[int], inv_freq: torch.Tensor, scale: float) -> tuple[list, list]:
    """``cos(fl(p·w))·s`` and ``sin(fl(p·w))·s`` rows, ``(T, R/2)`` each, one element at a time."""
    w = inv_freq.tolist()
    cos = [[math.cos(float(p) * wi) * scale for wi in w] for p in positions]
    sin = [[math.sin(float(p) * wi) * scale for wi in w] for p in positions]
    return cos, sin


def halves(table: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two copies of each angle's value in a RoPE table."""
    half = table.shape[-1] // 2
    if layout == "half":
        return table[:, :half], table[:, half:]
    return table[:, 0::2], table[:, 1::2]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    ("rotary_dim", "base", "scaling"),
    [
        (128, 10000.0, None),
        (64, 500000.0, RopeScaling("yarn", factor=4.0, original_max_position_embeddings=4096)),
        (10, 1.5, RopeScaling("linear", factor=2.0)),
    ],
)
@pytest.mark.parametrize("start", STARTS)
def test_values_are_cos_and_sin_of_the_float64_angles(layout, rotary_dim, base, scaling, start):
    positions = list(range(start, start + 131))  # two whole groups of 64 and parts
    inv_freq, scale = rope_inv_freq(rotary_dim, base, scaling, seq_len=start + 131)
    t = rope_cos_sin(positions, rotary_dim=rotary_dim, base=base, layout=layout,
                     scaling=scaling, dtype=F64)  # fmt: skip
    cos, sin = direct(positions, inv_freq, scale)
    for table, ref in ((t.cos, cos), (t.sin, sin)):
        first, second = halves(table, layout)
        assert torch.equal(first, second)
        # angle addition is within a few float64 ulps of the directly taken cos and sin
        torch.testing.assert_close(
            first, torch.tensor(ref, dtype=F64), rtol=0, atol=4e-16 * max(1.0, scale)
        )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_blocks_and_shuffled_positions_give_the_same_bytes(layout):
    seq_len, rotary_dim = 5000, 96
    whole = rope_cos_sin(seq_len=seq_len, rotary_dim=rotary_dim, layout=layout)
    for which in ("cos", "sin"):
        blocks = rope_blocks(seq_len=seq_len, rotary_dim=rotary_dim, layout=layout, which=which)
        out = torch.empty(seq_len, rotary_dim)
        for start, stop in ((0, 1), (1, 700), (700, 701), (701, 4321), (4321, seq_len)):
            blocks.fill(start, stop, out[start:stop])
        assert torch.equal(out, getattr(whole, which))
    order = torch.randperm(seq_len, generator=torch.Generator().manual_seed(3))
    shuffled = rope_cos_sin(order, rotary_dim=rotary_dim, layout=layout)
    assert torch.equal(shuffled.cos, whole.cos[order])
    assert torch.equal(shuffled.sin, whole.sin[order])


@pytest.mark.slow  # two tables of 2**20 positions
def test_float32_tables_are_the_float64_ones_cast_once():
    t64 = rope_cos_sin(seq_len=2**20, rotary_dim=8, base=10000.0, dtype=F64)
    t32 = rope_cos_sin(seq_len=2**20, rotary_dim=8, base=10000.0)
    assert torch.equal(t32.cos, t64.cos.to(torch.float32))
    assert torch.equal(t32.sin, t64.sin.to(torch.float32))
