"""LongRoPE (:mod:`posenc.rope.longrope`; Ding et al., 2024, Phi-3): the short factors up to
the original length, the long ones past it, and the attention factor, against transformers'
``_compute_longrope_parameters``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc import RopeScaling, rope_inv_freq
from tests.references import transformers_inv_freq

pytest.importorskip("transformers")

F64 = torch.float64


def ours(params: dict) -> RopeScaling:
    return RopeScaling.from_dict(params)


LONGROPE_RNG = np.random.default_rng(7)


@pytest.mark.parametrize("seq_len", [None, 1, 4096, 4097, 131072])
@pytest.mark.parametrize(
    "extra",
    [{"factor": 32.0}, {"factor": 1.0}, {"factor": 8.0, "attention_factor": 1.3}],
    ids=["factor32", "factor1", "attention-factor"],
)
def test_longrope_matches_transformers_below_and_above_the_original_length(seq_len, extra):
    rotary_dim, omax = 48, 4096
    short = [float(v) for v in LONGROPE_RNG.uniform(1.0, 1.2, rotary_dim // 2)]
    long = [float(v) for v in LONGROPE_RNG.uniform(1.0, 40.0, rotary_dim // 2)]
    params = {
        "rope_type": "longrope",
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": omax,
        **extra,
    }
    ref, ref_scale = transformers_inv_freq(
        dict(params),
        seq_len=seq_len,
        head_dim=64,
        rotary_dim=rotary_dim,
        max_position_embeddings=131072,
    )
    got, scale = rope_inv_freq(rotary_dim, 10000.0, ours(params), seq_len=seq_len)
    torch.testing.assert_close(got, ref.to(F64), rtol=2e-6, atol=0)
    assert scale == pytest.approx(ref_scale, rel=1e-12)
    factors = long if seq_len is not None and seq_len > omax else short
    plain, _ = rope_inv_freq(rotary_dim, 10000.0)
    torch.testing.assert_close(got, plain / torch.tensor(factors, dtype=F64), rtol=1e-15, atol=0)


def test_longrope_factor_from_max_position_embeddings_as_phi3():
    """Phi-3 leaves ``factor`` out; transformers uses max_position_embeddings / original.
    We take that ratio as ``factor``."""
    rotary_dim, omax, mpe = 32, 4096, 131072
    params = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 16,
        "long_factor": [2.0] * 16,
        "original_max_position_embeddings": omax,
    }
    _, ref_scale = transformers_inv_freq(dict(params), head_dim=32, max_position_embeddings=mpe)
    _, scale = rope_inv_freq(rotary_dim, 10000.0, ours({**params, "factor": mpe / omax}))
    assert scale == pytest.approx(ref_scale, rel=1e-12)
    assert scale == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)


def test_the_attention_factor_is_the_closed_form_of_the_factor() -> None:
    """Hand-worked: without ``attention_factor``, ``a = sqrt(1 + ln(f) / ln(original))``; with
    ``factor <= 1`` it is 1."""
    params = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 8,
        "long_factor": [4.0] * 8,
        "original_max_position_embeddings": 2048,
    }
    _, scale = rope_inv_freq(16, 10000.0, ours({**params, "factor": 16.0}), seq_len=4096)
    assert scale == pytest.approx(math.sqrt(1 + math.log(16) / math.log(2048)), rel=1e-15)
    _, scale = rope_inv_freq(16, 10000.0, ours({**params, "factor": 1.0}), seq_len=4096)
    assert scale == 1.0
