"""The ``diffusion_rope`` and ``sincos_2d`` endpoint kinds (posenc.core.kinds).

Both read a ``model`` name or a diffusers ``config`` into one rule (:mod:`posenc.diffusion.configs`)
and the grid into its numbers before anything is allocated, so a 4K video grid is sized (and
refused with a 413, or streamed in row blocks) from the request alone. Each table is one row
function (:func:`posenc.diffusion.rules.fill_rows`, :func:`posenc.diffusion.sincos.fill_sincos_rows`)
called for the whole table or for a block of rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from posenc.core import kinds
from posenc.core.blocks import DEFAULT_BLOCK_BYTES, TableBlocks
from posenc.core.errors import InvalidArgument
from posenc.diffusion.configs import (
    MODEL_NAMES,
    SINCOS_MODEL_NAMES,
    Reading,
    read_rope,
    read_sincos,
)
from posenc.diffusion.rules import RopeGrid, fill_rows
from posenc.diffusion.sincos import SincosGrid, fill_sincos_rows
from posenc.engines.diffusers import ENGINE as DIFFUSERS

__all__ = ["DIFFUSION_ROPE", "SINCOS_2D", "diffusion_rope_grid", "sincos_grid"]


def _json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


def _need_model_or_config(p: Mapping[str, Any]) -> None:
    if p.get("model") is None and p.get("config") is None:
        raise InvalidArgument(
            "give model (a diffusers transformer's name) or config (its transformer/config.json)",
            field="model",
        )


# ---------------------------------------------------------------------------------------------
# diffusion_rope
# ---------------------------------------------------------------------------------------------


def diffusion_rope_grid(p: Mapping[str, Any]) -> tuple[Reading, RopeGrid]:
    """The request read: its rule and grid (numbers only; a 422 for what the model refuses)."""
    _need_model_or_config(p)
    reading = read_rope(p.get("model"), p.get("config"))
    values = dict(reading.values)
    scale = p.get("rope_interpolation_scale")
    if scale is not None:
        if reading.rule.name != "ltx-video":
            raise InvalidArgument(
                f"rope_interpolation_scale is LTX-Video's; {reading.rule.name} has none",
                field="rope_interpolation_scale",
            )
        values["rope_interpolation_scale"] = list(scale)
    text_len = p.get("text_len") or 0
    grid = reading.rule.read(values, p.get("frames") or 1, p["height"], p["width"], text_len)
    return reading, dataclasses.replace(grid, engine=DIFFUSERS.own_arithmetic(p.get("precision")))


def _rope_shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    reading, grid = diffusion_rope_grid(p)
    n, r = grid.tokens, grid.rotary_dim
    return {"cos": (n, r), "sin": (n, r), "ids": (n, len(reading.rule.axis_names))}


def _rope_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    reading, grid = diffusion_rope_grid(p)
    shapes = _rope_shapes(p)
    out = {}
    for name, shape in shapes.items():

        def fill(start: int, stop: int, block: Tensor, which: str = name) -> None:
            fill_rows(reading.rule, grid, which, start, stop, block)

        out[name] = TableBlocks(name, shape, ctx.dtype, fill, ctx.device)
    return out


def _whole(blocks: Mapping[str, TableBlocks]) -> dict[str, Tensor]:
    """Each table whole, filled block by block so its float64 scratch stays a block's."""
    return {name: b.whole(max_block_bytes=DEFAULT_BLOCK_BYTES) for name, b in blocks.items()}


def _rope_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    return _whole(_rope_blocks(p, ctx))


def _rope_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    reading, grid = diffusion_rope_grid(p)
    rule = reading.rule
    return {
        "kind": "diffusion_rope",
        "model": rule.name,
        "class_name": reading.class_name,
        "axes": list(grid.axes),
        "axis_names": list(rule.axis_names),
        "layout": "interleaved",
        "channel_order": grid.numbers.get("channel_order", "axis_major"),
        "unrotated_channels": grid.pad,
        "rotary_dim": grid.rotary_dim,
        "frames": grid.frames,
        "height": grid.height,
        "width": grid.width,
        "text_len": grid.text_len,
        "text": rule.text,
        "text_rotated": rule.text_rotated,
        "tokens": grid.tokens,
        "reference": rule.reference,
        "reference_precision": rule.precision,
        "notes": rule.notes,
        "numbers": _json({k: v for k, v in grid.numbers.items() if k != "channel_order"}),
        "config_values": _json(reading.values),
        "defaulted": list(reading.defaulted),
        "source": reading.source,
        "precision": p["precision"],
        "dtype": p["dtype"],
    }


