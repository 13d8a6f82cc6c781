"""M-RoPE's sections (:mod:`posenc.rope.sections`): which position row drives each frequency,
Qwen2-VL's contiguous sections and Qwen3-VL's interleaving worked by hand, and the tables
against the closed form ``cos(p[axis_j] · base^(−2j/R))`` written here in numpy float64.
(transformers' own rotary embeddings of Qwen2.5-VL and Qwen3-VL: tests/lib/test_hf_rope.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.rope import mrope_cos_sin
from posenc.rope.sections import check_mrope_section, mrope_channel_axes


def test_contiguous_sections_hand_worked() -> None:
    """Qwen2-VL: ``[2, 1, 1]`` of ``R/2 = 4``: two temporal frequencies, then height, width."""
    assert mrope_channel_axes(8, [2, 1, 1]).tolist() == [0, 0, 1, 2]


def test_interleaved_sections_hand_worked() -> None:
    """Qwen3-VL (``apply_interleaved_mrope``): height at ``1, 4, 7 …`` and width at ``2, 5, 8 …``
    for as many as their sections hold, temporal elsewhere; ``[4, 3, 3]`` of ``R/2 = 10``."""
    assert mrope_channel_axes(20, [4, 3, 3], interleaved=True).tolist() == [
        0, 1, 2, 0, 1, 2, 0, 1, 2, 0,
    ]  # fmt: skip
    assert mrope_channel_axes(20, [6, 2, 2], interleaved=True).tolist() == [
        0, 1, 2, 0, 1, 2, 0, 0, 0, 0,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("section", "words"),
    [([2, 2], "three ints"), ([2, -1, 3], "three ints"), ([2, 1, 2], "sum 5"), ([True, 1, 2], "three ints")],
)  # fmt: skip
def test_bad_sections_are_refused_with_the_numbers(section: list, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words) as err:
        check_mrope_section(8, section)
    assert err.value.field == "mrope_section"


@pytest.mark.parametrize("interleaved", [False, True])
def test_tables_are_the_closed_form_of_each_frequencys_row(interleaved: bool) -> None:
    rng = np.random.default_rng(3)
    positions = rng.integers(0, 300, size=(3, 11))  # (3, T): temporal, height, width rows
    rotary_dim, section, base = 16, [4, 2, 2], 10000.0
    axes = [0, 0, 0, 0, 1, 1, 2, 2]
    if interleaved:
        axes = [0, 1, 2, 0, 1, 2, 0, 0]
    inv_freq = base ** (-np.arange(0, rotary_dim, 2) / rotary_dim)  # (R/2,)
    angles = np.stack([positions[a] * inv_freq[j] for j, a in enumerate(axes)], axis=1)  # (T, R/2)
    want_cos = np.cos(np.concatenate([angles, angles], axis=1))  # half layout: cat(θ, θ)
    want_sin = np.sin(np.concatenate([angles, angles], axis=1))
    got = mrope_cos_sin(
        torch.from_numpy(positions),
        rotary_dim=rotary_dim,
        mrope_section=section,
        interleaved=interleaved,
        base=base,
        dtype=torch.float64,
    )
    np.testing.assert_allclose(got.cos.numpy(), want_cos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.sin.numpy(), want_sin, rtol=0, atol=1e-12)


def test_equal_rows_are_plain_rope() -> None:
    """A text token has the same position on the three rows: M-RoPE is then RoPE itself."""
    t = torch.arange(20)
    got = mrope_cos_sin(
        torch.stack([t, t, t]), rotary_dim=16, mrope_section=[4, 2, 2], dtype=torch.float64
    )
    angles = np.arange(20)[:, None] * 10000.0 ** (-np.arange(0, 16, 2) / 16)
    np.testing.assert_allclose(
        got.cos.numpy(), np.cos(np.concatenate([angles, angles], 1)), atol=1e-12
    )
