"""Dynamic NTK (:mod:`posenc.rope.dynamic`): the base grows with the sequence length past the
original one, as transformers' ``_compute_dynamic_ntk_parameters`` computes it."""

from __future__ import annotations

import pytest
import torch

from posenc import RopeScaling, rope_inv_freq
from tests.references import transformers_inv_freq

pytest.importorskip("transformers")

F64 = torch.float64


def ours(params: dict) -> RopeScaling:
    return RopeScaling.from_dict(params)


@pytest.mark.parametrize("seq_len", [None, 1, 2047, 2048, 2049, 5000, 65536])
@pytest.mark.parametrize("rotary_dim", [64, 24])
def test_dynamic_ntk_matches_transformers_below_and_above_the_original_length(seq_len, rotary_dim):
    """transformers' dynamic NTK reads ``config.max_position_embeddings``; we read
    ``original_max_position_embeddings`` from the scaling parameters."""
    omax = 2048
    params = {"rope_type": "dynamic", "factor": 3.0}
    ref, ref_scale = transformers_inv_freq(
        params, seq_len=seq_len, head_dim=64, rotary_dim=rotary_dim, max_position_embeddings=omax
    )
    scaling = ours({**params, "original_max_position_embeddings": omax})
    got, scale = rope_inv_freq(rotary_dim, 10000.0, scaling, seq_len=seq_len)
    torch.testing.assert_close(got, ref.to(F64), rtol=2e-6, atol=0)
    assert scale == ref_scale == 1.0
    plain, _ = rope_inv_freq(rotary_dim, 10000.0)
    if seq_len is None or seq_len <= omax:
        torch.testing.assert_close(got, plain, rtol=0, atol=0)
    else:
        assert (got[1:] < plain[1:]).all()  # a larger base: lower frequencies


def test_the_base_past_the_original_length_is_the_ntk_closed_form() -> None:
    """Hand-worked: ``R = 64``, ``f = 3``, original 2048, length 4096: the base becomes
    ``10000 · (3·4096/2048 − 2)^(64/62) = 10000 · 4^(32/31)``."""
    scaling = ours(
        {"rope_type": "dynamic", "factor": 3.0, "original_max_position_embeddings": 2048}
    )
    got, scale = rope_inv_freq(64, 10000.0, scaling, seq_len=4096)
    new_base = 10000.0 * 4.0 ** (32 / 31)
    expected = torch.tensor([new_base ** (-2 * i / 64) for i in range(32)], dtype=F64)
    torch.testing.assert_close(got, expected, rtol=1e-14, atol=0)
    assert scale == 1.0
