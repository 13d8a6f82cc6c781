"""Llama 3.1's frequency bands (:mod:`posenc.rope.llama3`) against transformers'
``_compute_llama3_parameters`` (``ROPE_INIT_FUNCTIONS["llama3"]``) and the closed form of
tests/references.py (:func:`~tests.references.llama3_inv_freq`)."""

from __future__ import annotations

import pytest
import torch

from posenc import RopeScaling, rope_inv_freq
from tests import references
from tests.references import transformers_inv_freq

pytest.importorskip("transformers")

F64 = torch.float64


def ours(params: dict) -> RopeScaling:
    return RopeScaling.from_dict(params)


def test_llama3_bands_are_all_exercised():
    """The Llama 3.1 case keeps high frequencies, divides low ones by 8 and smooths between."""
    params, rotary_dim, base = LLAMA_3_1, 128, 500000.0
    plain, _ = rope_inv_freq(rotary_dim, base)
    got, _ = rope_inv_freq(rotary_dim, base, ours(params))
    ratio = plain / got
    assert (ratio == 1).any() and torch.isclose(ratio, torch.tensor(8.0, dtype=F64)).any()
    assert ((ratio > 1.01) & (ratio < 7.99)).any()


LLAMA_3_1 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@pytest.mark.parametrize(
    ("rotary_dim", "base", "factor", "low", "high", "original"),
    [(128, 500000.0, 8.0, 1.0, 4.0, 8192), (64, 500000.0, 32.0, 2.0, 6.0, 1024)],
    ids=["llama3.1", "llama3.2-wide-band"],
)
def test_inv_freq_is_the_closed_form_of_the_bands(rotary_dim, base, factor, low, high, original):
    """The numpy closed form of tests/references.py, band by band, in float64."""
    params = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": original,
    }
    got, scale = rope_inv_freq(rotary_dim, base, ours(params))
    expected = references.llama3_inv_freq(
        references.rope_inv_freq(rotary_dim, base), factor, low, high, original
    )
    torch.testing.assert_close(got, torch.from_numpy(expected), rtol=1e-15, atol=0)
    assert scale == 1.0
    ref, ref_scale = transformers_inv_freq(params, head_dim=rotary_dim, base=base)
    torch.testing.assert_close(got, ref.to(F64), rtol=2e-6, atol=0)
    assert ref_scale == 1.0


def test_the_lowest_frequency_is_divided_by_the_factor_and_the_highest_kept() -> None:
    """Hand-worked at R = 128, base 500000: ``ω_0 = 1`` (wavelength 2π, under 8192/4) is kept,
    ``ω_63 = 500000^(-126/128)`` (wavelength about 2.5e6, over 8192/1) is divided by 8."""
    got, _ = rope_inv_freq(128, 500000.0, ours(LLAMA_3_1))
    assert float(got[0]) == 1.0
    assert float(got[-1]) == pytest.approx(500000.0 ** (-126 / 128) / 8, rel=1e-15)
