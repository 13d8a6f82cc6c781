"""RADIO's cropped position embedding (CPE): resized to a square, then cropped to the grid.

RADIO (Ranzinger et al., 2024, "AM-RADIO", §3; transformers 5's
``RadioPatchEmbeddings._interpolate_position_embedding``) keeps an ``s × s`` table
(``max_img_size // patch_size``), resizes it bilinearly (``align_corners=False``, in float32) to
``M × M`` with ``M = max(h, w)`` and keeps its first ``h`` rows and ``w`` columns. So a patch
row depends on both sides of the grid: the weights of each axis are the bilinear resize
``s → M`` of the identity, cropped to that axis' length. The class and register tokens come
first with learned rows of their own (``cls_register_token``), outside the table.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, ResizeRule
from posenc.vision.learned.interpolate import interpolate_axis_weights

__all__ = ["CROPPED", "cropped_axis_pair", "cropped_patch_rows"]


def cropped_axis_pair(tower: LearnedTower, side: int, h: int, w: int) -> tuple[Tensor, Tensor]:
    """``(h, s)`` and ``(w, s)`` float64: the bilinear resize to ``max(h, w)``, cropped."""
    square = interpolate_axis_weights(tower, side, max(h, w))  # (M, s)
    return square[:h], square[:w]


def _axis(tower: LearnedTower, side: int, n: int) -> Tensor:
    """One axis alone: a square grid of side ``n``."""
    return cropped_axis_pair(tower, side, n, n)[0]


def cropped_patch_rows(tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    """``(h·w, D)``: the model's arithmetic (float32 resize to ``M × M``, crop), in order."""
    dim = rows.shape[-1]
    pos = rows.reshape(1, side, side, dim).permute(0, 3, 1, 2)  # (1, D, s, s)
    size = max(h, w)
    pos = F.interpolate(pos.float(), size=(size, size), mode="bilinear", align_corners=False)
    pos = pos.to(rows.dtype)[..., :h, :w]  # (1, D, h, w)
    return pos.flatten(2).permute(0, 2, 1)[0]


CROPPED = ResizeRule(
    name="cropped",
    axis_weights=_axis,
    engine=cropped_patch_rows,
    axis_pair=cropped_axis_pair,
    engine_elements=lambda _side, h, w, dim: max(h, w) ** 2 * dim,  # the M × M resize
)
