"""GLM-4V's towers: the table sampled per patch by ``F.grid_sample`` at the patch's centre.

GLM-4V (``Glm4vVisionEmbeddings`` in transformers 5, copied by GLM-4V-MoE and GLM-Image) keeps
an ``s × s`` table and, for each patch ``(y, x)`` of an image of ``h × w`` patches, samples it
with ``F.grid_sample(mode, align_corners=False, padding_mode="border")`` in float32 at the
normalised centre ``((x + ½) / w · 2 − 1, (y + ½) / h · 2 − 1)``, i.e. the source coordinate
``(x + ½) · s / w − ½``: bicubic for GLM-4V (the taps clamped to the border, as
``F.interpolate`` clamps them), bilinear for GLM-Image. The tower also rotates by a 2-D rotary
embedding (see ``/v1/encodings/vision-rope``) and visits the patches in that rotary's
spatial-merge block order (``spatial_merge_size``; ``get_vision_position_ids``), the order of
these rows.

The per-axis weights are ``grid_sample`` of the identity along that axis in float64 (a
one-row image whose ``s`` channels are the identity's rows).

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = ["GRID_SAMPLE", "grid_sample_axis_weights", "grid_sample_patch_rows"]


def grid_sample_axis_weights(tower: LearnedTower, side: int, n: int) -> Tensor:
    """``(n, s)`` float64: the weights of the ``s`` rows of one axis at its ``n`` centres."""
    eye = torch.eye(side, dtype=torch.float64).reshape(1, side, 1, side)  # (1, C=s, 1, s)
    coords = (torch.arange(n, dtype=torch.float64) + 0.5) / n * 2 - 1  # (n,)
    grid = torch.stack((coords, torch.zeros_like(coords)), dim=-1).reshape(1, 1, n, 2)
    out = F.grid_sample(eye, grid, mode=tower.mode, align_corners=False, padding_mode="border")
    return out[0, :, 0, :].T.contiguous()  # (n, s)


def grid_sample_at(
    tower: LearnedTower, rows: Tensor, side: int, h: int, w: int, y: Tensor, x: Tensor
) -> Tensor:
    """``(n, D)``: the model's own ``grid_sample`` (float32) at the patches ``(y, x)`` ``(n,)``
    of an ``h × w`` grid, cast back to the rows' dtype. Each patch is sampled on its own, so
    any subset of patches gets the bits of the whole grid's call."""
    dim = rows.shape[-1]
    table = rows.reshape(side, side, dim).permute(2, 0, 1)[None].to(torch.float32)  # (1, D, s, s)
    norm_w = ((x + 0.5) / torch.tensor(float(w))) * 2 - 1  # float32, as the model
    norm_h = ((y + 0.5) / torch.tensor(float(h))) * 2 - 1
    grid = torch.stack((norm_w, norm_h), dim=-1)[None, :, None, :]  # (1, n, 1, 2)
    out = F.grid_sample(table, grid, mode=tower.mode, align_corners=False, padding_mode="border")
    return out[0, :, :, 0].T.to(rows.dtype)  # (n, D)


def grid_sample_patch_rows(tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    """``(h·w, D)``: the model's own ``grid_sample`` (float32) at each patch of ``h × w``,
    row-major, cast back to the rows' dtype."""
    y = torch.arange(h, dtype=torch.int64)[:, None].expand(h, w).reshape(-1)  # (h·w,)
    x = torch.arange(w, dtype=torch.int64)[None, :].expand(h, w).reshape(-1)
    return grid_sample_at(tower, rows, side, h, w, y, x)


GRID_SAMPLE = ResizeRule(
    name="grid_sample",
    axis_weights=grid_sample_axis_weights,
    engine=grid_sample_patch_rows,
    engine_at=grid_sample_at,
)
