"""One record per vision tower with a rotary embedding: how its transformers rotary module
computes its 2-D table, read by :mod:`posenc.vision.rope` (``POST /v1/encodings/vision-rope``).

Each :class:`VisionRule` is keyed by the ``model_type`` of a vision config (``qwen2_vl_vision``,
``pixtral``, ``llama4_vision_model``, ``dinov3_vit`` ...): its family of frequencies, its layout,
its position-id rule and transformers 5.24's config-class defaults of the keys read. Beside them,
the other spellings transformers maps to one of these classes (:func:`vision_rope_alias`) and
the vision towers that have no rotary embedding, with what they use instead
(:func:`non_rotary_use`). :func:`vision_rope_rule` is the one lookup; adding a tower is adding
its record. The top-level model types' default towers are the ``vision_tower`` field of
:mod:`posenc.facts.families`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "NON_ROTARY",
    "VISION_ALIASES",
    "VISION_RULES",
    "ClassToken",
    "Layout",
    "Order",
    "RotaryFamily",
    "VisionRule",
    "non_rotary_use",
    "vision_rope_alias",
    "vision_rope_rule",
]

RotaryFamily = Literal["axial", "pixtral", "llama4", "dinov3"]
Order = Literal["hw", "wh", "wh_pairs"]
Layout = Literal["half", "interleaved", "split"]
ClassToken = Literal["", "first", "last"]


@dataclass(frozen=True)
class VisionRule:
    """How one vision config ``model_type`` of transformers computes its rotary table.

    Attributes:
        family: ``axial``, ``pixtral``, ``llama4`` or ``dinov3`` (:mod:`posenc.vision.rope`).
        layout: ``half`` (rotate_half), ``interleaved`` (adjacent pairs) or ``split`` (each
            half of the head rotate_half on its own, the first axis in the first half: Gemma 4's
            ``apply_multidimensional_rope``).
        order: ``axial`` only: how rows and columns fill half a head.
        offset: added to each row and column before the angles (Muse Spark's and Inkling2's
            1-based positions); a class token stays at angle 0.
        window: the config key whose value is the side, in patches, of the square windows the
            tower orders its tokens by (Muse Spark: ``pos_emb_height``); None: no reordering.
        scale: the config key ``s`` of positions scaled by ``s / w`` (SAM 3's ViT: each
            layer's grid is stretched to ``window_size``); None: no scaling.
        temporal: the frame index is a third axis (MiniMax-M3-VL): ``F = ⌊Dh/3⌋ // 2``
            frequencies per axis, ``[t | h | w]`` in half of the ``6F`` rotated channels, the
            rest of the head passes through.
        merge_per_grid: the merge size is a forward input per image or video (Video-LLaMA 3's
            ``merge_sizes``), taken from the request.
        merge: the merge size the tower passes to its position ids: ``None`` for the config's
            ``spatial_merge_size``, else this number.
        width: the config key that, divided by the heads, gives ``Dh`` when ``head_dim`` is
            absent (``embed_dim`` for Qwen2-VL, whose ``hidden_size`` is the language model's).
        fixed_grid: the grid is ``image_size / patch_size`` (Llama 4); ``grid_thw`` may be left
            out, and must be that grid if given.
        default_grid: a grid from ``image_size / patch_size`` when ``grid_thw`` is absent
            (DINOv3, which also takes other sizes).
        class_token: a class token at angle 0 ends (``last``: Llama 4) or starts (``first``:
            Inkling2) each grid's tokens; ``""``: none.
        learned_class_token: the tower puts a class token first whose angles are a trained
            parameter (MLCD's ``class_pos_emb``), not a position: it is not in the table, and
            ``meta.class_token`` says so.
        images_only: ``t`` must be 1 (the tower takes images, not videos).
        segments: what one attention segment of the packed tower is (``cu_seqlens``):
            ``frame`` (each frame of each grid alone, ``vision_utils.get_vision_cu_seqlens``
            as Qwen-VL and GLM-4V call it) or ``video`` (a video's frames together,
            ``merge_temporal=True``: Kimi-K2.5). A tower with a class token attends each
            grid with its class token.
        defaults: transformers' config-class defaults of the keys read.
        reference: the transformers class whose table this is.
    """

    family: RotaryFamily
    layout: Layout
    reference: str
    defaults: Mapping[str, Any]
    order: Order = "hw"
    merge: int | None = None
    width: str = "hidden_size"
    fixed_grid: bool = False
    default_grid: bool = False
    class_token: ClassToken = ""
    learned_class_token: bool = False
    images_only: bool = False
    offset: int = 0
    window: str | None = None
    scale: str | None = None
    temporal: bool = False
    merge_per_grid: bool = False
    segments: Literal["frame", "video"] = "frame"


def _axial(reference: str, hidden: int, heads: int, **extra: Any) -> VisionRule:
    """A Qwen-VL-style rule: axial frequencies, rows then columns, rotate_half, the config's
    merge size (``extra`` overrides any of these)."""
    defaults = {"hidden_size": hidden, "num_heads": heads, "spatial_merge_size": 2}
    defaults.update(extra.pop("defaults", {}))
    return VisionRule(
        family="axial",
        layout=extra.pop("layout", "half"),
        reference=reference,
        defaults={"rope_theta": 10000.0, **defaults},
        **extra,
    )


# Vision config model_type -> its rule. Defaults are transformers 5.24's config-class defaults.
_RULES: dict[str, VisionRule] = {
    "qwen2_vl_vision": _axial(
        "Qwen2VLVisionRotaryEmbedding", 3584, 16, width="embed_dim", defaults={"embed_dim": 1280}
    ),
    "qwen2_5_vl_vision": _axial("Qwen2_5_VLVisionRotaryEmbedding", 3584, 16),
    "qwen2_5_omni_vision_encoder": _axial("Qwen2_5OmniVisionRotaryEmbedding", 3584, 16),
    "qwen3_vl_vision": _axial("Qwen3VLVisionRotaryEmbedding", 1152, 16),
    "qwen3_vl_moe_vision": _axial("Qwen3VLMoeVisionRotaryEmbedding", 1152, 16),
    "qwen3_omni_moe_vision_encoder": _axial("Qwen3OmniMoeVisionRotaryEmbedding", 1152, 16),
    "qwen3_5_vision": _axial("Qwen3_5VisionRotaryEmbedding", 1152, 16),
    "qwen3_5_moe_vision": _axial("Qwen3_5MoeVisionRotaryEmbedding", 1152, 16),
    "qwen4_exp_vision": _axial("Qwen4ExpVisionRotaryEmbedding", 1152, 16),
    "glm4v_vision": _axial("Glm4vVisionRotaryEmbedding", 1536, 12),
    "glm4v_moe_vision": _axial("Glm4vMoeVisionRotaryEmbedding", 1536, 12),
    "glm_ocr_vision": _axial("GlmOcrVisionRotaryEmbedding", 1024, 16),
    "glm5_next_vision": _axial("Glm5NextVisionRotaryEmbedding", 1024, 16),
    "ernie4_5_vl_moe_vision": _axial("Ernie4_5_VLMoeVisionRotaryEmbedding", 1280, 16),
    "exaone4_5_vision": _axial("Exaone4_5_VisionRotaryEmbedding", 3584, 16),
    "cohere_compass_vision": _axial("CohereCompassVisionRotaryEmbedding", 1152, 16),
    "dots3_note_vision_encoder": _axial("Dots3NoteVisionRotaryEmbedding", 1536, 24),
    "lfm3_vl_vision": _axial(
        "Lfm3VlVisionRotaryEmbedding", 1024, 16, defaults={"rope_theta": 1000000.0}
    ),
    "paddleocr_vl_vision": _axial("PaddleOCRVisionRotaryEmbedding", 1152, 16, merge=1),
    "kimi_k25_vision": _axial(
        "Kimi_K25VisionRotaryEmbedding", 1152, 16, merge=1, order="wh_pairs", segments="video"
    ),
    "step3p5_vision": _axial(
        "Step3p7VisionRotaryEmbedding", 1536, 16, merge=1, order="wh", images_only=True
    ),
    "pixtral": VisionRule(
        family="pixtral",
        layout="half",
        reference="PixtralVisionRotaryEmbedding",
        defaults={"hidden_size": 1024, "num_heads": 16, "head_dim": 64, "rope_theta": 10000.0},
        merge=1,
        images_only=True,
    ),
    "llama4_vision_model": VisionRule(
        family="llama4",
        layout="interleaved",
        reference="Llama4VisionRotaryEmbedding",
        defaults={
            "hidden_size": 768,
            "num_heads": 16,
            "rope_theta": 10000.0,
            "image_size": 448,
            "patch_size": 14,
        },
        merge=1,
        fixed_grid=True,
        class_token="last",
        images_only=True,
    ),
    "dinov3_vit": VisionRule(
        family="dinov3",
        layout="half",
        reference="DINOv3ViTRopePositionEmbedding",
        defaults={
            "hidden_size": 384,
            "num_heads": 6,
            "rope_theta": 100.0,
            "image_size": 224,
            "patch_size": 16,
        },
        merge=1,
        default_grid=True,
        images_only=True,
    ),
}
# MLCD (DeepGlint-AI/mlcd-vit-*): Qwen-VL's axial frequencies over the patch grid row-major
# (no merge), any grid (no learned absolute table to resize), images only; its class token,
# first, is rotated by the trained class_pos_emb.
_RULES["mlcd_vision_model"] = _axial(
    "MLCDRotaryEmbedding",
    1664,
    16,
    merge=1,
    default_grid=True,
    learned_class_token=True,
    images_only=True,
    defaults={"image_size": 336, "patch_size": 14},
)
# Muse Spark and Muse Glimmer: axial frequencies turned by (column + 1, row + 1) (the tower
# flips get_vision_position_ids' (h, w) and adds 1), rotate_half, ids made with merge size 1
# (the merge is a pixel shuffle after the blocks), tokens in the tower's window order
# (get_vision_window_index over pos_emb_height-patch windows).
for _type, _module in (
    ("muse_spark_vision", "MuseSparkVisionRotaryEmbedding"),
    ("muse_glimmer_vision", "MuseGlimmerVisionRotaryEmbedding"),
):
    _RULES[_type] = _axial(
        _module,
        1536,
        16,
        merge=1,
        order="wh",
        offset=1,
        window="pos_emb_height",
        defaults={"pos_emb_height": 32},
    )
# Inkling2: a class token first in each image at (0, 0) (angle 0), patches at (row + 1,
# column + 1) in spatial-merge block order; (w | h) angles, each repeated for an interleaved pair.
_RULES["inkling2_vision"] = _axial(
    "Inkling2VisionRotaryEmbedding",
    1024,
    16,
    layout="interleaved",
    order="wh",
    offset=1,
    class_token="first",
)
# MiniMax-M3-VL: get_vision_position_ids(include_temporal=True): (t, h, w) in spatial-merge
# block order, each axis turning F = ⌊Dh/3⌋ // 2 frequencies; rotate_half over 6F channels.
_RULES["minimax_m3_vl_vision"] = _axial("MiniMaxM3VLVisionRotaryEmbedding", 1280, 16, temporal=True)
# Video-LLaMA 3: Qwen-VL's axial table with a merge size per image or video (merge_sizes).
_RULES["video_llama_3_vision"] = _axial(
    "VideoLlama3VisionRotaryEmbedding", 768, 12, merge_per_grid=True
)
# Gemma 4: the image processor's (x, y) patch positions row-major; columns rotate the first
# half of the head, rows the second, each half rotate_half on its own (H-H-W-W in the module's
# names, whose "h" is the processor's x).
_RULES["gemma4_vision"] = _axial(
    "Gemma4VisionRotaryEmbedding",
    768,
    12,
    merge=1,
    order="wh",
    layout="split",
    images_only=True,
    defaults={"head_dim": 64, "rope_theta": 100.0},
)
# SAM 3's ViT: each layer's grid (its window_size windows, or image_size / patch_size for the
# global layers) row-major, positions (column, row) scaled by window_size / w, interleaved.
_RULES["sam3_vit_model"] = _axial(
    "Sam3ViTRotaryEmbedding",
    1024,
    16,
    merge=1,
    order="wh",
    layout="interleaved",
    scale="window_size",
    default_grid=True,
    images_only=True,
    defaults={"window_size": 24, "image_size": 1008, "patch_size": 14},
)
# Sapiens2 copies DINOv3's module (Sapiens2RopePositionEmbedding) with other defaults.
_RULES["sapiens2"] = dataclasses.replace(
    _RULES["dinov3_vit"],
    reference="Sapiens2RopePositionEmbedding",
    defaults={**_RULES["dinov3_vit"].defaults, "hidden_size": 1024, "num_heads": 16},
)


# Other model_type spellings transformers maps to the same vision config class (the hub files
# of DeepGlint-AI say "mlcd"): read as that class's model_type.
_ALIASES: dict[str, str] = {"mlcd": "mlcd_vision_model"}

# Vision towers without a rotary embedding, and what they use instead (a 422 says so).
_NON_ROTARY: dict[str, str] = {
    "siglip_vision_model": "learned absolute position embeddings (SigLIP)",
    "siglip2_vision_model": "learned absolute position embeddings resized to each image (SigLIP 2)",
    "clip_vision_model": "learned absolute position embeddings (CLIP)",
    "idefics3_vision": "learned absolute position embeddings bucketed to each image (Idefics3)",
    "smolvlm_vision": "learned absolute position embeddings bucketed to each image (SmolVLM)",
    "mllama_vision_model": "learned absolute and per-tile position embeddings (Mllama)",
    "internvl_vision": "learned absolute position embeddings (InternViT)",
    "gemma3n_vision": "a MobileNet-v5 convolutional tower (no position embeddings)",
}


#: Vision config ``model_type`` -> its rule.
VISION_RULES: Mapping[str, VisionRule] = MappingProxyType(_RULES)
#: Other ``model_type`` spellings -> the vision config class's own.
VISION_ALIASES: Mapping[str, str] = MappingProxyType(_ALIASES)
#: Vision config ``model_type`` without a rotary embedding -> what it uses instead.
NON_ROTARY: Mapping[str, str] = MappingProxyType(_NON_ROTARY)


def vision_rope_rule(model_type: str | None) -> VisionRule | None:
    """The rule of the vision tower ``model_type``, or None where it has no rotary embedding
    posenc computes."""
    return VISION_RULES.get(model_type)  # type: ignore[arg-type]


def vision_rope_alias(model_type: str) -> str | None:
    """The vision config class's own ``model_type`` where ``model_type`` is another spelling of
    it (DeepGlint-AI's ``mlcd``), else None."""
    return VISION_ALIASES.get(model_type)


def non_rotary_use(model_type: str | None) -> str | None:
    """What the vision tower ``model_type`` uses in place of a rotary embedding, where posenc
    knows it has none, else None."""
    return NON_ROTARY.get(model_type)  # type: ignore[arg-type]
