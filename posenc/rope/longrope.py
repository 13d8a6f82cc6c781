"""LongRoPE (Ding et al., 2024; microsoft/LongRoPE, Phi-3): per-frequency divisors, the short ones
up to the original length and the long ones beyond (transformers' ``_compute_longrope_parameters``).

One scaling type: its parameters (:class:`LongRopeParams`), their validation
(:func:`validate`) and its inverse frequencies (:func:`inv_freq`), in float64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.rope.parameters import parameter
from posenc.rope.vllm_cache import VllmRope, VllmServer

NAME = "longrope"
#: Its ramp / factor lists are ``E // 2`` long: an odd exponent width cannot be built.
NEEDS_EVEN_WIDTH = True
#: How transformers fills ``original_max_position_embeddings`` from a model config for this
#: type: ``original`` (the config's own key, else ``max_position_embeddings``) or
#: ``max_position`` (always ``max_position_embeddings``).
ORIGINAL_MAX_FROM_CONFIG = "original"
#: Without ``factor``, transformers takes ``max_position_embeddings / original``.
FACTOR_FROM_LENGTHS = True
LABEL = "LongRoPE"
#: The class vLLM's ``get_rope`` builds for this type (:func:`vllm` is its cache).
VLLM_CLASS = "Phi3LongRoPEScaledRotaryEmbedding"


@dataclass(frozen=True)
class LongRopeParams:
    """LongRoPE (Ding et al., 2024): per-frequency divisors, short up to the original length."""

    short_factor: tuple[float, ...] = parameter(
        "R/2 divisors up to the original", type="floats", required=True, exclusive_minimum=0
    )
    long_factor: tuple[float, ...] = parameter(
        "R/2 divisors beyond the original", type="floats", required=True, exclusive_minimum=0
    )
    original_max_position_embeddings: int = parameter(
        "the pretraining context length", type="int", required=True, minimum=1
    )
    factor: float | None = parameter("context extension factor", exclusive_minimum=0)
    attention_factor: float | None = parameter("attention scaling", exclusive_minimum=0)


#: The parameter class of this type (its fields declared with :func:`parameter`).
Params = LongRopeParams


def validate(p: LongRopeParams) -> None:
    """``factor`` may be left out only when ``attention_factor`` is given (the factor is used
    only to derive it)."""
    if p.factor is None and p.attention_factor is None:
        raise InvalidArgument(
            "scaling.factor is required for longrope scaling unless scaling.attention_factor is "
            "given (transformers uses max_position_embeddings / original_max_position_embeddings; "
            "pass that ratio as factor)",
            field="scaling.factor",
        )


def inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: LongRopeParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """LongRoPE (``_compute_longrope_parameters``): per-frequency divisors, short or long."""
    half = rotary_dim // 2
    for name in ("short_factor", "long_factor"):
        n = len(getattr(s, name))
        if n != half:
            raise InvalidArgument(
                f"scaling.{name} must have rotary_dim/2 = {half} entries, got {n}",
                field=f"scaling.{name}",
            )
    omax = int(s.original_max_position_embeddings)
    if s.attention_factor is not None:
        attention_factor = float(s.attention_factor)
    elif s.factor <= 1.0:  # type: ignore[operator]
        attention_factor = 1.0
    else:
        attention_factor = math.sqrt(1 + math.log(s.factor) / math.log(omax))  # type: ignore[arg-type]
    use_long = seq_len is not None and seq_len > omax
    ext = s.long_factor if use_long else s.short_factor
    ext_factors = torch.tensor(ext, dtype=torch.float64)  # (R/2,)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # (R/2,)
    return 1.0 / (ext_factors * base**exponents), attention_factor


def vllm(
    inv_freq: Tensor, rotary_dim: int, base: float, scaling: Mapping[str, Any], server: VllmServer
) -> VllmRope:
    """vLLM's ``Phi3LongRoPEScaledRotaryEmbedding``: the long factors at every position when
    the server's ``max_model_len`` exceeds ``original_max_position_embeddings``, whatever the
    sequence (``max_position`` rows), else the short ones (``original`` rows); the magnitude is
    ``sqrt(1 + ln(L/L0)/ln L0)``, ``L = max_position`` (``attention_factor`` is not read;
    ``short_mscale`` / ``long_mscale`` replace it)."""
    omax = int(scaling["original_max_position_embeddings"])
    use_long = server.max_model_len > omax
    scale = server.max_position / omax
    magnitude = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(omax))
    key = "long_mscale" if use_long else "short_mscale"
    if server.extra.get(key) is not None:
        magnitude = float(server.extra[key])
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
        inv_freq / ext,
        magnitude,
        server.max_position if use_long else omax,
    )


def transformers_float32(dim: int, base: float, s: LongRopeParams, length: int) -> Tensor:
    """transformers' float32 ``inv_freq`` (``precision: "engine"``),
    ``_compute_longrope_parameters``: the long factors when ``max(position) + 1`` passes the
    original length (``longrope_frequency_update``), else the short ones; ``(E/2,)``."""
    omax = int(s.original_max_position_embeddings)
    factors = s.long_factor if length > omax else s.short_factor
    ext = torch.tensor(factors, dtype=torch.float32)
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    inv: Tensor = 1.0 / (ext * base**shape)
    return inv


def vllm_float32(
    dim: int, base: float, s: LongRopeParams, vllm_class: str, max_position: int
) -> Tensor:
    """vLLM's float32 ``inv_freq`` for this type (``precision: "engine"`` with ``engine:
    "vllm"``; ``vllm_class`` the class it builds, ``max_position`` its cache's length): ``Phi3LongRoPEScaledRotaryEmbedding``'s cache of the long
    factors (``longrope_long``) or the short ones;
    ``(R/2,)``."""
    factors = s.long_factor if vllm_class == "longrope_long" else s.short_factor
    ext = torch.tensor(factors, dtype=torch.float32)
    inv: Tensor = 1.0 / (ext * base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    return inv
