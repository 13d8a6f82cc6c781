"""A vision tower's learned position table resized to image grids, and the resize as a matrix.

:data:`LEARNED_TOWERS` joins each tower's record (:mod:`posenc.facts.learned_towers`) to the
code of its resizing rule (``interpolate``, ``naflex``, ``buckets`` ...:
:data:`RESIZE_RULES`); :func:`vision_learned_spec` reads a config into a :class:`VisionLearnedSpec`, and
the functions below compute from it:

- :func:`resample_matrix` ``(N, P)``: row ``n`` holds the weights of the table's ``P`` rows in
  token ``n`` (prefix rows: one-hot on themselves; patch rows: ``kron(Wh, Ww)`` of the rule's
  per-axis weights, float64). A caller applies it to a table it holds: ``M @ T``.
- :func:`resized_table` ``(N, D)``: ``precision="exact"`` is ``M @ T`` in float64, cast once;
  ``"engine"`` is the model's own arithmetic in the table's dtype, bit for bit what its
  embeddings forward adds.

Tokens are the grids' in order, each grid's prefix rows (class token first) then its ``h·w``
patches row-major: the order in which the tower adds the table.

Notation used for tensor shapes: ``N`` tokens of all the grids, ``P`` table rows, ``D`` width,
``s`` native side.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.facts.families import FAMILIES
from posenc.facts.learned_towers import LEARNED_TOWER_RECORDS, LearnedTowerRecord
from posenc.vision.learned import (
    buckets,
    cropped,
    fixed,
    gathered,
    grid_sample,
    interpolate,
    naflex,
    tile,
)
from posenc.vision.learned.base import LearnedTower, ResizeRule
from posenc.vision.learned.row_blocks import pos_embed_blocks, resample_blocks
from posenc.vision.learned.spec import VisionLearnedSpec, axes, check_table
from posenc.vision.rope import VISION_ROPE_PATH, vision_tower

__all__ = [
    "LEARNED_TOWERS",
    "RESIZE_RULES",
    "TOP_LEVEL_LEARNED",
    "VisionLearnedSpec",
    "axes",
    "check_table",
    "engine_table",
    "find_learned_tower",
    "position_ids",
    "resample_matrix",
    "resized_table",
    "vision_learned_spec",
]

Precision = Literal["exact", "engine"]

#: Each resizing rule's code, by the name a tower's record gives (``resize``).
RESIZE_RULES: Mapping[str, ResizeRule] = MappingProxyType(
    {
        "interpolate_pos_encoding": interpolate.INTERPOLATE,
        "naflex": naflex.NAFLEX,
        "navit_buckets": buckets.BUCKETS,
        "nearest_buckets": buckets.NEAREST_BUCKETS,
        "fixed": fixed.FIXED,
        "tile": tile.TILE,
        "grid_sample": grid_sample.GRID_SAMPLE,
        "gather_sum": gathered.GATHER_SUM,
        "embedding_bag": gathered.EMBEDDING_BAG,
        "cropped": cropped.CROPPED,
    }
)


def _tower(record: LearnedTowerRecord) -> LearnedTower:
    """A tower's record of :mod:`posenc.facts.learned_towers` with its resizing rule's code."""
    facts = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    return LearnedTower(**facts, rule=RESIZE_RULES[record.resize])


LEARNED_TOWERS: Mapping[str, LearnedTower] = MappingProxyType(
    {model_type: _tower(record) for model_type, record in LEARNED_TOWER_RECORDS.items()}
)
"""Vision config ``model_type`` -> its tower, over every resizing rule."""

#: Top-level model_type -> the model_type transformers gives its vision config by default
#: (where a published file's vision_config names none): the records' ``learned_vision_tower``.
TOP_LEVEL_LEARNED: Mapping[str, str] = MappingProxyType(
    {t: f.learned_vision_tower for t, f in FAMILIES.items() if f.learned_vision_tower}
)

#: Places read only when they hold a learned tower (nested in a vision config of another kind).
_INNER = (
    "vision_config.backbone_config",  # SAM 3's ViT
    "vision_config.sam_config",  # DeepSeek-OCR 2, Unlimited-OCR: their SAM encoder
    "sam_config",  # their vision configs alone
    "detector_config.vision_config.backbone_config",  # SAM 3 video
    "backbone_config",  # DPT on a DINOv2 backbone (DPT's own table is then absent)
)
_PLACES = (
    "vision_config",
    "image_config",  # FLAVA
    "thinker_config.vision_config",
    "vlm_config.vision_config",
    "encoder.vision_config",  # T5Gemma 2
    "encoder",  # vision-encoder-decoder
    "backbone_config",  # Depth Anything, DPT heads on a ViT or DINOv2
    "image_model_config",  # Depth Pro's image encoder (a DINOv2)
)
_MAX_SIDE = 2**20


def _holder(config: Mapping[str, Any], path: str) -> Any:
    holder: Any = config
    for key in path.split("."):
        holder = holder.get(key) if isinstance(holder, Mapping) else None
    return holder


def find_learned_tower(
    config: Mapping[str, Any],
) -> tuple[Mapping[str, Any], str, str] | None:
    """``(vision config, its model_type, where)`` of a config whose vision tower adds a learned
    2-D table, or None (no vision config, or one of another kind)."""
    if not isinstance(config, Mapping):
        return None
    top = config.get("model_type")
    for path in _INNER:
        holder = _holder(config, path)
        if isinstance(holder, Mapping) and holder.get("model_type") in LEARNED_TOWERS:
            return holder, str(holder["model_type"]), f"config.{path}"
    if top in LEARNED_TOWERS:
        return config, str(top), "config"
    for path in _PLACES:
        holder = _holder(config, path)
        if not isinstance(holder, Mapping):
            continue
        own = holder.get("model_type")
        if own in LEARNED_TOWERS:
            return holder, str(own), f"config.{path}"
        if own is None or own == top:
            default = TOP_LEVEL_LEARNED.get(str(top))
            if default is not None:
                return holder, default, f"config.{path}"
        return None
    if top in TOP_LEVEL_LEARNED:  # a whole config without vision_config: the default one
        return {}, TOP_LEVEL_LEARNED[str(top)], "config.vision_config"
    return None


def _pair(vision: Mapping[str, Any], key: str, tower: LearnedTower, where: str,
          used: list[str]) -> tuple[int, int]:  # fmt: skip
    value = vision.get(key)
    if value is None:
        used.append(f"{where}.{key}")
        value = tower.defaults[key]
    items = list(value) if isinstance(value, list | tuple) else [value, value]
    if len(items) != 2 or any(
        isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**31 for v in items
    ):
        raise InvalidArgument(
            f"{where}.{key} must be a positive int (or two), got {value!r}", field=f"{where}.{key}"
        )
    return int(items[0]), int(items[1])


def _positive(vision: Mapping[str, Any], key: str, tower: LearnedTower, where: str,
              used: list[str]) -> int:  # fmt: skip
    value = vision.get(key)
    if value is None:
        used.append(f"{where}.{key}")
        return int(tower.defaults[key])
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31:
        raise InvalidArgument(
            f"{where}.{key} must be a positive int, got {value!r}", field=f"{where}.{key}"
        )
    return value


def _side(vision: Mapping[str, Any], tower: LearnedTower, where: str, used: list[str]) -> int:
    """``s``: ``sqrt(num_patches)`` (SigLIP 2) or ``image_size // patch_size`` on both axes."""
    if tower.side_key is not None:
        patches = _positive(vision, tower.side_key, tower, where, used)
        side = math.isqrt(patches)
        if side * side != patches:
            raise InvalidArgument(
                f"{where}.{tower.side_key} must be a square (the table is s × s), got {patches}",
                field=f"{where}.{tower.side_key}",
            )
        return side
    if tower.grid_key is not None:
        return _positive(vision, tower.grid_key, tower, where, used)
    image = _pair(vision, tower.image_key, tower, where, used)
    patch = _pair(vision, tower.patch_key, tower, where, used)
    rows, cols = image[0] // patch[0], image[1] // patch[1]
    if rows != cols or rows < 1:
        raise InvalidArgument(
            f"{where}: image_size {list(image)} / patch_size {list(patch)} gives a {rows} × "
            f"{cols} grid; the table of model_type {tower.reference} is square",
            field=f"{where}.{tower.image_key}",
        )
    return rows


