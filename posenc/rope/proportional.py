"""Gemma 4's proportional RoPE: the first ``partial_rotary_factor`` of the ``Dh/2`` frequencies
are ``base^(−2i/Dh)``, the rest 0, all divided by ``factor`` (transformers'
``_compute_proportional_rope_parameters``).

One scaling type: its parameters (:class:`ProportionalParams`), their validation
(:func:`validate`) and its inverse frequencies (:func:`inv_freq`), in float64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.core.validate import check_finite
from posenc.rope.parameters import parameter
from posenc.rope.vllm_cache import VllmRope, VllmServer

NAME = "proportional"
LABEL = "proportional (Gemma 4)"
#: The class vLLM's ``get_rope`` builds for this type (:func:`vllm` is its cache).
VLLM_CLASS = "Gemma4RotaryEmbedding"


@dataclass(frozen=True)
class ProportionalParams:
    """Gemma 4's proportional RoPE: the first ``partial_rotary_factor`` of the frequencies."""

    factor: float | None = parameter("context extension factor", exclusive_minimum=0)
    partial_rotary_factor: float | None = parameter(
        "the fraction of the head's frequencies that rotate", exclusive_minimum=0, maximum=1
    )


#: The parameter class of this type (its fields declared with :func:`parameter`).
Params = ProportionalParams


def validate(p: ProportionalParams) -> None:
    """``partial_rotary_factor`` in (0, 1]."""
    if p.partial_rotary_factor is None:
        return
    check_finite("scaling.partial_rotary_factor", p.partial_rotary_factor, greater_than=0)
    if p.partial_rotary_factor > 1:
        raise InvalidArgument(
            f"scaling.partial_rotary_factor must be in (0, 1], got {p.partial_rotary_factor}",
            field="scaling.partial_rotary_factor",
        )


def inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: ProportionalParams, seq_len: int | None
) -> tuple[Tensor, float]:
    """Gemma 4's proportional RoPE (``_compute_proportional_rope_parameters``).

    ``rotary_dim`` is the whole head ``Dh``: the first ``int(p·Dh // 2)`` frequencies are
    ``base^(−2i/Dh)`` and the remaining ones 0, all divided by ``factor`` (default 1).
    """
    p = 1.0 if s.partial_rotary_factor is None else float(s.partial_rotary_factor)
    rope_angles = int(p * rotary_dim // 2)
    out = inv_freq.clone()
    out[rope_angles:] = 0.0
    factor = 1.0 if s.factor is None else float(s.factor)
    return out / factor, 1.0


def vllm(
    inv_freq: Tensor, rotary_dim: int, base: float, scaling: Mapping[str, Any], server: VllmServer
) -> VllmRope:
    """vLLM's ``Gemma4RotaryEmbedding`` (Gemma 4's global layers): the frequencies past the
    first ``partial_rotary_factor`` are 0; ``max_position`` rows. Unlike transformers, the
    class takes no ``factor`` (``get_rope`` passes only the head, the rotary width and the
    base), so a ``factor`` leaves vLLM's cache unchanged."""
    fraction = scaling.get("partial_rotary_factor")
    fraction = 1.0 if fraction is None else float(fraction)
    out = inv_freq.clone()
    out[int(fraction * rotary_dim) // 2 :] = 0.0
    return VllmRope("proportional", out, 1.0, server.max_position)


def transformers_float32(dim: int, base: float, s: ProportionalParams, length: int) -> Tensor:
    """transformers' float32 ``inv_freq`` (``precision: "engine"``),
    ``_compute_proportional_rope_parameters``: ``dim`` is the whole head; ``(E/2,)``."""
    share = 1.0 if s.partial_rotary_factor is None else float(s.partial_rotary_factor)
    angles = int(share * dim // 2)
    rotated = 1.0 / (base ** (torch.arange(0, 2 * angles, 2, dtype=torch.int64).float() / dim))
    rest = dim // 2 - angles
    inv = torch.cat((rotated, torch.zeros(rest, dtype=torch.float32))) if rest > 0 else rotated
    inv /= 1.0 if s.factor is None else float(s.factor)
    return inv


def vllm_float32(
    dim: int, base: float, s: ProportionalParams, vllm_class: str, max_position: int
) -> Tensor:
    """vLLM's float32 ``inv_freq`` for this type (``precision: "engine"`` with ``engine:
    "vllm"``; ``vllm_class`` the class it builds, ``max_position`` its cache's length): ``Gemma4RotaryEmbedding._compute_inv_freq``:
    ``get_rope``'s ``rotary_dim = int(head_size · partial_rotary_factor)``, its ``rotary_dim // 2``
    frequencies ``1.0 / (base ** (arange(0, 2·angles, 2, dtype=float) / head_size))`` in float32,
    then zeros for the rest of the head (cos 1, sin 0); vLLM reads no ``factor`` here;
    ``(R/2,)``."""
    fraction = 1.0 if s.partial_rotary_factor is None else s.partial_rotary_factor
    angles = int(dim * float(fraction)) // 2
    exponents = torch.arange(0, 2 * angles, 2, dtype=torch.float) / dim
    inv: Tensor = 1.0 / (base**exponents)
    return torch.cat([inv, torch.zeros(dim // 2 - angles, dtype=torch.float)])
