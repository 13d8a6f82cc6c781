"""transformers' and vLLM's RoPE for one config, side by side.

:func:`positions_for_engine` is ``POST /v1/configs/positions``' reading of a config's
positions for any registered engine (:mod:`posenc.engines`: each RoPE layer type's entry,
softmax scale and ``meta`` from the engine's module); :func:`compare_engines` is ``POST
/v1/configs/compare`` of transformers and vLLM: where the two engines' tables and scales differ
at the requested positions, with one sentence per rule (see docs/engines.md). vLLM's rules are
:mod:`posenc.rope.vllm`; transformers' are :mod:`posenc.rope` and :mod:`posenc.readers.hf`.

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements, sequence_length
from posenc.engines import ENGINES, engine_named
from posenc.facts.config_parts import text_part
from posenc.facts.families import family, types_where
from posenc.readers.hf.positions import read_positions
from posenc.resolve import resolve_fields
from posenc.rope import RopeScaling, rope_inv_freq
from posenc.rope.vllm import (
    VLLM_ONLY_ROPE_TYPES,
    VllmRope,
    angles_table,
    llama4_query_scale,
    vllm_for_fields,
)
from posenc.rope_kinds.kind import ROPE

#: Text model types whose transformers attention multiplies queries by Llama 4's
#: ``1 + β·ln(1 + ⌊p/L0⌋)`` with ``rope_parameters.llama_4_scaling_beta`` (vLLM: only from a
#: Mistral-format ``llama_4_scaling`` block).
LLAMA4_QUERY_SCALE_TYPES: frozenset[str] = types_where(lambda f: f.query_scale == "llama4_beta")

_DIFF_TOL = 1e-6


def _text_rope_parameters(config: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The text model's ``model_type`` and raw ``rope_parameters`` (or ``rope_scaling``)."""
    c, _ = text_part(config)
    model_type = c.get("model_type") or config.get("model_type") or ""
    params = c.get("rope_parameters") or c.get("rope_scaling") or {}
    return str(model_type), params if isinstance(params, Mapping) else {}


def query_scale_beta(config: Mapping[str, Any]) -> tuple[float, int] | None:
    """``(β, L0)`` of a query scale transformers applies and vLLM does not (an HF-format
    Ministral 3 config's ``llama_4_scaling_beta``), or None."""
    model_type, params = _text_rope_parameters(config)
    beta = params.get("llama_4_scaling_beta")
    omax = params.get("original_max_position_embeddings")
    if family(model_type.removesuffix("_text")).query_scale != "llama4_beta" or beta is None:
        return None
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not isinstance(omax, int):
        return None
    return float(beta), int(omax)


#: The two engines :func:`compare_engines` explains, rule by rule.
TRANSFORMERS, VLLM = ENGINES["transformers"], ENGINES["vllm"]


