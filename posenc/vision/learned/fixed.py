"""Towers that add their table as it is: the native grid only.

Such a tower reads rows ``0 … s²−1`` of its table for every image (``position_embedding``
of ``arange(s²)`` in transformers 5's ``Ovis2VisionEmbeddings`` and ``Aimv2VisionEmbeddings``;
SAM's encoder adds its ``(1, s, s, D)`` ``pos_embed`` to the patch feature map, which has to
be ``s × s``); its image processor always gives it the native ``s × s`` grid. Another grid is refused (a 422 naming ``grid``) rather than
resized by a rule the model does not have.

Notation used for tensor shapes: ``s`` native side, ``n`` one axis' output length, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = ["FIXED", "TOWERS", "native_only"]


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


def _sam(reference: str, image: int) -> LearnedTower:
    """A SAM-style encoder: a ``(1, s, s, D)`` ``pos_embed`` added to the patch feature map."""
    return LearnedTower(
        reference=reference,
        rule=FIXED,
        defaults={"hidden_size": 768, "image_size": image, "patch_size": 16},
        prefix=0,
        parameter="pos_embed",
        in_embeddings=False,
        note="a (1, s, s, D) table added to the patch feature map (with use_abs_pos, the default)",
    )


TOWERS: Mapping[str, LearnedTower] = {
    "ovis2_vision": LearnedTower(
        reference="Ovis2VisionEmbeddings",
        rule=FIXED,
        defaults={"hidden_size": 1024, "image_size": 224, "patch_size": 14},
        prefix=0,
        parameter="position_embedding.weight",
    ),
    "aimv2_vision_model": LearnedTower(
        reference="Aimv2VisionEmbeddings",
        rule=FIXED,
        defaults={"hidden_size": 1024, "image_size": 224, "patch_size": 14},
        prefix=0,
        parameter="position_embedding.weight",
        note="with is_native false (the default); is_native true builds a 2-D sin-cos table "
        "per image instead, and has no learned table",
    ),
    "layoutlmv3": LearnedTower(
        reference="LayoutLMv3Model",
        rule=FIXED,
        defaults={"hidden_size": 768, "input_size": 224, "patch_size": 16},
        prefix=1,
        parameter="pos_embed",
        image_key="input_size",
        in_embeddings=False,
        note="the image patches of a document model (visual_embed), the class row first",
    ),
    "sam_vision_model": _sam("SamVisionEncoder", 1024),
    "sam_hq_vision_model": _sam("SamHQVisionEncoder", 1024),
    "got_ocr2_vision": _sam("GotOcr2VisionEncoder", 1024),
    "slanext_vision": _sam("SLANeXtVisionEncoder", 512),
    "pp_formulanet_vision": _sam("PPFormulaNetVisionModel", 512),
}
