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

The ``axial`` rules also take the towers with their own id rules: 1-based positions (Muse
Spark and Muse Glimmer turn ``(column + 1, row + 1)``; Inkling2 ``(row + 1, column + 1)`` with a
class token first at angle 0), tokens in ``pos_emb_height``-patch windows (Muse), a frame axis
(MiniMax-M3-VL: ``F = ⌊Dh/3⌋ // 2`` frequencies each for the frame, the row and the column, over
``6F`` of the head), a merge size per grid (Video-LLaMA 3's ``merge_sizes``), the ``split``
layout (Gemma 4: columns rotate the first half of the head and rows the second, each half
rotate_half on its own) and positions scaled by ``window_size / w`` (SAM 3's ViT).

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

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.core import kinds
from posenc.core.blocks import TableBlocks, write_pair
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.engines.registry import engine_names
from posenc.engines.timm import ENGINE as TIMM
from posenc.facts.config_parts import vision_part
from posenc.facts.families import FAMILIES
from posenc.facts.vision_rope_towers import (
    VISION_ALIASES,
    VISION_RULES,
    Layout,
    VisionRule,
    non_rotary_use,
    vision_rope_alias,
    vision_rope_rule,
)
from posenc.vision.timm import (
    TIMM_MODULES,
    TimmRopeSpec,
    timm_position_ids,
    timm_rope_blocks,
    timm_rope_cos_sin,
    timm_rope_spec,
)

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

# Top-level model_type -> the model_type of its vision config (where the vision config of a
# published file names none, or names the top-level type as Qwen2-VL's once did): each record's
# vision_tower in posenc.facts.families.
TOP_LEVEL_VISION: dict[str, str] = {
    t: f.vision_tower for t, f in FAMILIES.items() if f.vision_tower is not None
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
    merges: tuple[int, ...] = ()
    window: int | None = None
    scale: float | None = None

    @property
    def layout(self) -> Layout:
        return self.rule.layout

    @property
    def grid_merges(self) -> tuple[int, ...]:
        """The merge size of each grid's position ids."""
        return self.merges or (self.merge,) * len(self.grids)

    @property
    def frequencies(self) -> int:
        """``F``: the frequencies each axis turns."""
        if self.rule.family == "pixtral":
            return self.head_dim // 4
        if self.rule.temporal:
            return (self.head_dim // 3) // 2
        return self.head_dim // 4

    @property
    def rotary_dim(self) -> int:
        """The columns of the tables: ``Dh``, or ``6F`` for a 3-D partial rotary."""
        return 6 * self.frequencies if self.rule.temporal else self.head_dim

    @property
    def axes(self) -> int:
        """Columns of ``position_ids``: 2 ``(row, column)``, 3 ``(frame, row, column)``."""
        return 3 if self.rule.temporal else 2

    @property
    def tokens_per_grid(self) -> list[int]:
        """Tokens of each grid: ``t·h·w`` (+1 with a class token)."""
        extra = 1 if self.rule.class_token else 0  # "" is no class token
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
    if vision_rope_rule(top) is None and isinstance(config.get("detector_config"), Mapping):
        # SAM 3 Video: the detector's vision tower (its tracker shares the same backbone)
        tower, tower_type, path = _vision_config(config["detector_config"])
        return tower, tower_type, path.replace("config", "config.detector_config", 1)
    found = vision_part(config)
    if found is not None:
        holder, where, outer = found
        backbone = holder.get("backbone_config")
        if vision_rope_rule(holder.get("model_type")) is None and isinstance(backbone, Mapping):
            # SAM 3's vision model: the rotary ViT is its backbone
            holder, where = backbone, f"{where}.backbone_config"
        own = holder.get("model_type")
        own = vision_rope_alias(str(own)) or own
        if own is None or (own in (outer, top) and vision_rope_rule(own) is None):
            # no model_type, or the top-level one (Qwen2-VL's files): the type transformers
            # gives the vision config of this model
            own = TOP_LEVEL_VISION.get(str(outer), TOP_LEVEL_VISION.get(str(top), own))
        return holder, str(own), where
    if top in TOP_LEVEL_VISION and vision_rope_rule(top) is None:
        # a whole config without vision_config: transformers builds the default one
        return {}, TOP_LEVEL_VISION[str(top)], "config.vision_config"
    return config, vision_rope_alias(str(top)) or str(top), "config"


def _no_rotary(model_type: str, where: str) -> InvalidArgument:
    uses = non_rotary_use(model_type)
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


def _config_grid(
    vision: Mapping[str, Any], rule: VisionRule, where: str
) -> tuple[int, int, int] | None:
    """The grid ``image_size / patch_size`` where the config fixes or defaults it, else None."""
    if not (rule.fixed_grid or rule.default_grid):
        return None
    image = vision.get("image_size", rule.defaults["image_size"])
    patch = vision.get("patch_size", rule.defaults["patch_size"])
    image_h, image_w = image if isinstance(image, list | tuple) else (image, image)
    patch_h, patch_w = patch if isinstance(patch, list | tuple) else (patch, patch)
    for name, value in (
        ("image_size", image_h),
        ("image_size", image_w),
        ("patch_size", patch_h),
        ("patch_size", patch_w),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgument(
                f"{where}.{name} must be a positive int, got {value!r}",
                field=f"{where}.{name}",
            )
    if rule.family == "llama4":
        side = image_h // patch_h
        return (1, side, side)
    return (1, image_h // patch_h, image_w // patch_w)


def _grid_merges(
    merge_sizes: Any, rule: VisionRule, grids: tuple[tuple[int, int, int], ...]
) -> tuple[int, ...]:
    """The merge size of each grid of a tower that takes them per image (Video-LLaMA 3): the
    request's ``merge_sizes``, else its processors' defaults (1 for an image, 2 for a video)."""
    if not rule.merge_per_grid:
        if merge_sizes is not None:
            raise InvalidArgument(
                "merge_sizes is only for a vision tower that takes a merge size per image "
                "(Video-LLaMA 3); this tower's merge size comes from its config",
                field="merge_sizes",
            )
        return ()
    if merge_sizes is None:
        return tuple(1 if t == 1 else 2 for t, _, _ in grids)
    merges = tuple(merge_sizes)
    if len(merges) != len(grids):
        raise InvalidArgument(
            f"merge_sizes must give one merge size per grid: {len(grids)} grids, got "
            f"{len(merges)} merge sizes",
            field="merge_sizes",
        )
    for i, ((t, h, w), m) in enumerate(zip(grids, merges, strict=True)):
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise InvalidArgument(
                f"merge_sizes[{i}] must be a positive int, got {m!r}", field="merge_sizes"
            )
        if h % m or w % m:
            raise InvalidArgument(
                f"grid_thw[{i}] = {[t, h, w]}: h and w must be multiples of its merge size {m}",
                field="grid_thw",
            )
    return merges


def vision_rope_spec(
    config: Mapping[str, Any],
    grid_thw: Any = None,
    *,
    need_grid: bool = True,
    merge_sizes: Any = None,
) -> VisionRopeSpec:
    """Read a config's vision tower and check the grids against it (numbers only).

    Args:
        config: a whole ``config.json`` (its ``vision_config``, or ``thinker_config``'s for the
            Omni models), or a vision config sent alone.
        grid_thw: ``[t, h, w]`` rows, or None where the config fixes the grid.
        need_grid: False: no grid_thw is no grids (the tower described, no table).
        merge_sizes: one merge size per grid, for a tower that takes them (Video-LLaMA 3).

    Raises:
        InvalidArgument: a tower without a rotary embedding (the message says what it uses),
            a bad key (``field`` names it), a grid whose h or w is not a multiple of the merge
            size (``field`` ``grid_thw``).
    """
    vision, model_type, where = _vision_config(config)
    rule = vision_rope_rule(model_type)
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
    if rule.temporal and head_dim < 6:
        raise InvalidArgument(
            f"{where}: the head dimension {head_dim} must be at least 6 (three axes of "
            "rotate-half pairs)",
            field=f"{where}.num_heads",
        )
    if not rule.temporal and head_dim % 4:
        raise InvalidArgument(
            f"{where}: the head dimension {head_dim} must be a multiple of 4 (two axes of "
            "rotate-half pairs)",
            field=f"{where}.num_heads",
        )
    theta = _theta(vision, rule, where, used)
    merge = 1 if rule.merge_per_grid else rule.merge
    if merge is None:
        merge = _int_key(vision, ("spatial_merge_size",), rule, where, used)
    window = None if rule.window is None else _int_key(vision, (rule.window,), rule, where, used)
    scale = None if rule.scale is None else _int_key(vision, (rule.scale,), rule, where, used)
    fixed = _config_grid(vision, rule, where)
    grids = (
        ()
        if grid_thw is None and fixed is None and not need_grid
        else _grids(grid_thw, rule, merge, fixed)
    )
    return VisionRopeSpec(
        model_type=model_type,
        rule=rule,
        head_dim=head_dim,
        rope_theta=theta,
        merge=merge,
        grids=grids,
        defaulted=tuple(used),
        merges=_grid_merges(merge_sizes, rule, grids),
        window=window,
        scale=None if scale is None else float(scale),
    )


def is_vision_config_alone(config: Mapping[str, Any]) -> bool:
    """Whether ``config`` is a vision tower's own config sent alone (Pixtral's, MLCD's, a
    Qwen-VL ``vision_config``, SigLIP's), not a whole model's file that holds one: a tower of
    :data:`~posenc.facts.vision_rope_towers.VISION_RULES` or of
    :data:`~posenc.facts.vision_rope_towers.NON_ROTARY`."""
    if not isinstance(config, Mapping):
        return False
    try:
        _vision, model_type, where = _vision_config(config)
    except InvalidArgument:
        return False
    return where == "config" and (
        vision_rope_rule(model_type) is not None or non_rotary_use(model_type) is not None
    )


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
    rule = vision_rope_rule(model_type)
    if where == "config" and rule is None and non_rotary_use(model_type) is None:
        return None  # no vision config, and not one sent alone
    if rule is None:
        return {"model_type": model_type, "rotary": False, "uses": non_rotary_use(model_type)}
    spec = vision_rope_spec(config, need_grid=False)
    return {
        "model_type": model_type,
        "rotary": True,
        "endpoint": VISION_ROPE_PATH,
        "head_dim": spec.head_dim,
        "rope_theta": spec.rope_theta,
        "layout": spec.layout,
        "merge_size": spec.merge,
        "rotary_dim": spec.rotary_dim,
        "grid": list(spec.grids[0]) if spec.grids else None,
        "reference": rule.reference,
        "class_token": _class_token(rule),
        "defaulted": list(spec.defaulted),
    }


def _class_token(rule: VisionRule) -> str | None:
    """What ``meta.class_token`` says of the tower's class token (None: none is rotated)."""
    if rule.class_token:
        return f"{rule.class_token} row of each grid, at angle 0, position_ids (-1, -1)"
    if rule.learned_class_token:
        return (
            "the tower puts a class token first, rotated by its trained class_pos_emb (weights, "
            "not a position): not in these tables"
        )
    return None


def _in_windows(within: Tensor, h: Tensor, w: Tensor, side: int) -> tuple[Tensor, Tensor]:
    """Row and column ``(N,)`` of the token at ``within`` in a frame ordered by ``side × side``
    windows, row-major over the windows and inside each (edge windows are cut to the frame:
    transformers' ``get_vision_window_index`` with merge size 1)."""
    band = within // (side * w)  # (N,) the row of windows
    rest = within - band * side * w
    band_h = torch.minimum(h - band * side, torch.full_like(h, side))  # rows in this band
    win = rest // (band_h * side)  # (N,) the window in its band
    rest = rest - win * band_h * side
    win_w = torch.minimum(w - win * side, torch.full_like(w, side))  # columns in this window
    return band * side + rest // win_w, win * side + rest % win_w


def _token_coordinates(spec: VisionRopeSpec, start: int, stop: int) -> tuple[Tensor, ...]:
    """Frame, row, column, and the grid's h and w, ``(N,)`` int64 each, of tokens
    ``start … stop−1`` (frame, row and column −1 for a class token)."""
    counts = torch.tensor(spec.tokens_per_grid, dtype=torch.int64)  # (G,)
    ends = torch.cumsum(counts, 0)  # (G,)
    index = torch.arange(start, stop, dtype=torch.int64)  # (N,)
    grid = torch.searchsorted(ends, index, right=True)  # (N,)
    local = index - (ends - counts)[grid]  # (N,) index inside its grid
    sizes = torch.tensor([[h, w] for _, h, w in spec.grids], dtype=torch.int64)  # (G, 2)
    h, w = sizes[grid, 0], sizes[grid, 1]  # (N,)
    cls = torch.zeros_like(local, dtype=torch.bool)
    if spec.rule.class_token == "first":
        cls = local == 0
        local = (local - 1).clamp(min=0)
    elif spec.rule.class_token == "last":
        cls = local == counts[grid] - 1
    frame = local // (h * w)
    within = local % (h * w)  # (N,) index inside its frame
    if spec.window is not None:
        row, col = _in_windows(within, h, w, spec.window)
    else:
        m = torch.tensor(spec.grid_merges, dtype=torch.int64)[grid]  # (N,)
        blocks_w = w // m
        in_col = within % m
        in_row = (within // m) % m
        block_col = (within // (m * m)) % blocks_w
        block_row = within // (m * m * blocks_w)
        row = block_row * m + in_row
        col = block_col * m + in_col
    frame, row, col = (torch.where(cls, -1, v) for v in (frame, row, col))
    return frame, row, col, h, w


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
    """``(N, 2)`` int64: each token's ``(row, column)``, ``(−1, −1)`` for a class token;
    ``(N, 3)`` ``(frame, row, column)`` for a 3-D rotary (MiniMax-M3-VL)."""
    frame, row, col, _, _ = _token_coordinates(spec, 0, spec.tokens)
    axes = (frame, row, col) if spec.axes == 3 else (row, col)
    return torch.stack(axes, dim=-1)


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
    s = 2 * spec.frequencies  # Dh/2, or 2·(⌊Dh/3⌋ // 2) for a 3-D rotary
    inv = theta ** (-torch.arange(0, s, 2, dtype=torch.float64) / s)  # (F,)
    return inv, inv


def _half_angles(spec: VisionRopeSpec, start: int, stop: int) -> Tensor:
    """float64 angles ``(N, R/2)`` of tokens ``start … stop−1``, half the rotated channels in
    the model's order (the other half, or the other slot of each pair, repeats them)."""
    frame, row, col, h, w = _token_coordinates(spec, start, stop)
    f_h, f_w = _frequencies(spec)
    rule = spec.rule
    if rule.family == "dinov3":
        # patch centres in [-1, 1], times 2π (DINOv3ViTRopePositionEmbedding, eval mode)
        y = 2.0 * (row.to(torch.float64) + 0.5) / h - 1.0
        x = 2.0 * (col.to(torch.float64) + 0.5) / w - 1.0
        return torch.cat((2 * math.pi * y[:, None] * f_h, 2 * math.pi * x[:, None] * f_w), -1)
    if rule.family == "llama4":
        cls = row < 0
        y = torch.where(cls, 0, row + 1).to(torch.float64)
        x = torch.where(cls, 0, col + 1).to(torch.float64)
        return torch.cat((x[:, None] * f_w, y[:, None] * f_h), dim=-1)
    cls = row < 0  # a class token: angle 0
    y = torch.where(cls, 0, row + rule.offset).to(torch.float64)
    x = torch.where(cls, 0, col + rule.offset).to(torch.float64)
    if spec.scale is not None:  # SAM 3: the grid stretched to window_size
        y, x = y * (spec.scale / w), x * (spec.scale / w)
    t = torch.where(cls, 0, frame).to(torch.float64)
    return _arranged(spec, t, y, x, f_h, f_w)


def _arranged(
    spec: VisionRopeSpec, t: Tensor, y: Tensor, x: Tensor, f_h: Tensor, f_w: Tensor
) -> Tensor:
    """The angles ``(N, R/2)`` of positions ``t``, ``y``, ``x`` ``(N,)`` and frequencies
    ``f_h``, ``f_w`` ``(F,)``, in the model's order of the channels."""
    rule = spec.rule
    y_angles = y[:, None] * f_h  # (N, F)
    x_angles = x[:, None] * f_w  # (N, F)
    if rule.temporal:
        return torch.cat((t[:, None] * f_h, y_angles, x_angles), dim=-1)
    if rule.family == "pixtral" or rule.order == "hw":
        return torch.cat((y_angles, x_angles), dim=-1)
    if rule.order == "wh":
        return torch.cat((x_angles, y_angles), dim=-1)
    return torch.stack((x_angles, y_angles), dim=-1).flatten(1)  # w0, h0, w1, h1 ...


def _engine_angles(spec: VisionRopeSpec, start: int, stop: int) -> Tensor:
    """transformers' float32 angles ``(N, R/2)`` of tokens ``start … stop−1``, each family's
    operations in its module's order (``1.0 / (θ ** (arange(...).float() / d))``, one float32
    product of position and frequency; DINOv3's float32 patch centres times ``2π`` then the
    frequency), half the rotated channels in the model's order."""
    frame, row, col, h, w = _token_coordinates(spec, start, stop)
    d, theta, rule = spec.head_dim, spec.rope_theta, spec.rule
    if rule.family == "dinov3":  # DINOv3ViTRopePositionEmbedding, get_patches_center_coordinates
        inv = 1 / theta ** torch.arange(0, 1, 4 / d, dtype=torch.float32)  # (Dh/4,)
        coords = torch.stack(((row.float() + 0.5) / h, (col.float() + 0.5) / w), -1)  # (N, 2)
        coords = 2.0 * coords - 1.0
        return (2 * math.pi * coords[:, :, None] * inv[None, None, :]).flatten(1, 2)
    if rule.family == "llama4":  # Llama4VisionRotaryEmbedding._compute_freqs_ci
        half = d // 2
        freq = 1.0 / (theta ** (torch.arange(0, half, 2)[: half // 2].float() / half))
        x = (col.to(torch.int32) + 1)[:, None] * freq[None, :]
        y = (row.to(torch.int32) + 1)[:, None] * freq[None, :]
        return torch.cat((x, y), -1).masked_fill((row < 0)[:, None], 0)
    if rule.family == "pixtral":  # compute_axial_rope_parameters: even | odd frequencies
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float) / d))
        f_h, f_w = inv[0::2], inv[1::2]
    else:
        s = 2 * spec.frequencies
        f_h = f_w = 1.0 / (theta ** (torch.arange(0, s, 2, dtype=torch.float) / s))
    cls = row < 0  # a class token: angle 0
    y = torch.where(cls, 0, row + rule.offset).float()
    x = torch.where(cls, 0, col + rule.offset).float()
    if spec.scale is not None:  # SAM 3: the grid stretched to window_size
        y, x = y * (spec.scale / w), x * (spec.scale / w)
    t = torch.where(cls, 0, frame).float()
    return _arranged(spec, t, y, x, f_h, f_w)


def _fill(
    spec: VisionRopeSpec, which: str, start: int, stop: int, out: Tensor, engine: bool = False
) -> None:
    """Rows ``start … stop−1`` of ``cos`` or ``sin`` into ``out`` ``(N, R)``, cast once (from
    float64 angles, or with ``engine`` transformers' float32 ones and float32 cos/sin)."""
    # (N, R/2): float32 on the CPU (the module's own numbers), or float64 where ``out`` is
    angles = (
        _engine_angles(spec, start, stop)
        if engine
        else _half_angles(spec, start, stop).to(out.device)
    )
    values = (angles.cos() if which == "cos" else angles.sin()).to(out.device)
    if spec.layout == "split":  # [a, a | b, b]: each half of the head rotate_half on its own
        half = values.shape[-1] // 2
        write_pair(out[:, : 2 * half], values[:, :half], values[:, :half], False)
        write_pair(out[:, 2 * half :], values[:, half:], values[:, half:], False)
        return
    write_pair(out, values, values, spec.layout == "interleaved")


def vision_rope_cos_sin(
    spec: VisionRopeSpec,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    precision: str = "exact",
) -> tuple[Tensor, Tensor]:
    """The tower's ``cos`` and ``sin`` ``(N, Dh)`` in the layout it applies them.

    ``precision`` ``exact``: angles in float64 and one cast to ``dtype``; ``engine``: the
    rotary module's own float32 arithmetic (bit for bit its output on the same torch build),
    then cast to ``dtype``. ``half``: ``cat(v, v)`` of the half-head values ``v``;
    ``interleaved``: each value twice in place.
    """
    kw: dict[str, Any] = dict(device=device, dtype=dtype, precision=precision)
    cos = vision_rope_blocks(spec, which="cos", **kw).whole()  # (N, Dh)
    sin = vision_rope_blocks(spec, which="sin", **kw).whole()  # (N, Dh)
    return cos, sin


def vision_rope_blocks(
    spec: VisionRopeSpec,
    *,
    which: str,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    precision: str = "exact",
) -> TableBlocks:
    """``cos`` or ``sin`` ``(N, Dh)`` of :func:`vision_rope_cos_sin` in row blocks (the same
    arithmetic on each block's tokens)."""
    if which not in ("cos", "sin"):
        raise InvalidArgument(f"which must be cos or sin, got {which!r}", field="which")
    dev = torch.device("cpu") if device is None else torch.device(device)

    def fill(start: int, stop: int, out: Tensor) -> None:
        _fill(spec, which, start, stop, out, precision == "engine")

    return TableBlocks(which, (spec.tokens, spec.rotary_dim), resolve_dtype(dtype), fill, dev)


def _position_blocks(spec: VisionRopeSpec, device: torch.device) -> TableBlocks:
    def fill(start: int, stop: int, out: Tensor) -> None:
        frame, row, col, _, _ = _token_coordinates(spec, start, stop)
        for i, axis in enumerate((frame, row, col)[3 - spec.axes :]):
            out[:, i].copy_(axis)

    return TableBlocks("position_ids", (spec.tokens, spec.axes), torch.int64, fill, device)


# ---------------------------------------------------------------------------------------------
# The vision-rope endpoint kind (posenc.core.kinds)
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
    return vision_rope_spec(p["config"], p["grid_thw"], merge_sizes=p.get("merge_sizes"))


def _timm(p: Mapping[str, Any]) -> TimmRopeSpec | None:
    """timm's spec where ``engine`` is ``timm``, else None (transformers' towers)."""
    if p.get("engine") != TIMM.name:
        return None
    if p.get("merge_sizes") is not None:
        raise InvalidArgument(
            "merge_sizes is only for a transformers vision tower that takes them (Video-LLaMA 3)",
            field="merge_sizes",
        )
    return timm_rope_spec(p["config"], p["grid_thw"])


def _complete(p: dict[str, Any], _models: Any) -> dict[str, Any]:
    """The config read and the grids checked (a 422 before any tensor); the spec, not the raw
    config, is what the tables depend on."""
    if _timm(p) is not None:
        return p
    spec = _spec(p)
    merges = list(spec.merges) or None
    return {**p, "grid_thw": [list(g) for g in spec.grids], "merge_sizes": merges}


def _shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    timm = _timm(p)
    if timm is not None:
        return {
            "cos": (timm.tokens, timm.width),
            "sin": (timm.tokens, timm.width),
            "position_ids": (timm.tokens, 2),
        }
    spec = _spec(p)
    n, d = spec.tokens, spec.rotary_dim
    return {"cos": (n, d), "sin": (n, d), "position_ids": (n, spec.axes)}


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    timm = _timm(p)
    if timm is not None:
        cos, sin = timm_rope_cos_sin(timm, device=ctx.device, dtype=ctx.dtype)
        return {"cos": cos, "sin": sin, "position_ids": timm_position_ids(timm).to(ctx.device)}
    spec = _spec(p)
    cos, sin = vision_rope_cos_sin(
        spec, device=ctx.device, dtype=ctx.dtype, precision=p.get("precision") or "exact"
    )
    return {"cos": cos, "sin": sin, "position_ids": vision_position_ids(spec).to(ctx.device)}


def _timm_blocks(timm: TimmRopeSpec, ctx: kinds.Context) -> dict[str, Any]:
    def table(which: str) -> TableBlocks:
        return timm_rope_blocks(timm, which=which, dtype=ctx.dtype, device=ctx.device)

    ids = timm_position_ids(timm)  # (N, 2) int64: 16 bytes a row, next to 4F values a row

    def fill_ids(start: int, stop: int, out: Tensor) -> None:
        out.copy_(ids[start:stop])

    return {
        "cos": table("cos"),
        "sin": table("sin"),
        "position_ids": TableBlocks(
            "position_ids", (timm.tokens, 2), torch.int64, fill_ids, ctx.device
        ),
    }


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    timm = _timm(p)
    if timm is not None:
        return _timm_blocks(timm, ctx)
    spec = _spec(p)
    precision = p.get("precision") or "exact"
    dev, dtype = ctx.device, ctx.dtype
    return {
        "cos": vision_rope_blocks(spec, which="cos", device=dev, dtype=dtype, precision=precision),
        "sin": vision_rope_blocks(spec, which="sin", device=dev, dtype=dtype, precision=precision),
        "position_ids": _position_blocks(spec, ctx.device),
    }


def _timm_meta(timm: TimmRopeSpec, p: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": "vision_rope",
        "engine": TIMM.name,
        "rope_type": timm.rope_type,
        "reference": TIMM_MODULES[timm.rope_type],
        "head_dim": timm.head_dim,
        "rotary_dim": timm.width,
        "layout": timm.layout,
        "grids": [[1, h, w] for h, w in timm.grids],
        "tokens": timm.tokens,
        "rows": "blocks, then heads, then tokens" if timm.rope_type == "mixed" else "tokens",
        "config": dict(timm.args),
        "dtype": p["dtype"],
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
    timm = _timm(p)
    if timm is not None:
        return _timm_meta(timm, p)
    spec = _spec(p)
    return {
        "kind": "vision_rope",
        "engine": "transformers",
        "model_type": spec.model_type,
        "head_dim": spec.head_dim,
        "rope_theta": spec.rope_theta,
        "layout": spec.layout,
        "grids": [list(g) for g in spec.grids],
        "merge_size": spec.merge,
        "merge_sizes": list(spec.grid_merges),
        "rotary_dim": spec.rotary_dim,
        "position_axes": ["frame", "row", "column"][3 - spec.axes :],
        "window": spec.window,
        "tokens": spec.tokens,
        **_segments(spec),
        "reference": spec.rule.reference,
        "class_token": _class_token(spec.rule),
        "defaulted": list(spec.defaulted),
        "dtype": p["dtype"],
        "precision": p.get("precision") or "exact",
    }


def _row_elements(p: Mapping[str, Any]) -> int:
    timm = _timm(p)
    return timm.width if timm is not None else _spec(p).rotary_dim


VISION_ROPE: kinds.Kind = kinds.Kind(
    name="vision_rope",
    path=VISION_ROPE_PATH,
    tag="encodings",
    summary="Vision-tower 2-D rotary tables (Qwen-VL, GLM-4V, Pixtral, Llama 4, DINOv3...)",
    description="The 2-D (axial) rotary cos/sin of a vision encoder, as its transformers rotary "
    "module computes them for the position ids its tower makes from `grid_thw`: one row per "
    "patch token of all the grids, in the tower's order (spatial-merge blocks for Qwen-VL, "
    "before Qwen2.5-VL's window reordering), laid out as the model applies them "
    "(`meta.layout`: `half`, `interleaved`, or `split` for Gemma 4's halves). `position_ids` "
    "gives each token's (row, column), (−1, −1) for a class token (Llama 4, Inkling2), and "
    "(frame, row, column) for MiniMax-M3-VL's 3-D rotary, whose tables are its `meta.rotary_dim` "
    "rotated channels. `config` is the model's config.json (its `vision_config`, under "
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
        kinds.FieldSpec(  # issue 30
            "precision",
            "str",
            "exact (default: float64 angles, cast once) or engine: the tower's rotary module's "
            "own float32 arithmetic (float32 inv_freq, position x inv_freq, torch's float32 "
            "cos/sin), bit for bit its output on the same torch build",
            "exact",
            choices=("exact", "engine"),
        ),
        kinds.FieldSpec(
            "engine",
            "str",
            "whose tables: transformers (default: the vision tower of a transformers config) or "
            "timm (config is the arguments of timm's create_rope_embed: EVA's and ROPE-ViT's "
            "axial cat/base, ROPE-ViT's mixed, DINOv3's; see docs/engines.md)",
            "transformers",
            choices_from=lambda: engine_names("vision_rope"),
        ),
        kinds.FieldSpec(
            "merge_sizes",
            "ints",
            "the merge size of each grid, for a tower that takes one per image or video "
            "(Video-LLaMA 3; default 1 for an image, 2 for a video, as its processors do)",
            None,
            minimum=1,
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
    row_elements=_row_elements,
    complete=_complete,
    examples=({"config": _EXAMPLE_CONFIG, "grid_thw": [[1, 4, 6]]},),
)
"""The vision-rope endpoint kind (see :mod:`posenc.core.kinds`)."""
