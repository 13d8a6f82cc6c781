"""transformers' float32 exponents and default ``inv_freq``, which every scaling type's
``transformers_float32`` hook (``precision: "engine"``) starts from.

Notation: ``E`` the exponent width (``rotary_dim``, or a config's odd ``exponent_dim``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def exponents(dim: int) -> Tensor:
    """``torch.arange(0, dim, 2).float() / dim`` as every transformers init function writes it,
    ``(E/2,)`` float32."""
    return torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim


def default_float32(dim: int, base: float) -> Tensor:
    """``1.0 / (base ** exponents)``: transformers' default ``inv_freq``, ``(E/2,)`` float32."""
    inv: Tensor = 1.0 / (base ** exponents(dim))
    return inv


__all__ = ["default_float32", "exponents"]
