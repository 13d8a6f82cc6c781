"""ALiBi slopes and biases against the paper's closed form, BLOOM and MPT.

References: Press et al. 2022 (the authors' fairseq ``get_slopes``), transformers'
``models/bloom/modeling_bloom.py::build_alibi_tensor`` and
``models/mpt/modeling_mpt.py::build_mpt_alibi_tensor``, and MPT's own ``gen_slopes``
(mosaicml llm-foundry ``attention.py``), written out below.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from posenc.core.errors import InvalidArgument
from posenc.relative_schemes.alibi import alibi_bias, alibi_slopes

HEAD_COUNTS = [*range(1, 70), 71, 80, 96, 100, 112, 127, 128, 200, 256]


def paper_get_slopes(n: int) -> list[float]:
    """The authors' fairseq ``get_slopes`` (attention_with_linear_biases), in float64."""

    def power_of_2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_get_slopes(2 * closest)[0::2][: n - closest]


def mpt_gen_slopes(n_heads: int, alibi_bias_max: float = 8) -> torch.Tensor:
    """MPT's ``gen_slopes`` (llm-foundry ``attention.py``): the 2p-head list, then reordered.

    ``slopes[1::2]`` of the 2p-head list are exactly the p-head slopes, ``slopes[::2]`` the
    even-indexed extra ones, so MPT and BLOOM agree although the code reads differently.
    """
    _n_heads = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, _n_heads + 1, dtype=torch.float32)
    m = m.mul(alibi_bias_max / _n_heads)
    slopes = 1.0 / torch.pow(2, m)
    if _n_heads != n_heads:
        slopes = torch.concat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def test_eight_heads_give_powers_of_one_half():
    expected = torch.tensor([2.0**-k for k in range(1, 9)], dtype=torch.float64)
    assert_close(alibi_slopes(8, dtype=torch.float64), expected, rtol=0, atol=0)
    assert_close(alibi_slopes(8), expected.float(), rtol=0, atol=0)


def test_twelve_heads_hand_worked():
    """p = 8: 2^-1..2^-8; then 16-head list 2^(-k/2), indices 0, 2, 4, 6: 2^-0.5 .. 2^-3.5."""
    exponents = [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5]
    expected = torch.tensor([2.0**e for e in exponents], dtype=torch.float64)
    assert_close(alibi_slopes(12, dtype=torch.float64), expected, rtol=0, atol=0)


def test_max_bias_scales_the_exponents():
    # 4 heads, max_bias 2: 2^(-2 (h+1)/4) = 2^-0.5, 2^-1, 2^-1.5, 2^-2
    expected = torch.tensor([2.0**-0.5, 0.5, 2.0**-1.5, 0.25], dtype=torch.float64)
    assert_close(alibi_slopes(4, max_bias=2.0, dtype=torch.float64), expected, rtol=0, atol=0)


def test_float64_slopes_are_correctly_rounded():
    """Against 200-bit arithmetic (mpmath): every float64 slope is the nearest double."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.prec = 200
    for n in (12, 32, 40, 64, 100, 256):
        p = 2 ** math.floor(math.log2(n))
        exps = [mpmath.mpf(-8 * (h + 1)) / p for h in range(p)]
        exps += [mpmath.mpf(-8 * (2 * k + 1)) / (2 * p) for k in range(n - p)]
        exact = torch.tensor([float(mpmath.power(2, e)) for e in exps], dtype=torch.float64)
        assert torch.equal(alibi_slopes(n, dtype=torch.float64), exact), f"{n} heads"


@pytest.mark.parametrize("n", HEAD_COUNTS)
def test_slopes_match_the_papers_code(n):
    """Press et al.'s fairseq ``get_slopes`` is float64 too (its start**i drifts ~1e-14 at 256 heads)."""
    expected = torch.tensor(paper_get_slopes(n), dtype=torch.float64)
    assert_close(alibi_slopes(n, dtype=torch.float64), expected, rtol=1e-13, atol=0)


