"""RoPE as vLLM builds it: ``get_rope``'s cos/sin caches, magnitudes and softmax scales.

Most people who train with transformers serve with vLLM, and for some configs the two engines
build different tables. This module writes down vLLM's rules (``vllm/model_executor/layers/
rotary_embedding/``: ``get_rope`` and one class per type, as vLLM 0.32's model code calls them),
beside transformers' (:mod:`posenc.rope`), in float64, so a table stays exact:

- **One class per scaling type, declared by its module.** Each scaling module
  (:mod:`posenc.rope.linear`, :mod:`~posenc.rope.dynamic`, :mod:`~posenc.rope.yarn`,
  :mod:`~posenc.rope.longrope`, :mod:`~posenc.rope.llama3`, :mod:`~posenc.rope.proportional`)
  names the class vLLM builds (``VLLM_CLASS``) and writes its cache (``vllm``: frequencies,
  magnitude and rows, as :class:`~posenc.rope.vllm_cache.VllmRope`); :func:`vllm_rules` reads
  them off the registered types, so a new type's vLLM rule is written once, in its module.
  Where the engines differ: vLLM's cache has ``max_position`` rows (the config's
  ``max_position_embeddings``) for ``default``, ``llama3`` and ``dynamic``;
  ``max_position · factor`` for ``linear``; ``original_max_position_embeddings · factor`` for
  ``yarn`` and DeepSeek's YaRN; LongRoPE takes its long factors whenever the server's
  ``max_model_len`` exceeds the original length; dynamic NTK is one fixed cache; DeepSeek's
  models build ``DeepseekScalingRotaryEmbedding`` for YaRN. A position at or beyond the rows
  is refused.
- vLLM-only types, read from the configs that use them (:func:`vllm_only_rope`):
  ``dynamic`` with ``alpha`` (Hunyuan's ``DynamicNTKAlphaRotaryEmbedding``: base
  ``·alpha^(R/(R−2))``, ``max_position`` rows); ``xdrope`` (HunyuanOCR's ``XDRotaryEmbedding``:
  the same cache, its half-width split into ``xdrope_section`` parts, part ``i`` taken at
  position row ``i`` of four, P/W/H/T); ``ntk`` (``NTKScalingRotaryEmbedding``: fixed NTK, or
  mixed with ``mixed_b``); a config's ``dual_chunk_attention_config`` (Qwen2.5-1M's
  ``DualChunkRotaryEmbedding``, chosen by ``get_rope`` before any rope type: five caches of
  plain RoPE angles at remapped positions, :func:`dual_chunk_positions`).

Position-dependent query scales: transformers' Ministral 3 multiplies queries by
``1 + β·ln(1 + ⌊p/L0⌋)`` from ``rope_parameters.llama_4_scaling_beta`` of an HF-format config;
vLLM applies that only from a Mistral-format ``llama_4_scaling`` block
(:func:`llama4_query_scale`).

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.facts.families import types_where
from posenc.rope.scaling import ROPE_TYPES
from posenc.rope.sections import check_section_rows
from posenc.rope.vllm_cache import (
    DUAL_CHUNK_CACHES,
    VllmRope,
    VllmServer,
    base_inv_freq,
    check_dual_chunk_cache,
    dual_chunk_positions,
)

#: Model types whose vLLM model code builds DeepSeek's YaRN (``deepseek_v2.py`` and the
#: models that reuse its attention) for any non-default RoPE type.
DEEPSEEK_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.vllm_deepseek_yarn)


#: RoPE types only vLLM builds (``NTKScalingRotaryEmbedding``, ``XDRotaryEmbedding``):
#: transformers 5.24's ``ROPE_INIT_FUNCTIONS`` has no rule for them.
VLLM_ONLY_ROPE_TYPES: frozenset[str] = frozenset({"ntk", "xdrope"})


def vllm_rules() -> dict[str, ModuleType]:
    """Scaling type -> its module, for the registered types (:data:`~posenc.rope.scaling.
    ROPE_TYPES`) whose module declares vLLM's class (``VLLM_CLASS``) and its cache
    (``vllm``): vLLM's chain of types, read off the modules."""
    return {
        name: module
        for name, module in ROPE_TYPES.items()
        if hasattr(module, "VLLM_CLASS") and hasattr(module, "vllm")
    }


