"""posenc.core.blocks: every table computed in row blocks is bit for bit the whole table.

Each case concatenates the blocks of several block sizes (one row, odd sizes, one block) and
compares the bytes with the library's whole-table function (sinusoidal_table, rope_cos_sin,
alibi_bias, relative_buckets / relative_bias, deberta_relative_positions,
swin_relative_position_index, learned_table), in every dtype; and checks the
values independently against the closed form in float64 for the encodings.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch

from posenc import alibi_bias, learned_table, sinusoidal_table
from posenc.absolute.learned import learned_blocks
from posenc.absolute.sinusoidal import sinusoidal_blocks
from posenc.core.blocks import row_ranges, tensor_blocks
from posenc.core.errors import InvalidArgument
from posenc.relative_schemes.alibi import alibi_bias_blocks
from posenc.relative_schemes.relative import (
    deberta_positions_blocks,
    deberta_relative_positions,
    num_relative_buckets,
    relative_bias,
    relative_bias_blocks,
    relative_bias_table,
    relative_buckets,
    relative_buckets_blocks,
    swin_bias_blocks,
    swin_index_blocks,
    swin_relative_position_index,
)
from posenc.rope import RopeScaling, rope_blocks, rope_cos_sin

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
BLOCK_BYTES = [1, 100, 4096, 77_777, 1 << 24]


def _bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


# Over this many blocks, a block size is checked on a sample of its blocks (the first and last
# ones and an even stride between): a row per block over 3,000 rows added seconds a case and
# no information the sample lacks, since each block is filled on its own.
MAX_BLOCKS_CHECKED = 192


def _sampled(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` whole when short, else its first and last 64 and 64 evenly between."""
    if len(ranges) <= MAX_BLOCKS_CHECKED:
        return ranges
    third = MAX_BLOCKS_CHECKED // 3
    stride = ranges[third : -third : max(1, (len(ranges) - 2 * third) // third)]
    return ranges[:third] + stride + ranges[-third:]


def _check(make, whole: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    for block_bytes in BLOCK_BYTES:
        table = make()
        assert table.nbytes == whole.numel() * whole.element_size()
        ranges = table.ranges(block_bytes)
        assert ranges[0][0] == 0 and ranges[-1][1] == table.rows
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        if len(ranges) > MAX_BLOCKS_CHECKED and not table.sequential:  # sampled blocks
            rows = whole.reshape(table.rows, -1)
            for start, stop in _sampled(ranges):
                got = table.fill(start, stop).reshape(stop - start, -1)
                assert got.dtype == whole.dtype
                assert _bytes(got) == _bytes(rows[start:stop]), (table.name, block_bytes, start)
            continue
        blocks = list(table.blocks(block_bytes))
        assert sum(b.shape[0] for b in blocks) == table.rows
        got = torch.cat(blocks).reshape(table.shape)
        assert got.dtype == whole.dtype and tuple(got.shape) == tuple(whole.shape)
        assert _bytes(got) == _bytes(whole), (table.name, block_bytes)


def test_row_ranges_cover_and_keep_multiples() -> None:
    assert row_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert row_ranges(10, 4, multiple=3) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert row_ranges(10, 4, multiple=3, min_last=2) == [(0, 3), (3, 6), (6, 10)]
    assert row_ranges(3, 100, min_last=5) == [(0, 3)]
    assert row_ranges(0, 4) == []
    with pytest.raises(InvalidArgument, match="block_rows"):
        row_ranges(10, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["interleaved", "concat", "tensor2tensor"])
def test_sinusoidal_blocks_equal_whole(dtype: torch.dtype, layout: str) -> None:
    kw: dict[str, Any] = dict(d_model=64, layout=layout, dtype=dtype)
    _check(
        lambda: sinusoidal_blocks(seq_len=700, offset=12_345, **kw),
        sinusoidal_table(seq_len=700, offset=12_345, **kw),
    )
    positions = [5, 1, 99_999, 3, 1 << 20] * 40
    _check(
        lambda: sinusoidal_blocks(positions, offset=2, **kw),
        sinusoidal_table(positions, offset=2, **kw),
    )


def test_sinusoidal_blocks_closed_form() -> None:
    """Independent of sinusoidal_table: PE[p, 2i] = sin(p·10000^(-2i/D)) in float64."""
    table = sinusoidal_blocks(seq_len=50, d_model=8, offset=1_000_000, dtype=torch.float64)
    got = torch.cat(list(table.blocks(200)))
    for p in (0, 17, 49):
        for i in range(4):
            angle = (1_000_000 + p) * 10000.0 ** (-2 * i / 8)
            assert got[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert got[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)


SCALINGS = [
    None,
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256},
    {
        "type": "llama3",
        "factor": 8.0,
        "original_max_position_embeddings": 512,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
    {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1000},
]


def _rope_block_cases() -> list[Any]:
    """Every scaling, layout and dtype (ids as three stacked parametrizations give them); the
    fast lane runs each scaling and layout once, with the dtype that rotates with them (8 of
    32; each dtype twice), the whole suite all of them."""
    cases = []
    for s, scaling in enumerate(SCALINGS):
        for lay, layout in enumerate(["half", "interleaved"]):
            for d, dtype in enumerate(DTYPES):
                name = f"{scaling['type'] if scaling else 'none'}-{layout}-dtype{d}"
                marks = () if (s + lay + d) % len(DTYPES) == 0 else (pytest.mark.slow,)
                cases.append(pytest.param(scaling, layout, dtype, id=name, marks=marks))
    return cases


@pytest.mark.parametrize(("scaling", "layout", "dtype"), _rope_block_cases())
def test_rope_blocks_equal_whole(dtype: torch.dtype, layout: str, scaling: dict | None) -> None:
    sc = RopeScaling.from_dict(scaling) if scaling else None
    kw: dict[str, Any] = dict(rotary_dim=32, layout=layout, scaling=sc, dtype=dtype)
    whole = rope_cos_sin(seq_len=3000, **kw)
    _check(lambda: rope_blocks(seq_len=3000, **kw), whole.cos)
    _check(lambda: rope_blocks(seq_len=3000, which="sin", **kw), whole.sin)
    positions = [0, 7, 4095, 12, 2**20 - 1] * 30
    whole = rope_cos_sin(positions, **kw)
    _check(lambda: rope_blocks(positions, **kw), whole.cos)


def test_rope_blocks_closed_form_at_large_positions() -> None:
    """cos(p·base^(-2i/R)) in float64, to 1e-6 in float32 at p near 2^20."""
    table = rope_blocks(seq_len=2**20, rotary_dim=8, dtype=torch.float32)
    ranges = table.ranges(1 << 20)
    start, stop = ranges[-1]
    block = table.fill(start, stop)
    p = stop - 1
    for i in range(4):
        want = math.cos(p * 10000.0 ** (-2 * i / 8))
        assert block[-1, i].item() == pytest.approx(want, abs=1e-6)
        assert block[-1, i + 4].item() == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["causal", "symmetric"])
def test_alibi_blocks_equal_whole(dtype: torch.dtype, mode: str) -> None:
    _check(
        lambda: alibi_bias_blocks(12, 50, 70, mode=mode, dtype=dtype),  # type: ignore[arg-type]
        alibi_bias(12, 50, 70, mode=mode, dtype=dtype),  # type: ignore[arg-type]
    )
    _check(
        lambda: alibi_bias_blocks(5, 33, mode=mode, dtype=dtype),  # type: ignore[arg-type]
        alibi_bias(5, 33, mode=mode, dtype=dtype),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("bucketing", ["log", "clip"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_blocks_equal_whole(bucketing: str, bidirectional: bool) -> None:
    kw: dict[str, Any] = dict(bucketing=bucketing, bidirectional=bidirectional, max_distance=20)
    buckets = relative_buckets(40, 90, **kw)
    _check(lambda: relative_buckets_blocks(40, 90, **kw), buckets)
    n = num_relative_buckets(num_buckets=32, max_distance=20, bucketing=bucketing)  # type: ignore[arg-type]
    table = relative_bias_table(n, 6, seed=2)
    for dtype in DTYPES:
        _check(
            lambda dt=dtype: relative_bias_blocks(40, 90, num_heads=6, seed=2, dtype=dt, **kw),
            relative_bias(buckets, table, dtype=dtype),
        )


@pytest.mark.parametrize(
    ("position_buckets", "max_position"), [(None, None), (8, 20), (256, 512), (4, 5)]
)
def test_deberta_blocks_equal_whole(position_buckets: int | None, max_position: int | None) -> None:
    kw: dict[str, Any] = dict(position_buckets=position_buckets, max_position=max_position)
    _check(
        lambda: deberta_positions_blocks(37, 300, **kw), deberta_relative_positions(37, 300, **kw)
    )
    _check(lambda: deberta_positions_blocks(61, **kw), deberta_relative_positions(61, **kw))


@pytest.mark.parametrize("window", [1, 2, 7, 12])
def test_swin_blocks_equal_whole(window: int) -> None:
    index = swin_relative_position_index(window)
    _check(lambda: swin_index_blocks(window), index)
    table = relative_bias_table((2 * window - 1) ** 2, 3, seed=5)
    for dtype in DTYPES:
        _check(
            lambda dt=dtype: swin_bias_blocks(window, num_heads=3, seed=5, dtype=dt),
            relative_bias(index, table, dtype=dtype),
        )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(1, 3), (3, 7), (17, 1), (300, 24), (129, 16), (5, 5)])
def test_learned_blocks_equal_whole(dtype: torch.dtype, rows: int, cols: int) -> None:
    """The seeded table's random stream is drawn block after block as normal_ draws it whole."""
    _check(
        lambda: learned_blocks(rows, cols, seed=3, dtype=dtype),
        learned_table(rows, cols, seed=3, dtype=dtype),
    )


def test_learned_blocks_refuse_out_of_order() -> None:
    table = learned_blocks(64, 16, seed=0)
    table.fill(0, 16)
    with pytest.raises(InvalidArgument, match="in order: next row is 16, got 32"):
        table.fill(32, 48)


def test_tensor_blocks_and_bad_out() -> None:
    t = torch.arange(10, dtype=torch.float64)
    _check(lambda: tensor_blocks("x", t), t)
    table = sinusoidal_blocks(seq_len=4, d_model=4)
    with pytest.raises(InvalidArgument, match="out must be a contiguous"):
        table.fill(0, 2, torch.empty(3, 4))
    with pytest.raises(InvalidArgument, match="not within the table's 4 rows"):
        table.fill(2, 5)


def test_whole_in_blocks_equals_whole() -> None:
    table = sinusoidal_blocks(seq_len=1000, d_model=96, offset=5)
    want = sinusoidal_table(seq_len=1000, d_model=96, offset=5)
    for block_bytes in (None, 1000, 1 << 16):
        assert _bytes(table.whole(block_bytes)) == _bytes(want)


def test_rope_blocks_of_a_negative_rotation_and_an_odd_width_equal_whole() -> None:
    """nanochat's ``rotation: negative`` (sin negated) and GLM-4-MoE's exponent_dim 21 in a
    22-wide table: the row blocks are the whole table's bytes."""
    kw: dict[str, Any] = dict(
        rotary_dim=22, exponent_dim=21, rotation="negative", dtype=torch.float32
    )
    whole = rope_cos_sin(seq_len=3000, **kw)
    _check(lambda: rope_blocks(seq_len=3000, **kw), whole.cos)
    _check(lambda: rope_blocks(seq_len=3000, which="sin", **kw), whole.sin)
    positive = rope_cos_sin(seq_len=3000, rotary_dim=22, exponent_dim=21)
    assert torch.equal(whole.sin, -positive.sin) and torch.equal(whole.cos, positive.cos)
