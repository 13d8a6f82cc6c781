"""Linear scaling: position interpolation (kaiokendev; Chen et al., 2023), every frequency
divided by ``factor`` (transformers' ``_compute_linear_scaling_rope_parameters``).

One scaling type: its parameters (:class:`LinearParams`), their validation
(:func:`validate`) and its inverse frequencies (:func:`inv_freq`), in float64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from posenc.rope.float32 import default_float32
from posenc.rope.parameters import parameter
from posenc.rope.vllm_cache import VllmRope, VllmServer

NAME = "linear"
LABEL = "linear"
#: The class vLLM's ``get_rope`` builds for this type (:func:`vllm` is its cache).
VLLM_CLASS = "LinearScalingRotaryEmbedding"


@dataclass(frozen=True)
class LinearParams:
    """Position interpolation: every frequency divided by ``factor``."""

    factor: float = parameter("context extension factor", required=True, exclusive_minimum=0)


#: The parameter class of this type (its fields declared with :func:`parameter`).
Params = LinearParams


def validate(p: LinearParams) -> None:
    """Nothing beyond the checks every type's parameters get (positive, finite factors)."""


def inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: LinearParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """Position interpolation: ``ω_i / factor`` (``_compute_linear_scaling_rope_parameters``)."""
    return inv_freq / float(s.factor), 1.0


def vllm(
    inv_freq: Tensor, rotary_dim: int, base: float, scaling: Mapping[str, Any], server: VllmServer
) -> VllmRope:
    """vLLM's ``LinearScalingRotaryEmbedding``: the positions divided by the factor (the same
    angles as ``ω_i / factor``) in a cache of ``ceil(max_position · factor)`` rows."""
    factor = float(scaling["factor"])
    return VllmRope("linear", inv_freq / factor, 1.0, math.ceil(server.max_position * factor))


def transformers_float32(dim: int, base: float, s: LinearParams, length: int) -> Tensor:
    """transformers' float32 ``inv_freq`` (``precision: "engine"``): the default one, divided
    in place by ``factor``; ``(E/2,)``."""
    inv = default_float32(dim, base)
    inv /= float(s.factor)
    return inv


def vllm_float32(
    dim: int, base: float, s: LinearParams, vllm_class: str, max_position: int
) -> Tensor:
    """vLLM's float32 ``inv_freq`` for this type (``precision: "engine"`` with ``engine:
    "vllm"``; ``vllm_class`` the class it builds, ``max_position`` its cache's length): the default one (``LinearScalingRotaryEmbedding`` divides the
    positions by ``factor`` instead);
    ``(R/2,)``."""
    return default_float32(dim, base)
