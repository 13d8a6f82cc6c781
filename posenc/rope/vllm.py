"""RoPE as vLLM builds it: ``get_rope``'s cos/sin caches, magnitudes and softmax scales.

Most people who train with transformers serve with vLLM, and for some configs the two engines
build different tables. This module writes down vLLM's rules (``vllm/model_executor/layers/
rotary_embedding/``: ``get_rope`` and one class per type, as vLLM 0.32's model code calls them),
beside transformers' (:mod:`posenc.rope`), in float64, so a table stays exact:

- **Rows.** vLLM precomputes one cache per layer: ``max_position`` rows (the config's
  ``max_position_embeddings``) for ``default``, ``llama3``, ``dynamic`` and ``ntk``;
  ``max_position · factor`` for ``linear``; ``original_max_position_embeddings · factor`` for
  ``yarn`` and DeepSeek's YaRN; for LongRoPE ``original_max_position_embeddings`` rows of short
  factors or ``max_position`` rows of long ones. A position at or beyond the rows is refused.
- **LongRoPE** (``Phi3LongRoPEScaledRotaryEmbedding``): the long factors at every position when
  the server's ``max_model_len`` exceeds ``original_max_position_embeddings``, whatever the
  sequence; the magnitude is ``sqrt(1 + ln(L/L0)/ln L0)`` with ``L = max_position``
  (``attention_factor`` is not read).
- **Dynamic NTK** (``DynamicNTKScalingRotaryEmbedding``): one fixed cache with the base
  ``base·(f·L/T − (f−1))^(R/(R−2))``, ``L = max_position``, ``T = max_trained_positions``
  (default ``L``, which leaves the base unscaled); transformers rescales from the sequence.
- **DeepSeek's YaRN** (``DeepseekScalingRotaryEmbedding``, chosen by vLLM's DeepSeek model code
  for any non-default type): magnitude ``mscale(f, mscale)/mscale(f, mscale_all_dim)`` (defaults
  1 and 0), ``attention_factor`` ignored, the correction range always truncated;
  ``attention_factor == 1.0`` selects ``deepseek_llama_scaling``, whose attention leaves
  ``mscale(f, mscale_all_dim)²`` out of the softmax scale.
- **Linear** divides the positions by the factor (the same angles as ``inv_freq / factor``);
  ``llama3`` and ``yarn`` follow the same formulas as transformers.
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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.errors import InvalidArgument
from posenc.hf.families import types_where
from posenc.rope.sections import check_section_rows

Engine = Literal["transformers", "vllm"]
ENGINES: tuple[str, ...] = ("transformers", "vllm")

#: Model types whose vLLM model code builds DeepSeek's YaRN (``deepseek_v2.py`` and the
#: models that reuse its attention) for any non-default RoPE type.
DEEPSEEK_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.vllm_deepseek_yarn)


#: RoPE types only vLLM builds (``NTKScalingRotaryEmbedding``, ``XDRotaryEmbedding``):
#: transformers 5.24's ``ROPE_INIT_FUNCTIONS`` has no rule for them.
VLLM_ONLY_ROPE_TYPES: frozenset[str] = frozenset({"ntk", "xdrope"})


def _mscale(scale: float, mscale: float = 1.0) -> float:
    """vLLM's ``yarn_get_mscale``: ``0.1·mscale·ln(scale) + 1`` (1 for ``scale ≤ 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class VllmRope:
    """What vLLM's ``get_rope`` builds for one layer type.

    Attributes:
        rope_type: the class vLLM chose: ``default``, ``linear``, ``llama3``, ``dynamic``,
            ``dynamic_alpha``, ``ntk``, ``yarn``, ``deepseek_yarn``, ``deepseek_llama_scaling``,
            ``longrope`` (``longrope_long`` when the long factors are in use) or
            ``proportional``.
        inv_freq: ``(R/2,)`` float64: the angle per position of each frequency.
        attention_scaling: the magnitude cos and sin are multiplied by.
        rows: the rows of vLLM's cache (positions ``0 … rows − 1``).
        softmax_factor: what vLLM's attention multiplies transformers' softmax scale by (1, or
            ``1/mscale²`` for ``deepseek_llama_scaling``).
        dual_chunk: ``(chunk_size, local_size, cache)`` for ``dual_chunk``: which of its five
            caches these rows are (:data:`DUAL_CHUNK_CACHES`).
        xdrope_section: for ``xdrope``: the half-width parts, one per position row (P/W/H/T).
    """

    rope_type: str
    inv_freq: Tensor
    attention_scaling: float
    rows: int
    softmax_factor: float = 1.0
    dual_chunk: tuple[int, int, str] | None = None
    xdrope_section: tuple[int, ...] | None = None

    def angle_positions(self, rows: Tensor) -> Tensor:
        """The positions whose angles rows ``rows (T,)`` of the cache hold, ``(T,)`` int64: the
        rows themselves, or for ``dual_chunk`` (:func:`dual_chunk_positions`) the remapped
        ones."""
        if self.dual_chunk is None:
            return rows
        chunk, local, cache = self.dual_chunk
        return dual_chunk_positions(rows, cache, chunk, local)


