"""CogVideoX (:mod:`posenc.diffusion.cogvideox`): the resize-crop region of its 3-D RoPE grid
and its 3-D sincos table, hand-worked and against closed forms written here (numpy float64,
diffusers' ``get_resize_crop_region_for_grid`` and ``get_3d_sincos_pos_embed`` by their formulas)."""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc.diffusion import DIFFUSION_ROPE, SINCOS_2D
from posenc.diffusion.cogvideox import resize_crop_region
from posenc.resolve import compute, resolve_fields
from tests.references import sincos_1d


def rope(**fields: Any) -> dict[str, np.ndarray]:
    params = resolve_fields(DIFFUSION_ROPE, {"dtype": "float64", **fields})
    return {k: v.numpy() for k, v in compute(DIFFUSION_ROPE, params).items()}


def sincos(**fields: Any) -> np.ndarray:
    params = resolve_fields(SINCOS_2D, {"dtype": "float64", **fields})
    return compute(SINCOS_2D, params)["pos_embed"].numpy()


def test_cogvideox_crop_region_by_hand() -> None:
    # a 40 x 40 grid into the 30 x 45 base: height-bound, resized 30 x 30, centred with
    # round(15 / 2) = 8 columns to the left (Python rounds half to even: round(7.5) = 8).
    assert resize_crop_region(40, 40, 45, 30) == ((0, 8), (30, 38))
    # the base grid itself is its own crop
    assert resize_crop_region(30, 45, 45, 30) == ((0, 0), (30, 45))
    ids = rope(model="cogvideox", frames=1, height=40, width=40)["ids"]
    rows = ids[::40, 1]  # linspace(0, 30 · 39/40, 40)
    np.testing.assert_allclose(rows, np.arange(40) * (30 * 39 / 40) / 39, rtol=0, atol=1e-13)
    columns = ids[:40, 2]  # linspace(8, 38 · 39/40, 40)
    np.testing.assert_allclose(
        columns, 8 + np.arange(40) * (38 * 39 / 40 - 8) / 39, rtol=0, atol=1e-13
    )


def test_cogvideox_sincos_puts_the_frame_first() -> None:
    got = sincos(model="cogvideox", frames=2, height=1, width=2)  # D = 30 · 64 = 1920
    t, h, w = np.meshgrid(np.arange(2), np.arange(1), np.arange(2), indexing="ij")
    want = np.concatenate(
        [
            sincos_1d(480, t.ravel() / 1.0),
            sincos_1d(720, w.ravel() / 1.875),
            sincos_1d(720, h.ravel() / 1.875),
        ],
        axis=1,
    )
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
