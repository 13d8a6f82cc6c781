"""The ``vision_learned`` endpoint kind: ``POST /v1/encodings/vision-learned``.

A vision tower's learned absolute position table, resized to the request's patch grids as the
model's own code resizes it (:mod:`posenc.vision_learned`). The table is a loaded model's
(``model``: a vision model folder of ``POSENC_MODELS``, its checkpoint's table) or the seeded one
of a config without weights: ``torch.manual_seed(seed)`` then ``N(0, 1)`` over the model's
parameter shape, drawn as :func:`posenc.learned.seeded_normal` draws it. The resampling matrix
needs no weights at all.

Notation used for tensor shapes: ``N`` tokens of all the grids, ``P`` table rows, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from posenc import kinds
from posenc.blocks import TableBlocks, tensor_blocks
from posenc.errors import InvalidArgument
from posenc.learned import SEED_MAX, SEED_MIN, seeded_normal
from posenc.vision_learned.tables import (
    VisionLearnedSpec,
    check_table,
    position_ids,
    resample_matrix,
    resized_table,
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
    for h, w in spec.grids:  # a fixed tower refuses another grid before any tensor
        spec.tower.rule.axis_weights(spec.tower, spec.side, h)
        spec.tower.rule.axis_weights(spec.tower, spec.side, w)
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


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    spec = _spec(p)
    out: dict[str, Tensor] = {}
    if p["include"] in ("pos_embed", "both"):
        table = resized_table(spec, _table(p, spec, ctx), p["precision"])
        out["pos_embed"] = table.to(device=ctx.device, dtype=ctx.dtype)
    if p["include"] in ("resample", "both"):
        out["resample"] = resample_matrix(spec).to(device=ctx.device, dtype=ctx.dtype)
    ids = position_ids(spec)
    if ids is not None:
        out["position_ids"] = ids.to(ctx.device)
    return out


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, TableBlocks]:
    """The tables computed whole and handed out in blocks: here the whole is the one
    computation, not a second one beside the blocks. The resized table is a resize of the
    whole source grid (``kron(Wh, Ww)`` over every source row, or the tower's own interpolate
    of the grid), and the source table is one seeded draw or a model's weight."""
    return {name: tensor_blocks(name, t) for name, t in _compute(p, ctx).items()}


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
    row_elements=_row_elements,
    complete=_complete,
    model_field="model",
    examples=({"config": _EXAMPLE_CONFIG, "grid": [12, 20]},),
)
"""The vision-learned endpoint kind (see :mod:`posenc.kinds`)."""
