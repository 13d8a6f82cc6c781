"""YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of LLMs"): a ramp between
interpolation and extrapolation, and an attention factor (mscale), as transformers'
``_compute_yarn_parameters``.

One scaling type: its parameters (:class:`YarnParams`), their validation
(:func:`validate`) and its inverse frequencies (:func:`inv_freq`), in float64.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.rope.parameters import parameter
from posenc.rope.vllm_cache import VllmRope, VllmServer, yarn_get_mscale

# transformers' defaults for YaRN's ramp boundaries (`beta_fast or 32`, `beta_slow or 1`).
BETA_FAST = 32.0
BETA_SLOW = 1.0


NAME = "yarn"
#: Its ramp / factor lists are ``E // 2`` long: an odd exponent width cannot be built.
NEEDS_EVEN_WIDTH = True
#: How transformers fills ``original_max_position_embeddings`` from a model config for this
#: type: ``original`` (the config's own key, else ``max_position_embeddings``) or
#: ``max_position`` (always ``max_position_embeddings``).
ORIGINAL_MAX_FROM_CONFIG = "original"
#: Without ``factor``, transformers takes ``max_position_embeddings / original``.
FACTOR_FROM_LENGTHS = True
LABEL = "YaRN"
#: The class vLLM's ``get_rope`` builds for this type (:func:`vllm` is its cache);
#: DeepSeek's models build ``DeepseekScalingRotaryEmbedding`` instead.
VLLM_CLASS = "YaRNScalingRotaryEmbedding"


@dataclass(frozen=True)
class YarnParams:
    """YaRN (Peng et al., 2023): ramp between interpolation and extrapolation, mscale."""

    factor: float = parameter("context extension factor", required=True, exclusive_minimum=0)
    original_max_position_embeddings: int = parameter(
        "the pretraining context length", type="int", required=True, minimum=1
    )
    beta_fast: float | None = parameter("rotations where extrapolation ends", exclusive_minimum=0)
    beta_slow: float | None = parameter("rotations where interpolation begins", exclusive_minimum=0)
    mscale: float | None = parameter("numerator mscale (DeepSeek)")
    mscale_all_dim: float | None = parameter("denominator mscale (DeepSeek)")
    attention_factor: float | None = parameter("attention scaling", exclusive_minimum=0)
    truncate: bool | None = parameter("round the correction range (default true)", type="bool")


#: The parameter class of this type (its fields declared with :func:`parameter`).
Params = YarnParams


def correction_range(
    dim: int,
    base: float,
    original: int | float,
    beta_fast: float,
    beta_slow: float,
    *,
    truncate: bool = True,
) -> tuple[float, float]:
    """YaRN's correction range ``(low, high)``, the ramp's ends in dimensions (Python floats, as
    transformers' ``find_correction_range``, vLLM's ``yarn_find_correction_range`` and mlx-lm's
    ``YarnRoPE`` compute it): the dimension whose wavelength fits ``beta`` rotations into the
    ``original`` context, ``E·ln(L/(β·2π)) / (2·ln base)``, rounded outwards when ``truncate``,
    clamped to ``[0, E − 1]``, ``high`` nudged by 0.001 where the two meet."""

    def dimension(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = dimension(beta_fast), dimension(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: prevent a zero-width ramp
    return low, high


def validate(p: YarnParams) -> None:
    """The ramp's ends in order: ``beta_fast >= beta_slow`` (their defaults 32 and 1)."""
    fast = p.beta_fast if p.beta_fast is not None else BETA_FAST
    slow = p.beta_slow if p.beta_slow is not None else BETA_SLOW
    if fast < slow:
        raise InvalidArgument(
            f"scaling.beta_fast must be >= scaling.beta_slow, got beta_fast={fast} and "
            f"beta_slow={slow}",
            field="scaling.beta_fast",
        )


def _yarn(
    base_inv_freq: Tensor, rotary_dim: int, base: float, s: YarnParams
) -> tuple[Tensor, float]:
    """YaRN (Peng et al., 2023) as transformers' ``_compute_yarn_parameters``, in float64."""
    factor = float(s.factor)
    omax = s.original_max_position_embeddings

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if s.attention_factor is not None:
        attention_factor = float(s.attention_factor)
    elif s.mscale and s.mscale_all_dim:  # truthiness as in transformers: 0 means "not given"
        attention_factor = get_mscale(factor, s.mscale) / get_mscale(factor, s.mscale_all_dim)
    else:
        attention_factor = get_mscale(factor)

    beta_fast = s.beta_fast if s.beta_fast is not None else BETA_FAST
    beta_slow = s.beta_slow if s.beta_slow is not None else BETA_SLOW

    truncate = s.truncate is None or s.truncate
    low, high = correction_range(rotary_dim, base, omax, beta_fast, beta_slow, truncate=truncate)

    ramp = torch.arange(rotary_dim // 2, dtype=torch.float64)
    ramp = ((ramp - low) / (high - low)).clamp(0, 1)  # (R/2,)
    extrapolation = 1 - ramp  # 1 keeps ω_i (high frequencies), 0 uses ω_i / factor
    inv_freq = (base_inv_freq / factor) * (1 - extrapolation) + base_inv_freq * extrapolation
    return inv_freq, attention_factor


def inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: YarnParams, seq_len: int | None
) -> tuple[Tensor, float]:
    return _yarn(inv_freq, rotary_dim, base, s)