def _resolve(config: Mapping[str, Any], engine: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    given = {"config": dict(config), "engine": engine, "dtype": "float64", **extra}
    return resolve_fields(ROPE, {k: v for k, v in given.items() if v is not None})


def positions_for_engine(
    config: Mapping[str, Any], engine: str = "transformers", max_model_len: int | None = None
) -> dict[str, Any]:
    """``read_positions(config).to_dict()`` as ``engine`` applies it, with ``meta``.

    Each RoPE layer type's entry is updated with the engine's own (:meth:`Engine.layer_entry`:
    vLLM's magnitude, class and cache rows; llama.cpp's and MLX's arguments, layout, magnitude
    and scaling type as each names it), the softmax scale multiplied by its factor (vLLM's
    smallest), its notes added to ``warnings``; ``meta`` names the engine and, for one that
    reads a server's context (``takes_max_model_len``), the ``max_model_len`` it used.

    Raises:
        InvalidArgument: an unknown engine, a bad ``max_model_len``, a config it does not run.
    """
    reader = engine_named(engine)
    if max_model_len is not None and (
        isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 1
    ):
        raise InvalidArgument(
            f"max_model_len must be an integer >= 1, got {max_model_len!r}", field="max_model_len"
        )
    mp = read_positions(config)
    out = mp.to_dict()
    meta: dict[str, Any] = {"engine": reader.name}
    if reader.describes_layers:
        meta["max_model_len"] = max_model_len
    if reader.describes_layers and mp.kind == "rope" and mp.rope:
        factors = []
        for name in mp.rope:
            given: dict[str, Any] = {"positions": [0]}
            given["layer_type"] = name if mp.per_layer_type else None
            if reader.takes_max_model_len:
                given["max_model_len"] = max_model_len
            fields = _resolve(config, reader.name, given)
            out["rope"][name].update(reader.layer_entry(fields))
            factors.append(reader.softmax_factor(fields))
            notes = reader.notes(fields)
            if notes:
                out["warnings"] = [*out["warnings"], *notes]
            if "vllm_max_model_len" in fields:  # what the server's context defaulted to
                meta["max_model_len"] = fields["vllm_max_model_len"]
        if reader.scales_softmax and out["softmax_scale"] is not None:
            out["softmax_scale"] = out["softmax_scale"] * min(factors)
        if mp.layout is not None:  # the engine's layout, as each layer entry says it
            layouts = {out["rope"][n].get("layout", mp.layout) for n in mp.rope}
            out["layout"] = layouts.pop() if len(layouts) == 1 else mp.layout
    elif reader.scales_softmax:
        meta["max_model_len"] = max_model_len or mp.max_position_embeddings
    out["engine"] = reader.name
    out["meta"] = meta
    return out


def _diff(a: Tensor, b: Tensor, pos: Tensor) -> dict[str, Any]:
    """``{"max_abs_diff", "first_position"}`` of two ``(T, R/2)`` tables over ``pos (T,)``."""
    if a.numel() == 0:
        return {"max_abs_diff": 0.0, "first_position": None}
    delta = (a - b).abs().amax(dim=1)  # (T,)
    over = torch.nonzero(delta > _DIFF_TOL)
    first = int(pos[int(over[0, 0])]) if over.numel() else None
    return {"max_abs_diff": float(delta.max()), "first_position": first}


def _scalar(tf: float | None, vl: float | None, first: int) -> dict[str, Any]:
    if tf is None or vl is None:
        return {"max_abs_diff": None, "first_position": None, "transformers": tf, "vllm": vl}
    d = abs(tf - vl)
    return {
        "max_abs_diff": d,
        "first_position": first if d > _DIFF_TOL else None,
        "transformers": tf,
        "vllm": vl,
    }


def compare_engines(
    config: Mapping[str, Any],
    *,
    seq_len: int | None = None,
    positions: Sequence[int] | None = None,
    max_model_len: int | None = None,
    layer_type: str | None = None,
    max_elements: int | None = None,
) -> dict[str, Any]:
    """Where transformers' and vLLM's RoPE for ``config`` differ, at the requested positions.

    cos and sin are compared per (position, frequency), magnitude included, whatever the
    layouts. ``first_position`` is the first requested position whose values differ by more than
    1e-6 (null when none); for the two scalars, null when they are equal, else the first
    requested position. Positions beyond vLLM's cache are compared no further (vLLM refuses them)
    and named in ``differences``, which has one sentence per rule on which the engines disagree
    at the requested positions.

    Raises:
        InvalidArgument: a config posenc cannot read, not RoPE, bad positions.
        TooLarge: more than ``max_elements`` values to compare.
    """
    count = sequence_length(positions, seq_len)
    mp = read_positions(config)
    if mp.kind != "rope":
        raise InvalidArgument(
            f"config of model_type {mp.model_type!r} uses {mp.kind} positions; the engines "
            "are compared on RoPE only",
            field="config",
        )
    rope_type = mp.rope_for(layer_type).rope_type
    if rope_type in VLLM_ONLY_ROPE_TYPES:
        raise InvalidArgument(
            f"config rope_type {rope_type!r} is built by vLLM only: transformers 5.24 has no rule "
            "for it (its rotary module fails on this config), so there is nothing to compare; "
            'ask /v1/encodings/rope with engine: "vllm" for vLLM\'s table',
            field="config",
        )
    where = {"seq_len": seq_len, "positions": list(positions) if positions is not None else None}
    tf = _resolve(config, TRANSFORMERS.name, {**where, "layer_type": layer_type})
    if count is not None:
        check_elements(
            4 * count * tf["rotary_dim"], what="the compared tables", max_elements=max_elements
        )
    vf = _resolve(
        config,
        VLLM.name,
        {"positions": [0], "max_model_len": max_model_len, "layer_type": layer_type},
    )
    if tf["positions"] is not None:  # (T,), checked by resolve_fields
        pos = torch.tensor(tf["positions"], dtype=torch.int64)
    else:
        pos = torch.arange(int(tf["seq_len"]), dtype=torch.int64)
    length = int(pos.max()) + 1
    scaling = RopeScaling.from_dict(tf["scaling"]) if tf["scaling"] is not None else None
    tf_inv, tf_scale = rope_inv_freq(tf["rotary_dim"], tf["base"], scaling, seq_len=length)
    vl = vllm_for_fields(vf)
    inside = pos < vl.rows
    shown = pos[inside]
    tf_cos, tf_sin = angles_table(shown, tf_inv, tf_scale)
    vl_cos, vl_sin = angles_table(vl.angle_positions(shown), vl.inv_freq, vl.attention_scaling)
    first = int(pos[0])
    tf_softmax = mp.softmax_scale
    vl_softmax = None if tf_softmax is None else tf_softmax * vl.softmax_factor
    out: dict[str, Any] = {
        "engines": [TRANSFORMERS.name, VLLM.name],
        "cos": _diff(tf_cos, vl_cos, shown),
        "sin": _diff(tf_sin, vl_sin, shown),
        "attention_scaling": _scalar(tf_scale, vl.attention_scaling, first),
        "softmax_scale": _scalar(tf_softmax, vl_softmax, first),
    }
    beta = query_scale_beta(config)
    sentences: list[str] = []
    if beta is not None:
        qs = llama4_query_scale(pos, *beta)  # (T,)
        over = torch.nonzero((qs - 1).abs() > _DIFF_TOL)
        out["query_scale"] = {
            "max_abs_diff": float((qs - 1).abs().max()),
            "first_position": int(pos[int(over[0, 0])]) if over.numel() else None,
        }
        if over.numel():
            sentences.append(
                f"Query scale: transformers multiplies queries by 1 + {beta[0]:g}·ln(1 + "
                f"⌊p/{beta[1]}⌋) from rope_parameters.llama_4_scaling_beta (up to "
                f"{float(qs.max()):.6g} here, from position {out['query_scale']['first_position']}"
                "); vLLM applies Llama 4 scaling only from a Mistral-format params.json "
                "(llama_4_scaling), not from an HF config, so its queries are unscaled."
            )
    sentences += _sentences(tf, vf, vl, scaling, length, tf_scale, out, pos, tf_softmax)
    out["differences"] = sentences
    out["meta"] = {
        "config_model_type": mp.model_type,
        "layer_type": layer_type,
        "max_model_len": vf["vllm_max_model_len"],
        "transformers_rope_type": scaling.type if scaling is not None else "default",
        "vllm_rope_type": vl.rope_type,
        "vllm_rows": vl.rows,
        "positions_compared": int(inside.sum()),
    }
    return out


def _sentences(
    tf: Mapping[str, Any],
    vf: Mapping[str, Any],
    vl: VllmRope,
    scaling: RopeScaling | None,
    length: int,
    tf_scale: float,
    out: Mapping[str, Any],
    pos: Tensor,
    tf_softmax: float | None,
) -> list[str]:
    """One sentence per rule on which the engines disagree at these positions."""
    said: list[str] = []
    beyond = pos[pos >= vl.rows]
    if beyond.numel():
        said.append(
            f"Rows: vLLM's {vl.rope_type} cache has {vl.rows} rows, so it refuses positions from "
            f"{vl.rows} on ({beyond.numel()} requested, the first {int(beyond[0])}); "
            "transformers computes them. Those positions are not compared."
        )
    table_differs = (
        out["cos"]["first_position"] is not None or out["sin"]["first_position"] is not None
    )
    explained = False
    kind = scaling.type if scaling is not None else "default"
    mml = vf["vllm_max_model_len"]
    if kind == "longrope" and scaling is not None:
        omax = int(scaling.original_max_position_embeddings)  # type: ignore[arg-type]
        tf_long, vl_long = length > omax, vl.rope_type == "longrope_long"
        if tf_long != vl_long:
            said.append(
                f"LongRoPE factors: vLLM uses {'long' if vl_long else 'short'}_factor at every "
                f"position because max_model_len {mml} "
                f"{'>' if vl_long else '<='} original_max_position_embeddings {omax}; "
                f"transformers uses {'long' if tf_long else 'short'}_factor for this sequence of "
                f"{length} positions (long only above {omax})."
            )
            explained = True
    if kind == "dynamic" and scaling is not None:
        omax = int(scaling.original_max_position_embeddings)  # type: ignore[arg-type]
        if length > omax:
            said.append(
                f"Dynamic NTK: vLLM's cache is fixed at {vl.rows} rows with the unscaled base "
                f"{tf['base']:g} (max_trained_positions = max_position_embeddings); transformers "
                f"rescales the base for a sequence of {length} > {omax} positions, at every "
                "position of it."
            )
            explained = True
    if vl.dual_chunk is not None and table_differs:
        chunk, local, cache = vl.dual_chunk
        said.append(
            f"Dual chunk attention: vLLM's DualChunkRotaryEmbedding (chunk_size {chunk}, "
            f"local_size {local}) rotates keys at position p mod {chunk - local} (its {cache} "
            "cache here) and queries with four other caches; transformers ignores "
            "dual_chunk_attention_config and applies plain RoPE at every position."
        )
        explained = True
    deepseek = vl.rope_type.startswith("deepseek")
    if deepseek and abs(tf_scale - vl.attention_scaling) > _DIFF_TOL and scaling is not None:
        said.append(
            f"DeepSeek YaRN magnitude: vLLM multiplies cos/sin by mscale(factor, mscale) / "
            f"mscale(factor, mscale_all_dim) with defaults 1 and 0 and ignores attention_factor "
            f"= {vl.attention_scaling:.6g}; transformers uses attention_factor, else that ratio "
            f"only when both mscale and mscale_all_dim are given, else mscale(factor) = "
            f"{tf_scale:.6g}."
        )
        explained = True
    elif abs(tf_scale - vl.attention_scaling) > _DIFF_TOL:
        said.append(
            f"Magnitude: vLLM's {vl.rope_type} multiplies cos/sin by {vl.attention_scaling:.6g}, "
            f"transformers by {tf_scale:.6g}."
        )
        explained = True
    if vl.rope_type == "deepseek_llama_scaling" and vl.softmax_factor != 1.0:
        vl_soft = None if tf_softmax is None else tf_softmax * vl.softmax_factor
        said.append(
            "DeepSeek softmax scale: attention_factor == 1.0 makes vLLM build "
            "deepseek_llama_scaling, whose attention leaves mscale(factor, mscale_all_dim)² out "
            f"of the softmax scale ({vl_soft:.6g}); transformers keeps it ({tf_softmax:.6g})."
            if tf_softmax is not None and vl_soft is not None
            else "DeepSeek softmax scale: vLLM's deepseek_llama_scaling leaves mscale² out."
        )
    if deepseek and scaling is not None and scaling.truncate is False and table_differs:
        said.append(
            "DeepSeek YaRN ramp: vLLM always rounds the correction range to whole dimensions; "
            "transformers follows truncate: false."
        )
        explained = True
    if table_differs and not explained:
        said.append(
            f"Frequencies: vLLM's {vl.rope_type} rule gives other angles than transformers' "
            f"{kind} at these positions (largest cos difference "
            f"{out['cos']['max_abs_diff']:.3g}, from position {out['cos']['first_position']})."
        )
    return said


__all__ = [
    "LLAMA4_QUERY_SCALE_TYPES",
    "compare_engines",
    "positions_for_engine",
    "query_scale_beta",
]
