"""The ``vision_learned`` endpoint kind: ``POST /v1/encodings/vision-learned``.

A vision tower's learned absolute position table, resized to the request's patch grids as the
model's own code resizes it (:mod:`posenc.vision.learned`). The table is a loaded model's
(``model``: a vision model folder of ``POSENC_MODELS``, its checkpoint's table) or the seeded one
of a config without weights: ``torch.manual_seed(seed)`` then ``N(0, 1)`` over the model's
parameter shape, drawn as :func:`posenc.absolute.learned.seeded_normal` draws it. The resampling matrix
needs no weights at all.

Notation used for tensor shapes: ``N`` tokens of all the grids, ``P`` table rows, ``D`` width.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from posenc.absolute.learned import SEED_MAX, SEED_MIN, seeded_normal
from posenc.core import kinds
from posenc.core.blocks import TableBlocks, tensor_blocks
from posenc.core.errors import InvalidArgument
from posenc.vision.learned.fixed import FIXED, native_only
from posenc.vision.learned.row_blocks import (
    axis_weight_elements,
    engine_streams,
    pos_embed_blocks,
    resample_blocks,
)
from posenc.vision.learned.tables import (
    VisionLearnedSpec,
    check_table,
    engine_table,
    position_ids,
    vision_learned_spec,
)

__all__ = ["VISION_LEARNED", "VISION_LEARNED_PATH"]

VISION_LEARNED_PATH = "/v1/encodings/vision-learned"

# google/siglip2-base-patch16-naflex's vision_config, the keys this kind reads.
_EXAMPLE_CONFIG = {
    "model_type": "siglip2",
    "vision_config": {
        "model_type": "siglip2_vision_model",
        "hidden_size": 768,
        "num_patches": 256,
        "patch_size": 16,
    },
}


def _spec(p: Mapping[str, Any]) -> VisionLearnedSpec:
    return vision_learned_spec(p["config"], p["grid"], p["grid_thw"])


def _check(p: Mapping[str, Any]) -> None:
    if p.get("config") is not None and p.get("model") is not None:
        raise InvalidArgument(
            "give config or model, not both (a model folder brings its own config)",
            field="model",
        )
    if p.get("grid") is not None and p.get("grid_thw") is not None:
        raise InvalidArgument("give grid or grid_thw, not both", field="grid_thw")


def _loaded_table(model: Any) -> Tensor:
    if model.vision is None:
        raise InvalidArgument(
            f"model {model.name!r} is not a vision model folder (it is a "
            f"{model.positional!r} text model: see /v1/embed); vision-learned reads the folders "
            "of ViT, DINOv2, CLIP, SigLIP and the other towers with a learned 2-D table",
            field="model",
        )
    table: Tensor = model.vision.table
    return table


def _complete(p: dict[str, Any], models: Callable[[str | None], Any]) -> dict[str, Any]:
    """The config read and the grids checked (a 422 before any tensor); a named model's
    config and table size checked against each other."""
    if p["model"] is not None:
        model = models(p["model"])
        table = _loaded_table(model)
        p = {**p, "config": dict(model.vision.config), "model": model.name}
        check_table(_spec(p), table)
    elif p["config"] is None:
        raise InvalidArgument(
            "give config (a vision model's config.json) or model (a vision model folder from "
            "GET /v1/models)",
            field="config",
        )
    spec = _spec(p)
    for h, w in spec.grids if spec.tower.rule is FIXED else ():  # another grid: 422, early
        native_only(spec.side, h)
        native_only(spec.side, w)
    return p


def _shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    spec = _spec(p)
    out: dict[str, tuple[int, ...]] = {}
    if p["include"] in ("pos_embed", "both"):
        out["pos_embed"] = (spec.tokens, spec.width)
    if p["include"] in ("resample", "both"):
        out["resample"] = (spec.tokens, spec.table_rows)
    if spec.tower.rule.position_ids is not None:
        out["position_ids"] = (spec.tokens,)
    return out


def _table(p: Mapping[str, Any], spec: VisionLearnedSpec, ctx: kinds.Context) -> Tensor:
    if p["model"] is not None:
        return _loaded_table(ctx.models(p["model"])).to(torch.float32)
    return seeded_normal(spec.table_rows, spec.width, seed=p["seed"])


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, TableBlocks]:
    """The tensors as row blocks: each block of ``pos_embed`` and ``resample`` computes only
    its own rows (:mod:`posenc.vision.learned.row_blocks`), on the CPU."""
    spec = _spec(p)
    out: dict[str, TableBlocks] = {}
    if p["include"] in ("pos_embed", "both"):
        table = functools.cache(lambda: _table(p, spec, ctx))  # made at the first fill
        out["pos_embed"] = pos_embed_blocks(
            spec, table, p["precision"], ctx.dtype, lambda: engine_table(spec, table())
        )
    if p["include"] in ("resample", "both"):
        out["resample"] = resample_blocks(spec, ctx.dtype)
    ids = position_ids(spec)
    if ids is not None:
        out["position_ids"] = tensor_blocks("position_ids", ids)
    return out


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    """The blocks filled whole: the bytes a streamed response sends."""
    return {name: b.whole().to(ctx.device) for name, b in _blocks(p, ctx).items()}


def _streams(p: Mapping[str, Any]) -> bool:
    """``precision="engine"`` of a rule whose model kernel runs on the whole grid
    (``F.interpolate``, NaFlex, RADIO): not streamed (bounded by ``POSENC_MAX_ELEMENTS``);
    everything else is."""
    if p["include"] == "resample" or p["precision"] != "engine":
        return True
    return engine_streams(_spec(p))


def _allocations(p: Mapping[str, Any]) -> dict[str, int]:
    """What the compute holds besides its outputs, from the numbers alone: the table ``(P, D)``,
    the per-axis weights, and the model's own arithmetic for ``precision="engine"``."""
    spec = _spec(p)
    out = {"grid": axis_weight_elements(spec)}
    if p["include"] in ("pos_embed", "both"):
        out["config"] = spec.table_rows * spec.width  # the position table itself
        work = spec.tower.rule.engine_elements
        if p["precision"] == "engine" and work is not None and not engine_streams(spec):
            out["precision"] = sum(work(spec.side, h, w, spec.width) for h, w in spec.grids)
    return out