def _mode(vision: Mapping[str, Any], tower: LearnedTower, where: str,
          used: list[str]) -> LearnedTower:  # fmt: skip
    """The tower with the interpolation mode its config names (``mode_key``), if it names one."""
    if tower.mode_key is None:
        return tower
    value = vision.get(tower.mode_key)
    if value is None:
        used.append(f"{where}.{tower.mode_key}")
        value = tower.defaults[tower.mode_key]
    if value not in ("bicubic", "bilinear"):
        raise InvalidArgument(
            f"{where}.{tower.mode_key} must be 'bicubic' or 'bilinear', got {value!r}",
            field=f"{where}.{tower.mode_key}",
        )
    return dataclasses.replace(tower, mode=value)


def _grids(
    grid: Sequence[int] | None, grid_thw: Sequence[Sequence[int]] | None, side: int
) -> tuple[tuple[int, int], ...]:
    if grid is not None and grid_thw is not None:
        raise InvalidArgument("give grid or grid_thw, not both", field="grid_thw")
    if grid is None and grid_thw is None:
        return ((side, side),)
    if grid is not None:
        rows: list[tuple[str, Sequence[int]]] = [("grid", [1, *grid])]
    else:
        rows = [(f"grid_thw[{i}]", r) for i, r in enumerate(grid_thw or ())]
    out = []
    for where, row in rows:
        if len(row) != 3 or any(isinstance(v, bool) or not isinstance(v, int) for v in row):
            raise InvalidArgument(f"{where} must be [t, h, w] ints, got {row!r}", field=where)
        t, h, w = row
        if t != 1:
            raise InvalidArgument(
                f"{where}: t must be 1 (these towers take images; send one row per frame), got {t}",
                field=where,
            )
        if not (1 <= h <= _MAX_SIDE and 1 <= w <= _MAX_SIDE):
            raise InvalidArgument(
                f"{where}: h and w must be in [1, {_MAX_SIDE}], got {h} and {w}", field=where
            )
        out.append((h, w))
    return tuple(out)