_GRID_FIELDS = (
    kinds.FieldSpec(
        "frames",
        "int",
        "latent frames in the transformer's patches (1 for an image)",
        1,
        minimum=1,
    ),
    kinds.FieldSpec(
        "height", "int", "latent rows in the transformer's patches", minimum=1, example=4
    ),
    kinds.FieldSpec(
        "width", "int", "latent columns in the transformer's patches", minimum=1, example=6
    ),
    kinds.FieldSpec(
        "precision",
        "str",
        "exact: float64 positions and angles, cast once; engine (or diffusers, the same): "
        "diffusers' own arithmetic, in float32 where it computes in float32 (positions, "
        "frequencies, angles), as precision engine means on every RoPE-family table",
        "exact",
        choices=DIFFUSERS.precisions,
    ),
)

DIFFUSION_ROPE: kinds.Kind = kinds.Kind(
    name="diffusion_rope",
    path="/v1/encodings/diffusion-rope",
    tag="encodings",
    summary="Rotary tables of diffusion and video transformers (FLUX, Wan, HunyuanVideo, "
    "Qwen-Image, CogVideoX, LTX-Video)",
    description="The rotary embedding of a diffusion or video transformer as diffusers' own "
    "module computes it, for a latent grid of `frames` × `height` × `width` patches and "
    "`text_len` text tokens placed where the model places them (FLUX and Qwen-Image: text "
    "first, rotated; CogVideoX: text first, not rotated; HunyuanVideo: text last, not "
    "rotated; Wan and LTX-Video: text by cross-attention, no rows). `ids` (N, A) are each "
    "token's positions per axis (fractional for CogVideoX 1.0 and LTX-Video), `cos` and `sin` "
    "(N, R) each angle on its pair's two adjacent channels (`meta.layout` interleaved), the "
    "axes' widths in `meta.axes`. Angles in float64, cast once (diffusers computes FLUX's and "
    "Wan's in float64 too, the others' in float32: `meta.reference_precision`).",
    fields=(
        kinds.FieldSpec(
            "model",
            "str",
            "a diffusers transformer's name (flux, wan, hunyuan-video, qwen-image, cogvideox, "
            "ltx-video: the published checkpoint each stands for is in meta.source), a "
            "published checkpoint (FLUX.1-dev, Wan2.2-TI2V-5B, CogVideoX1.5-5B …) or a "
            "diffusers transformer class (its defaults)",
            None,
            choices=MODEL_NAMES,
            example="flux",
        ),
        kinds.FieldSpec(
            "config",
            "object",
            "a diffusers transformer/config.json (its _class_name picks the rule; keys it "
            "lacks take the class default, listed in meta.defaulted), instead of model",
            None,
        ),
        *_GRID_FIELDS,
        kinds.FieldSpec(
            "text_len",
            "int",
            "text tokens, placed where the model places them (none for cross-attention models)",
            0,
            minimum=0,
        ),
        kinds.FieldSpec(
            "rope_interpolation_scale",
            "floats",
            "LTX-Video only: what the pipeline passes, (vae temporal compression / frame_rate, "
            "vae spatial compression, vae spatial compression); default (8/25, 32, 32), "
            "LTXPipeline at 25 frames per second",
            None,
            length=3,
            exclusive_minimum=0,
        ),
    ),
    tensors=(
        kinds.TensorSpec("cos", ("N", "R")),
        kinds.TensorSpec("sin", ("N", "R")),
        kinds.TensorSpec("ids", ("N", "A")),
    ),
    shapes=_rope_shapes,
    compute=_rope_compute,
    check=_need_model_or_config,
    meta=_rope_meta,
    blocks=_rope_blocks,
    row_elements=lambda p: max(s[-1] for s in _rope_shapes(p).values()),
    examples=({"model": "flux", "height": 4, "width": 6, "text_len": 2},),
)
"""The diffusion-rope endpoint kind (see :mod:`posenc.core.kinds`)."""


