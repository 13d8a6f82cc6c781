"""The library's size check runs on numbers only: absurd sizes raise TooLarge before anything
is allocated (peak RSS does not move), for every public table, bias and batch function."""

from __future__ import annotations

import resource
from typing import Any

import pytest
import torch

import posenc.core.limits
from posenc.absolute.learned import learned_table, seeded_normal
from posenc.absolute.sinusoidal import sinusoidal_frequencies, sinusoidal_table
from posenc.core.errors import TooLarge
from posenc.embedding import embed_tokens
from posenc.relative_schemes.alibi import alibi_bias, alibi_slopes
from posenc.relative_schemes.relative import (
    relative_bias,
    relative_bias_table,
    relative_buckets,
    relative_positions,
)
from posenc.rope import rope_cos_sin, rope_inv_freq
from posenc.tokens.position_ids import build_batch, pad_rows

HUGE = 1_121_509_132  # the head_dim that once allocated 4.5 GB before its 413


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# (call, elements it asks for): each well above the default 2**31, none allocatable here.
ABSURD = [
    (lambda: sinusoidal_table(seq_len=2_729_208, d_model=HUGE), 2_729_208 * (HUGE)),
    (lambda: sinusoidal_table(list(range(4)), d_model=2**40), 4 * 2**40),
    (lambda: sinusoidal_frequencies(2**33), 2**32),
    (lambda: learned_table(2**20, 2**20), 2**40),
    (lambda: seeded_normal(2**17, 2**17), 2**34),
    (lambda: rope_inv_freq(2**33), 2**32),
    (lambda: rope_cos_sin(seq_len=2_729_208, rotary_dim=HUGE), 2 * 2_729_208 * HUGE + HUGE // 2),
    (lambda: rope_cos_sin([0, 5], rotary_dim=2**31), 2 * 2 * 2**31 + 2**30),
    (lambda: alibi_slopes(2**32), 2**32),
    (lambda: alibi_bias(64, 2**16, 2**16), 64 * 2**32),
    (lambda: relative_positions(2**16, 2**16), 2**32),
    (lambda: relative_buckets(2**16, 2**17), 2**33),
    (lambda: relative_bias_table(2**20, 2**12), 2**32),
]


@pytest.mark.parametrize("call,requested", ABSURD, ids=lambda v: "" if callable(v) else str(v))
def test_absurd_sizes_raise_before_allocating(call, requested) -> None:  # type: ignore[no-untyped-def]
    before = _peak_rss_bytes()
    with pytest.raises(TooLarge) as info:
        call()
    grown = _peak_rss_bytes() - before
    assert grown < 64 * 2**20, f"peak RSS grew by {grown} bytes before the refusal"
    assert info.value.limit == posenc.core.limits.MAX_ELEMENTS == 2**31
    if requested is not None:
        assert info.value.requested == requested
    assert str(info.value.limit) in str(info.value) and str(info.value.requested) in str(info.value)


def test_rope_counts_cos_sin_and_inv_freq() -> None:
    """2·T·R + R/2: one element over the cap is refused, exactly the cap is made."""
    t, r = 3, 8  # 2*3*8 + 4 = 52 elements
    assert rope_cos_sin(seq_len=t, rotary_dim=r, max_elements=52).cos.shape == (3, 8)
    with pytest.raises(TooLarge) as info:
        rope_cos_sin(seq_len=t, rotary_dim=r, max_elements=51)
    assert (info.value.limit, info.value.requested) == (51, 52)


def test_max_elements_keyword_overrides_the_default_both_ways() -> None:
    table = sinusoidal_table(seq_len=4, d_model=6, max_elements=24)
    torch.testing.assert_close(table[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    with pytest.raises(TooLarge) as info:
        sinusoidal_table(seq_len=4, d_model=6, max_elements=23)
    assert info.value.requested == 24
    with pytest.raises(TooLarge):
        alibi_bias(2, 3, 4, max_elements=2 * 3 * 4 - 1)
    assert alibi_bias(2, 3, 4, max_elements=24).shape == (2, 3, 4)
    with pytest.raises(TooLarge):
        learned_table(5, 5, max_elements=24)


def test_module_default_can_be_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(posenc.core.limits, "MAX_ELEMENTS", 10)
    with pytest.raises(TooLarge) as info:
        relative_buckets(3, 4)
    assert (info.value.limit, info.value.requested) == (10, 12)


def test_batches_are_counted_from_row_lengths() -> None:
    rows = [[1, 2, 3], [4]]
    with pytest.raises(TooLarge) as info:
        build_batch(rows, max_elements=3 * 2 * 3 - 1)  # ids, mask, positions: 3 x (2, 3)
    assert info.value.requested == 18
    assert build_batch(rows, max_elements=18).position_ids.tolist() == [[0, 1, 2], [0, 0, 0]]
    with pytest.raises(TooLarge):
        pad_rows(rows, max_elements=11)  # ids and mask: 2 x (2, 3)
    ids = torch.zeros(2, 3, dtype=torch.int64)
    table = torch.randn(10, 4)
    with pytest.raises(TooLarge) as info:
        embed_tokens(ids, token_table=table, positional="none", max_elements=23)
    assert info.value.requested == 24
    buckets = torch.zeros(3, 4, dtype=torch.int64)
    with pytest.raises(TooLarge) as info:
        relative_bias(buckets, torch.zeros(5, 2), max_elements=23)  # H = 2
    assert info.value.requested == 24


def test_embed_tokens_into_a_preallocated_output() -> None:
    """``out=`` is filled and returned, equal to the fresh result; a wrong buffer is refused."""
    g = torch.Generator().manual_seed(0)
    table, pos_table = torch.randn(50, 8, generator=g), torch.randn(16, 8, generator=g)
    ids = torch.randint(0, 50, (3, 5), generator=g)
    mask = torch.ones(3, 5, dtype=torch.int64)
    mask[1, 3:] = 0
    kwargs: dict[str, Any] = dict(
        token_table=table, position_table=pos_table, attention_mask=mask, scale=True
    )
    fresh = embed_tokens(ids, **kwargs)
    buf = torch.full((3, 5, 8), float("nan"))
    got = embed_tokens(ids, out=buf, **kwargs)
    assert got.data_ptr() == buf.data_ptr()
    torch.testing.assert_close(got, fresh, rtol=0, atol=0)
    # independent: row 0, slot 2 = table[id] * sqrt(8) + pos_table[2]
    torch.testing.assert_close(
        got[0, 2], table[ids[0, 2]] * 8**0.5 + pos_table[2], rtol=1e-6, atol=1e-6
    )
    assert not got[1, 3:].any()
    from posenc.core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=r"out must be a \(3, 5, 8\) tensor"):
        embed_tokens(ids, out=torch.empty(3, 5, 7), **kwargs)
    with pytest.raises(InvalidArgument, match="float32"):
        embed_tokens(ids, out=torch.empty(3, 5, 8, dtype=torch.float64), **kwargs)
