"""2-D (axial) rotary tables of vision encoders, read from a model's config.json.

A vision tower cuts an image (or each frame of a video) into a ``t × h × w`` grid of patches and
rotates each patch token's queries and keys by angles of its row and its column (Su et al.,
2021, "RoFormer", applied per axis: Wang et al., 2024, "Qwen2-VL", §2.1; Mistral AI, 2024,
"Pixtral 12B"; Siméoni et al., 2025, "DINOv3"). The reference implementations are the vision
rotary modules of transformers 5 (``Qwen2VLVisionRotaryEmbedding`` and its copies,
``PixtralVisionRotaryEmbedding``, ``Llama4VisionRotaryEmbedding``,
``DINOv3ViTRopePositionEmbedding``) fed with the position ids their towers make
(``transformers.vision_utils.get_vision_position_ids``).

Four families of frequencies, each in float64 here and cast once at the end:

- ``axial`` (Qwen-VL, GLM-4V, ERNIE-4.5-VL, Kimi-K2.5, Step3, MLCD...): ``s = Dh/2``,
  ``f_i = θ^(−2i/s)`` for ``i < s/2``; the row turns one copy of the ``Dh/4`` frequencies, the
  column the other. ``order`` says how the two copies fill half a head: ``hw`` (rows then
  columns), ``wh`` (columns then rows, Step3) or ``wh_pairs`` (``w0, h0, w1, h1 …``, Kimi-K2.5).
- ``pixtral``: ``f_i = θ^(−2i/Dh)`` for ``i < Dh/2``; rows turn the even ones, columns the odd
  ones (``[h·f_0, h·f_2, … | w·f_1, w·f_3, …]``).
- ``llama4``: the ``Dh/4`` axial frequencies turned by ``column + 1`` then ``row + 1``, pairs
  interleaved; the class token, last, at angle 0.
- ``dinov3``: ``f_i = θ^(−4i/Dh)``, angles ``2π·c·f_i`` of the patch centre ``c = 2(k + ½)/n − 1``
  of row ``k`` of ``n`` (then column), as the model computes them in eval mode (no jitter).

Tokens come in the order the tower computes its table: each grid's ``t`` frames one after the
other; in a frame, ``m × m`` blocks row-major and row-major inside a block, ``m`` the merge size
the tower passes to its position ids (the config's ``spatial_merge_size`` for Qwen-VL and GLM-4V,
1 where the tower merges after its blocks: PaddleOCR-VL, Kimi-K2.5, Step3). ``position_ids`` are
each token's ``(row, column)``, ``(−1, −1)`` for a class token. MLCD's class token, whose
angles are a trained parameter (``class_pos_emb``) rather than a position, is left out.

Notation used for tensor shapes: ``N`` tokens of all the grids, ``Dh`` head dimension,
``F`` frequencies of one axis.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from posenc import kinds
from posenc.blocks import TableBlocks, write_pair
from posenc.device import resolve_dtype
from posenc.errors import InvalidArgument
from posenc.hf.families import FAMILIES
from posenc.hf.reader import vision_part

__all__ = [
    "VISION_ALIASES",
    "VISION_ROPE",
    "VISION_RULES",
    "VisionRopeSpec",
    "VisionRule",
    "vision_cu_seqlens",
    "vision_position_ids",
    "vision_rope_blocks",
    "vision_rope_cos_sin",
    "vision_rope_spec",
    "vision_tower",
]

Family = Literal["axial", "pixtral", "llama4", "dinov3"]
Order = Literal["hw", "wh", "wh_pairs"]
Layout = Literal["half", "interleaved"]


@dataclass(frozen=True)
class VisionRule:
    """How one vision config ``model_type`` of transformers computes its rotary table.

    Attributes:
        family: ``axial``, ``pixtral``, ``llama4`` or ``dinov3`` (module docstring).
        layout: ``half`` (rotate_half) or ``interleaved`` (adjacent pairs).
        order: ``axial`` only: how rows and columns fill half a head.
        merge: the merge size the tower passes to its position ids: ``None`` for the config's
            ``spatial_merge_size``, else this number.
        width: the config key that, divided by the heads, gives ``Dh`` when ``head_dim`` is
            absent (``embed_dim`` for Qwen2-VL, whose ``hidden_size`` is the language model's).
        fixed_grid: the grid is ``image_size / patch_size`` (Llama 4); ``grid_thw`` may be left
            out, and must be that grid if given.
        default_grid: a grid from ``image_size / patch_size`` when ``grid_thw`` is absent
            (DINOv3, which also takes other sizes).
        class_token: a class token at angle 0 ends each grid's tokens (Llama 4).
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

    family: Family
    layout: Layout
    reference: str
    defaults: Mapping[str, Any]
    order: Order = "hw"
    merge: int | None = None
    width: str = "hidden_size"
    fixed_grid: bool = False
    default_grid: bool = False
    class_token: bool = False
    learned_class_token: bool = False
    images_only: bool = False
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
VISION_RULES: dict[str, VisionRule] = {
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
        class_token=True,
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
VISION_RULES["mlcd_vision_model"] = _axial(
    "MLCDRotaryEmbedding",
    1664,
    16,
    merge=1,
    default_grid=True,
    learned_class_token=True,
    images_only=True,
    defaults={"image_size": 336, "patch_size": 14},
)
# Sapiens2 copies DINOv3's module (Sapiens2RopePositionEmbedding) with other defaults.
VISION_RULES["sapiens2"] = dataclasses.replace(
    VISION_RULES["dinov3_vit"],
    reference="Sapiens2RopePositionEmbedding",
    defaults={**VISION_RULES["dinov3_vit"].defaults, "hidden_size": 1024, "num_heads": 16},
)

# Top-level model_type -> the model_type of its vision config (where the vision config of a
# published file names none, or names the top-level type as Qwen2-VL's once did): each record's
# vision_tower in posenc.hf.families.
TOP_LEVEL_VISION: dict[str, str] = {
    t: f.vision_tower for t, f in FAMILIES.items() if f.vision_tower is not None
}

# Other model_type spellings transformers maps to the same vision config class (the hub files
# of DeepGlint-AI say "mlcd"): read as that class's model_type.
VISION_ALIASES: dict[str, str] = {"mlcd": "mlcd_vision_model"}

# Vision towers without a rotary embedding, and what they use instead (a 422 says so).
NON_ROTARY: dict[str, str] = {
    "siglip_vision_model": "learned absolute position embeddings (SigLIP)",
    "siglip2_vision_model": "learned absolute position embeddings resized to each image (SigLIP 2)",
    "clip_vision_model": "learned absolute position embeddings (CLIP)",
    "idefics3_vision": "learned absolute position embeddings bucketed to each image (Idefics3)",
    "smolvlm_vision": "learned absolute position embeddings bucketed to each image (SmolVLM)",
    "mllama_vision_model": "learned absolute and per-tile position embeddings (Mllama)",
    "internvl_vision": "learned absolute position embeddings (InternViT)",
    "gemma3n_vision": "a MobileNet-v5 convolutional tower (no position embeddings)",
}

_MAX = kinds.INT_BOUND
VISION_ROPE_PATH = "/v1/encodings/vision-rope"


@dataclass(frozen=True)
class VisionRopeSpec:
    """What a config says about its vision tower's rotary table, with the grids to cover.

    Attributes:
        model_type: the vision config's ``model_type`` (transformers' name).
        rule: its :class:`VisionRule`.
        head_dim: ``Dh``.
        rope_theta: ``θ``.
        merge: the merge size of the position ids.
        grids: the ``[t, h, w]`` grids, in order.
        defaulted: the config keys that took transformers' class default.
    """

    model_type: str
    rule: VisionRule
    head_dim: int
    rope_theta: float
    merge: int
    grids: tuple[tuple[int, int, int], ...]
    defaulted: tuple[str, ...] = ()

    @property
    def layout(self) -> Layout:
        return self.rule.layout

    @property
    def tokens_per_grid(self) -> list[int]:
        """Tokens of each grid: ``t·h·w`` (+1 with a class token)."""
        extra = 1 if self.rule.class_token else 0
        return [t * h * w + extra for t, h, w in self.grids]

    @property
    def tokens(self) -> int:
        """``N``: the rows of the tables (numbers only)."""
        return sum(self.tokens_per_grid)


def _vision_config(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, str]:
    """``(vision config, its model_type, where it was found)``."""
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a config.json), got {type(config).__name__}",
            field="config",
        )
    top = config.get("model_type")
    found = vision_part(config)
    if found is not None:
        holder, where, outer = found
        own = holder.get("model_type")
        own = VISION_ALIASES.get(str(own), own)
        if own is None or (own in (outer, top) and own not in VISION_RULES):
            # no model_type, or the top-level one (Qwen2-VL's files): the type transformers
            # gives the vision config of this model
            own = TOP_LEVEL_VISION.get(str(outer), TOP_LEVEL_VISION.get(str(top), own))
        return holder, str(own), where
    if top in TOP_LEVEL_VISION and top not in VISION_RULES:
        # a whole config without vision_config: transformers builds the default one
        return {}, TOP_LEVEL_VISION[str(top)], "config.vision_config"
    return config, VISION_ALIASES.get(str(top), str(top)), "config"


