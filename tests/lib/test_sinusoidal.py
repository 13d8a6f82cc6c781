"""Sinusoidal tables (Vaswani et al., 2017, §3.5) against closed forms written out here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from posenc import InvalidArgument, SinusoidalPositionalEncoding, sinusoidal_table
from posenc.absolute.sinusoidal import sinusoidal_frequencies
from tests.references import sinusoidal

LAYOUTS = ("interleaved", "concat", "tensor2tensor")
TOP = 2**20 - 1


def test_row_zero_is_sin0_cos0_whole():
    d = 8
    interleaved = sinusoidal_table(seq_len=1, d_model=d, layout="interleaved")
    assert_close(interleaved, torch.tensor([[0.0, 1.0] * (d // 2)]), rtol=0, atol=0)
    for layout in ("concat", "tensor2tensor"):
        row = sinusoidal_table(seq_len=1, d_model=d, layout=layout)
        assert_close(row, torch.tensor([[0.0] * (d // 2) + [1.0] * (d // 2)]), rtol=0, atol=0)


def test_hand_worked_small_tables():
    # D = 4, base 10000: w = [1, 10000**(-2/4) = 0.01] (Vaswani); tensor2tensor w = [1, 1e-4].
    interleaved = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004],
            [0.9092974268, -0.4161468365, 0.0199986667, 0.9998000067],
        ]
    )
    assert_close(sinusoidal_table(seq_len=3, d_model=4), interleaved, rtol=0, atol=1e-7)
    concat = interleaved[:, [0, 2, 1, 3]]
    assert_close(sinusoidal_table(seq_len=3, d_model=4, layout="concat"), concat, rtol=0, atol=1e-7)
    t2t = torch.tensor(
        [
            [0.0, 0.0, 1.0, 1.0],
            [0.8414709848, 0.0000999999998, 0.5403023059, 0.999999995],
            [0.9092974268, 0.0001999999987, -0.4161468365, 0.99999998],
        ]
    )
    assert_close(
        sinusoidal_table(seq_len=3, d_model=4, layout="tensor2tensor"), t2t, rtol=0, atol=1e-7
    )


def test_frequencies_closed_form():
    assert_close(
        sinusoidal_frequencies(8, 10000.0),
        torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64),
        rtol=1e-15,
        atol=0,
    )
    assert_close(
        sinusoidal_frequencies(8, 1000.0, "tensor2tensor"),
        torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64),
        rtol=1e-15,
        atol=0,
    )
    # D = 2: the tensor2tensor denominator max(D/2 - 1, 1) avoids 0/0.
    assert_close(
        sinusoidal_frequencies(2, layout="tensor2tensor"), torch.tensor([1.0], dtype=torch.float64)
    )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("d_model", "base"), [(2, 10000.0), (6, 10000.0), (64, 500000.0), (768, 10000.0), (128, 2.5)]
)
def test_float32_table_within_1e6_of_float64_formula_up_to_2_pow_20(layout, d_model, base):
    rng = np.random.default_rng(d_model)
    positions = np.unique(
        np.concatenate(
            [
                np.arange(0, 64),
                np.arange(TOP - 63, TOP + 1),
                [2**19, 10**6, 999_983],
                rng.integers(0, TOP + 1, size=400),
            ]
        )
    )
    table = sinusoidal_table(torch.from_numpy(positions), d_model=d_model, base=base, layout=layout)
    assert table.dtype == torch.float32
    expected = sinusoidal(positions, d_model, base, layout)
    err = np.abs(table.double().numpy() - expected).max()
    assert err <= 1e-6, f"max error {err} at {layout} D={d_model} base={base}"


def test_float32_angles_would_fail_the_1e6_check():
    """The check above can fail: float32 angle arithmetic drifts by ~1e-2 near 2**20."""
    positions = np.arange(TOP - 255, TOP + 1)
    w = (10000.0 ** (-2 * np.arange(32, dtype=np.float32) / 64)).astype(np.float32)
    angles32 = positions.astype(np.float32)[:, None] * w[None, :]
    drifted = np.stack([np.sin(angles32), np.cos(angles32)], -1).reshape(len(positions), 64)
    assert np.abs(drifted - sinusoidal(positions, 64, 10000.0, "interleaved")).max() > 1e-3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_output_dtype_is_one_cast_of_float64(layout):
    pos = torch.tensor([0, 1, 7, 4096, TOP])
    exact = sinusoidal_table(pos, d_model=16, layout=layout, dtype=torch.float64)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        table = sinusoidal_table(pos, d_model=16, layout=layout, dtype=dtype)
        assert table.dtype == dtype
        assert torch.equal(table, exact.to(dtype))


def test_offset_and_explicit_positions_agree():
    by_offset = sinusoidal_table(seq_len=5, d_model=8, offset=1000)
    by_positions = sinusoidal_table([1000, 1001, 1002, 1003, 1004], d_model=8)
    assert torch.equal(by_offset, by_positions)
    shifted = sinusoidal_table([0, 4, 2], d_model=8, offset=1000)
    assert torch.equal(shifted, by_positions[[0, 4, 2]])


def rotation(k: int, d_model: int, base: float, layout: str) -> np.ndarray:
    """M_k: the (D, D) block rotation taking PE(p) to PE(p + k), from k alone."""
    half = d_model // 2
    denom = max(half - 1, 1) if layout == "tensor2tensor" else d_model / 2
    m = np.zeros((d_model, d_model))
    for i in range(half):
        w = math.pow(base, -i / denom)
        c, s = math.cos(k * w), math.sin(k * w)
        si, ci = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, half + i)
        # sin(a + b) = sin a cos b + cos a sin b;  cos(a + b) = cos a cos b - sin a sin b
        m[si, si], m[si, ci] = c, s
        m[ci, si], m[ci, ci] = -s, c
    return m


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(0, 2**16),
    k=st.integers(0, 2**16),
    layout=st.sampled_from(LAYOUTS),
    half=st.integers(1, 16),
)
def test_shift_by_k_is_a_fixed_block_rotation(p, k, layout, half):
    d = 2 * half
    pe = sinusoidal_table([p, p + k], d_model=d, layout=layout, dtype=torch.float64).numpy()
    m_k = rotation(k, d, 10000.0, layout)
    np.testing.assert_allclose(m_k @ pe[0], pe[1], rtol=0, atol=1e-9)


def fairseq_get_embedding(
    num_embeddings: int, embedding_dim: int, dtype=torch.float
) -> torch.Tensor:
    """fairseq ``SinusoidalPositionalEmbedding.get_embedding`` (padding_idx None), as written there.

    fairseq/modules/sinusoidal_positional_embedding.py: half_dim - 1 in the denominator;
    ``dtype`` float is fairseq's own, float64 is the same formula without float32 angles.
    """
    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=dtype) * -emb)  # type: ignore[assignment]
    emb = torch.arange(num_embeddings, dtype=dtype).unsqueeze(1) * emb.unsqueeze(0)  # type: ignore[attr-defined]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)  # type: ignore[assignment]
    return emb


def test_tensor2tensor_matches_fairseq_get_embedding():
    ours = sinusoidal_table(seq_len=1024, d_model=512, layout="tensor2tensor")
    # fairseq's own float32 angles: the same table up to its float32 rounding at p < 1024
    assert_close(ours, fairseq_get_embedding(1024, 512), rtol=0, atol=2e-4)
    # the formula in float64: the same within float32 rounding
    exact = fairseq_get_embedding(1024, 512, torch.float64)
    assert_close(ours.double(), exact, rtol=0, atol=1e-7)
    ours64 = sinusoidal_table(
        seq_len=1024, d_model=512, layout="tensor2tensor", dtype=torch.float64
    )
    assert_close(ours64, exact, rtol=0, atol=1e-12)


def test_module_adds_the_table():
    module = SinusoidalPositionalEncoding(8, max_seq_len=16)
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(module(x), x + sinusoidal_table(seq_len=5, d_model=8)[None])
    # beyond the cache: computed on the fly, still the same table
    assert torch.equal(
        module(x, offset=14), x + sinusoidal_table(seq_len=5, d_model=8, offset=14)[None]
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq_len": 4, "d_model": 7}, "d_model must be even, got 7"),
        ({"seq_len": 4, "d_model": 0}, "d_model must be >= 2, got 0"),
        ({"seq_len": 0, "d_model": 8}, "seq_len must be an int >= 1, got 0"),
        ({"d_model": 8}, "exactly one of positions or seq_len, got neither"),
        ({"positions": [1], "seq_len": 1, "d_model": 8}, "got both"),
        ({"positions": [3, -2], "d_model": 8}, r"positions must be >= 0, got -2 at positions\[1\]"),
        ({"positions": [1.5], "d_model": 8}, "positions must be ints, got dtype float"),
        ({"positions": [], "d_model": 8}, "got 0 positions"),
        ({"seq_len": 4, "d_model": 8, "base": 0.0}, "base must be a finite number > 0, got 0.0"),
        ({"seq_len": 4, "d_model": 8, "offset": -3}, "offset must be an int >= 0, got -3"),
        ({"seq_len": 4, "d_model": 8, "layout": "half"}, "layout must be one of .*'half'"),
    ],
)
def test_bad_arguments_say_what_was_given(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        sinusoidal_table(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_table_matches_cpu_table():
    pos = torch.tensor([0, 1, 12345, TOP])
    cpu = sinusoidal_table(pos, d_model=256, dtype=torch.float64)
    gpu = sinusoidal_table(pos, d_model=256, dtype=torch.float64, device="cuda")
    assert gpu.device.type == "cuda"
    assert_close(gpu.cpu(), cpu, rtol=0, atol=1e-12)
