"""posenc.absolute.sinusoidal.write_rows: sines and cosines by angle addition are those of the float64
angles of the direct formula, and an element's value does not depend on the rows around it.

The reference here is independent of the angle addition: ``sin`` and ``cos`` of ``fl(p·w_i)``
taken element by element with Python's ``math`` (the direct float64 formula).
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc import sinusoidal_frequencies, sinusoidal_table
from posenc.absolute.sinusoidal import sinusoidal_blocks

# first positions around the edges of the method: groups of 64, the 2**26 switch to the direct
# formula (for base >= 1; base 0.5 moves it), and the largest exact positions
OFFSETS = [0, 1, 63, 64, 65, 12_345, 999_983, 2**26 - 100, 3 * 2**26 - 7, 2**40 + 5, 2**53 - 300]


def direct(positions: list[int], d_model: int, base: float, layout: str) -> torch.Tensor:
    """``[sin(fl(p·w)) | cos(fl(p·w))]`` ``(T, D)`` float64, one element at a time."""
    w = sinusoidal_frequencies(d_model, base, layout).tolist()  # type: ignore[arg-type]
    rows = []
    for p in positions:
        angles = [float(p) * wi for wi in w]
        rows.append([math.sin(a) for a in angles] + [math.cos(a) for a in angles])
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize(
    ("d_model", "base"), [(768, 10000.0), (6, 0.5), (64, 500000.0), (130, 2.5)]
)
@pytest.mark.parametrize("offset", OFFSETS)
def test_float64_values_are_sin_and_cos_of_the_float64_angles(d_model, base, offset):
    seq_len = 131  # two whole groups of 64 and parts, whatever the offset
    table = sinusoidal_table(
        seq_len=seq_len,
        d_model=d_model,
        base=base,
        layout="concat",
        offset=offset,
        dtype=torch.float64,
    )
    expected = direct(list(range(offset, offset + seq_len)), d_model, base, "concat")
    # a few float64 ulps of values <= 1, not the float32 rounding (6e-8)
    torch.testing.assert_close(table, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("offset", OFFSETS)
def test_explicit_positions_in_any_order_and_blocks_give_the_same_bytes(offset):
    kw = dict(d_model=22, base=10000.0, layout="interleaved", dtype=torch.float64)
    table = sinusoidal_table(seq_len=300, offset=offset, **kw)
    order = torch.randperm(300, generator=torch.Generator().manual_seed(offset % 1000))
    order = torch.cat([order, order[:17]])  # repeats too
    shuffled = sinusoidal_table((order + offset).tolist(), **kw)
    assert torch.equal(shuffled, table[order])
    for rows in (1, 7, 64, 65, 129):
        blocks = sinusoidal_blocks(seq_len=300, offset=offset, **kw)
        assert torch.equal(torch.cat(list(blocks.blocks(rows * 22 * 8))), table)


def test_the_float32_table_is_one_cast_of_the_float64_one():
    kw = dict(seq_len=2048, d_model=768, offset=123_457)
    exact = sinusoidal_table(**kw, dtype=torch.float64)
    assert torch.equal(sinusoidal_table(**kw), exact.to(torch.float32))
    # and within float32 rounding of the direct formula on a sample of its rows
    rows = [0, 1, 63, 64, 1000, 2047]
    expected = direct([123_457 + r for r in rows], 768, 10000.0, "interleaved")
    got = exact[rows].view(len(rows), 384, 2)
    torch.testing.assert_close(got[..., 0], expected[:, :384], rtol=0, atol=1e-15)
    torch.testing.assert_close(got[..., 1], expected[:, 384:], rtol=0, atol=1e-15)
