"""SAM 3's ViT: the table tiled, not interpolated, to the image's grid.

SAM 3's backbone (transformers 5's ``Sam3ViTEmbeddings._tile_position_embeddings``) keeps the
``s × s`` table of its pretraining size (``pretrain_image_size // patch_size``: 336 / 14 = 24)
and repeats it over a larger grid: ``tile`` then crop to ``h × w``. Patch ``(y, x)`` reads
table row ``(y mod s) · s + (x mod s)``; at the native grid that is the table as it is. There
is no class row (it is removed when the weights are converted).

As a resize, each axis' weights are one-hot: ``W[y, y mod s] = 1``.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = ["TILE", "tile_position_ids"]


def _axis(side: int, n: int) -> Tensor:
    """``(n,)`` int64: the table row (of ``s``) each of ``n`` patches of one axis reads."""
    return torch.arange(n, dtype=torch.int64) % side


def tile_position_ids(_tower: LearnedTower, side: int, h: int, w: int) -> Tensor:
    """``(h·w,)`` int64: each patch's table row, row-major."""
    return (_axis(side, h)[:, None] * side + _axis(side, w)[None, :]).reshape(-1)


def _one_hot(_tower: LearnedTower, side: int, n: int) -> Tensor:
    weights = torch.zeros(n, side, dtype=torch.float64)
    weights[torch.arange(n), _axis(side, n)] = 1.0
    return weights


def _gather(tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    return rows[tile_position_ids(tower, side, h, w)]


TILE = ResizeRule(
    name="tile", axis_weights=_one_hot, engine=_gather, position_ids=tile_position_ids
)