def _base_inv_freq(rotary_dim: int, base: float) -> Tensor:
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # (R/2,)
    return 1.0 / (float(base) ** exponents)


def _yarn_inv_freq(
    inv: Tensor,
    rotary_dim: int,
    base: float,
    factor: float,
    original: int,
    beta_fast: float,
    beta_slow: float,
    truncate: bool,
) -> Tensor:
    """vLLM's YaRN frequencies (``yarn_find_correction_range`` and ``yarn_linear_ramp_mask``):
    extrapolated above the ramp, interpolated (``/ factor``) below it; ``(R/2,)`` float64."""

    def dim(rotations: float) -> float:
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim(beta_fast), dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    mask = 1 - ramp  # 1: extrapolation (ω), 0: interpolation (ω / factor)
    return (inv / factor) * (1 - mask) + inv * mask


def _llama3_inv_freq(inv: Tensor, s: Mapping[str, Any]) -> Tensor:
    """vLLM's ``Llama3RotaryEmbedding._compute_inv_freq``; ``(R/2,)`` float64."""
    factor, low, high = (
        float(s["factor"]),
        float(s["low_freq_factor"]),
        float(s["high_freq_factor"]),
    )
    original = float(s["original_max_position_embeddings"])
    wave_len = 2 * math.pi / inv
    smooth = (original / wave_len - low) / (high - low) if low != high else torch.zeros_like(inv)
    return torch.where(
        wave_len < original / high,
        inv,
        torch.where(
            wave_len > original / low, inv / factor, (1 - smooth) * inv / factor + smooth * inv
        ),
    )


