"""LTX-Video: RoPE over fractional coordinates, on the whole hidden state.

Reference: diffusers ``LTXVideoRotaryPosEmbed`` (``transformer_ltx.py``): each token's grid
coordinate ``(f, h, w)`` times ``rope_interpolation_scale`` times the patch size, over the base
sizes ``(20, 2048, 2048)``; frequencies ``theta^linspace(0, 1, R // 6)`` times ``π/2``; angle
``freq · (2·coordinate − 1)``. The channels run frequency-major (``f0`` frame, ``f0`` row, ``f0``
column, ``f1`` frame …), each angle on two adjacent channels, and the first ``R mod 6`` channels
are not rotated (cos 1, sin 0). ``R`` is the transformer's inner dimension (heads × head dim):
LTX rotates the hidden state before it is split into heads. Angles are float32 in diffusers.
Text reaches the video through cross-attention: no text rows.

``rope_interpolation_scale`` is what ``LTXPipeline`` passes: ``(vae_temporal_compression /
frame_rate, vae_spatial_compression, vae_spatial_compression)``, ``(8/25, 32, 32)`` for the LTX
VAE at its default 25 frames per second.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.diffusion.rules import (
    ConfigValues,
    RopeGrid,
    RopeRule,
    config_int,
)

THETA = 10000.0
BASE = (
    20,
    2048,
    2048,
)  # LTXVideoRotaryPosEmbed(base_num_frames=20, base_height=2048, base_width=2048)
PIPELINE_SCALE = (8 / 25, 32.0, 32.0)  # LTXPipeline at frame_rate 25 with the LTX VAE (8x, 32x)


def _read(values: ConfigValues, frames: int, height: int, width: int, text_len: int) -> RopeGrid:
    heads = config_int(values, "num_attention_heads")
    head_dim = config_int(values, "attention_head_dim")
    dim = heads * head_dim
    if dim < 6:
        raise InvalidArgument(
            f"LTX-Video rotates heads × head dim channels in sixes, got {dim}",
            field="config.attention_head_dim",
        )
    scale = values.get("rope_interpolation_scale") or PIPELINE_SCALE
    if len(scale) != 3 or not all(math.isfinite(s) and s > 0 for s in scale):
        raise InvalidArgument(
            f"rope_interpolation_scale must be 3 finite numbers > 0, got {scale!r}",
            field="rope_interpolation_scale",
        )
    numbers = {
        "patch_size": config_int(values, "patch_size"),
        "patch_size_t": config_int(values, "patch_size_t"),
        "rope_interpolation_scale": [float(s) for s in scale],
        "channel_order": "frequency_major",
    }
    pairs = dim // 6
    return RopeGrid(
        "ltx-video", frames, height, width, 0, (2 * pairs,) * 3, pad=dim % 6, numbers=numbers
    )


def _video_ids(grid: RopeGrid, t: Tensor, h: Tensor, w: Tensor) -> Tensor:
    s = grid.numbers["rope_interpolation_scale"]
    p, pt = grid.numbers["patch_size"], grid.numbers["patch_size_t"]
    dtype = torch.float32 if grid.engine else torch.float64  # diffusers: "always in fp32"
    frame = t.to(dtype) * s[0] * pt / BASE[0]
    row = h.to(dtype) * s[1] * p / BASE[1]
    column = w.to(dtype) * s[2] * p / BASE[2]
    return torch.stack([frame, row, column], dim=1).to(torch.float64)


def _text_ids(grid: RopeGrid, j: Tensor) -> Tensor:
    return torch.zeros((j.numel(), 3), dtype=torch.float64, device=j.device)


def ltx_frequencies(
    pairs: int, *, dtype: torch.dtype = torch.float64, device: torch.device | None = None
) -> Tensor:
    """``theta^linspace(0, 1, pairs) · π / 2``: (pairs,) in ``dtype`` (diffusers: float32)."""
    exponents = torch.linspace(
        math.log(1.0, THETA), math.log(THETA, THETA), pairs, dtype=dtype, device=device
    )
    return THETA**exponents * math.pi / 2.0


def _angles(grid: RopeGrid, ids: Tensor) -> Tensor:
    dtype = torch.float32 if grid.engine else torch.float64
    freqs = ltx_frequencies(grid.axes[0] // 2, dtype=dtype, device=ids.device)  # (F,)
    angles = freqs[None, None, :] * (ids.to(dtype)[:, :, None] * 2 - 1)  # (n, 3, F)
    return angles.transpose(1, 2).flatten(1)  # (n, 3F): frequency-major


LTX_VIDEO = RopeRule(
    name="ltx-video",
    class_names=("LTXVideoTransformer3DModel",),
    reference="diffusers LTXVideoRotaryPosEmbed (transformers/transformer_ltx.py)",
    keys={"num_attention_heads": 32, "attention_head_dim": 64, "patch_size": 1, "patch_size_t": 1},
    text="cross_attention",
    text_rotated=False,
    axis_names=("frame", "height", "width"),
    read=_read,
    video_ids=_video_ids,
    text_ids=_text_ids,
    angles=_angles,
    precision="float32",
    notes="ids are the fractional coordinates; channels frequency-major after R mod 6 unrotated "
    "ones; text reaches the video through cross-attention: text_len adds no rows",
)
