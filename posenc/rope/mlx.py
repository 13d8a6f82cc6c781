"""RoPE as MLX runs it: mlx-lm's ``initialize_rope`` and ``mx.fast.rope`` on the CPU.

mlx-lm builds ``nn.RoPE(dims, traditional, base, scale)`` for the ``default`` and ``linear``
types (``scale = 1 / factor``), which calls ``mx.fast.rope``. On the CPU that is MLX's own
fallback (``mlx/fast.cpp``), in float32:

- ``inv_freqs = exp(arange(0, -R/2, -1) * (logf(base) / (R/2)))`` with MLX's vectorised
  ``exp`` (a degree-6 polynomial of the fractional part of ``x·log2(e)``, fused multiply-adds,
  scaled by ``2^round(x·log2(e))`` built from the exponent bits), not libm's;
- ``positions = (arange(T) + offset) * scale``, ``theta = positions * inv_freqs``;
- ``cos(theta)``, ``sin(theta)``.

``traditional`` rotates adjacent pairs (the interleaved layout), otherwise the two halves.

:func:`mlx_rope_tables` replays that in NumPy, MLX's ``exp`` bit for bit; MLX's ``cos``/``sin``
are within an ulp of the correctly rounded value used here, so the tables are within 2 float32
ulp of MLX's. :func:`mlx_exact_tables` is the same rule in float64. mlx-lm's other types
(``llama3``, ``yarn``, ``longrope``, ``dynamic``, ``proportional``) compute their frequencies with
further MLX operations (``power``, ``where``) and are not replayed yet.

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.errors import InvalidArgument

#: mlx-lm rope types posenc replays (``nn.RoPE``).
MLX_TYPES: frozenset[str] = frozenset({"default", "linear"})

_EXP_COEFFICIENTS = (
    1.339887440266574e-3,
    9.618437357674640e-3,
    5.550332471162809e-2,
    2.402264791363012e-1,
    6.931472028550421e-1,
    1.0,
)


@dataclass(frozen=True)
class MlxRope:
    """``nn.RoPE``'s arguments: ``dims``, ``traditional``, ``base``, ``scale``."""

    dims: int
    traditional: bool = False
    base: float = 10000.0
    scale: float = 1.0

    @property
    def layout(self) -> str:
        return "interleaved" if self.traditional else "half"

    def to_dict(self) -> dict[str, Any]:
        return {
            "dims": self.dims,
            "traditional": self.traditional,
            "base": self.base,
            "scale": self.scale,
        }


def _fma(a: np.ndarray, b: np.ndarray | np.float32, c: np.ndarray | np.float32) -> np.ndarray:
    """float32 ``fma(a, b, c)``: the product of two float32 is exact in float64."""
    return (a.astype(np.float64) * np.float64(b) + np.asarray(c, np.float64)).astype(np.float32)


def mlx_exp(x: np.ndarray) -> np.ndarray:
    """MLX's CPU ``exp`` for float32, bit for bit."""
    x = np.asarray(x, dtype=np.float32)
    y = x * np.float32(1.442695)
    ipart = np.floor(y + np.float32(0.5)).astype(np.float32)
    fpart = (y - ipart).astype(np.float32)
    r = np.full_like(fpart, np.float32(1.535336188319500e-4))
    for c in _EXP_COEFFICIENTS:
        r = _fma(r, fpart, np.float32(c))
    two = ((ipart.astype(np.int32) + 127) << 23).astype(np.int32).view(np.float32)
    out = (two * r).astype(np.float32)
    out = np.where(x > np.float32(88.72283905206835), np.float32(np.inf), out)
    return np.where(x < np.float32(-88.72283905206835), np.float32(0), out)


def mlx_inv_freq(rope: MlxRope) -> np.ndarray:
    """``mx.fast.rope``'s default ``inv_freqs``, ``(R/2,)`` float32."""
    half = rope.dims // 2
    step = np.float32(np.float32(math.log(np.float32(rope.base))) / np.float32(half))
    return mlx_exp(np.arange(0, -half, -1, dtype=np.float32) * step)


def mlx_rope_tables(positions: Tensor, rope: MlxRope) -> tuple[Tensor, Tensor]:
    """MLX's float32 ``(cos, sin)``, ``(T, R/2)`` each."""
    pos = positions.numpy().astype(np.float32) * np.float32(rope.scale)  # (T,)
    theta = (pos[:, None] * mlx_inv_freq(rope)[None, :]).astype(np.float64)
    cos = np.cos(theta).astype(np.float32)
    sin = np.sin(theta).astype(np.float32)
    return torch.from_numpy(cos), torch.from_numpy(sin)


def mlx_exact_tables(positions: Tensor, rope: MlxRope) -> tuple[Tensor, Tensor]:
    """The same rule in float64: ``p · scale · base^(−2i/R)``."""
    i = torch.arange(rope.dims // 2, dtype=torch.float64)
    inv = float(rope.base) ** (-2.0 * i / rope.dims)
    angles = positions.to(torch.float64)[:, None] * rope.scale * inv[None, :]
    return angles.cos(), angles.sin()


def mlx_rope_for(
    *, rotary_dim: int, base: float, layout: str, scaling: Mapping[str, Any] | None
) -> MlxRope:
    """``initialize_rope(dims, base, traditional, scaling_config)`` for posenc's reading of a
    config: ``traditional`` for the interleaved layout (mlx-lm's ports keep the Hugging Face
    weight order).

    Raises:
        InvalidArgument: a type mlx-lm builds from further MLX operations (not replayed yet).
    """
    kind = "default" if not scaling else str(scaling.get("type") or "default")
    if kind not in MLX_TYPES:
        raise InvalidArgument(
            f"engine mlx covers mlx-lm's default and linear RoPE (nn.RoPE) so far; this config "
            f"is {kind!r}",
            field="engine",
        )
    scale = 1.0 if kind == "default" else float(np.float32(1.0 / float(scaling["factor"])))  # type: ignore[index]
    return MlxRope(rotary_dim, layout == "interleaved", float(base), scale)


__all__ = [
    "MLX_TYPES",
    "MlxRope",
    "mlx_exact_tables",
    "mlx_exp",
    "mlx_inv_freq",
    "mlx_rope_for",
    "mlx_rope_tables",
]
