"""Learned 2-D position tables of vision towers, resized to an image's grid as each model does.

One module per resizing rule, whose towers are records of :mod:`posenc.facts.learned_towers`
(each naming its rule; :data:`~posenc.vision.learned.tables.RESIZE_RULES` joins them):

- :mod:`~posenc.vision.learned.interpolate`: ``interpolate_pos_encoding`` (ViT, DeiT, DINOv2,
  CLIP, SigLIP, BLIP, InternViT...), bicubic or antialiased, class rows kept;
- :mod:`~posenc.vision.learned.naflex`: SigLIP 2 NaFlex's per-image bilinear antialiased resize;
- :mod:`~posenc.vision.learned.buckets`: NaViT bucketed position ids (Idefics2/3, SmolVLM,
  Phi-4-multimodal).

:mod:`~posenc.vision.learned.tables` reads a config and computes the resized table and the
resampling matrix; :mod:`~posenc.vision.learned.kind` is the ``vision_learned`` endpoint kind.
"""

from __future__ import annotations

from posenc.vision.learned.base import LearnedTower, ResizeRule
from posenc.vision.learned.tables import (
    LEARNED_TOWERS,
    VisionLearnedSpec,
    find_learned_tower,
    position_ids,
    resample_matrix,
    resized_table,
    vision_learned_spec,
)

__all__ = [
    "LEARNED_TOWERS",
    "LearnedTower",
    "ResizeRule",
    "VisionLearnedSpec",
    "find_learned_tower",
    "position_ids",
    "resample_matrix",
    "resized_table",
    "vision_learned_spec",
]