def test_slopes_match_bloom_build_alibi_tensor():
    """transformers' BLOOM ``build_alibi_tensor``: (H, 1, L) rows ``m_h * j`` in float32.

    BLOOM raises a float32 base to the power k, so its slope k carries up to ~k float32 roundings
    (measured up to 2.3e-6 relative over these head counts); another convention would differ by
    >= 2%.
    """
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    length = 7
    worst = 0.0
    for n in HEAD_COUNTS:
        bloom = build_alibi_tensor(torch.ones(1, length), n, torch.float32)  # (H, 1, L)
        ours = alibi_slopes(n, dtype=torch.float64)[:, None, None] * torch.arange(
            length, dtype=torch.float64
        )
        assert_close(bloom.double(), ours, rtol=1e-5, atol=0, msg=f"{n} heads")
        worst = max(worst, ((bloom.double()[..., 1] - ours[..., 1]) / ours[..., 1]).abs().max())
    assert worst < 1e-5


@pytest.mark.parametrize("max_bias", [8.0, 4.0, 16.0, 5.5])
def test_slopes_match_mpt_gen_slopes(max_bias):
    for n in HEAD_COUNTS:
        expected = mpt_gen_slopes(n, alibi_bias_max=max_bias).double()
        assert_close(
            alibi_slopes(n, max_bias=max_bias, dtype=torch.float64),
            expected,
            rtol=1e-6,
            atol=0,
            msg=f"{n} heads, max_bias {max_bias}",
        )