def _no_rotary(model_type: str, where: str) -> InvalidArgument:
    uses = NON_ROTARY.get(model_type)
    known = ", ".join(sorted(set(VISION_RULES) | set(TOP_LEVEL_VISION)))
    if uses is not None:
        message = (
            f"the vision tower of this config ({where}, model_type {model_type!r}) has no "
            f"rotary embedding: it uses {uses}"
        )
    elif model_type in ("None", ""):
        message = (
            f"{where} names no model_type, so its vision tower is unknown; vision-rope reads "
            f"the vision towers with a rotary embedding: {known}"
        )
    else:
        message = (
            f"the vision tower of model_type {model_type!r} ({where}) has no rotary embedding "
            f"that vision-rope computes (it uses another position scheme); the model types "
            f"with one are: {known}"
        )
    return InvalidArgument(message, field="config.model_type")


def _int_key(
    vision: Mapping[str, Any], keys: Sequence[str], rule: VisionRule, where: str, used: list[str]
) -> int:
    for key in keys:
        value = vision.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX:
                raise InvalidArgument(
                    f"{where}.{key} must be an int in [1, 2**53], got {value!r}",
                    field=f"{where}.{key}",
                )
            return value
    used.append(f"{where}.{keys[0]}")
    return int(rule.defaults[keys[-1] if keys[-1] in rule.defaults else keys[0]])


