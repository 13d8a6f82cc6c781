"""Qwen-Image: a frame/row/column RoPE centred on the image, text placed after the largest index.

Reference: diffusers ``QwenEmbedRope`` (``transformer_qwenimage.py``) with ``scale_rope=True``
(``QwenImageTransformer2DModel`` always sets it): tables of 4096 positive and 4096 negative
positions per axis (angles in float32 there, kept as complex numbers, which rotate adjacent
pairs). Frame ``f`` takes position ``f``; row ``h`` of ``H`` takes ``h − (H − H//2)`` (so the rows
run ``−(H − H//2) … H//2 − 1``), columns likewise. Text token ``j`` takes ``m + j`` on every axis,
``m = max(H//2, W//2)``: after the largest video index. The joint attention concatenates text
first.
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
    limit,
)

THETA = 10000.0  # QwenEmbedRope(theta=10000, ...)
TABLE = 4096  # QwenEmbedRope's pos_index / neg_index length


def _read(values: ConfigValues, frames: int, height: int, width: int, text_len: int) -> RopeGrid:
    if values.get("use_layer3d_rope"):
        raise InvalidArgument(
            "config.use_layer3d_rope is true: QwenEmbedLayer3DRope (the layered model) is not "
            "served; only QwenEmbedRope",
            field="config.use_layer3d_rope",
        )
    axes = config_axes(values, "axes_dims_rope")
    why = f"QwenEmbedRope holds {TABLE} positions each way"
    limit("frames", frames, TABLE, why)
    limit("height", height, 2 * TABLE, why)
    limit("width", width, 2 * TABLE, why)
    start = max(height // 2, width // 2)
    limit("text_len", start + text_len, TABLE, why + f"; text starts at {start}")
    return RopeGrid(
        "qwen-image", frames, height, width, text_len, axes, numbers={"text_start": start}
    )


def _video_ids(grid: RopeGrid, t: Tensor, h: Tensor, w: Tensor) -> Tensor:
    up = grid.height - grid.height // 2
    left = grid.width - grid.width // 2
    return torch.stack([t, h - up, w - left], dim=1).to(torch.float64)


def _text_ids(grid: RopeGrid, j: Tensor) -> Tensor:
    pos = (j + int(grid.numbers["text_start"])).to(torch.float64)
    return pos[:, None].expand(-1, 3).clone()


def _angles(grid: RopeGrid, ids: Tensor) -> Tensor:
    return concat_axes_angles(grid, ids, THETA, float32=grid.engine)


QWEN_IMAGE = RopeRule(
    name="qwen-image",
    class_names=("QwenImageTransformer2DModel",),
    reference="diffusers QwenEmbedRope(scale_rope=True) (transformers/transformer_qwenimage.py)",
    keys={"axes_dims_rope": (16, 56, 56), "use_layer3d_rope": False},
    text="first",
    text_rotated=True,
    axis_names=("frame", "height", "width"),
    read=_read,
    video_ids=_video_ids,
    text_ids=_text_ids,
    angles=_angles,
    precision="float32",
    notes="rows and columns centred (scale_rope); text at max(H//2, W//2) + j on every axis",
)