def _number(s: Mapping[str, Any], key: str, default: float | None = None) -> float | None:
    value = s.get(key)
    return default if value is None else float(value)


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
    inv = _base_inv_freq(rotary_dim, base)
    if scaling is None:
        if "alpha" in extra:  # Hunyuan: a "dynamic" config with alpha
            alpha = float(extra["alpha"])
            new_base = base * alpha ** (rotary_dim / (rotary_dim - 2))
            return VllmRope(
                "dynamic_alpha", _base_inv_freq(rotary_dim, new_base), 1.0, max_position
            )
        return VllmRope("default", inv, 1.0, max_position)
    kind = scaling.get("type") or scaling.get("rope_type")
    if kind == "linear":
        factor = float(scaling["factor"])
        return VllmRope("linear", inv / factor, 1.0, math.ceil(max_position * factor))
    if kind == "llama3":
        return VllmRope("llama3", _llama3_inv_freq(inv, scaling), 1.0, max_position)
    if kind == "dynamic":
        factor = float(scaling["factor"])
        trained = float(extra.get("max_trained_positions", max_position))
        new_base = base * ((factor * max_position / trained) - (factor - 1)) ** (
            rotary_dim / (rotary_dim - 2)
        )
        return VllmRope("dynamic", _base_inv_freq(rotary_dim, new_base), 1.0, max_position)
    if kind == "yarn":
        factor = float(scaling["factor"])
        original = int(scaling["original_max_position_embeddings"])
        rows = math.ceil(original * factor)
        fast = float(scaling.get("beta_fast") or 32.0)
        slow = float(scaling.get("beta_slow") or 1.0)
        mscale, mad = scaling.get("mscale"), scaling.get("mscale_all_dim")
        if deepseek:  # DeepseekScalingRotaryEmbedding: always truncated, attention_factor unread
            inv_freq = _yarn_inv_freq(inv, rotary_dim, base, factor, original, fast, slow, True)
            m_all = _mscale(factor, 0.0 if mad is None else float(mad))
            magnitude = _mscale(factor, 1.0 if mscale is None else float(mscale)) / m_all
            if scaling.get("attention_factor") == 1.0:
                return VllmRope(
                    "deepseek_llama_scaling", inv_freq, magnitude, rows, 1.0 / (m_all * m_all)
                )
            return VllmRope("deepseek_yarn", inv_freq, magnitude, rows)
        truncate = scaling.get("truncate")
        inv_freq = _yarn_inv_freq(
            inv,
            rotary_dim,
            base,
            factor,
            original,
            fast,
            slow,
            truncate is None or bool(truncate),
        )
        if scaling.get("attention_factor") is not None:  # YaRNScalingRotaryEmbedding
            magnitude = float(scaling["attention_factor"])
        elif mscale and mad:
            magnitude = _mscale(factor, float(mscale)) / _mscale(factor, float(mad))
        else:
            magnitude = _mscale(factor)
        return VllmRope("yarn", inv_freq, magnitude, rows)
    if kind == "longrope":
        omax = int(scaling["original_max_position_embeddings"])
        use_long = max_model_len > omax
        scale = max_position / omax
        magnitude = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(omax))
        key = "long_mscale" if use_long else "short_mscale"
        if extra.get(key) is not None:
            magnitude = float(extra[key])
        name = "long_factor" if use_long else "short_factor"
        factors = scaling.get(name)
        half = rotary_dim // 2
        if factors is None or len(factors) != half:
            raise InvalidArgument(
                f"scaling.{name} must have rotary_dim/2 = {half} entries, got "
                f"{0 if factors is None else len(factors)}",
                field=f"scaling.{name}",
            )
        ext = torch.tensor([float(f) for f in factors], dtype=torch.float64)  # (R/2,)
        return VllmRope(
            "longrope_long" if use_long else "longrope",
            inv / ext,
            magnitude,
            max_position if use_long else omax,
        )
    if kind == "proportional":  # Gemma 4's global layers: vLLM's Gemma4RotaryEmbedding
        fraction = _number(scaling, "partial_rotary_factor", 1.0)
        out = inv.clone()
        out[int(fraction * rotary_dim // 2) :] = 0.0  # type: ignore[operator]
        return VllmRope("proportional", out / _number(scaling, "factor", 1.0), 1.0, max_position)  # type: ignore[operator]
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
    return vllm_rope(
        p["rotary_dim"],
        p["base"],
        scaling,
        max_position=max_position,
        max_model_len=p.get("vllm_max_model_len") or p.get("max_model_len") or max_position,
        deepseek=bool(p.get("config_deepseek")),
    )


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
        fixed: Tensor = _base_inv_freq(rotary_dim, base * factor) / factor ** (2 / rotary_dim)
        return fixed
    half = rotary_dim // 2
    a = math.log(factor) / half**mixed_b
    m = torch.arange(1, half + 1, dtype=torch.float64)  # (R/2,)
    return _base_inv_freq(rotary_dim, base) / torch.exp(a * m**mixed_b)


#: ``DualChunkRotaryEmbedding``'s caches, in vLLM's order (``cos_sin_<name>_cache``).
DUAL_CHUNK_CACHES: tuple[str, ...] = ("q", "qc", "k", "qc_no_clamp", "q_inter")


def _check_cache(cache: str) -> None:
    if cache not in DUAL_CHUNK_CACHES:
        raise InvalidArgument(
            f"dual_chunk_cache must be one of {', '.join(DUAL_CHUNK_CACHES)}, got {cache!r}",
            field="dual_chunk_cache",
        )


def dual_chunk_positions(rows: Tensor, cache: str, chunk_size: int, local_size: int) -> Tensor:
    """The position whose plain-RoPE angles row ``r`` of a ``DualChunkRotaryEmbedding`` cache
    holds (vLLM's ``_compute_cos_sin_cache``), with ``L = chunk_size − local_size``:

    - ``q``: ``r`` (``L`` rows; a query at position ``p`` reads row ``p mod L``, intra-chunk);
    - ``qc``: ``min(r + L, chunk_size)`` (``L`` rows; successive-chunk queries, and row
      ``L − 1`` for every inter-chunk query);
    - ``k``: ``r mod L`` (``max_position`` rows; a key at position ``p`` reads row ``p``);
    - ``qc_no_clamp``: ``r + L`` (``L`` rows);
    - ``q_inter``: ``r + chunk_size`` (``L`` rows).

    Args:
        rows: ``(T,)`` integer row indices.

    Returns:
        ``(T,)`` int64 positions.
    """
    _check_cache(cache)
    span = chunk_size - local_size
    r = rows.to(torch.int64)
    if cache == "q":
        return r
    if cache == "qc":
        return (r + span).clamp(max=chunk_size)
    if cache == "k":
        return r % span
    if cache == "qc_no_clamp":
        return r + span
    return r + chunk_size


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
    config's top level), as :mod:`posenc.hf_config` keeps them (``RopeLayerType.vllm``).

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
        _check_cache(which)
        rows = max_position if which == "k" else chunk - local
        return VllmRope(
            "dual_chunk",
            _base_inv_freq(rotary_dim, theta),
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
        inv = _base_inv_freq(rotary_dim, theta * alpha ** (rotary_dim / (rotary_dim - 2)))
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
    "ENGINES",
    "UNBOUNDED",
    "VLLM_ONLY_ROPE_TYPES",
    "Engine",
    "VllmRope",
    "angles_table",
    "check_rows",
    "default_max_position",
    "dual_chunk_positions",
    "llama4_query_scale",
    "ntk_inv_freq",
    "vllm_complete",
    "vllm_for_fields",
    "vllm_only_rope",
    "vllm_rope",
    "xdrope_cos_sin",
]