def _theta(vision: Mapping[str, Any], rule: VisionRule, where: str, used: list[str]) -> float:
    params = vision.get("rope_parameters") or vision.get("rope_scaling")
    candidates = []
    if isinstance(params, Mapping):
        candidates.append(("rope_parameters.rope_theta", params.get("rope_theta")))
    candidates.append(("rope_theta", vision.get("rope_theta")))
    for key, value in candidates:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise InvalidArgument(
                f"{where}.{key} must be a number > 0, got {value!r}", field=f"{where}.{key}"
            )
        if not math.isfinite(value):
            raise InvalidArgument(
                f"{where}.{key} must be finite, got {value!r}", field=f"{where}.{key}"
            )
        return float(value)
    used.append(f"{where}.rope_theta")
    return float(rule.defaults["rope_theta"])


def _grids(
    grid_thw: Any, rule: VisionRule, merge: int, fixed: tuple[int, int, int] | None
) -> tuple[tuple[int, int, int], ...]:
    if grid_thw is None:
        if fixed is None:
            raise InvalidArgument(
                "grid_thw is required for this model: the [t, h, w] of each image or video in "
                "patches, as its image processor reports them",
                field="grid_thw",
            )
        return (fixed,)
    rows = grid_thw.tolist() if isinstance(grid_thw, Tensor) else list(grid_thw)
    if not rows:
        raise InvalidArgument("grid_thw must hold at least one [t, h, w]", field="grid_thw")
    out = []
    for i, row in enumerate(rows):
        items = list(row)
        if len(items) != 3 or not all(
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= _MAX for v in items
        ):
            raise InvalidArgument(
                f"grid_thw[{i}] must be three integers [t, h, w], each in [1, 2**53], got "
                f"{items!r}",
                field="grid_thw",
            )
        t, h, w = items
        if rule.images_only and t != 1:
            raise InvalidArgument(
                f"grid_thw[{i}] = {items}: this vision tower takes images, so t must be 1",
                field="grid_thw",
            )
        if h % merge or w % merge:
            raise InvalidArgument(
                f"grid_thw[{i}] = {items}: h and w must be multiples of the merge size {merge} "
                f"the vision tower uses, got h {h} and w {w}",
                field="grid_thw",
            )
        if rule.fixed_grid and fixed is not None and (t, h, w) != fixed:
            raise InvalidArgument(
                f"grid_thw[{i}] = {items}: this model's grid is fixed by its config "
                f"(image_size / patch_size) to {list(fixed)}",
                field="grid_thw",
            )
        out.append((t, h, w))
    return tuple(out)


