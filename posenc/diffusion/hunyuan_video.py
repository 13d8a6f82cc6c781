"""HunyuanVideo: a frame/row/column RoPE (theta 256), video tokens first, text after, unrotated.

Reference: diffusers ``HunyuanVideoRotaryPosEmbed`` (``transformer_hunyuan_video.py``): a float32
``meshgrid`` of ``arange`` per axis, ``get_1d_rotary_pos_embed(rope_axes_dim[i], grid,
rope_theta, use_real=True)`` (interleaved, angles in float32 there), axes concatenated. Its
attention processor rotates ``query[:, :-text]`` and leaves the text tokens that follow as they
are.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.diffusion.rules import (
    ConfigValues,
    RopeGrid,
    RopeRule,
    concat_axes_angles,
    config_axes,
    config_float,
)


def _read(values: ConfigValues, frames: int, height: int, width: int, text_len: int) -> RopeGrid:
    axes = config_axes(values, "rope_axes_dim")
    theta = config_float(values, "rope_theta")
    return RopeGrid(
        "hunyuan-video", frames, height, width, text_len, axes, numbers={"theta": theta}
    )


def _video_ids(grid: RopeGrid, t: Tensor, h: Tensor, w: Tensor) -> Tensor:
    return torch.stack([t, h, w], dim=1).to(torch.float64)


def _text_ids(grid: RopeGrid, j: Tensor) -> Tensor:
    return torch.zeros((j.numel(), 3), dtype=torch.float64, device=j.device)


def _angles(grid: RopeGrid, ids: Tensor) -> Tensor:
    return concat_axes_angles(grid, ids, float(grid.numbers["theta"]), float32=grid.engine)


HUNYUAN_VIDEO = RopeRule(
    name="hunyuan-video",
    class_names=("HunyuanVideoTransformer3DModel",),
    reference="diffusers HunyuanVideoRotaryPosEmbed (transformers/transformer_hunyuan_video.py)",
    keys={"rope_axes_dim": (16, 56, 56), "rope_theta": 256.0},
    text="last",
    text_rotated=False,
    axis_names=("frame", "height", "width"),
    read=_read,
    video_ids=_video_ids,
    text_ids=_text_ids,
    angles=_angles,
    precision="float32",
    notes="text tokens follow the video and are not rotated (ids 0, cos 1, sin 0)",
)