def test_last_query_row_equals_mpt_and_causal_softmax_equals_bloom():
    """MPT's row ``m_h (j - S + 1)`` is our last query row; BLOOM's ``m_h j`` + causal mask gives
    the same softmax as our bias (they differ by a constant per query)."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for n in (8, 12, 32, 40):
        s = 9
        ours = alibi_bias(n, s, dtype=torch.float64)  # (H, S, S)
        mpt = build_mpt_alibi_tensor(n, s, alibi_bias_max=8).double()  # (H, 1, S)
        assert_close(ours[:, -1, :], mpt[:, 0, :], rtol=1e-6, atol=0)

        bloom = build_alibi_tensor(torch.ones(1, s), n, torch.float32).double()  # (H, 1, S)
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        bloom_logits = bloom.expand(n, s, s).masked_fill(~causal, float("-inf"))
        assert_close(ours.softmax(-1), bloom_logits.softmax(-1), rtol=1e-5, atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(
    num_heads=st.integers(1, 40),
    seq_len=st.integers(1, 20),
    extra=st.integers(0, 12),
    mode=st.sampled_from(["causal", "symmetric"]),
    max_bias=st.floats(0.25, 16.0),
)
def test_bias_is_minus_slope_times_distance(num_heads, seq_len, extra, mode, max_bias):
    key_len = seq_len + extra
    bias = alibi_bias(
        num_heads, seq_len, key_len, mode=mode, max_bias=max_bias, dtype=torch.float64
    )
    slopes = alibi_slopes(num_heads, max_bias, dtype=torch.float64)
    assert bias.shape == (num_heads, seq_len, key_len)
    for i in range(seq_len):
        q = i + key_len - seq_len
        for j in range(key_len):
            if mode == "causal" and j > q:
                assert torch.isneginf(bias[:, i, j]).all()
            else:
                assert torch.equal(bias[:, i, j], -slopes * abs(q - j))
    # float32 is the float64 table cast once
    bias32 = alibi_bias(num_heads, seq_len, key_len, mode=mode, max_bias=max_bias)
    assert torch.equal(bias32, bias.float())


@pytest.mark.parametrize(("seq_len", "key_len"), [(1, 1), (6, 6), (3, 8), (1, 17)])
def test_causal_mask_is_exactly_minus_inf_above_the_diagonal(seq_len, key_len):
    bias = alibi_bias(5, seq_len, key_len)
    above = torch.ones(seq_len, key_len, dtype=torch.bool).triu(key_len - seq_len + 1)
    assert torch.equal(torch.isneginf(bias), above.expand(5, -1, -1))
    assert torch.isfinite(bias[:, ~above]).all()
    assert (bias[:, ~above] <= 0).all()
    # the diagonal (j = i + S - T) is +0.0, not -0.0
    diag = bias[:, torch.arange(seq_len), torch.arange(seq_len) + key_len - seq_len]
    assert torch.equal(diag, torch.zeros_like(diag))
    assert not torch.signbit(diag).any()


def test_symmetric_has_no_mask_and_is_symmetric():
    bias = alibi_bias(6, 10, mode="symmetric")
    assert torch.isfinite(bias).all()
    assert torch.equal(bias, bias.transpose(1, 2))
    assert not torch.signbit(bias.diagonal(dim1=1, dim2=2)).any()


def test_cached_decoding_hand_worked():
    """2 heads, max_bias 2: slopes 1/2, 1/4. T = 2 queries at positions 2 and 3 of S = 4 keys."""
    inf = float("inf")
    causal = alibi_bias(2, 2, 4, max_bias=2.0, dtype=torch.float64)
    expected = torch.tensor(
        [
            [[-1.0, -0.5, 0.0, -inf], [-1.5, -1.0, -0.5, 0.0]],
            [[-0.5, -0.25, 0.0, -inf], [-0.75, -0.5, -0.25, 0.0]],
        ],
        dtype=torch.float64,
    )
    assert_close(causal, expected, rtol=0, atol=0)

    symmetric = alibi_bias(2, 2, 4, mode="symmetric", max_bias=2.0, dtype=torch.float64)
    expected_sym = torch.tensor(
        [
            [[-1.0, -0.5, 0.0, -0.5], [-1.5, -1.0, -0.5, 0.0]],
            [[-0.5, -0.25, 0.0, -0.25], [-0.75, -0.5, -0.25, 0.0]],
        ],
        dtype=torch.float64,
    )
    assert_close(symmetric, expected_sym, rtol=0, atol=0)


def test_one_step_decode_is_the_last_row_of_the_full_table():
    full = alibi_bias(12, 9)
    step = alibi_bias(12, 1, 9)
    assert torch.equal(step, full[:, -1:, :])
    tail = alibi_bias(12, 3, 9, mode="symmetric")
    assert torch.equal(tail, alibi_bias(12, 9, mode="symmetric")[:, -3:, :])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_lower_precision_is_one_cast_of_float64(dtype):
    exact = alibi_bias(12, 16, 24, dtype=torch.float64)
    assert torch.equal(alibi_bias(12, 16, 24, dtype=dtype), exact.to(dtype))
    assert alibi_slopes(12, dtype=dtype).dtype == dtype


def test_key_len_below_seq_len_states_both():
    with pytest.raises(InvalidArgument, match=r"key_len=3 and seq_len=5") as info:
        alibi_bias(4, 5, 3)
    assert info.value.field == "key_len"


@pytest.mark.parametrize(
    ("kwargs", "pattern", "field"),
    [
        ({"num_heads": 0, "seq_len": 4}, r"num_heads must be >= 1, got 0", "num_heads"),
        ({"num_heads": 4, "seq_len": 0}, r"seq_len must be >= 1, got 0", "seq_len"),
        ({"num_heads": 4, "seq_len": 2, "mode": "alibi"}, r"'causal'.*'alibi'", "mode"),
        ({"num_heads": 4, "seq_len": 2, "max_bias": 0.0}, r"max_bias.*got 0.0", "max_bias"),
        ({"num_heads": 4, "seq_len": 2, "max_bias": math.inf}, r"max_bias.*inf", "max_bias"),
        ({"num_heads": 2.5, "seq_len": 2}, r"num_heads must be an integer, got 2.5", "num_heads"),
    ],
)
def test_bad_arguments_state_the_numbers(kwargs, pattern, field):
    with pytest.raises(InvalidArgument, match=pattern) as info:
        alibi_bias(**kwargs)
    assert info.value.field == field