def _row_elements(p: Mapping[str, Any]) -> int:
    return max(shape[-1] for shape in _shapes(p).values())


def _meta(p: Mapping[str, Any]) -> dict[str, Any]:
    spec = _spec(p)
    tower = spec.tower
    resize = tower.rule.name
    if resize == "interpolate_pos_encoding" and spec.native:
        resize = "none"  # the model adds its table as it is
    meta: dict[str, Any] = {
        "kind": "vision_learned",
        "model_type": spec.model_type,
        "reference": tower.reference,
        "class_token": spec.kept > 0,
        "prefix_tokens": spec.kept,
        "resize": resize,
        "rule": tower.describe(),
        "native_grid": [spec.side, spec.side],
        "grids": [list(g) for g in spec.grids],
        "table_rows": spec.table_rows,
        "width": spec.width,
        "tokens": spec.tokens,
        "include": p["include"],
        "precision": "exact" if tower.rule.position_ids is not None else p["precision"],
        "note": tower.note,
        "defaulted": list(spec.defaulted),
        "dtype": p["dtype"],
    }
    if p["model"] is not None:
        meta["model"] = p["model"]
        meta["table"] = "checkpoint"
    else:
        meta["seed"] = p["seed"]
        meta["table"] = "seeded"
    return meta


VISION_LEARNED: kinds.Kind = kinds.Kind(
    name="vision_learned",
    path=VISION_LEARNED_PATH,
    tag="encodings",
    summary="Vision-tower learned 2-D position tables, resized as the model does "
    "(ViT, DeiT, DINOv2, CLIP, SigLIP, SigLIP 2 NaFlex, Idefics3...)",
    description="A vision tower's learned absolute position table resized to each image's patch "
    "grid exactly as the model's code resizes it: `interpolate_pos_encoding` (ViT, DeiT, "
    "DINOv2, CLIP, SigLIP, BLIP...: bicubic or antialiased, class rows kept first), SigLIP 2 "
    "NaFlex's per-image bilinear antialiased resize, NaViT's bucketed position ids "
    "(Idefics2/3, SmolVLM, Phi-4-multimodal, MiniCPM-V; `position_ids` gives the rows read), "
    "or none (Ovis2, AIMv2, SAM: the native grid only); SAM 3's tiling, GLM-4V's "
    "`grid_sample`, the gathered interpolation of PaddleOCR-VL, Kimi K2.5 and Inkling 2, and "
    "RADIO's cropped table. `meta.resize` names the rule. The table is "
    "`model`'s checkpoint table, or the seeded one of `config` "
    "(`torch.manual_seed(seed)` over the model's parameter shape). `include` `resample` gives "
    "the resampling matrix (N, P), which needs no weights: `resample @ table` is the resized "
    "table of any table a caller holds.",
    fields=(
        kinds.FieldSpec(
            "config",
            "object",
            "the model's config.json (whole, or its vision config alone): the vision config's "
            "model_type picks the rule; hidden_size, image_size and patch_size (SigLIP 2: "
            "num_patches; some towers other keys, named in meta.defaulted) are read. Not "
            "together with model",
            None,
        ),
        kinds.FieldSpec(
            "model",
            "str",
            "name of a vision model folder from GET /v1/models: its checkpoint's table",
            None,
        ),
        kinds.FieldSpec(
            "grid",
            "ints",
            "[h, w]: one image's grid in patches (default: the native grid, image_size / "
            "patch_size)",
            None,
            minimum=1,
            length=2,
        ),
        kinds.FieldSpec(
            "grid_thw",
            "int_rows",
            "[1, h, w] per image, in patches, in order (instead of grid)",
            None,
            minimum=1,
            length=3,
        ),
        kinds.FieldSpec(
            "seed",
            "int",
            "torch.manual_seed of the table of a config without weights",
            0,
            minimum=SEED_MIN,
            maximum=SEED_MAX,
        ),
        kinds.FieldSpec(
            "include",
            "str",
            "pos_embed: the resized table (N, D); resample: the resampling matrix (N, P), no "
            "weights needed; both",
            "pos_embed",
            choices=("pos_embed", "resample", "both"),
        ),
        kinds.FieldSpec(
            "precision",
            "str",
            "exact: float64 weights applied in float64, cast once; engine: the model's own "
            "arithmetic in float32, bit for bit what its forward adds",
            "exact",
            choices=("exact", "engine"),
        ),
    ),
    tensors=(
        kinds.TensorSpec("pos_embed", ("N", "D")),
        kinds.TensorSpec("resample", ("N", "P")),
        kinds.TensorSpec("position_ids", ("N",), integer=True),
    ),
    shapes=_shapes,
    compute=_compute,
    check=_check,
    meta=_meta,
    blocks=_blocks,
    streams=_streams,
    row_elements=_row_elements,
    allocations=_allocations,
    complete=_complete,
    model_field="model",
    examples=({"config": _EXAMPLE_CONFIG, "grid": [12, 20]},),
)
"""The vision-learned endpoint kind (see :mod:`posenc.core.kinds`)."""
