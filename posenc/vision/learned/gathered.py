"""Interpolation written as a weighted gather: PaddleOCR-VL, Kimi K2.5 and Inkling 2.

These towers resize their ``s × s`` table to each image's ``h × w`` patches as
``F.interpolate(mode, align_corners=False)`` would (border taps clamped), but as a gather of
``n²`` rows per patch and a weighted sum (transformers 5's
``vision_utils.get_vision_interpolation_indices_and_weights``): per axis, output ``k`` sits at
source coordinate ``(k + ½) · s / n − ½``, with 2 taps (bilinear, hat kernel) or 4 (bicubic,
Keys' kernel with ``a = −0.75``) around its floor, clamped into ``[0, s − 1]``. PaddleOCR-VL
sums ``table[taps] · weights`` (bilinear); Kimi K2.5 calls ``F.embedding_bag(mode="sum")``
(bicubic) and adds a per-frame sinusoid that is zero for an image (frame 0); both in raster
order. Inkling 2 sums bilinear taps in spatial-merge block order (``spatial_merge_size``), and
gives each image's class token a row of its own outside the table.

The per-axis weights are the same formula in float64, the clamped taps summed into their rows.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = ["EMBEDDING_BAG", "GATHER_SUM", "axis_taps"]


def axis_taps(mode: str, side: int, index: Tensor, size: Tensor) -> tuple[Tensor, Tensor]:
    """``(taps, weights)``, each ``(n, k)`` (``k`` = 2 bilinear, 4 bicubic): the clamped rows of
    one axis each output reads and their weights, in ``index``'s dtype and the model's order of
    operations."""
    src = (index + 0.5) * side / size - 0.5
    floor = torch.floor(src)
    offsets = torch.arange(0, 2) if mode == "bilinear" else torch.arange(-1, 3)
    taps = (floor.long()[:, None] + offsets).clamp(0, side - 1)
    distance = (src[:, None] - floor[:, None] - offsets).abs()
    if mode == "bilinear":
        return taps, (1 - distance).clamp(min=0)
    a = -0.75
    near = ((a + 2) * distance - (a + 3)) * distance * distance + 1
    far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
    return taps, torch.where(distance <= 1, near, far)


def _axis_weights(tower: LearnedTower, side: int, n: int) -> Tensor:
    """``(n, s)`` float64: the formula in float64, clamped taps summed into their rows."""
    index = torch.arange(n, dtype=torch.float64)
    taps, weights = axis_taps(tower.mode, side, index, torch.tensor(float(n), dtype=torch.float64))
    out = torch.zeros(n, side, dtype=torch.float64)
    return out.scatter_add_(1, taps, weights)


def _indices(
    tower: LearnedTower, side: int, h: int, w: int, y: Tensor, x: Tensor
) -> tuple[Tensor, Tensor]:
    """``(n, k²)`` table rows and float32 weights of the patches ``(y, x)`` ``(n,)``."""
    n = y.shape[0]
    ht, hw = axis_taps(tower.mode, side, y.to(torch.float32), torch.tensor(float(h)).expand(n))
    wt, ww = axis_taps(tower.mode, side, x.to(torch.float32), torch.tensor(float(w)).expand(n))
    k = ht.shape[1]
    rows = (ht[:, :, None] * side + wt[:, None, :]).reshape(-1, k * k)
    return rows, (hw[:, :, None] * ww[:, None, :]).reshape(-1, k * k)


def _engine(
    combine: Callable[[Tensor, Tensor, Tensor], Tensor],
) -> tuple[Callable[..., Tensor], Callable[..., Tensor]]:
    """The engine over the whole grid (raster order) and at given patches: each patch's taps
    and weights are its own, so a subset gets the bits of the whole."""

    def at(
        tower: LearnedTower, rows: Tensor, side: int, h: int, w: int, y: Tensor, x: Tensor
    ) -> Tensor:
        index, weights = _indices(tower, side, h, w, y, x)
        return combine(rows, index, weights)

    def engine(tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
        y = torch.arange(h)[:, None].expand(h, w).reshape(-1)
        x = torch.arange(w)[None, :].expand(h, w).reshape(-1)
        return at(tower, rows, side, h, w, y, x)

    return engine, at


def _sum(rows: Tensor, index: Tensor, weights: Tensor) -> Tensor:
    """PaddleOCR-VL: ``(table[index] · weights).sum(taps)``."""
    return (rows[index] * weights[:, :, None]).sum(1)


def _bag(rows: Tensor, index: Tensor, weights: Tensor) -> Tensor:
    """Kimi K2.5: ``F.embedding_bag(index, table, per_sample_weights, mode="sum")``."""
    return F.embedding_bag(index, rows, per_sample_weights=weights.to(rows.dtype), mode="sum")


def _gathered_elements(_side: int, h: int, w: int, dim: int) -> int:
    """PaddleOCR-VL and Inkling 2 (bilinear): the gathered taps ``(h·w, 4, D)``."""
    return 4 * h * w * dim


def _bag_elements(_side: int, h: int, w: int, _dim: int) -> int:
    """Kimi K2.5 (bicubic): the bag's rows and weights ``(h·w, 16)`` each."""
    return 2 * 16 * h * w


GATHER_SUM = ResizeRule(
    name="interpolate_gather",
    axis_weights=_axis_weights,
    engine=_engine(_sum)[0],
    engine_at=_engine(_sum)[1],
    engine_elements=_gathered_elements,
)
EMBEDDING_BAG = ResizeRule(
    name="interpolate_gather",
    axis_weights=_axis_weights,
    engine=_engine(_bag)[0],
    engine_at=_engine(_bag)[1],
    engine_elements=_bag_elements,
)
