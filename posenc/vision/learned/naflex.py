"""SigLIP 2 NaFlex: the table resized to each image's own patch grid, bilinear with antialias.

SigLIP 2's NaFlex variant (Tschannen et al., 2025, "SigLIP 2", §2.4) keeps each image's aspect
ratio: an image of ``h × w`` patches gets its ``s × s`` table resized to ``h × w`` with
``F.interpolate(mode="bilinear", align_corners=False, antialias=True)``. The reference is
``Siglip2VisionEmbeddings.resize_positional_embeddings`` in transformers 5, which writes those
weights out (a triangle of support ``max(s/n, 1)`` around each output's centre
``(k + ½)·s/n − ½``, normalised to sum to one) and multiplies; the padding tokens of a batch
take the first patch's row. There is no class row.

Re-implementations that drop the antialias (openvino.genai #4444) or use bicubic differ from the
model whenever a grid is smaller than the table.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = ["NAFLEX", "naflex_axis_weights", "naflex_patch_rows"]


def _triangle(side: int, n: Tensor, index: Tensor, dtype: torch.dtype) -> Tensor:
    """Antialiased bilinear weights ``(..., s)`` of outputs ``index`` of a length-``n`` axis,
    in ``dtype``, in the order of operations of the model's code."""
    scale = side / n
    support = scale.clamp(min=1)
    center = (index + 0.5) * scale - 0.5
    source = torch.arange(side, dtype=dtype)
    weights = (1 - (source - center[..., None]).abs_().div_(support[..., None])).clamp_(min=0)
    return weights / weights.sum(-1, keepdim=True)


def naflex_axis_weights(_tower: LearnedTower, side: int, n: int) -> Tensor:
    """``(n, s)`` float64: NaFlex's weights of one axis, its formula evaluated in float64."""
    index = torch.arange(n, dtype=torch.float64)
    return _triangle(side, torch.tensor(float(n), dtype=torch.float64), index, torch.float64)


def naflex_patch_rows(_tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    """``(h·w, D)``: ``resize_positional_embeddings``' arithmetic for one image of ``h × w``
    patches (float32 weights, one matmul), cast back to the rows' dtype."""
    sizes = torch.tensor([[float(h), float(w)]], dtype=torch.float32)[:, None]  # (1, 1, 2)
    length = h * w
    positions = torch.arange(length, dtype=torch.float32)[None, :, None]  # (1, L, 1)
    r = torch.div(positions, sizes[..., 1:], rounding_mode="floor")
    index = torch.cat([r, positions - r * sizes[..., 1:]], dim=-1)  # (1, L, 2) row, column
    weights = _triangle(side, sizes, index, torch.float32)  # (1, L, 2, s)
    weights = (weights[..., 0, :, None] * weights[..., 1, None, :]).flatten(-2)  # (1, L, s²)
    out = weights @ rows.float()  # (1, L, D)
    return out[0].to(rows.dtype)


NAFLEX = ResizeRule(
    name="naflex",
    axis_weights=naflex_axis_weights,
    engine=naflex_patch_rows,
    engine_elements=lambda side, h, w, _dim: 2 * h * w * side * side,  # (L, 2, s), (L, s²)
)
