"""FLUX.1: three-axis RoPE over ids (text, row, column), angles in float64.

Reference: diffusers ``FluxPosEmbed`` (``transformer_flux.py``), which calls
``get_1d_rotary_pos_embed(axes_dim[i], ids[:, i], theta=10000, use_real=True,
repeat_interleave_real=True, freqs_dtype=float64)`` per axis and concatenates the axes; the
pipeline's ``_prepare_latent_image_ids`` gives image token ``(0, h, w)`` and text ids are zeros.
The transformer concatenates ``(txt_ids, img_ids)``: text first, rotated by angle 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.diffusion.rules import (
    ConfigValues,
    RopeGrid,
    RopeRule,
    concat_axes_angles,
    config_axes,
)

THETA = 10000.0  # FluxTransformer2DModel: FluxPosEmbed(theta=10000, ...)


def _read(values: ConfigValues, frames: int, height: int, width: int, text_len: int) -> RopeGrid:
    if frames != 1:
        raise InvalidArgument(
            f"frames must be 1 for an image model (flux), got {frames}", field="frames"
        )
    axes = config_axes(values, "axes_dims_rope")
    return RopeGrid("flux", 1, height, width, text_len, axes, numbers={"theta": THETA})


def _video_ids(grid: RopeGrid, t: Tensor, h: Tensor, w: Tensor) -> Tensor:
    return torch.stack([torch.zeros_like(h), h, w], dim=1).to(torch.float64)


def _text_ids(grid: RopeGrid, j: Tensor) -> Tensor:
    return torch.zeros((j.numel(), 3), dtype=torch.float64, device=j.device)


def _angles(grid: RopeGrid, ids: Tensor) -> Tensor:
    return concat_axes_angles(grid, ids, THETA)


FLUX = RopeRule(
    name="flux",
    class_names=("FluxTransformer2DModel", "ChromaTransformer2DModel"),
    reference="diffusers FluxPosEmbed (transformers/transformer_flux.py), "
    "get_1d_rotary_pos_embed(freqs_dtype=float64); FluxPipeline._prepare_latent_image_ids",
    keys={"axes_dims_rope": (16, 56, 56)},
    text="first",
    text_rotated=True,
    axis_names=("text", "height", "width"),
    read=_read,
    video_ids=_video_ids,
    text_ids=_text_ids,
    angles=_angles,
    precision="float64",
    notes="text ids are (0, 0, 0): rotated by angle 0",
)
