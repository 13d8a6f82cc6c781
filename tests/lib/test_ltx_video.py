"""LTX-Video's RoPE (:mod:`posenc.diffusion.ltx_video`): coordinates as fractions of the base
sizes and angles frequency-major after the unrotated channels, against closed forms written
here (numpy float64, diffusers' ``LTXVideoRotaryPosEmbed`` by its formulas)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from posenc.diffusion import DIFFUSION_ROPE
from posenc.resolve import compute, resolve_fields


def rope(**fields: Any) -> dict[str, np.ndarray]:
    params = resolve_fields(DIFFUSION_ROPE, {"dtype": "float64", **fields})
    return {k: v.numpy() for k, v in compute(DIFFUSION_ROPE, params).items()}


def interleaved(angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.repeat(np.cos(angles), 2, axis=1), np.repeat(np.sin(angles), 2, axis=1)


def test_ltx_coordinates_are_fractions_of_the_base_sizes() -> None:
    ids = rope(model="ltx-video", frames=3, height=2, width=2)["ids"]
    t, h, w = np.meshgrid(np.arange(3), np.arange(2), np.arange(2), indexing="ij")
    want = np.stack(
        [t.ravel() * (8 / 25) / 20, h.ravel() * 32 / 2048, w.ravel() * 32 / 2048], axis=1
    )
    np.testing.assert_allclose(ids, want, rtol=1e-15)


def test_ltx_angles_frequency_major_after_the_unrotated_channels() -> None:
    out = rope(model="ltx-video", frames=2, height=2, width=3)
    dim, pairs = 2048, 2048 // 6  # 341 frequencies per axis, 2048 mod 6 = 2 channels left as is
    np.testing.assert_array_equal(out["cos"][:, :2], 1.0)
    np.testing.assert_array_equal(out["sin"][:, :2], 0.0)
    freqs = 10000.0 ** np.linspace(0.0, 1.0, pairs) * math.pi / 2  # (F,)
    angles = freqs[None, :, None] * (out["ids"][:, None, :] * 2 - 1)  # (N, F, 3)
    cos, sin = interleaved(angles.reshape(len(out["ids"]), -1))
    np.testing.assert_allclose(out["cos"][:, 2:], cos, rtol=0, atol=1e-9)
    np.testing.assert_allclose(out["sin"][:, 2:], sin, rtol=0, atol=1e-9)
    assert out["cos"].shape == (12, dim)
