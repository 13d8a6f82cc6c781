"""Dynamic NTK scaling (bloc97, emozilla): the base grows with the sequence length above
``original_max_position_embeddings`` (transformers' ``_compute_dynamic_ntk_parameters``).

One scaling type: its parameters (:class:`DynamicParams`), their validation
(:func:`validate`) and its inverse frequencies (:func:`inv_freq`), in float64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.rope.float32 import default_float32, exponents
from posenc.rope.parameters import parameter
from posenc.rope.vllm_cache import VllmRope, VllmServer, base_inv_freq

NAME = "dynamic"
#: How transformers fills ``original_max_position_embeddings`` from a model config for this
#: type: ``original`` (the config's own key, else ``max_position_embeddings``) or
#: ``max_position`` (always ``max_position_embeddings``).
ORIGINAL_MAX_FROM_CONFIG = "max_position"
LABEL = "dynamic"
#: The class vLLM's ``get_rope`` builds for this type (:func:`vllm` is its cache).
VLLM_CLASS = "DynamicNTKScalingRotaryEmbedding"


@dataclass(frozen=True)
class DynamicParams:
    """Dynamic NTK: the base grows with the length above ``original_max_position_embeddings``."""

    factor: float = parameter("context extension factor", required=True, exclusive_minimum=0)
    original_max_position_embeddings: int = parameter(
        "the pretraining context length", type="int", required=True, minimum=1
    )


#: The parameter class of this type (its fields declared with :func:`parameter`).
Params = DynamicParams


def validate(p: DynamicParams) -> None:
    """Nothing beyond the checks every type's parameters get (positive, finite factors)."""


def inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: DynamicParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """Dynamic NTK (``_compute_dynamic_ntk_parameters``): the base grows above ``L0``."""
    if rotary_dim < 4:
        raise InvalidArgument(
            f"dynamic scaling needs rotary_dim >= 4 (the base exponent is R/(R-2)), "
            f"got {rotary_dim}",
            field="rotary_dim",
        )
    omax = int(s.original_max_position_embeddings)
    length = max(seq_len if seq_len is not None else omax, omax)
    if length == omax:
        return inv_freq, 1.0
    factor = float(s.factor)
    new_base = base * ((factor * length / omax) - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # (R/2,)
    return 1.0 / (new_base**exponents), 1.0


def vllm(
    inv_freq: Tensor, rotary_dim: int, base: float, scaling: Mapping[str, Any], server: VllmServer
) -> VllmRope:
    """vLLM's ``DynamicNTKScalingRotaryEmbedding``: one fixed cache of ``L = max_position``
    rows with the base ``base·(f·L/T − (f−1))^(R/(R−2))``, ``T = max_trained_positions``
    (default ``L``, which leaves the base unscaled); transformers rescales from the sequence."""
    factor = float(scaling["factor"])
    trained = float(server.extra.get("max_trained_positions", server.max_position))
    new_base = base * ((factor * server.max_position / trained) - (factor - 1)) ** (
        rotary_dim / (rotary_dim - 2)
    )
    return VllmRope("dynamic", base_inv_freq(rotary_dim, new_base), 1.0, server.max_position)


def transformers_float32(dim: int, base: float, s: DynamicParams, length: int) -> Tensor:
    """transformers' float32 ``inv_freq`` (``precision: "engine"``),
    ``_compute_dynamic_ntk_parameters``: at init (python floats, ``seq_len`` the original
    length) and, once ``max(position) + 1`` passes it, again with a 0-dim int64 ``seq_len``,
    which makes the rescaled base a float32 tensor; ``(E/2,)``."""
    factor = float(s.factor)
    omax = int(s.original_max_position_embeddings)
    if length <= omax:  # the buffer built at init
        b = base * ((factor * omax / omax) - (factor - 1)) ** (dim / (dim - 2))
        inv: Tensor = 1.0 / (b ** exponents(dim))
        return inv
    seq = torch.maximum(torch.tensor(length), torch.tensor(omax))  # int64, as in forward
    rescaled = base * ((factor * seq / omax) - (factor - 1)) ** (dim / (dim - 2))
    out: Tensor = 1.0 / (rescaled ** exponents(dim))
    return out


def vllm_float32(
    dim: int, base: float, s: DynamicParams, vllm_class: str, max_position: int
) -> Tensor:
    """vLLM's float32 ``inv_freq`` for this type (``precision: "engine"`` with ``engine:
    "vllm"``; ``vllm_class`` the class it builds, ``max_position`` its cache's length): ``DynamicNTKScalingRotaryEmbedding``'s base rescaled once for
    ``max_position`` (its cache is fixed);
    ``(R/2,)``."""
    factor = float(s.factor)
    max_len = max_position * factor
    new_base = base * ((max_len / max_position) - (factor - 1)) ** (dim / (dim - 2))
    return default_float32(dim, new_base)