# ---------------------------------------------------------------------------------------------
# sincos_2d
# ---------------------------------------------------------------------------------------------


def sincos_grid(p: Mapping[str, Any]) -> tuple[Reading, SincosGrid]:
    """The request read: its rule and grid (numbers only)."""
    _need_model_or_config(p)
    reading = read_sincos(p.get("model"), p.get("config"))
    grid = reading.rule.read(reading.values, p.get("frames") or 1, p["height"], p["width"])
    return reading, dataclasses.replace(grid, engine=DIFFUSERS.own_arithmetic(p.get("precision")))


def _sincos_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    reading, grid = sincos_grid(p)

    def fill(start: int, stop: int, block: Tensor) -> None:
        fill_sincos_rows(grid, reading.rule, start, stop, block)

    shape = (grid.tokens, grid.dim)
    return {"pos_embed": TableBlocks("pos_embed", shape, ctx.dtype, fill, ctx.device)}


def _sincos_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    reading, grid = sincos_grid(p)
    temporal = grid.temporal
    spatial = grid.dim - temporal
    parts = [["column", spatial // 2], ["row", spatial // 2]]
    if temporal:
        parts.insert(0, ["frame", temporal])
    return {
        "kind": "sincos_2d",
        "model": reading.rule.name,
        "class_name": reading.class_name,
        "frames": grid.frames,
        "height": grid.height,
        "width": grid.width,
        "dim": grid.dim,
        "parts": parts,
        "layout": "[sin | cos] per part",
        "tokens": grid.tokens,
        "reference": reading.rule.reference,
        "numbers": _json(grid.numbers),
        "config_values": _json(reading.values),
        "defaulted": list(reading.defaulted),
        "source": reading.source,
        "precision": p["precision"],
        "dtype": p["dtype"],
    }


SINCOS_2D: kinds.Kind = kinds.Kind(
    name="sincos_2d",
    path="/v1/encodings/sincos-2d",
    tag="encodings",
    summary="2-D and 3-D sin-cos position tables of diffusion transformers (SD3, PixArt, DiT, "
    "CogVideoX)",
    description="The fixed sin-cos table a diffusion transformer adds to its patches, as "
    "diffusers' get_2d_sincos_pos_embed / get_3d_sincos_pos_embed compute it for a grid of "
    "`frames` × `height` × `width` patches, rows in row-major order: SD3 crops the centre of "
    "its pos_embed_max_size table; PixArt and DiT scale coordinates by base_size / grid and "
    "interpolation_scale; CogVideoX (without rotary) puts a frame part first. Each part is "
    "[sin | cos], the column coordinate's before the row's (`meta.parts`). float64, cast once.",
    fields=(
        kinds.FieldSpec(
            "model",
            "str",
            "sd3, pixart, dit or cogvideox (the published checkpoint each stands for is in "
            "meta.source), a published checkpoint (stable-diffusion-3-medium, CogVideoX-2b …) "
            "or a diffusers transformer class (its defaults)",
            None,
            choices=SINCOS_MODEL_NAMES,
            example="sd3",
        ),
        kinds.FieldSpec(
            "config",
            "object",
            "a diffusers transformer/config.json (its _class_name picks the rule), instead of "
            "model",
            None,
        ),
        *_GRID_FIELDS,
    ),
    tensors=(kinds.TensorSpec("pos_embed", ("N", "D")),),
    shapes=lambda p: {"pos_embed": (sincos_grid(p)[1].tokens, sincos_grid(p)[1].dim)},
    compute=lambda p, ctx: _whole(_sincos_blocks(p, ctx)),
    check=_need_model_or_config,
    meta=_sincos_meta,
    blocks=_sincos_blocks,
    row_elements=lambda p: sincos_grid(p)[1].dim,
    examples=({"model": "sd3", "height": 4, "width": 6},),
)
"""The sincos-2d endpoint kind (see :mod:`posenc.core.kinds`)."""
