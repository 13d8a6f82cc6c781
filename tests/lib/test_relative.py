"""T5 relative position buckets and bias against transformers' ``T5Attention``.

References: Raffel et al. 2020; Mesh TensorFlow ``_relative_position_bucket``;
transformers ``models/t5/modeling_t5.py::T5Attention._relative_position_bucket`` and
``compute_bias``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from posenc.core.errors import InvalidArgument
from posenc.relative_schemes.relative import (
    clipped_bucket,
    num_relative_buckets,
    relative_bias,
    relative_bias_table,
    relative_buckets,
    relative_position_bucket,
    relative_positions,
)
from tests.references import t5_buckets

T5_SETTINGS = [
    (32, 128),  # T5 (all sizes)
    (32, 64),
    (64, 256),
    (16, 32),
    (8, 20),
    (128, 1000),
    (33, 100),  # odd bucket count
    (4, 7),
    (10, 160),  # settings where a float64 log would move a boundary (see below)
    (48, 81),
    (36, 392),
]


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), T5_SETTINGS)
def test_buckets_match_t5_over_a_wide_range(bidirectional, num_buckets, max_distance):
    if not bidirectional or num_buckets >= 4:
        rp = torch.arange(-5000, 5001)
        expected = t5_buckets(rp, bidirectional, num_buckets, max_distance)
        ours = relative_position_bucket(
            rp, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
        )
        assert ours.dtype == torch.int64
        assert torch.equal(ours, expected.to(torch.int64))


def test_buckets_match_t5_far_away():
    """Large distances (beyond float32's exact integers) still land in the reference's bucket."""
    rp = torch.tensor([-(2**40), -(2**24) - 1, -(10**6), 10**6, 2**24 + 1, 2**40])
    for bidirectional in (True, False):
        expected = t5_buckets(rp, bidirectional, 32, 128)
        ours = relative_position_bucket(rp, bidirectional=bidirectional)
        assert torch.equal(ours, expected)


def test_float32_log_decides_exact_boundaries():
    """Unidirectional, 10 buckets, max_distance 160: 5 exact buckets, then 5 + floor(log2(d / 5)),
    so d = 10, 20, 80 sit exactly on boundaries. T5's float32 arithmetic gives 6, 7, 9; the same
    formula in float64 lands on 0.999... below each and gives 5, 6, 8."""
    rp = torch.tensor([-10, -20, -80])
    ours = relative_position_bucket(rp, bidirectional=False, num_buckets=10, max_distance=160)
    assert torch.equal(ours, torch.tensor([6, 7, 9]))
    assert torch.equal(ours, t5_buckets(rp, False, 10, 160))
    ours = relative_position_bucket(
        torch.tensor([-54]), bidirectional=False, num_buckets=48, max_distance=81
    )
    assert ours.item() == 39  # float64 arithmetic would give 40


def test_bucket_boundaries_hand_worked():
    """T5 defaults, bidirectional: 16 buckets per direction, 8 exact, then
    8 + floor(log(d/8) / log(16) * 8): d = 12 -> 9, 16 -> 10, 23 -> 11, 32 -> 12, 128 -> 15."""
    rp = torch.tensor([0, -1, -7, -8, -11, -12, -15, -16, -22, -23, -32, -127, -128, -(10**5)])
    expected = torch.tensor([0, 1, 7, 8, 8, 9, 9, 10, 10, 11, 12, 15, 15, 15])
    assert torch.equal(relative_position_bucket(rp), expected)
    # keys after the query use the upper half: +16
    assert torch.equal(relative_position_bucket(-rp[1:]), expected[1:] + 16)
    # unidirectional: future positions all go to bucket 0; 16 exact, then 16 + ... up to 31
    uni = relative_position_bucket(
        torch.tensor([5, 1, 0, -1, -15, -16, -128, -500]), bidirectional=False
    )
    assert torch.equal(uni, torch.tensor([0, 0, 0, 1, 15, 16, 31, 31]))


def test_relative_positions_follow_t5_sign_and_cached_offset():
    """T5 ``compute_bias``: memory_position - context_position; queries are the last T of S."""
    assert torch.equal(relative_positions(3), torch.tensor([[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]))
    assert torch.equal(relative_positions(2, 4), torch.tensor([[-2, -1, 0, 1], [-3, -2, -1, 0]]))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_buckets_match_t5_compute_bias_positions(bidirectional):
    """T5 ``compute_bias(query_length, key_length, past_seen_tokens=S-T)`` bucket grid."""
    t, s = 7, 300
    context = torch.arange(t)[:, None] + (s - t)
    memory = torch.arange(s)[None, :]
    expected = t5_buckets(memory - context, bidirectional, 32, 128)
    assert torch.equal(relative_buckets(t, s, bidirectional=bidirectional), expected)


def test_clip_bucketing():
    rp = torch.tensor([-10, -4, -3, -1, 0, 1, 3, 4, 10])
    assert torch.equal(
        clipped_bucket(rp, max_distance=3), torch.tensor([0, 0, 0, 2, 3, 4, 6, 6, 6])
    )
    assert torch.equal(
        clipped_bucket(rp, max_distance=3, bidirectional=False),
        torch.tensor([0, 0, 0, 2, 3, 3, 3, 3, 3]),
    )
    assert num_relative_buckets(max_distance=3, bucketing="clip") == 7
    assert num_relative_buckets(num_buckets=32, max_distance=3) == 32
    grid = relative_buckets(4, 6, max_distance=2, bucketing="clip")
    # rel = j - (i + 2): row 0 is -2..3 -> clamp to [-2, 2] -> +2
    assert torch.equal(grid[0], torch.tensor([0, 1, 2, 3, 4, 4]))
    assert torch.equal(grid[3], torch.tensor([0, 0, 0, 0, 1, 2]))
    assert int(grid.max()) < num_relative_buckets(max_distance=2, bucketing="clip")


@settings(max_examples=40, deadline=None)
@given(
    seq_len=st.integers(1, 40),
    extra=st.integers(0, 40),
    max_distance=st.integers(0, 50),
    bidirectional=st.booleans(),
)
def test_clip_is_clamped_shifted_relative_position(seq_len, extra, max_distance, bidirectional):
    key_len = seq_len + extra
    grid = relative_buckets(
        seq_len, key_len, max_distance=max_distance, bidirectional=bidirectional, bucketing="clip"
    )
    for i in range(seq_len):
        for j in range(key_len):
            rel = j - (i + key_len - seq_len)
            hi = max_distance if bidirectional else 0
            assert grid[i, j] == min(max(rel, -max_distance), hi) + max_distance


def test_bias_table_equals_seeded_nn_embedding_and_keeps_global_rng():
    state = torch.get_rng_state()
    try:
        for seed, (n_buckets, heads) in [(0, (32, 12)), (1234, (257, 8)), (7, (1, 1))]:
            torch.set_rng_state(state)
            marker = torch.rand(3)
            torch.set_rng_state(state)
            ours = relative_bias_table(n_buckets, heads, seed=seed)
            # our call leaves the global generator alone
            assert torch.equal(torch.rand(3), marker)
            torch.manual_seed(seed)
            expected = nn.Embedding(n_buckets, heads).weight.detach()
            assert ours.dtype == torch.float32
            assert_close(ours, expected, rtol=0, atol=0)
    finally:
        torch.set_rng_state(state)


def test_bias_gather_matches_t5_compute_bias():
    """T5: ``values = relative_attention_bias(buckets)`` (T, S, H) -> permute to (H, T, S)."""
    t, s, heads = 5, 9, 12
    buckets = relative_buckets(t, s)
    table = relative_bias_table(32, heads, seed=3)
    bias = relative_bias(buckets, table)
    assert bias.shape == (heads, t, s)
    emb = nn.Embedding(32, heads)
    with torch.no_grad():
        emb.weight.copy_(table)
    expected = emb(buckets).permute(2, 0, 1).detach()
    assert_close(bias, expected, rtol=0, atol=0)
    for h in range(heads):
        for i in range(t):
            for j in range(s):
                assert bias[h, i, j] == table[buckets[i, j], h]


def test_bias_gather_small_hand_worked():
    table = torch.tensor([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])  # (NB=3, H=2)
    buckets = torch.tensor([[0, 2], [1, 1]])
    expected = torch.tensor([[[0.0, 2.0], [1.0, 1.0]], [[10.0, 12.0], [11.0, 11.0]]])
    assert torch.equal(relative_bias(buckets, table), expected)
    assert relative_bias(buckets, table, dtype=torch.float64).dtype == torch.float64


def test_bias_rejects_ids_outside_the_table():
    table = torch.zeros(4, 2)
    with pytest.raises(InvalidArgument, match=r"\[0, 4\).*from 0 to 5"):
        relative_bias(torch.tensor([[0, 5]]), table)
    with pytest.raises(InvalidArgument, match=r"2-D \(T, S\), got shape \(3,\)"):
        relative_bias(torch.tensor([0, 1, 2]), table)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: relative_positions(5, 3), r"key_len=3 and seq_len=5"),
        (lambda: relative_positions(0), r"seq_len must be >= 1, got 0"),
        (lambda: relative_position_bucket(torch.tensor([1]), num_buckets=3), r">= 4.*got 3"),
        (lambda: relative_position_bucket(torch.tensor([1]), max_distance=8), r"> 8.*got 8"),
        (lambda: relative_position_bucket(torch.tensor([1.5])), r"integers.*float32"),
        (lambda: relative_buckets(3, bucketing="linear"), r"'log'.*'linear'"),  # type: ignore[arg-type]
        (lambda: clipped_bucket(torch.tensor([1]), max_distance=-1), r">= 0, got -1"),
        (lambda: relative_bias_table(0, 4), r"num_buckets must be >= 1, got 0"),
    ],
)
def test_bad_arguments_state_the_numbers(call, pattern):
    with pytest.raises(InvalidArgument, match=pattern):
        call()
