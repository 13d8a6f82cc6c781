"""YaRN (:mod:`posenc.rope.yarn`; Peng et al., 2023): the correction range, the ramp between
extrapolated and interpolated frequencies, and the attention factor, worked by hand from the
paper's formulas (``d(β) = R·ln(L/(2πβ)) / (2·ln base)``, ``mscale = 0.1·ln(f) + 1``). The
parity of whole configs with transformers' ``_compute_yarn_parameters`` is in
tests/lib/test_rope_tables.py."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.rope import RopeScaling, rope_inv_freq
from posenc.rope.yarn import correction_range

F64 = torch.float64


def test_correction_range_hand_worked() -> None:
    """``R = 64``, base 10^4, ``L = 4096``: ``d(32) = 10.47`` and ``d(1) = 22.51``, rounded
    outwards to 10 and 23; without truncation they stay as they are."""
    assert correction_range(64, 10000.0, 4096, 32.0, 1.0) == (10, 23)
    low, high = correction_range(64, 10000.0, 4096, 32.0, 1.0, truncate=False)
    assert low == pytest.approx(64 * math.log(4096 / (64 * math.pi)) / (2 * math.log(10000.0)))
    assert (round(low, 4), round(high, 4)) == (10.4722, 22.5134)


def test_correction_range_is_clamped_and_never_zero_wide() -> None:
    # base 100, L = 131072: d(1) = 69.1 passes R − 1 = 63 and is clamped to it; d(32) = 45.0
    assert correction_range(64, 100.0, 131072, 32.0, 1.0) == (45, 63)
    # equal betas: a zero-width ramp, widened by 0.001 as transformers does
    low, high = correction_range(64, 10000.0, 4096, 4.0, 4.0, truncate=False)
    assert high == low + 0.001
    assert low == pytest.approx(64 * math.log(4096 / (8 * math.pi)) / (2 * math.log(10000.0)))


def test_inv_freq_keeps_the_fast_end_interpolates_the_slow_end_and_ramps_between() -> None:
    """``R = 64``, base 10^4, ``f = 4``, ``L = 4096``: the ramp runs from dimension 10 to 23;
    ``ω_i`` is kept below 10, ``ω_i / 4`` from 23 on, and the linear blend in between."""
    scaling = RopeScaling.from_dict(
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    )
    got, attention = rope_inv_freq(64, 10000.0, scaling)
    plain = 10000.0 ** (-torch.arange(0, 64, 2, dtype=F64) / 64)  # (32,)
    want = []
    for i, w in enumerate(plain.tolist()):
        ramp = min(max((i - 10) / (23 - 10), 0.0), 1.0)
        want.append(w * (1 - ramp) + (w / 4) * ramp)
    torch.testing.assert_close(got, torch.tensor(want, dtype=F64), rtol=1e-15, atol=0)
    assert float(got[0]) == 1.0 and float(got[-1]) == pytest.approx(float(plain[-1]) / 4)
    assert attention == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-15)


def test_attention_factor_given_and_deepseeks_ratio_of_mscales() -> None:
    base = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}
    _, given = rope_inv_freq(64, 10000.0, RopeScaling.from_dict({**base, "attention_factor": 1.25}))
    assert given == 1.25
    deepseek = RopeScaling.from_dict({**base, "mscale": 0.707, "mscale_all_dim": 1.0})
    _, ratio = rope_inv_freq(64, 10000.0, deepseek)
    ln40 = math.log(40.0)
    assert ratio == pytest.approx((0.1 * 0.707 * ln40 + 1) / (0.1 * ln40 + 1), rel=1e-15)
    _, none = rope_inv_freq(64, 10000.0, RopeScaling.from_dict({**base, "factor": 1.0}))
    assert none == 1.0  # no extension: no attention scaling


def test_a_reversed_ramp_is_refused_with_both_numbers() -> None:
    with pytest.raises(InvalidArgument, match=r"beta_fast=2\.0 and beta_slow=4\.0") as err:
        RopeScaling.from_dict(
            {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 2.0,
                "beta_slow": 4.0,
            }
        )
    assert err.value.field == "scaling.beta_fast"
