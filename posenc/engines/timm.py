"""timm: its vision rotary tables (vision-rope's ``engine: "timm"``).

``config`` is the arguments of timm's ``create_rope_embed`` (EVA's and ROPE-ViT's axial
``cat``/``base``, ROPE-ViT's ``mixed``, DINOv3's); the tables are
:mod:`posenc.vision.timm`'s. It has no text RoPE.
"""

from __future__ import annotations

from posenc.engines.base import ApplyHook, Engine, ShiftHook


class Timm(Engine):
    """timm's ``RotaryEmbeddingCat`` family, for vision-rope."""

    name = "timm"
    summary = (
        "timm (config is the arguments of timm's create_rope_embed: EVA's and ROPE-ViT's "
        "axial cat/base, ROPE-ViT's mixed, DINOv3's)"
    )
    kinds = frozenset({"vision_rope"})
    precisions = ("exact",)
    apply: ApplyHook | None = None
    shift: ShiftHook | None = None


ENGINE = Timm()
"""The timm engine."""

__all__ = ["ENGINE", "Timm"]
