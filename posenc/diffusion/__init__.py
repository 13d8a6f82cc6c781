"""Positions of diffusion and video transformers, as diffusers computes them.

One module per model rule (:mod:`~posenc.diffusion.flux`, :mod:`~posenc.diffusion.wan`,
:mod:`~posenc.diffusion.hunyuan_video`, :mod:`~posenc.diffusion.qwen_image`,
:mod:`~posenc.diffusion.cogvideox`, :mod:`~posenc.diffusion.ltx_video`), the sin-cos tables of
SD3, PixArt, DiT and CogVideoX (:mod:`~posenc.diffusion.sincos`), what they share
(:mod:`~posenc.diffusion.rules`), the published configs (:mod:`~posenc.diffusion.published`), the
reading of a diffusers config (:mod:`~posenc.diffusion.configs`), the sweep of diffusers' classes
(:mod:`~posenc.diffusion.sweep`) and the two endpoint kinds (:mod:`~posenc.diffusion.kind`).
"""

from __future__ import annotations

from posenc.diffusion.configs import ROPE_RULES, describe, read_rope, read_sincos
from posenc.diffusion.kind import DIFFUSION_ROPE, SINCOS_2D, diffusion_rope_grid, sincos_grid
from posenc.diffusion.sincos import SINCOS_RULES

__all__ = [
    "DIFFUSION_ROPE",
    "ROPE_RULES",
    "SINCOS_2D",
    "SINCOS_RULES",
    "describe",
    "diffusion_rope_grid",
    "read_rope",
    "read_sincos",
    "sincos_grid",
]