def vision_rope_spec(
    config: Mapping[str, Any], grid_thw: Any = None, *, need_grid: bool = True
) -> VisionRopeSpec:
    """Read a config's vision tower and check the grids against it (numbers only).

    Args:
        config: a whole ``config.json`` (its ``vision_config``, or ``thinker_config``'s for the
            Omni models), or a vision config sent alone.
        grid_thw: ``[t, h, w]`` rows, or None where the config fixes the grid.
        need_grid: False: no grid_thw is no grids (the tower described, no table).

    Raises:
        InvalidArgument: a tower without a rotary embedding (the message says what it uses),
            a bad key (``field`` names it), a grid whose h or w is not a multiple of the merge
            size (``field`` ``grid_thw``).
    """
    vision, model_type, where = _vision_config(config)
    rule = VISION_RULES.get(model_type)
    if rule is None:
        raise _no_rotary(model_type, where)
    used: list[str] = []
    heads = _int_key(vision, ("num_heads", "num_attention_heads"), rule, where, used)
    head_dim: int
    if vision.get("head_dim") is not None:
        head_dim = _int_key(vision, ("head_dim",), rule, where, used)
    else:
        width = _int_key(vision, (rule.width,), rule, where, used)
        head_dim = width // heads
    if head_dim % 4:
        raise InvalidArgument(
            f"{where}: the head dimension {head_dim} must be a multiple of 4 (two axes of "
            "rotate-half pairs)",
            field=f"{where}.num_heads",
        )
    theta = _theta(vision, rule, where, used)
    merge = rule.merge
    if merge is None:
        merge = _int_key(vision, ("spatial_merge_size",), rule, where, used)
    fixed = None
    if rule.fixed_grid or rule.default_grid:
        image = vision.get("image_size", rule.defaults["image_size"])
        patch = vision.get("patch_size", rule.defaults["patch_size"])
        if isinstance(image, list | tuple):
            image_h, image_w = image
        else:
            image_h = image_w = image
        if isinstance(patch, list | tuple):
            patch_h, patch_w = patch
        else:
            patch_h = patch_w = patch
        for name, value in (("image_size", image_h), ("patch_size", patch_h)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(
                    f"{where}.{name} must be a positive int, got {value!r}",
                    field=f"{where}.{name}",
                )
        if rule.family == "llama4":
            side = image_h // patch_h
            fixed = (1, side, side)
        else:
            fixed = (1, image_h // patch_h, image_w // patch_w)
    return VisionRopeSpec(
        model_type=model_type,
        rule=rule,
        head_dim=head_dim,
        rope_theta=theta,
        merge=merge,
        grids=()
        if grid_thw is None and fixed is None and not need_grid
        else (_grids(grid_thw, rule, merge, fixed)),
        defaulted=tuple(used),
    )


def is_vision_config_alone(config: Mapping[str, Any]) -> bool:
    """Whether ``config`` is a vision tower's own config sent alone (Pixtral's, MLCD's, a
    Qwen-VL ``vision_config``, SigLIP's), not a whole model's file that holds one: a tower of
    :data:`VISION_RULES` or of :data:`NON_ROTARY`."""
    if not isinstance(config, Mapping):
        return False
    try:
        _vision, model_type, where = _vision_config(config)
    except InvalidArgument:
        return False
    return where == "config" and (model_type in VISION_RULES or model_type in NON_ROTARY)


def vision_tower(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``POST /v1/configs/positions`` says of a config's vision tower: None without a
    vision config; else its ``model_type`` and ``rotary`` (false: ``uses`` says what it uses
    instead), and for a rotary tower the numbers of :func:`vision_rope_spec`.

    Raises:
        InvalidArgument: a rotary tower's key that cannot be read.
    """
    if not isinstance(config, Mapping):
        return None
    _vision, model_type, where = _vision_config(config)
    if where == "config" and model_type not in VISION_RULES and model_type not in NON_ROTARY:
        return None  # no vision config, and not one sent alone
    rule = VISION_RULES.get(model_type)
    if rule is None:
        return {"model_type": model_type, "rotary": False, "uses": NON_ROTARY.get(model_type)}
    spec = vision_rope_spec(config, need_grid=False)
    return {
        "model_type": model_type,
        "rotary": True,
        "endpoint": VISION_ROPE_PATH,
        "head_dim": spec.head_dim,
        "rope_theta": spec.rope_theta,
        "layout": spec.layout,
        "merge_size": spec.merge,
        "grid": list(spec.grids[0]) if spec.grids else None,
        "reference": rule.reference,
        "class_token": _class_token(rule),
        "defaulted": list(spec.defaulted),
    }


def _class_token(rule: VisionRule) -> str | None:
    """What ``meta.class_token`` says of the tower's class token (None: none is rotated)."""
    if rule.class_token:
        return "last row of each grid, at angle 0, position_ids (-1, -1)"
    if rule.learned_class_token:
        return (
            "the tower puts a class token first, rotated by its trained class_pos_emb (weights, "
            "not a position): not in these tables"
        )
    return None


def _token_coordinates(
    spec: VisionRopeSpec, start: int, stop: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Rows, columns, and the grid's h and w, ``(N,)`` int64 each, of tokens ``start … stop−1``
    (row and column −1 for a class token)."""
    counts = torch.tensor(spec.tokens_per_grid, dtype=torch.int64)  # (G,)
    ends = torch.cumsum(counts, 0)  # (G,)
    index = torch.arange(start, stop, dtype=torch.int64)  # (N,)
    grid = torch.searchsorted(ends, index, right=True)  # (N,)
    local = index - (ends - counts)[grid]  # (N,) index inside its grid
    sizes = torch.tensor([[h, w] for _, h, w in spec.grids], dtype=torch.int64)  # (G, 2)
    h, w = sizes[grid, 0], sizes[grid, 1]  # (N,)
    m = spec.merge
    within = local % (h * w)  # (N,) index inside its frame
    blocks_w = w // m
    in_col = within % m
    in_row = (within // m) % m
    block_col = (within // (m * m)) % blocks_w
    block_row = within // (m * m * blocks_w)
    row = block_row * m + in_row
    col = block_col * m + in_col
    if spec.rule.class_token:
        cls = local == h * w  # the last token of its grid
        row = torch.where(cls, -1, row)
        col = torch.where(cls, -1, col)
    return row, col, h, w


def vision_cu_seqlens(spec: VisionRopeSpec) -> list[int]:
    """The packed tower's attention segments, as flash-attn's varlen calls take them: 0, then
    the end of each segment (``spec.rule.segments``: each frame of each grid, or each grid), so
    the tokens of all the grids attend as each image or frame would alone. Numbers only: no
    tensor is made."""
    ends = [0]
    for (t, h, w), tokens in zip(spec.grids, spec.tokens_per_grid, strict=True):
        whole = spec.rule.class_token or spec.rule.segments == "video"
        for n in [tokens] if whole else [h * w] * t:
            ends.append(ends[-1] + n)
    return ends


def vision_position_ids(spec: VisionRopeSpec) -> Tensor:
    """``(N, 2)`` int64: each token's ``(row, column)``, ``(−1, −1)`` for a class token."""
    row, col, _, _ = _token_coordinates(spec, 0, spec.tokens)
    return torch.stack((row, col), dim=-1)


def _frequencies(spec: VisionRopeSpec) -> tuple[Tensor, Tensor]:
    """float64 frequencies ``(F,)`` turned by the row and by the column."""
    d = spec.head_dim
    theta = spec.rope_theta
    family = spec.rule.family
    if family == "pixtral":
        inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (Dh/2,)
        return inv[0::2], inv[1::2]
    if family == "dinov3":
        inv = theta ** (-torch.arange(0, d // 4, dtype=torch.float64) * 4 / d)  # (Dh/4,)
        return inv, inv
    s = d // 2
    inv = theta ** (-torch.arange(0, s, 2, dtype=torch.float64) / s)  # (Dh/4,)
    return inv, inv


def _half_angles(spec: VisionRopeSpec, start: int, stop: int) -> Tensor:
    """float64 angles ``(N, Dh/2)`` of tokens ``start … stop−1``, half a head in the model's
    order (the other half, or the other slot of each pair, repeats them)."""
    row, col, h, w = _token_coordinates(spec, start, stop)
    f_h, f_w = _frequencies(spec)
    family = spec.rule.family
    if family == "dinov3":
        # patch centres in [-1, 1], times 2π (DINOv3ViTRopePositionEmbedding, eval mode)
        y = 2.0 * (row.to(torch.float64) + 0.5) / h - 1.0
        x = 2.0 * (col.to(torch.float64) + 0.5) / w - 1.0
        return torch.cat((2 * math.pi * y[:, None] * f_h, 2 * math.pi * x[:, None] * f_w), -1)
    if family == "llama4":
        cls = row < 0
        y = torch.where(cls, 0, row + 1).to(torch.float64)
        x = torch.where(cls, 0, col + 1).to(torch.float64)
        return torch.cat((x[:, None] * f_w, y[:, None] * f_h), dim=-1)
    y_angles = row.to(torch.float64)[:, None] * f_h  # (N, F)
    x_angles = col.to(torch.float64)[:, None] * f_w  # (N, F)
    if family == "pixtral" or spec.rule.order == "hw":
        return torch.cat((y_angles, x_angles), dim=-1)
    if spec.rule.order == "wh":
        return torch.cat((x_angles, y_angles), dim=-1)
    return torch.stack((x_angles, y_angles), dim=-1).flatten(1)  # w0, h0, w1, h1 ...


def _fill(spec: VisionRopeSpec, which: str, start: int, stop: int, out: Tensor) -> None:
    """Rows ``start … stop−1`` of ``cos`` or ``sin`` into ``out`` ``(N, Dh)``, cast once."""
    angles = _half_angles(spec, start, stop).to(out.device)  # (N, Dh/2)
    values = angles.cos() if which == "cos" else angles.sin()
    write_pair(out, values, values, spec.layout == "interleaved")


def vision_rope_cos_sin(
    spec: VisionRopeSpec,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """The tower's ``cos`` and ``sin`` ``(N, Dh)`` in the layout it applies them.

    Angles in float64 and one cast to ``dtype``. ``half``: ``cat(v, v)`` of the half-head
    values ``v``; ``interleaved``: each value twice in place.
    """
    dev = torch.device("cpu") if device is None else torch.device(device)
    shape = (spec.tokens, spec.head_dim)
    cos = torch.empty(shape, dtype=dtype, device=dev)
    sin = torch.empty(shape, dtype=dtype, device=dev)
    _fill(spec, "cos", 0, spec.tokens, cos)
    _fill(spec, "sin", 0, spec.tokens, sin)
    return cos, sin


def vision_rope_blocks(
    spec: VisionRopeSpec,
    *,
    which: str,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TableBlocks:
    """``cos`` or ``sin`` ``(N, Dh)`` of :func:`vision_rope_cos_sin` in row blocks (the same
    arithmetic on each block's tokens)."""
    if which not in ("cos", "sin"):
        raise InvalidArgument(f"which must be cos or sin, got {which!r}", field="which")
    dev = torch.device("cpu") if device is None else torch.device(device)

    def fill(start: int, stop: int, out: Tensor) -> None:
        _fill(spec, which, start, stop, out)

    return TableBlocks(which, (spec.tokens, spec.head_dim), resolve_dtype(dtype), fill, dev)


def _position_blocks(spec: VisionRopeSpec, device: torch.device) -> TableBlocks:
    def fill(start: int, stop: int, out: Tensor) -> None:
        row, col, _, _ = _token_coordinates(spec, start, stop)
        out[:, 0].copy_(row)
        out[:, 1].copy_(col)

    return TableBlocks("position_ids", (spec.tokens, 2), torch.int64, fill, device)


# ---------------------------------------------------------------------------------------------
# The vision-rope endpoint kind (posenc.kinds)
# ---------------------------------------------------------------------------------------------

# Qwen2.5-VL-7B-Instruct's vision_config, the keys this kind reads (and its model_type).
_EXAMPLE_CONFIG = {
    "model_type": "qwen2_5_vl",
    "vision_config": {
        "hidden_size": 1280,
        "num_heads": 16,
        "spatial_merge_size": 2,
        "model_type": "qwen2_5_vl",
    },
}


def _spec(p: Mapping[str, Any]) -> VisionRopeSpec:
    return vision_rope_spec(p["config"], p["grid_thw"])


def _complete(p: dict[str, Any], _models: Any) -> dict[str, Any]:
    """The config read and the grids checked (a 422 before any tensor); the spec, not the raw
    config, is what the tables depend on."""
    spec = _spec(p)
    return {**p, "grid_thw": [list(g) for g in spec.grids]}


def _shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    spec = _spec(p)
    n, d = spec.tokens, spec.head_dim
    return {"cos": (n, d), "sin": (n, d), "position_ids": (n, 2)}


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    spec = _spec(p)
    cos, sin = vision_rope_cos_sin(spec, device=ctx.device, dtype=ctx.dtype)
    return {"cos": cos, "sin": sin, "position_ids": vision_position_ids(spec).to(ctx.device)}


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    spec = _spec(p)
    return {
        "cos": vision_rope_blocks(spec, which="cos", device=ctx.device, dtype=ctx.dtype),
        "sin": vision_rope_blocks(spec, which="sin", device=ctx.device, dtype=ctx.dtype),
        "position_ids": _position_blocks(spec, ctx.device),
    }


def _segments(spec: VisionRopeSpec) -> dict[str, Any]:
    """``cu_seqlens`` and ``max_seqlen`` of the packed grids, when there are few enough segments
    to list (a grid of 2**20 frames is answered without them)."""
    frames = sum(1 if spec.rule.segments == "video" else t for t, _, _ in spec.grids)
    if frames > _MAX_LISTED_SEGMENTS:
        return {"cu_seqlens": None, "max_seqlen": None, "segments": spec.rule.segments}
    cu = vision_cu_seqlens(spec)
    longest = max((b - a for a, b in itertools.pairwise(cu)), default=0)
    return {"cu_seqlens": cu, "max_seqlen": longest, "segments": spec.rule.segments}


# meta lists cu_seqlens up to this many segments (one per frame)
_MAX_LISTED_SEGMENTS = 65536


def _meta(p: Mapping[str, Any]) -> dict[str, Any]:
    spec = _spec(p)
    return {
        "kind": "vision_rope",
        "model_type": spec.model_type,
        "head_dim": spec.head_dim,
        "rope_theta": spec.rope_theta,
        "layout": spec.layout,
        "grids": [list(g) for g in spec.grids],
        "merge_size": spec.merge,
        "tokens": spec.tokens,
        **_segments(spec),
        "reference": spec.rule.reference,
        "class_token": _class_token(spec.rule),
        "defaulted": list(spec.defaulted),
        "dtype": p["dtype"],
    }


VISION_ROPE: kinds.Kind = kinds.Kind(
    name="vision_rope",
    path=VISION_ROPE_PATH,
    tag="encodings",
    summary="Vision-tower 2-D rotary tables (Qwen-VL, GLM-4V, Pixtral, Llama 4, DINOv3...)",
    description="The 2-D (axial) rotary cos/sin of a vision encoder, as its transformers rotary "
    "module computes them for the position ids its tower makes from `grid_thw`: one row per "
    "patch token of all the grids, in the tower's order (spatial-merge blocks for Qwen-VL, "
    "before Qwen2.5-VL's window reordering), laid out as the model applies them "
    "(`meta.layout`). `position_ids` gives each token's (row, column), (−1, −1) for Llama 4's "
    "class token. `config` is the model's config.json (its `vision_config`, under "
    "`thinker_config` for the Omni models) or the vision config alone.",
    fields=(
        kinds.FieldSpec(
            "config",
            "object",
            "the model's config.json (whole, or its vision config alone): the vision config's "
            "model_type picks the rule; head_dim (or hidden_size / num_heads), rope_theta, "
            "spatial_merge_size, image_size and patch_size are read",
        ),
        kinds.FieldSpec(
            "grid_thw",
            "int_rows",
            "[t, h, w] of each image or video, in patches, as the image processor reports "
            "them; h and w multiples of the merge size the tower uses. Optional where the "
            "config fixes the grid (Llama 4; DINOv3 defaults to image_size / patch_size)",
            None,
            minimum=1,
            length=3,
        ),
    ),
    tensors=(
        kinds.TensorSpec("cos", ("N", "Dh")),
        kinds.TensorSpec("sin", ("N", "Dh")),
        kinds.TensorSpec("position_ids", ("N", "2"), integer=True),
    ),
    shapes=_shapes,
    compute=_compute,
    meta=_meta,
    blocks=_blocks,
    row_elements=lambda p: _spec(p).head_dim,
    complete=_complete,
    examples=({"config": _EXAMPLE_CONFIG, "grid_thw": [[1, 4, 6]]},),
)
"""The vision-rope endpoint kind (see :mod:`posenc.kinds`)."""
