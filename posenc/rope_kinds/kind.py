"""The rope endpoint kind (:mod:`posenc.core.kinds`): RoPE and M-RoPE tables, with presets, configs
and every text-RoPE engine of the registry (:mod:`posenc.engines`): what each reads, its
arguments, its own arithmetic and its ``meta`` come from its module."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posenc.core import kinds, slices
from posenc.core.blocks import tensor_blocks
from posenc.core.errors import InvalidArgument
from posenc.core.validate import check_seq_len_or_positions
from posenc.engines.registry import engine_named, engine_names, refuse_rope_type
from posenc.rope import scaling as scaling_registry
from posenc.rope.precision import LLAMACPP_FIELD, PRECISIONS  # issue 30: precision "engine"
from posenc.rope.scaling import (
    ROPE_LAYOUTS,
    ROPE_ROTATIONS,
    RopeScaling,
    check_exponent_dim,
    rope_inv_freq,
    scaling_parameters,
)
from posenc.rope.sections import check_mrope_section, hunyuan_vl_cos_sin, mrope_cos_sin
from posenc.rope.tables import cos_sin_tables, positions_tensor, rope_blocks, rope_cos_sin
from posenc.rope.vllm import (
    DUAL_CHUNK_CACHES,
    VllmRope,
    xdrope_cos_sin,
)


def _xd_rows(p: Mapping[str, Any]) -> list[list[int]] | None:
    """HunyuanOCR's XD-RoPE position rows (P/W/H/T, one per ``xdrope_section`` part) of
    resolved fields, or None: given only as that many rows with a config that has the
    sections."""
    rows = p["positions"]
    section = p.get("config_xdrope_section")
    if section is None or rows is None or not isinstance(rows[0], list):
        return None
    return [list(r) for r in rows]


def _mrope_rows(p: Mapping[str, Any]) -> list[list[int]] | None:
    """The ``(3, T)`` M-RoPE position rows of resolved fields, or None for plain RoPE: three
    given rows, or with ``mrope_section`` one row (or ``seq_len``) as text on all three axes, as
    transformers expands text positions."""
    rows = p["positions"]
    if _xd_rows(p) is not None:
        return None
    if rows is not None and isinstance(rows[0], list):
        return [list(r) for r in rows]
    if p["mrope_section"] is None:
        return None
    text = list(rows) if rows is not None else list(range(int(p["seq_len"])))
    return [text, text, text]


def _rope_lengths(p: Mapping[str, Any]) -> tuple[int, int]:
    """``(T, max(position) + 1)`` of resolved fields, from the numbers."""
    rows = p["positions"]
    if rows is None:
        return int(p["seq_len"]), int(p["seq_len"])
    if isinstance(rows[0], list):
        return len(rows[0]), max(slices.largest(r) for r in rows) + 1
    return len(rows), slices.largest(rows) + 1


def _rope_check(p: Mapping[str, Any]) -> None:
    check_seq_len_or_positions(p.get("seq_len"), p.get("positions"))
    head_dim, rotary_dim = p.get("head_dim"), p.get("rotary_dim")
    if head_dim is not None and rotary_dim is not None and rotary_dim > head_dim:
        raise InvalidArgument(
            f"rotary_dim must be <= head_dim, got rotary_dim {rotary_dim} > head_dim {head_dim}",
            field="rotary_dim",
        )


def _rope_complete(p: dict[str, Any], _models: Any) -> dict[str, Any]:
    """``rotary_dim`` defaults to ``head_dim``; the M-RoPE fields and the scaling are checked
    (numbers only: nothing of the table's size is made here)."""
    p = {**p, "rotary_dim": p["head_dim"] if p["rotary_dim"] is None else p["rotary_dim"]}
    rows = p["positions"]
    section = p.get("config_xdrope_section")
    if rows is not None and isinstance(rows[0], list) and section is not None:
        if len(rows) != len(section):
            raise InvalidArgument(
                f"this config's XD-RoPE (xdrope_section {section}) takes {len(section)} "
                f"position rows (P/W/H/T), or one; got {len(rows)}",
                field="positions",
            )
    elif rows is not None and isinstance(rows[0], list) and len(rows) != 3:
        raise InvalidArgument(
            f"positions given as {len(rows)} rows are XD-RoPE's (HunyuanOCR: P/W/H/T), which "
            "needs a config with rope_scaling.xdrope_section; M-RoPE takes three rows",
            field="positions",
        )
    elif rows is not None and isinstance(rows[0], list) and p["mrope_section"] is None:
        raise InvalidArgument(
            "positions given as three rows (temporal, height, width) need mrope_section "
            "(three ints summing to rotary_dim/2), or a config that has one",
            field="mrope_section",
        )
    check_exponent_dim(p["rotary_dim"], p["exponent_dim"])
    if p["mrope_section"] is not None:
        check_mrope_section(p["rotary_dim"], p["mrope_section"])
    if p["scaling"] is not None:
        RopeScaling.from_dict(p["scaling"])
    engine = engine_named(p["engine"])
    if p["precision"] not in engine.precisions:
        raise InvalidArgument(
            f"precision {p['precision']!r} is not computed for engine {engine.name}; its "
            f"precisions: {', '.join(engine.precisions)}",
            field="precision",
        )
    return engine.complete(p)  # its own arguments and refusals (issue 30)


def _vllm(p: Mapping[str, Any]) -> VllmRope | None:
    """The engine's fixed cache of frequencies (vLLM's :class:`VllmRope`) or None."""
    cache: VllmRope | None = engine_named(p["engine"]).cache(p)
    return cache


def _rope_scaling(p: Mapping[str, Any]) -> RopeScaling | None:
    return RopeScaling.from_dict(p["scaling"]) if p["scaling"] is not None else None


def _rope_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    seq_len, length = _rope_lengths(p)
    scaling = _rope_scaling(p)
    _inv_freq, attention_scaling = rope_inv_freq(
        p["rotary_dim"], p["base"], scaling, seq_len=length, exponent_dim=p["exponent_dim"]
    )
    vllm = _vllm(p)
    if vllm is not None:
        attention_scaling = vllm.attention_scaling
    meta = {
        "kind": "rope",
        "seq_len": seq_len,
        **{k: p[k] for k in ("head_dim", "rotary_dim", "base", "layout", "scaling", "preset")},
        "exponent_dim": p["exponent_dim"] if p["exponent_dim"] is not None else p["rotary_dim"],
        "rotation": p["rotation"],
        "rope_type": scaling.type if scaling is not None else "default",
        "attention_scaling": attention_scaling,
        "layer_type": p["layer_type"],
        "dtype": p["dtype"],
        **{k: p[k] for k in ("config_model_type", "rope_type") if k in p},
    }
    if _xd_rows(p) is not None:
        meta["xdrope_section"] = p["config_xdrope_section"]
    if _mrope_rows(p) is not None:
        meta["mrope_section"] = p["mrope_section"]
        meta["mrope_interleaved"] = bool(p["mrope_interleaved"])
    meta["engine"] = p["engine"]
    meta["precision"] = p.get("precision", "exact")  # issue 30
    meta.update(engine_named(p["engine"]).meta(p))  # its arguments, magnitude, cache
    return meta


def _table_arguments(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    """The arguments every RoPE table function takes, from resolved fields."""
    return dict(
        rotary_dim=p["rotary_dim"],
        base=p["base"],
        layout=p["layout"],
        scaling=_rope_scaling(p),
        device=ctx.device,
        dtype=ctx.dtype,
        exponent_dim=p["exponent_dim"],
        rotation=p["rotation"],
    )


def _xd_compute(
    p: Mapping[str, Any], rows: list[list[int]], ctx: kinds.Context
) -> dict[str, Tensor]:
    """XD-RoPE for its position rows. vLLM's ``XDRotaryEmbedding``: frequency part ``i`` at
    row ``i``, the same in the layout's two copies; transformers' ``HunYuanVLRotaryEmbedding``:
    the doubled parts over the whole ``half`` width (:func:`hunyuan_vl_cos_sin`)."""
    pos = torch.tensor(rows, dtype=torch.int64)  # (n, T)
    section = p["config_xdrope_section"]
    vllm = _vllm(p)
    if vllm is not None:
        inv, scale = vllm.inv_freq, vllm.attention_scaling
        cos, sin = xdrope_cos_sin(pos, inv, section)  # (T, R/2) each
        if p["layout"] == "half":
            cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        else:
            cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    else:
        if p["layout"] != "half":
            raise InvalidArgument(
                "transformers' HunYuanVL splits the half layout's two copies over different "
                "position rows, which the interleaved layout cannot hold; ask layout half (or "
                "engine vllm)",
                field="layout",
            )
        inv, scale = rope_inv_freq(p["rotary_dim"], p["base"], None)
        cos, sin = hunyuan_vl_cos_sin(pos, inv, section)  # (T, R) each
    return {
        "cos": (cos * scale).to(device=ctx.device, dtype=ctx.dtype),
        "sin": (sin * scale).to(device=ctx.device, dtype=ctx.dtype),
        "inv_freq": inv.to(device=ctx.device, dtype=ctx.dtype),
    }


def _rope_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    engine = engine_named(p["engine"])
    if engine.computes(p):  # issue 30: an engine's own arithmetic, or its own rule
        return engine.tables(p, _mrope_rows(p), device=ctx.device, dtype=ctx.dtype)
    common = _table_arguments(p, ctx)
    xd = _xd_rows(p)
    if xd is not None:
        return _xd_compute(p, xd, ctx)
    rows = _mrope_rows(p)
    if rows is not None:
        tables = mrope_cos_sin(
            rows,
            mrope_section=p["mrope_section"],
            interleaved=bool(p["mrope_interleaved"]),
            **common,
        )
        cos, sin, inv = tables.cos, tables.sin, tables.inv_freq
    else:
        vllm = _vllm(p)
        if vllm is not None:  # vLLM's angles and magnitude, exact in float64 as the default's
            pos = vllm.angle_positions(positions_tensor(p["positions"], p["seq_len"]))
            pos = pos.to(ctx.device)
            inv = vllm.inv_freq.to(ctx.device)
            cos, sin = cos_sin_tables(
                pos, inv, vllm.attention_scaling, p["layout"], ctx.dtype, p["rotation"]
            )
            inv = inv.to(ctx.dtype)
        else:
            tables = rope_cos_sin(p["positions"], seq_len=p["seq_len"], **common)
            cos, sin, inv = tables.cos, tables.sin, tables.inv_freq
    return {"cos": cos, "sin": sin, "inv_freq": inv}


def _rope_streams(p: Mapping[str, Any]) -> bool:
    """Row blocks are of 1-D positions; three rows of M-RoPE positions are computed whole."""
    return p["positions"] is None or not isinstance(p["positions"][0], list)


def _rope_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    engine = engine_named(p["engine"])
    if engine.computes(p):  # issue 30
        return engine.blocks(p, device=ctx.device, dtype=ctx.dtype)
    kw = {**_table_arguments(p, ctx), "seq_len": p["seq_len"]}
    _seq_len, length = _rope_lengths(p)
    inv_freq, _ = rope_inv_freq(
        p["rotary_dim"], p["base"], kw["scaling"], seq_len=length, exponent_dim=p["exponent_dim"]
    )
    vllm = _vllm(p)
    positions = p["positions"]
    if vllm is not None:
        inv_freq = vllm.inv_freq
        kw["frequencies"] = (vllm.inv_freq, vllm.attention_scaling)
        if vllm.dual_chunk is not None:  # the cache's rows hold remapped positions' angles
            positions = vllm.angle_positions(positions_tensor(positions, p["seq_len"]))
            kw["seq_len"] = None
    return {
        "cos": rope_blocks(positions, which="cos", **kw),
        "sin": rope_blocks(positions, which="sin", **kw),
        "inv_freq": tensor_blocks("inv_freq", inv_freq.to(device=ctx.device, dtype=ctx.dtype)),
    }


def _rope_from_config(
    positions: Any, given: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of a read config (:class:`posenc.readers.hf.results.ModelPositions`, which the config
    reader above this module makes) for the layer type asked for."""
    layer_type = given.get("layer_type")
    fields = positions.rope_fields(layer_type)
    layer = positions.rope_for(layer_type)
    info: dict[str, Any] = {"rope_type": layer.rope_type}
    name = given.get("engine", "transformers")
    engine = engine_named(name) if name in engine_names() else None  # else refused later
    xd = None if layer.vllm is None else layer.vllm.get("xdrope_section")
    # HunYuanVL's own reading (default with the alpha base) takes XD-RoPE's sections too
    if xd is not None and layer.rope_type == "default":
        info["config_xdrope_section"] = list(xd)
    if engine is not None:
        info.update(engine.from_config(positions, layer))  # what it reads beyond transformers
        if not engine.implements(layer.rope_type):
            refuse_rope_type(engine, layer.rope_type, engine.why_not(layer.rope_type))
    return fields, info


def _rope_follow(given: Mapping[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A preset's (or config's) rotated fraction follows a ``head_dim`` given without
    ``rotary_dim`` (GPT-NeoX's ``rotary_pct``, Phi's ``partial_rotary_factor``). A config's
    odd ``exponent_dim`` belongs to its own rotated width: it is dropped when the body asks for
    another width."""
    head_dim, rotary_dim = defaults.get("head_dim"), defaults.get("rotary_dim")
    if (
        given.get("head_dim") is not None
        and given.get("rotary_dim") is None
        and head_dim
        and rotary_dim
    ):
        defaults = {**defaults, "rotary_dim": int(given["head_dim"] * rotary_dim / head_dim)}
    width = given.get("rotary_dim") or defaults.get("rotary_dim")
    if "exponent_dim" in defaults and width != rotary_dim:
        defaults = {k: v for k, v in defaults.items() if k != "exponent_dim"}
    return defaults


def scaling_field() -> kinds.FieldSpec:
    """The ``scaling`` field of the rope kind, read off the registered scaling types
    (:func:`posenc.rope.scaling.scaling_parameters`): one member per parameter, with the
    description and bounds its type's module declares."""
    types = scaling_registry.SCALING_TYPES
    members = [
        kinds.FieldSpec(
            "type",
            "str",
            f"{', '.join(types[:-1])} or {types[-1]}; rope_type is accepted as an alias",
            choices=types,
        )
    ]
    members += [
        kinds.FieldSpec(
            p.name,
            p.type,
            p.description,
            default=None,
            minimum=p.bounds.get("minimum"),
            maximum=p.bounds.get("maximum"),
            # a list's bound is of each element, which the library checks
            exclusive_minimum=p.bounds.get("exclusive_minimum") if p.type != "floats" else None,
        )
        for p in scaling_parameters()
    ]
    return kinds.FieldSpec(
        "scaling",
        "struct",
        "null or a scaling object, with the names of transformers' rope_parameters",
        default=None,
        sourced=True,
        schema_name="RopeScalingRequest",
        aliases=(("rope_type", "type"),),
        example={
            "type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        members=tuple(members),
    )


def with_current_scaling(kind: kinds.Kind) -> kinds.Kind:
    """``kind`` with its ``scaling`` field (the rope kind's, and every kind that takes rope
    settings: apply, shift, context parallel) read off the scaling types registered now; a
    kind without one is returned as it is."""
    if not any(f.name == "scaling" for f in kind.fields):
        return kind
    return dataclasses.replace(
        kind, fields=tuple(scaling_field() if f.name == "scaling" else f for f in kind.fields)
    )


def rope_kind() -> kinds.Kind:
    """The rope kind with its ``scaling`` field read off the scaling types registered now (a
    type registered after import is served once this kind, and :func:`with_current_scaling`
    of the other kinds with rope settings, replace theirs in the registry)."""
    return with_current_scaling(ROPE)


ROPE: kinds.Kind = kinds.Kind(
    name="rope",
    path="/v1/encodings/rope",
    tag="encodings",
    summary="Rotary position embedding tables",
    description="RoPE cos/sin tables with the scaling types of Hugging Face transformers "
    "(linear, dynamic, yarn, longrope, llama3, proportional); cos and sin include the "
    "attention scaling (`meta.attention_scaling`, with `meta.rope_type`). `config` takes a "
    "model's config.json (as transformers 5 reads it; `layer_type` for per-layer-type "
    "RoPE); `positions` as three rows with `mrope_section` gives M-RoPE (Qwen2-VL).",
    fields=(
        kinds.FieldSpec("seq_len", "int", "T: positions 0 … T−1", None, minimum=1, example=8),
        kinds.FieldSpec(
            "positions",
            "ints",
            "explicit positions (ints ≥ 0) instead of seq_len; or three lists (temporal, "
            "height, width: (3, T)) with mrope_section; or four (P/W/H/T: (4, T)) with a "
            "HunyuanOCR config's XD-RoPE",
            None,
            minimum=0,
            rows=3,
            max_rows=4,
        ),
        kinds.FieldSpec(
            "head_dim",
            "int",
            "Dh, even (required unless a preset or config gives it)",
            minimum=2,
            multiple_of=2,
            sourced=True,
            example=16,
        ),
        kinds.FieldSpec(
            "rotary_dim",
            "int",
            "R, even ≤ head_dim (default head_dim)",
            None,
            minimum=2,
            multiple_of=2,
            sourced=True,
        ),
        kinds.FieldSpec(
            "base",
            "float",
            "rope_theta (default 10000 when neither preset nor config gives it)",
            10000.0,
            exclusive_minimum=0,
            sourced=True,
        ),
        kinds.FieldSpec(
            "layout",
            "str",
            "half (GPT-NeoX, Llama) or interleaved (GPT-J, RoFormer); default half when "
            "neither preset nor config gives it",
            "half",
            choices=ROPE_LAYOUTS,
            sourced=True,
        ),
        scaling_field(),
        kinds.FieldSpec(
            "exponent_dim",
            "int",
            "E, the exponents' denominator (inv_freq = base^(-2i/E)): rotary_dim (default), or "
            "the odd rotary_dim - 1 of a config whose rotated width int(head_dim x "
            "partial_rotary_factor) is odd (GLM-4-MoE: 21, a 22-wide table)",
            None,
            minimum=1,
            sourced=True,
        ),
        kinds.FieldSpec(
            "rotation",
            "str",
            "positive (default: x cos + rotate_half(x) sin) or negative: the model rotates by "
            "-theta and sin is negated (nanochat, whose rotate_half is cat(x2, -x1))",
            "positive",
            choices=ROPE_ROTATIONS,
            sourced=True,
        ),
        kinds.preset_field("rope"),
        kinds.CONFIG_FIELD,
        kinds.FieldSpec(
            "layer_type",
            "str",
            "for a config with RoPE parameters per layer type (Gemma 3: sliding_attention, "
            "full_attention): which type; required there, refused otherwise",
            None,
        ),
        kinds.FieldSpec(
            "mrope_section",
            "ints",
            "M-RoPE: three ints (temporal, height, width) summing to rotary_dim/2",
            None,
            minimum=0,
            length=3,
            sourced=True,
        ),
        kinds.FieldSpec(
            "mrope_interleaved",
            "bool",
            "M-RoPE: false (default) Qwen2-VL's contiguous sections, true Qwen3-VL's interleaving",
            None,
            sourced=True,
        ),
        kinds.FieldSpec(
            "engine",
            "str",
            "whose tables: transformers (default), vllm (what vLLM's get_rope builds from the "
            "same config), llama.cpp (what llama.cpp passes ggml_rope_ext for the model) or mlx "
            "(mlx-lm's initialize_rope and mx.fast.rope), or another registered engine "
            "(posenc.engines): see docs/engines.md",
            "transformers",
            choices_from=engine_names,
        ),
        kinds.FieldSpec(  # issue 30
            "precision",
            "str",
            "exact (default: float64 angles from the engine's rule, cast once) or engine: the "
            "engine's own arithmetic in its own dtype and order of operations (transformers: "
            "float32 inv_freq, float32 position x inv_freq, torch's float32 cos/sin, bit for bit "
            "its rotary module's output; vLLM: its float32 cache, bit for bit, every class but "
            "XD-RoPE's and Gemma 4's; llama.cpp: ggml's float32 rope, MLX: mx.fast.rope, "
            "within 2 ulp)",
            "exact",
            choices=PRECISIONS,
        ),
        LLAMACPP_FIELD,  # issue 30
        kinds.FieldSpec(
            "max_model_len",
            "int",
            "engine vllm: the server's --max-model-len (default the config's "
            "max_position_embeddings); LongRoPE uses its long factors everywhere above "
            "original_max_position_embeddings",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "dual_chunk_cache",
            "str",
            "engine vllm with a config that has dual_chunk_attention_config (Qwen2.5-1M): which "
            "of DualChunkRotaryEmbedding's five caches, positions being its rows: q, qc, k "
            "(default), qc_no_clamp, q_inter (see docs/engines.md)",
            None,
            choices=DUAL_CHUNK_CACHES,
        ),
    ),
    tensors=(
        kinds.TensorSpec("cos", ("T", "R")),
        kinds.TensorSpec("sin", ("T", "R")),
        kinds.TensorSpec("inv_freq", ("R/2",)),
    ),
    shapes=lambda p: {
        "cos": (_rope_lengths(p)[0], p["rotary_dim"]),
        "sin": (_rope_lengths(p)[0], p["rotary_dim"]),
        "inv_freq": (p["rotary_dim"] // 2,),
    },
    compute=_rope_compute,
    check=_rope_check,
    meta=_rope_meta,
    blocks=_rope_blocks,
    streams=_rope_streams,
    row_elements=lambda p: int(p["rotary_dim"]),
    sources=kinds.Sources("rope", _rope_from_config, _rope_follow),
    complete=_rope_complete,
    examples=(
        {"seq_len": 8, "head_dim": 16},
        {"positions": [0, 1, 2, 4096], "preset": "llama-3.1-8b"},
    ),
)
"""The rope endpoint kind (see :mod:`posenc.core.kinds`)."""
