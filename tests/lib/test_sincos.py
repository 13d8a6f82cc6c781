"""The 2-D sincos tables of SD3, PixArt and DiT (:mod:`posenc.diffusion.sincos`) against
closed forms written here (numpy float64, diffusers' ``get_2d_sincos_pos_embed`` by its
formulas): SD3's centre crop of its max-size table, the base-size-over-grid scale of the others."""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc.diffusion import SINCOS_2D
from posenc.resolve import compute, resolve_fields
from tests.references import sincos_1d


def sincos(**fields: Any) -> np.ndarray:
    params = resolve_fields(SINCOS_2D, {"dtype": "float64", **fields})
    return compute(SINCOS_2D, params)["pos_embed"].numpy()


def test_sd3_crop_is_the_centre_of_its_max_size_table() -> None:
    # stable-diffusion-3.5-large: D = 38 · 64, pos_embed_max_size 192, base 128 // 2 = 64
    got = sincos(model="sd3", height=3, width=4)
    top, left = (192 - 3) // 2, (192 - 4) // 2
    h, w = np.meshgrid(np.arange(3) + top, np.arange(4) + left, indexing="ij")
    rows, cols = h.ravel() / (192 / 64), w.ravel() / (192 / 64)
    want = np.concatenate([sincos_1d(1216, cols), sincos_1d(1216, rows)], axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_pixart_and_dit_scale_by_base_size_over_the_grid() -> None:
    got = sincos(model="pixart", height=2, width=4)  # base 64, interpolation_scale 2
    h, w = np.meshgrid(np.arange(2), np.arange(4), indexing="ij")
    rows, cols = h.ravel() / (2 / 64) / 2, w.ravel() / (4 / 64) / 2
    want = np.concatenate([sincos_1d(576, cols), sincos_1d(576, rows)], axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    single = sincos(model="dit", height=1, width=1)  # position 0: sines 0, cosines 1
    np.testing.assert_array_equal(single, np.tile(np.repeat([0.0, 1.0], 288), 2)[None])
