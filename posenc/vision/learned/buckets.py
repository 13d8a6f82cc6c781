"""NaViT-style bucketed position ids: Idefics2, Idefics3, SmolVLM, Phi-4-multimodal, MiniCPM-V.

These towers keep SigLIP's ``s × s`` table and never resize it: a patch at row ``y`` of an image
of ``h`` patch rows reads table row ``bucket(y / h)``, the bucket of its fractional coordinate
among the boundaries ``1/s, 2/s, …`` (Dehghani et al., 2023, "Patch n' Pack: NaViT", §3.1), and
likewise for its column; its id is ``bucket_row · s + bucket_column``. The reference is the
embeddings forward of transformers 5's ``Idefics2VisionEmbeddings`` (copied by Idefics3, SmolVLM
and Phi-4-multimodal), computed here with its own float32 arithmetic
(``arange(1/s, 1, 1/s)`` boundaries, ``y · (1/h)`` clamped below ``1 − 1e-6``,
``bucketize(right=True)``), since an id one bucket off is a different row. MiniCPM-V's towers
(``get_vision_nearest_position_ids`` of ``transformers.vision_utils``) divide instead,
``arange(h) / h``, without the clamp: :data:`NEAREST_BUCKETS`, whose ids can differ from the
Idefics ones where ``y · (1/h)`` and ``y / h`` round to either side of a boundary.

As a resize, each axis' weights are one-hot: ``Wh[y, bucket(y / h)] = 1``.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = [
    "BUCKETS",
    "NEAREST_BUCKETS",
    "axis_buckets",
    "bucket_position_ids",
    "nearest_axis_buckets",
]


def axis_buckets(side: int, n: int) -> Tensor:
    """``(n,)`` int64: the table row (of ``s``) each of the ``n`` patches of one axis reads."""
    boundaries = torch.arange(1 / side, 1.0, 1 / side)  # float32, as the model makes them
    step = 1.0 / torch.tensor([n])  # (1,) float32: 1.0 / the int64 patch count
    fractional = torch.arange(n, dtype=torch.float32)[None, :] * step[:, None]  # (1, n)
    fractional = torch.clamp(fractional, max=(1.0 - 1e-6))
    return torch.bucketize(fractional, boundaries, right=True)[0]  # (n,)


def nearest_axis_buckets(side: int, n: int) -> Tensor:
    """``(n,)`` int64: MiniCPM-V's bucket of ``k / n`` (a true division, no clamp)."""
    boundaries = torch.arange(1 / side, 1.0, 1 / side)
    coords = torch.arange(n) / n  # float32
    return torch.bucketize(coords, boundaries, right=True)


def _rule(name: str, buckets: Callable[[int, int], Tensor]) -> ResizeRule:
    def ids(_tower: LearnedTower, side: int, h: int, w: int) -> Tensor:
        """``(h·w,)`` int64: each patch's table row, row-major."""
        rows, cols = buckets(side, h), buckets(side, w)
        return (rows[:, None] * side + cols[None, :]).reshape(-1)

    def one_hot(_tower: LearnedTower, side: int, n: int) -> Tensor:
        weights = torch.zeros(n, side, dtype=torch.float64)
        weights[torch.arange(n), buckets(side, n)] = 1.0
        return weights

    def gather(tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
        return rows[ids(tower, side, h, w)]

    return ResizeRule(name=name, axis_weights=one_hot, engine=gather, position_ids=ids)


BUCKETS = _rule("navit_buckets", axis_buckets)
NEAREST_BUCKETS = _rule("nearest_buckets", nearest_axis_buckets)


def bucket_position_ids(tower: LearnedTower, side: int, h: int, w: int) -> Tensor:
    """``(h·w,)`` int64: each patch's table row, row-major, by the tower's rule."""
    ids_of = tower.rule.position_ids
    if ids_of is None:
        raise ValueError(f"{tower.reference} does not bucket its positions")
    return ids_of(tower, side, h, w)
