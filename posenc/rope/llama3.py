"""Llama 3.1's frequency bands (meta-llama/llama-models; transformers'
``_compute_llama3_parameters``).

One scaling type: its parameters (:class:`Llama3Params`), their validation
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
from posenc.rope.float32 import default_float32
from posenc.rope.parameters import parameter
from posenc.rope.vllm_cache import VllmRope, VllmServer

NAME = "llama3"
#: How transformers fills ``original_max_position_embeddings`` from a model config for this
#: type: ``original`` (the config's own key, else ``max_position_embeddings``) or
#: ``max_position`` (always ``max_position_embeddings``).
ORIGINAL_MAX_FROM_CONFIG = "original"
LABEL = "Llama 3"
#: The class vLLM's ``get_rope`` builds for this type (:func:`vllm` is its cache).
VLLM_CLASS = "Llama3RotaryEmbedding"


@dataclass(frozen=True)
class Llama3Params:
    """Llama 3.1's frequency bands."""

    factor: float = parameter("context extension factor", required=True, exclusive_minimum=0)
    original_max_position_embeddings: int = parameter(
        "the pretraining context length", type="int", required=True, minimum=1
    )
    low_freq_factor: float = parameter("low-frequency factor", required=True, exclusive_minimum=0)
    high_freq_factor: float = parameter("high-frequency factor", required=True, exclusive_minimum=0)


#: The parameter class of this type (its fields declared with :func:`parameter`).
Params = Llama3Params


def validate(p: Llama3Params) -> None:
    """The band in order: ``high_freq_factor >= low_freq_factor``. Equal factors (Llama 4 Scout
    publishes 1.0 and 1.0) leave no medium band: transformers warns and runs them; only a
    reversed band is refused."""
    if p.high_freq_factor < p.low_freq_factor:
        raise InvalidArgument(
            f"scaling.high_freq_factor must be >= scaling.low_freq_factor, got "
            f"high_freq_factor={p.high_freq_factor} and low_freq_factor={p.low_freq_factor}",
            field="scaling.high_freq_factor",
        )


def _llama3(base_inv_freq: Tensor, s: Llama3Params) -> Tensor:
    """Llama 3.1 band rescaling as transformers' ``_compute_llama3_parameters``, in float64."""
    factor = float(s.factor)
    low_ff = float(s.low_freq_factor)
    high_ff = float(s.high_freq_factor)
    old_context_len = float(s.original_max_position_embeddings)
    low_freq_wavelen = old_context_len / low_ff
    high_freq_wavelen = old_context_len / high_ff

    wavelen = 2 * math.pi / base_inv_freq  # (R/2,)
    inv_freq = torch.where(wavelen > low_freq_wavelen, base_inv_freq / factor, base_inv_freq)
    smooth = (old_context_len / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    if high_ff == low_ff:  # no medium band (a 0/0 smooth factor): keep the two outer bands
        return inv_freq
    return torch.where(is_medium, smoothed, inv_freq)


def inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: Llama3Params, seq_len: int | None
) -> tuple[Tensor, float]:
    return _llama3(inv_freq, s), 1.0


def vllm(
    inv_freq: Tensor, rotary_dim: int, base: float, scaling: Mapping[str, Any], server: VllmServer
) -> VllmRope:
    """vLLM's ``Llama3RotaryEmbedding._compute_inv_freq`` (written from vLLM's class, not from
    :func:`_llama3`), in a cache of ``max_position`` rows."""
    factor, low, high = (
        float(scaling["factor"]),
        float(scaling["low_freq_factor"]),
        float(scaling["high_freq_factor"]),
    )
    original = float(scaling["original_max_position_embeddings"])
    wave_len = 2 * math.pi / inv_freq
    smooth = (
        (original / wave_len - low) / (high - low) if low != high else torch.zeros_like(inv_freq)
    )
    out = torch.where(
        wave_len < original / high,
        inv_freq,
        torch.where(
            wave_len > original / low,
            inv_freq / factor,
            (1 - smooth) * inv_freq / factor + smooth * inv_freq,
        ),
    )
    return VllmRope("llama3", out, 1.0, server.max_position)


def transformers_float32(dim: int, base: float, s: Llama3Params, length: int) -> Tensor:
    """transformers' float32 ``inv_freq`` (``precision: "engine"``),
    ``_compute_llama3_parameters`` in float32, its ``where``s in the same order (vLLM's
    ``Llama3RotaryEmbedding`` computes the same); ``(E/2,)``."""
    inv = default_float32(dim, base)
    factor = float(s.factor)
    low = float(s.low_freq_factor)
    high = float(s.high_freq_factor)
    old = int(s.original_max_position_embeddings)
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, llama)


def vllm_float32(
    dim: int, base: float, s: Llama3Params, vllm_class: str, max_position: int
) -> Tensor:
    """vLLM's float32 ``inv_freq`` for this type (``precision: "engine"`` with ``engine:
    "vllm"``; ``vllm_class`` the class it builds, ``max_position`` its cache's length): ``Llama3RotaryEmbedding``'s, transformers' float32 rule;
    ``(R/2,)``."""
    return transformers_float32(dim, base, s, max_position)
