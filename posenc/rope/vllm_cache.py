"""What vLLM's ``get_rope`` builds, as each scaling module writes its own rule: the cache
(:class:`VllmRope`), the server's settings a rule reads (:class:`VllmServer`) and the arithmetic
several of vLLM's classes share (``_compute_inv_freq``'s base, ``yarn_get_mscale``,
``DualChunkRotaryEmbedding``'s positions).

Each scaling module (:mod:`posenc.rope.linear` ...) that vLLM builds declares ``VLLM_CLASS``
(vLLM's class name) and ``vllm(inv, rotary_dim, base, scaling, server)``, its cache;
:mod:`posenc.rope.vllm` reads them off the registered modules, so vLLM's chain of types is
derived, not written. This module sits below the scaling modules so that they can build a
:class:`VllmRope` without importing :mod:`posenc.rope.vllm`.

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument

#: ``DualChunkRotaryEmbedding``'s caches, in vLLM's order (``cos_sin_<name>_cache``).
DUAL_CHUNK_CACHES: tuple[str, ...] = ("q", "qc", "k", "qc_no_clamp", "q_inter")


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


@dataclass(frozen=True)
class VllmServer:
    """What a scaling type's vLLM rule reads besides its parameters.

    Attributes:
        max_position: what vLLM's model code passes as ``max_position``: the config's
            ``max_position_embeddings``.
        max_model_len: the server's ``--max-model-len`` (LongRoPE's choice of factors).
        deepseek: the model's vLLM code builds DeepSeek's YaRN for a non-default type.
        extra: vLLM-only keys of the rope parameters (``alpha``, ``max_trained_positions``,
            ``short_mscale``, ``long_mscale``).
    """

    max_position: int
    max_model_len: int
    deepseek: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


def base_inv_freq(rotary_dim: int, base: float) -> Tensor:
    """vLLM's ``RotaryEmbedding._compute_inv_freq``: ``base^(−2i/R)``, ``(R/2,)`` float64."""
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # (R/2,)
    return 1.0 / (float(base) ** exponents)


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """vLLM's ``yarn_get_mscale``: ``0.1·mscale·ln(scale) + 1`` (1 for ``scale ≤ 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def check_dual_chunk_cache(cache: str) -> None:
    """Refuse a cache name that is not one of :data:`DUAL_CHUNK_CACHES`."""
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
    check_dual_chunk_cache(cache)
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


__all__ = [
    "DUAL_CHUNK_CACHES",
    "VllmRope",
    "VllmServer",
    "base_inv_freq",
    "check_dual_chunk_cache",
    "dual_chunk_positions",
    "yarn_get_mscale",
]
