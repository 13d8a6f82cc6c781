"""Towers that add their table as it is: the native grid only (Ovis2's SigLIP-style tower).

Such a tower reads rows ``0 … s²−1`` of its table for every image (``position_embedding``
of ``arange(s²)`` in transformers 5's ``Ovis2VisionEmbeddings``); its image processor always
gives it the native ``s × s`` grid. Another grid is refused (a 422 naming ``grid``) rather than
resized by a rule the model does not have.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from posenc.errors import InvalidArgument
from posenc.vision_learned.base import LearnedTower, ResizeRule

__all__ = ["FIXED", "TOWERS"]


def _native_only(side: int, n: int) -> None:
    if n != side:
        raise InvalidArgument(
            f"this tower adds its table as it is, without resizing: its grid is {side} x "
            f"{side} patches, got an axis of {n}",
            field="grid",
        )


def _identity(_tower: LearnedTower, side: int, n: int) -> Tensor:
    _native_only(side, n)
    return torch.eye(side, dtype=torch.float64)


def _as_is(_tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    _native_only(side, h)
    _native_only(side, w)
    return rows


FIXED = ResizeRule(name="fixed", axis_weights=_identity, engine=_as_is)

TOWERS: Mapping[str, LearnedTower] = {
    "ovis2_vision": LearnedTower(
        reference="Ovis2VisionEmbeddings",
        rule=FIXED,
        defaults={"hidden_size": 1024, "image_size": 224, "patch_size": 14},
        prefix=0,
        parameter="position_embedding.weight",
    ),
}
