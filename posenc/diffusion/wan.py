"""Wan 2.1 / 2.2: a frame/row/column RoPE with the head split t = D − 2·h, h = w = 2·(D // 6).

Reference: diffusers ``WanRotaryPosEmbed`` (``transformer_wan.py``): per axis
``get_1d_rotary_pos_embed(dim, rope_max_seq_len, 10000, use_real=True,
repeat_interleave_real=True, freqs_dtype=float64)``, each axis' rows sliced to the grid and
broadcast over it. Text reaches the video through cross-attention: no text rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.diffusion.rules import (
    ConfigValues,
    RopeGrid,
    RopeRule,
    concat_axes_angles,
    config_int,
    limit,
)

THETA = 10000.0  # WanRotaryPosEmbed's default, which WanTransformer3DModel keeps


def wan_axes(head_dim: int) -> tuple[int, int, int]:
    """``(t, h, w)`` channels of a head of ``head_dim``: h = w = 2·(D // 6), t the rest."""
    h = 2 * (head_dim // 6)
    return head_dim - 2 * h, h, h


def _read(values: ConfigValues, frames: int, height: int, width: int, text_len: int) -> RopeGrid:
    head_dim = config_int(values, "attention_head_dim", 6)
    most = config_int(values, "rope_max_seq_len")
    why = f"rope_max_seq_len {most}: WanRotaryPosEmbed's table has that many rows per axis"
    for name, size in (("frames", frames), ("height", height), ("width", width)):
        limit(name, size, most, why)
    return RopeGrid("wan", frames, height, width, 0, wan_axes(head_dim), numbers={"theta": THETA})


def _video_ids(grid: RopeGrid, t: Tensor, h: Tensor, w: Tensor) -> Tensor:
    return torch.stack([t, h, w], dim=1).to(torch.float64)


def _text_ids(grid: RopeGrid, j: Tensor) -> Tensor:
    return torch.zeros((j.numel(), 3), dtype=torch.float64, device=j.device)


def _angles(grid: RopeGrid, ids: Tensor) -> Tensor:
    return concat_axes_angles(grid, ids, THETA)


WAN = RopeRule(
    name="wan",
    class_names=("WanTransformer3DModel", "WanVACETransformer3DModel"),
    reference="diffusers WanRotaryPosEmbed (transformers/transformer_wan.py), "
    "get_1d_rotary_pos_embed(freqs_dtype=float64)",
    keys={"attention_head_dim": 128, "rope_max_seq_len": 1024},
    text="cross_attention",
    text_rotated=False,
    axis_names=("frame", "height", "width"),
    read=_read,
    video_ids=_video_ids,
    text_ids=_text_ids,
    angles=_angles,
    precision="float64",
    notes="text reaches the video through cross-attention: text_len adds no rows",
)