def vision_learned_spec(
    config: Mapping[str, Any],
    grid: Sequence[int] | None = None,
    grid_thw: Sequence[Sequence[int]] | None = None,
) -> VisionLearnedSpec:
    """Read ``config``'s learned vision table and the grids to resize it to.

    Args:
        config: the model's whole ``config.json``, or its vision config alone.
        grid: one image's ``[h, w]`` in patches.
        grid_thw: ``[1, h, w]`` rows, one per image. Neither: the native grid.

    Raises:
        InvalidArgument: a config whose tower has no learned 2-D table (the message says what
            it has), a bad key (``field`` names it), a bad grid.
    """
    found = find_learned_tower(config)
    if found is None:
        raise _not_learned(config)
    vision, model_type, where = found
    used: list[str] = []
    tower = _mode(vision, LEARNED_TOWERS[model_type], where, used)
    width = _positive(vision, tower.width_key, tower, where, used)
    side = _side(vision, tower, where, used)
    prefix = tower.prefix
    if tower.prefix_key is not None:
        prefix = _positive(vision, tower.prefix_key, tower, where, used)
    merge = 1
    if tower.merge_key is not None:
        merge = _positive(vision, tower.merge_key, tower, where, used)
    grids = _grids(grid, grid_thw, side)
    for h, w in grids if merge > 1 else ():
        if h % merge or w % merge:
            raise InvalidArgument(
                f"this tower orders its patches in {merge} x {merge} merge blocks: the grid's "
                f"h and w must be multiples of {merge}, got {h} and {w}",
                field="grid",
            )
    return VisionLearnedSpec(
        model_type=model_type,
        tower=tower,
        width=width,
        side=side,
        grids=grids,
        defaulted=tuple(used),
        where=where,
        prefix=prefix,
        merge=merge,
    )