def vllm_classes() -> dict[str, str]:
    """Scaling type -> the class vLLM's ``get_rope`` builds for it (:func:`vllm_rules`)."""
    return {name: str(module.VLLM_CLASS) for name, module in vllm_rules().items()}


def vllm_rope(
    rotary_dim: int,
    base: float,
    scaling: Mapping[str, Any] | None,
    *,
    max_position: int,
    max_model_len: int,
    deepseek: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> VllmRope:
    """vLLM's cache for one layer type, in float64 (written from vLLM's classes, not from
    :mod:`posenc.rope`).

    Args:
        rotary_dim: ``R`` (even).
        base: ``rope_theta``.
        scaling: the scaling with transformers' names and ``type`` (the rope kind's ``scaling``
            field), or None.
        max_position: what vLLM's model code passes as ``max_position``: the config's
            ``max_position_embeddings``.
        max_model_len: the server's ``--max-model-len`` (LongRoPE's choice of factors).
        deepseek: the model's vLLM code builds DeepSeek's YaRN (:data:`DEEPSEEK_MODEL_TYPES`).
        extra: vLLM-only keys of the rope parameters (``alpha``, ``max_trained_positions``,
            ``short_mscale``, ``long_mscale``).

    Returns:
        :class:`VllmRope`.
    """
    extra = dict(extra or {})
    base = float(base)
    inv = base_inv_freq(rotary_dim, base)
    if scaling is None:
        if "alpha" in extra:  # Hunyuan: a "dynamic" config with alpha
            alpha = float(extra["alpha"])
            new_base = base * alpha ** (rotary_dim / (rotary_dim - 2))
            return VllmRope("dynamic_alpha", base_inv_freq(rotary_dim, new_base), 1.0, max_position)
        return VllmRope("default", inv, 1.0, max_position)
    kind = scaling.get("type") or scaling.get("rope_type")
    module = vllm_rules().get(str(kind))
    if module is not None:
        server = VllmServer(max_position, max_model_len, deepseek, extra)
        rope: VllmRope = module.vllm(inv, rotary_dim, base, scaling, server)
        return rope
    raise InvalidArgument(
        f"engine vllm has no rule for scaling type {kind!r}", field="scaling.type"
    )


#: Rows of a cache without a known ``max_position`` (fields given without a config or
#: ``max_model_len``): no limit below the library's own.
UNBOUNDED = 2**53


def default_max_position(scaling: Mapping[str, Any] | None, max_model_len: int | None) -> int:
    """vLLM's ``max_position`` for fields given without a config: what the scaling says of the
    config (``dynamic``: ``original_max_position_embeddings`` stands for
    ``max_position_embeddings``; ``longrope``: ``factor · original``), else ``max_model_len``."""
    if scaling is not None and scaling.get("original_max_position_embeddings") is not None:
        omax = int(scaling["original_max_position_embeddings"])
        if scaling.get("type") == "dynamic":
            return omax
        if scaling.get("type") == "longrope":
            factor = scaling.get("factor")
            return round(omax * factor) if factor is not None else omax
    return max_model_len if max_model_len is not None else UNBOUNDED


def vllm_for_fields(p: Mapping[str, Any]) -> VllmRope:
    """:func:`vllm_rope` for resolved rope fields (``posenc.rope``'s kind, ``engine: vllm``);
    :func:`vllm_only_rope` for a config read with vLLM-only parameters (``config_vllm``)."""
    scaling = p["scaling"]
    max_position = p.get("config_max_position_embeddings") or default_max_position(
        scaling, p.get("max_model_len")
    )
    if p.get("config_vllm"):
        return vllm_only_rope(
            p["rotary_dim"],
            p["config_vllm"],
            max_position=max_position,
            cache=p.get("dual_chunk_cache"),
        )
    if p.get("dual_chunk_cache") is not None:
        raise InvalidArgument(_NO_DUAL_CHUNK, field="dual_chunk_cache")
    rope = vllm_rope(
        p["rotary_dim"],
        p["base"],
        scaling,
        max_position=max_position,
        max_model_len=p.get("vllm_max_model_len") or p.get("max_model_len") or max_position,
        deepseek=bool(p.get("config_deepseek")),
    )
    if p.get("mrope_section") is not None and rope.rows < UNBOUNDED:
        # MRotaryEmbedding: max_position · positions_factor rows (get_rope's default 4)
        factor = int(p.get("config_mrope_positions_factor") or 4)
        rope = dataclasses.replace(rope, rows=rope.rows * factor)
    return rope


def vllm_complete(p: dict[str, Any], max_position_asked: int) -> dict[str, Any]:
    """Resolved rope fields with ``engine: vllm``: ``max_model_len`` defaulted (the config's
    ``max_position_embeddings``), and a position beyond vLLM's cache refused."""
    scaling = p["scaling"]
    max_len = p.get("max_model_len")
    if max_len is None:
        max_len = p.get("config_max_position_embeddings") or default_max_position(scaling, None)
    # null when nothing tells it (fields without a config or max_model_len)
    p = {**p, "vllm_max_model_len": None if max_len == UNBOUNDED else max_len}
    if p.get("config_deepseek"):  # deepseek_v2.py: is_neox_style=False whatever the config says
        p["layout"] = "interleaved"
    rope = vllm_for_fields(p)
    check_rows(max_position_asked, rope.rows, rope.rope_type)
    return p


def ntk_inv_freq(rotary_dim: int, base: float, factor: float, mixed_b: float | None) -> Tensor:
    """vLLM's ``NTKScalingRotaryEmbedding``: fixed NTK (``base·factor``, then ``/ factor^(2/R)``)
    or mixed NTK (``/ exp(a·m^b)``, ``a = ln(factor)/(R/2)^b``, ``m = 1 … R/2``); ``(R/2,)``."""
    if mixed_b is None:
        fixed: Tensor = base_inv_freq(rotary_dim, base * factor) / factor ** (2 / rotary_dim)
        return fixed
    half = rotary_dim // 2
    a = math.log(factor) / half**mixed_b
    m = torch.arange(1, half + 1, dtype=torch.float64)  # (R/2,)
    return base_inv_freq(rotary_dim, base) / torch.exp(a * m**mixed_b)


def xdrope_cos_sin(
    positions: Tensor, inv_freq: Tensor, section: Sequence[int]
) -> tuple[Tensor, Tensor]:
    """``XDRotaryEmbedding``'s cos and sin for four position rows, ``(T, R/2)`` float64 each:
    frequency block ``i`` (``section[i]`` wide, in order) at position row ``i``.

    Args:
        positions: ``(len(section), T)`` integers ≥ 0 (P/W/H/T for HunyuanOCR).
        inv_freq: ``(R/2,)``; ``sum(section)`` must equal ``R/2``.
    """
    check_section_rows("XD-RoPE's sections", "xdrope_section", positions, inv_freq, section)
    axis = torch.repeat_interleave(
        torch.arange(len(section)), torch.tensor([int(s) for s in section])
    )  # (R/2,): the position row of each frequency
    pos = positions.to(torch.float64)[axis, :].T  # (T, R/2)
    angles = pos * inv_freq.to(torch.float64)[None, :]
    return torch.cos(angles), torch.sin(angles)


_NO_DUAL_CHUNK = (
    "dual_chunk_cache is for engine vllm with a config that has dual_chunk_attention_config "
    "(Qwen2.5-1M), whose vLLM rotary embedding has five caches; these fields have a single "
    "cache (send the model's config: a preset's fields carry no dual_chunk_attention_config)"
)


def vllm_only_rope(
    rotary_dim: int,
    params: Mapping[str, Any],
    *,
    max_position: int,
    cache: str | None = None,
) -> VllmRope:
    """vLLM's cache for a config whose RoPE only vLLM reads as it is written: ``params`` are
    the config's rope parameters with vLLM's names (``rope_type``, ``rope_theta``, ``alpha``,
    ``factor``, ``mixed_b``, ``xdrope_section``, and ``dual_chunk_attention_config`` from the
    config's top level), as :mod:`posenc.readers.hf` keeps them (``RopeLayerType.vllm``).

    ``get_rope``'s order: ``dual_chunk_attention_config`` first (``DualChunkRotaryEmbedding``,
    plain angles of ``rope_theta``; ``cache`` picks one of its five caches, default ``k``), then
    ``ntk`` (``NTKScalingRotaryEmbedding``), ``dynamic`` with ``alpha``
    (``DynamicNTKAlphaRotaryEmbedding``), ``xdrope`` (``XDRotaryEmbedding``: the same cache).

    Raises:
        InvalidArgument: ``cache`` without a dual-chunk config; a parameter missing.
    """
    theta = float(params["rope_theta"])
    dca = params.get("dual_chunk_attention_config")
    if dca is not None:
        chunk, local = int(dca["chunk_size"]), int(dca["local_size"])
        which = cache or "k"
        check_dual_chunk_cache(which)
        rows = max_position if which == "k" else chunk - local
        return VllmRope(
            "dual_chunk",
            base_inv_freq(rotary_dim, theta),
            1.0,
            rows,
            dual_chunk=(chunk, local, which),
        )
    if cache is not None:
        raise InvalidArgument(_NO_DUAL_CHUNK, field="dual_chunk_cache")
    kind = params.get("rope_type")
    if kind == "ntk":
        mixed = params.get("mixed_b")
        inv = ntk_inv_freq(
            rotary_dim, theta, float(params["factor"]), None if mixed is None else float(mixed)
        )
        return VllmRope("ntk", inv, 1.0, max_position)
    if kind in ("dynamic", "xdrope") and params.get("alpha") is not None:
        alpha = float(params["alpha"])
        inv = base_inv_freq(rotary_dim, theta * alpha ** (rotary_dim / (rotary_dim - 2)))
        if kind == "xdrope":
            section = tuple(int(s) for s in params["xdrope_section"])
            return VllmRope("xdrope", inv, 1.0, max_position, xdrope_section=section)
        return VllmRope("dynamic_alpha", inv, 1.0, max_position)
    raise InvalidArgument(
        f"engine vllm has no rule for rope_type {kind!r} with parameters {sorted(params)}",
        field="config",
    )


def check_rows(positions_max: int, rows: int, rope_type: str, field: str = "positions") -> None:
    """Refuse a position at or beyond vLLM's cache (``InvalidArgument`` giving the rows)."""
    if positions_max >= rows:
        raise InvalidArgument(
            f"engine vllm: position {positions_max} is beyond vLLM's {rope_type} cos/sin cache "
            f"of {rows} rows (positions 0 … {rows - 1}); vLLM builds it once per server from the "
            "config (and max_model_len for LongRoPE)",
            field=field,
        )


def llama4_query_scale(
    positions: Sequence[int] | Tensor, beta: float, original_max_position_embeddings: int
) -> Tensor:
    """``1 + β·ln(1 + ⌊p/L0⌋)`` per position, ``(T,)`` float64: the factor transformers'
    Ministral 3 multiplies queries by (``get_llama_4_attn_scale``)."""
    pos = torch.as_tensor(positions, dtype=torch.float64)
    return 1 + beta * torch.log1p(torch.floor(pos / original_max_position_embeddings))


def angles_table(positions: Tensor, inv_freq: Tensor, magnitude: float) -> tuple[Tensor, Tensor]:
    """``magnitude·cos(p·ω)`` and ``magnitude·sin(p·ω)``, ``(T, R/2)`` float64 (one value per
    position and frequency, whatever the layout)."""
    angles = positions.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    return torch.cos(angles) * magnitude, torch.sin(angles) * magnitude


__all__ = [
    "DEEPSEEK_MODEL_TYPES",
    "DUAL_CHUNK_CACHES",
    "UNBOUNDED",
    "VLLM_ONLY_ROPE_TYPES",
    "VllmRope",
    "angles_table",
    "check_rows",
    "default_max_position",
    "dual_chunk_positions",
    "llama4_query_scale",
    "ntk_inv_freq",
    "vllm_classes",
    "vllm_complete",
    "vllm_for_fields",
    "vllm_only_rope",
    "vllm_rope",
    "vllm_rules",
    "xdrope_cos_sin",
]