def _vllm_inv_freq(
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

    low, high = correction_range(
        rotary_dim, base, original, beta_fast, beta_slow, truncate=truncate
    )
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    mask = 1 - ramp  # 1: extrapolation (ω), 0: interpolation (ω / factor)
    return (inv / factor) * (1 - mask) + inv * mask


def vllm(
    inv_freq: Tensor, rotary_dim: int, base: float, scaling: Mapping[str, Any], server: VllmServer
) -> VllmRope:
    """vLLM's ``YaRNScalingRotaryEmbedding``, or for a model whose vLLM code builds DeepSeek's
    YaRN (``server.deepseek``) ``DeepseekScalingRotaryEmbedding``: magnitude
    ``mscale(f, mscale)/mscale(f, mscale_all_dim)`` (defaults 1 and 0), ``attention_factor``
    ignored, the correction range always truncated; ``attention_factor == 1.0`` selects
    ``deepseek_llama_scaling``, whose attention leaves ``mscale(f, mscale_all_dim)²`` out of
    the softmax scale. Both caches have ``original_max_position_embeddings · factor`` rows."""
    factor = float(scaling["factor"])
    original = int(scaling["original_max_position_embeddings"])
    rows = math.ceil(original * factor)
    fast = float(scaling.get("beta_fast") or BETA_FAST)
    slow = float(scaling.get("beta_slow") or BETA_SLOW)
    mscale, mad = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if server.deepseek:  # DeepseekScalingRotaryEmbedding: always truncated, attention_factor unread
        inv = _vllm_inv_freq(inv_freq, rotary_dim, base, factor, original, fast, slow, True)
        m_all = yarn_get_mscale(factor, 0.0 if mad is None else float(mad))
        magnitude = yarn_get_mscale(factor, 1.0 if mscale is None else float(mscale)) / m_all
        if scaling.get("attention_factor") == 1.0:
            return VllmRope("deepseek_llama_scaling", inv, magnitude, rows, 1.0 / (m_all * m_all))
        return VllmRope("deepseek_yarn", inv, magnitude, rows)
    truncate = scaling.get("truncate")
    inv = _vllm_inv_freq(
        inv_freq, rotary_dim, base, factor, original, fast, slow, truncate is None or bool(truncate)
    )
    if scaling.get("attention_factor") is not None:  # YaRNScalingRotaryEmbedding
        magnitude = float(scaling["attention_factor"])
    elif mscale and mad:
        magnitude = yarn_get_mscale(factor, float(mscale)) / yarn_get_mscale(factor, float(mad))
    else:
        magnitude = yarn_get_mscale(factor)
    return VllmRope("yarn", inv, magnitude, rows)


def transformers_float32(dim: int, base: float, s: YarnParams, length: int) -> Tensor:
    """transformers' float32 ``inv_freq`` (``precision: "engine"``),
    ``_compute_yarn_parameters``' float32 ramp between interpolation and extrapolation (vLLM's
    YaRN classes compute the same; DeepSeek's always truncated); ``(E/2,)``."""
    factor = float(s.factor)
    omax = int(s.original_max_position_embeddings)
    beta_fast = s.beta_fast or 32
    beta_slow = s.beta_slow or 1
    truncate = s.truncate is None or s.truncate
    low, high = correction_range(dim, base, omax, beta_fast, beta_slow, truncate=truncate)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp.to(dtype=torch.float)
    inv: Tensor = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv


def vllm_float32(
    dim: int, base: float, s: YarnParams, vllm_class: str, max_position: int
) -> Tensor:
    """vLLM's float32 ``inv_freq`` for this type (``precision: "engine"`` with ``engine:
    "vllm"``; ``vllm_class`` the class it builds, ``max_position`` its cache's length): transformers' ramp (:func:`transformers_float32`), always
    truncated in DeepSeek's classes;
    ``(R/2,)``."""
    if vllm_class.startswith("deepseek"):
        s = dataclasses.replace(s, truncate=True)
    return transformers_float32(dim, base, s, max_position)