def _not_learned(config: Any) -> InvalidArgument:
    known = ", ".join(sorted(LEARNED_TOWERS))
    try:
        rotary = vision_tower(config) if isinstance(config, Mapping) else None
    except InvalidArgument:
        rotary = None
    if rotary is not None and rotary.get("rotary"):
        message = (
            f"the vision tower of this config (model_type {rotary['model_type']!r}) uses a "
            f"rotary embedding, not a learned table: see {VISION_ROPE_PATH}"
        )
    else:
        model_type = config.get("model_type") if isinstance(config, Mapping) else None
        message = (
            f"config (model_type {model_type!r}) has no vision tower with a learned 2-D "
            f"position table that vision-learned reads; the vision model types with one are: "
            f"{known}"
        )
    return InvalidArgument(message, field="config.model_type")


# ---------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------


def resample_matrix(spec: VisionLearnedSpec) -> Tensor:
    """``(N, P)`` float64: token ``n``'s weights over the table's rows (see the module doc);
    :func:`~posenc.vision.learned.row_blocks.resample_blocks` filled whole."""
    return resample_blocks(spec).whole()


def position_ids(spec: VisionLearnedSpec) -> Tensor | None:
    """``(N,)`` int64 table rows each token reads, for a rule that gathers (NaViT buckets);
    None for a rule that mixes rows."""
    ids_of = spec.tower.rule.position_ids
    if ids_of is None:
        return None
    parts = []
    for h, w in spec.grids:
        parts.append(torch.arange(spec.kept, dtype=torch.int64))
        parts.append(ids_of(spec.tower, spec.side, h, w)[spec.order(h, w)] + spec.prefix)
    return torch.cat(parts)


def resized_table(spec: VisionLearnedSpec, table: Tensor, precision: Precision = "exact") -> Tensor:
    """``(N, D)``: ``table`` ``(P, D)`` resized to every grid of ``spec``.

    ``exact``: float64 per-axis weights applied to the table in float64 (``Wh · T · Wwᵀ`` per
    channel), returned in float64 for one cast by the caller. ``engine``: the model's own code
    path, in the table's dtype. A rule that gathers rows (NaViT buckets) is exact either way.
    Both are :func:`~posenc.vision.learned.row_blocks.pos_embed_blocks` filled whole, so a
    streamed table's blocks are these bytes.
    """
    dtype = table.dtype if precision == "engine" else torch.float64
    blocks = pos_embed_blocks(
        spec, table, precision, dtype, engine_whole=lambda: engine_table(spec, table)
    )
    return blocks.whole()


def engine_table(spec: VisionLearnedSpec, table: Tensor) -> Tensor:
    """``(N, D)`` in the table's dtype: each grid through the rule's ``engine`` (the model's own
    arithmetic, on the whole grid), prefix rows first, in the tower's order."""
    check_table(spec, table)
    p, k, s = spec.prefix, spec.kept, spec.side
    parts = []
    for h, w in spec.grids:
        parts.append(table[:k])
        rows = spec.tower.rule.engine(spec.tower, table[p:], s, h, w)  # (h·w, D)
        parts.append(rows if spec.merge == 1 else rows[spec.order(h, w)])
    return torch.cat(parts)
