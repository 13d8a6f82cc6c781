"""Towers that add their table as it is: the native grid only.

Such a tower reads rows ``0 … s²−1`` of its table for every image (``position_embedding``
of ``arange(s²)`` in transformers 5's ``Ovis2VisionEmbeddings`` and ``Aimv2VisionEmbeddings``;
SAM's encoder adds its ``(1, s, s, D)`` ``pos_embed`` to the patch feature map, which has to
be ``s × s``); its image processor always gives it the native ``s × s`` grid. Another grid is refused (a 422 naming ``grid``) rather than
resized by a rule the model does not have.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = ["FIXED", "native_only"]


def native_only(side: int, n: int) -> None:
    """A 422 naming ``grid`` for an axis of ``n`` patches other than the native ``s``."""
    if n != side:
        raise InvalidArgument(
            f"this tower adds its table as it is, without resizing: its grid is {side} x "
            f"{side} patches, got an axis of {n}",
            field="grid",
        )


def _identity(_tower: LearnedTower, side: int, n: int) -> Tensor:
    native_only(side, n)
    return torch.eye(side, dtype=torch.float64)


def _as_is(_tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    native_only(side, h)
    native_only(side, w)
    return rows


FIXED = ResizeRule(name="fixed", axis_weights=_identity, engine=_as_is)
