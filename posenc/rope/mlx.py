"""RoPE as MLX runs it: mlx-lm's ``initialize_rope`` and ``mx.fast.rope`` on the CPU.

mlx-lm (``mlx_lm/models/rope_utils.py``) builds one module per scaling type; each calls
``mx.fast.rope``, which on the CPU is MLX's own fallback (``mlx/fast.cpp``), in float32:

- ``inv_freqs``: without ``freqs``, ``exp(arange(0, -R/2, -1) * (logf(base) / (R/2)))`` with
  MLX's vectorised ``exp`` (a degree-6 polynomial of the fractional part of ``x·log2(e)``,
  fused multiply-adds, scaled by ``2^round(x·log2(e))`` built from the exponent bits), not
  libm's; with ``freqs`` (the scaled types), ``1 / freqs``;
- ``positions = (arange(T) + offset) * scale``, ``theta = positions * inv_freqs``;
- ``cos(theta)``, ``sin(theta)``; the module may first multiply its input by a magnitude
  (YaRN's ``mscale``, LongRoPE's scale), which multiplies cos and sin.

The types, as ``initialize_rope`` dispatches them:

- ``default``, ``linear``: ``nn.RoPE(dims, traditional, base, scale = 1 / factor)``;
- ``dynamic``: ``DynamicNTKScalingRoPE``, ``base · (factor·L/max_pos − (factor − 1))^(R/(R−2))``
  in Python floats with ``L = max(T + offset, max_pos)``, then ``nn.RoPE``'s rule;
- ``llama3``: ``Llama3RoPE``, the wavelength bands as float32 ``where``s on
  ``freqs = base ** (arange(0, R, 2) / R)``;
- ``yarn`` (also ``deepseek_yarn``): ``YarnRoPE``, the ramp always truncated to whole
  dimensions (``math.floor``/``ceil``), ``attention_factor`` ignored, magnitude
  ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)``;
- ``longrope``: ``SuScaledRoPE``, always the *long* factors and the half layout, magnitude
  ``sqrt(1 + ln(max_pos/orig) / ln(orig))``;
- ``proportional``: ``ProportionalRoPE``, ``factor · base ** (arange(0, r, 2) / R)`` for the
  ``r = int(R · partial_rotary_factor)`` rotated dimensions, ``inf`` (no rotation) after.

:func:`mlx_rope_tables` replays that in NumPy: MLX's ``exp`` bit for bit, ``power`` as the C
library's ``powf`` (which MLX calls, element by element, on the CPU), every other step as the
same float32 operation. MLX's ``cos``/``sin`` are within an ulp of the correctly rounded value
used here, so the tables are within 2 float32 ulp of MLX's. :func:`mlx_exact_tables` is the same
rule in float64.

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.rope.yarn import correction_range

#: mlx-lm rope types posenc replays (``initialize_rope``'s branches; ``su`` and
#: ``deepseek_yarn`` are read as ``longrope`` and ``yarn``).
MLX_TYPES: frozenset[str] = frozenset(
    {"default", "linear", "dynamic", "llama3", "yarn", "longrope", "proportional"}
)
_ALIASES = {"su": "longrope", "deepseek_yarn": "yarn", "telechat3-yarn": "yarn"}

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
    """``initialize_rope``'s arguments and what it makes of them.

    Attributes:
        dims: the rotated dimensions ``R`` (``mx.fast.rope``'s ``dims``).
        traditional: adjacent pairs (interleaved) rather than two halves.
        base: ``rope_theta``.
        scale: ``nn.RoPE``'s position scale (``1 / factor`` for ``linear``, else 1).
        rope_type: the mlx-lm type (one of :data:`MLX_TYPES`).
        scaling_config: the scaling parameters mlx-lm reads (``None`` for ``default``).
        max_position_embeddings: ``initialize_rope``'s ``max_position_embeddings`` (dynamic
            NTK's threshold, LongRoPE's magnitude).
    """

    dims: int
    traditional: bool = False
    base: float = 10000.0
    scale: float = 1.0
    rope_type: str = "default"
    scaling_config: Mapping[str, Any] | None = field(default=None, compare=False)
    max_position_embeddings: int | None = None

    @property
    def layout(self) -> str:
        return "interleaved" if self.traditional else "half"

    def to_dict(self) -> dict[str, Any]:
        return {
            "dims": self.dims,
            "traditional": self.traditional,
            "base": self.base,
            "scale": self.scale,
            "rope_type": self.rope_type,
            "scaling_config": dict(self.scaling_config) if self.scaling_config else None,
            "max_position_embeddings": self.max_position_embeddings,
        }

    def get(self, name: str, default: Any) -> Any:
        """A scaling parameter as mlx-lm reads it: ``scaling_config.get(name, default)``."""
        value = (self.scaling_config or {}).get(name)
        return default if value is None else value


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


@cache
def _libm_powf() -> Any:
    """The C library's ``powf`` (what MLX's CPU ``power`` calls for float32), or None."""
    name = ctypes.util.find_library("m") or ctypes.util.find_library("c")
    try:
        powf = ctypes.CDLL(name).powf
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no C library found
        return None
    powf.restype = ctypes.c_float
    powf.argtypes = (ctypes.c_float, ctypes.c_float)
    return powf


def mlx_power(base: float, exponents: np.ndarray) -> np.ndarray:
    """``base ** exponents`` as MLX computes it on the CPU: ``powf(float32(base), e)`` per element.

    NumPy's float32 ``power`` is vectorised and differs from ``powf`` in the last bit for about
    a fifth of these exponents; one bit of a frequency moves ``theta`` at position 131,072 by
    an ulp of ``theta``, far more than an ulp of its cosine.
    """
    b = float(np.float32(base))
    powf = _libm_powf()
    if powf is None:  # pragma: no cover - the float64 power rounded once
        return np.array([math.pow(b, float(e)) for e in exponents], dtype=np.float32)
    return np.array([powf(b, float(e)) for e in exponents], dtype=np.float32)


def _f(x: float) -> np.float32:
    """A Python scalar as MLX takes it beside a float32 array."""
    return np.float32(x)


def _exponents(rope: MlxRope, stop: int | None = None) -> np.ndarray:
    """``mx.arange(0, stop, 2, dtype=float32) / dims`` (float32, exact division)."""
    top = rope.dims if stop is None else stop
    return np.arange(0, top, 2, dtype=np.float32) / _f(rope.dims)


def _llama3_freqs(rope: MlxRope) -> np.ndarray:
    """``Llama3RoPE.__init__``'s ``_freqs``, float32, in its order of operations."""
    factor = float(rope.get("factor", 1.0))
    low = float(rope.get("low_freq_factor", 1.0))
    high = float(rope.get("high_freq_factor", 4.0))
    old = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    freqs = mlx_power(rope.base, _exponents(rope))
    wavelens = _f(2 * math.pi) * freqs
    freqs = np.where(wavelens > _f(low_wavelen), freqs * _f(factor), freqs)
    medium = (wavelens > _f(high_wavelen)) & (wavelens < _f(low_wavelen))
    smooth = (_f(old) / wavelens - _f(low)) / _f(high - low)
    smooth_freqs = freqs / ((_f(1) - smooth) / _f(factor) + smooth)
    return np.where(medium, smooth_freqs, freqs).astype(np.float32)


def _yarn_parts(rope: MlxRope) -> tuple[int, int | float, float]:
    """``YarnRoPE``'s Python-float ``(low, high)`` ramp ends and its magnitude ``mscale``."""
    dims, base = rope.dims, rope.base
    factor = float(rope.get("factor", 1.0))
    omax = rope.get("original_max_position_embeddings", 4096)

    def get_mscale(m: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    fast, slow = rope.get("beta_fast", 32), rope.get("beta_slow", 1)
    low, high = correction_range(dims, base, omax, fast, slow)  # always rounded outwards
    mscale = get_mscale(rope.get("mscale", 1)) / get_mscale(rope.get("mscale_all_dim", 0))
    return int(low), high, mscale


def _yarn_freqs(rope: MlxRope) -> np.ndarray:
    """``YarnRoPE.__init__``'s ``_freqs``, float32."""
    low, high, _m = _yarn_parts(rope)
    extra = mlx_power(rope.base, _exponents(rope))
    inter = _f(float(rope.get("factor", 1.0))) * extra
    ramp = (np.arange(rope.dims // 2, dtype=np.float32) - _f(low)) / _f(high - low)
    mask: np.ndarray = _f(1.0) - np.clip(ramp, _f(0), _f(1))
    freqs: np.ndarray = (inter * extra) / (inter * mask + extra * (_f(1) - mask))
    return freqs.astype(np.float32)


def _longrope_scale(rope: MlxRope) -> float:
    """``SuScaledRoPE``'s magnitude: ``sqrt(1 + ln(max_pos/orig) / ln(orig))`` when
    ``max_pos > orig`` (mlx-lm passes no ``long_mscale``)."""
    omax = rope.get("original_max_position_embeddings", 4096)
    mpe = rope.max_position_embeddings or 131072
    factor = mpe / omax
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(omax))


def _proportional_freqs(rope: MlxRope) -> np.ndarray:
    """``ProportionalRoPE.__init__``'s ``_freqs``: ``inf`` past the rotated dimensions."""
    rotated = int(rope.dims * float(rope.get("partial_rotary_factor", 1.0)))
    freqs = _f(float(rope.get("factor", 1.0))) * mlx_power(rope.base, _exponents(rope, rotated))
    rest = np.full((rope.dims - rotated) // 2, np.inf, dtype=np.float32)
    return np.concatenate((freqs, rest)).astype(np.float32)


def mlx_freqs(rope: MlxRope) -> np.ndarray | None:
    """The ``freqs`` the module passes ``mx.fast.rope`` (``(R/2,)`` float32), or None when it
    passes a ``base`` (``default``, ``linear``, ``dynamic``)."""
    if rope.rope_type == "llama3":
        return _llama3_freqs(rope)
    if rope.rope_type == "yarn":
        return _yarn_freqs(rope)
    if rope.rope_type == "longrope":
        long = np.asarray(rope.get("long_factor", 1.0), dtype=np.float32)
        freqs: np.ndarray = long * mlx_power(rope.base, _exponents(rope))
        return freqs.astype(np.float32)
    if rope.rope_type == "proportional":
        return _proportional_freqs(rope)
    return None


def mlx_magnitude(rope: MlxRope) -> float:
    """What the module multiplies its input by before ``mx.fast.rope`` (a Python float)."""
    if rope.rope_type == "yarn":
        return _yarn_parts(rope)[2]
    if rope.rope_type == "longrope":
        return _longrope_scale(rope)
    return 1.0


def mlx_base(rope: MlxRope, seq_len: int) -> float:
    """The ``base`` passed ``mx.fast.rope``: dynamic NTK's rescaled one for a sequence of
    ``seq_len`` positions (``T + offset``), else ``rope_theta``."""
    if rope.rope_type != "dynamic":
        return rope.base
    mpe = int(rope.max_position_embeddings or seq_len)
    factor = float(rope.get("factor", 1.0))
    length = max(seq_len, mpe)
    growth = ((factor * length / mpe) - (factor - 1)) ** (rope.dims / (rope.dims - 2))
    return float(rope.base * growth)


def mlx_inv_freq(rope: MlxRope, seq_len: int = 1) -> np.ndarray:
    """``mx.fast.rope``'s ``inv_freqs``, ``(R/2,)`` float32: ``1 / freqs``, or the default rule
    with MLX's ``exp``."""
    freqs = mlx_freqs(rope)
    if freqs is not None:
        with np.errstate(divide="ignore"):
            return (np.float32(1.0) / freqs).astype(np.float32)
    half = rope.dims // 2
    base = np.float32(mlx_base(rope, seq_len))
    step = np.float32(np.float32(math.log(base)) / np.float32(half))
    return mlx_exp(np.arange(0, -half, -1, dtype=np.float32) * step)


def _length(positions: Tensor, seq_len: int | None) -> int:
    if seq_len is not None:
        return seq_len
    return int(positions.max()) + 1 if positions.numel() else 1


def mlx_rope_tables(
    positions: Tensor, rope: MlxRope, seq_len: int | None = None
) -> tuple[Tensor, Tensor]:
    """MLX's float32 ``(cos, sin)``, ``(T, R/2)`` each, magnitude included.

    Args:
        positions: ``(T,)`` int64.
        seq_len: ``T + offset`` of the call (dynamic NTK's length; default ``max + 1``).
    """
    inv = mlx_inv_freq(rope, _length(positions, seq_len))
    pos = positions.numpy().astype(np.float32) * np.float32(rope.scale)  # (T,)
    theta = (pos[:, None] * inv[None, :]).astype(np.float64)
    cos = np.cos(theta).astype(np.float32)
    sin = np.sin(theta).astype(np.float32)
    magnitude = mlx_magnitude(rope)
    if magnitude != 1.0:  # x.at[..., :dims].multiply(m), then x·cos − 0·sin
        cos, sin = cos * np.float32(magnitude), sin * np.float32(magnitude)
    return torch.from_numpy(cos), torch.from_numpy(sin)


def mlx_speeds(rope: MlxRope, seq_len: int = 1) -> Tensor:
    """The rule in float64: the ``(R/2,)`` angle per position (``scale / freqs``)."""
    i = torch.arange(rope.dims // 2, dtype=torch.float64)
    e = 2.0 * i / rope.dims
    base = mlx_base(rope, seq_len)
    freqs = base**e
    if rope.rope_type == "llama3":
        factor = float(rope.get("factor", 1.0))
        low, high = (
            float(rope.get("low_freq_factor", 1.0)),
            float(rope.get("high_freq_factor", 4.0)),
        )
        old = rope.get("original_max_position_embeddings", 8192)
        wavelens = 2 * math.pi * freqs
        scaled = torch.where(wavelens > old / low, freqs * factor, freqs)
        smooth = (old / wavelens - low) / (high - low)
        medium = (wavelens > old / high) & (wavelens < old / low)
        freqs = torch.where(medium, scaled / ((1 - smooth) / factor + smooth), scaled)
    elif rope.rope_type == "yarn":
        low_end, high_end, _m = _yarn_parts(rope)
        inter = float(rope.get("factor", 1.0)) * freqs
        mask = 1.0 - ((i - low_end) / (high_end - low_end)).clamp(0, 1)
        freqs = inter * freqs / (inter * mask + freqs * (1 - mask))
    elif rope.rope_type == "longrope":
        freqs = torch.tensor(rope.get("long_factor", 1.0), dtype=torch.float64) * freqs
    elif rope.rope_type == "proportional":
        rotated = int(rope.dims * float(rope.get("partial_rotary_factor", 1.0))) // 2
        freqs = float(rope.get("factor", 1.0)) * freqs
        freqs[rotated:] = math.inf
    return rope.scale / freqs


def mlx_exact_tables(
    positions: Tensor, rope: MlxRope, seq_len: int | None = None
) -> tuple[Tensor, Tensor]:
    """The same rule in float64: ``m · cos(p · scale / freqs)`` (and sin)."""
    speeds = mlx_speeds(rope, _length(positions, seq_len))
    angles = positions.to(torch.float64)[:, None] * speeds[None, :]
    magnitude = mlx_magnitude(rope)
    return angles.cos() * magnitude, angles.sin() * magnitude


_SCALING_KEYS = (
    "factor",
    "original_max_position_embeddings",
    "low_freq_factor",
    "high_freq_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "long_factor",
    "partial_rotary_factor",
)


def mlx_rope_for(
    *,
    rotary_dim: int,
    base: float,
    layout: str,
    scaling: Mapping[str, Any] | None,
    max_position_embeddings: int | None = None,
) -> MlxRope:
    """``initialize_rope(dims, base, traditional, scaling_config, max_position_embeddings)`` for
    posenc's reading of a config: ``traditional`` for the interleaved layout (mlx-lm's ports
    keep the Hugging Face weight order; ``SuScaledRoPE`` always rotates halves).

    Raises:
        InvalidArgument: a type mlx-lm does not build.
    """
    raw = "default" if not scaling else str(scaling.get("type") or scaling.get("rope_type"))
    kind = _ALIASES.get(raw, raw)
    if kind not in MLX_TYPES:
        raise InvalidArgument(
            f"engine mlx covers mlx-lm's {', '.join(sorted(MLX_TYPES))} RoPE types; this "
            f"config is {raw!r}",
            field="engine",
        )
    config = None
    if scaling and kind != "default":
        config = {k: scaling[k] for k in _SCALING_KEYS if scaling.get(k) is not None}
        if kind == "longrope" and "long_factor" not in config:
            raise InvalidArgument(
                "engine mlx's longrope (SuScaledRoPE) needs long_factor", field="scaling"
            )
    mpe = max_position_embeddings
    if kind == "dynamic" and mpe is None and config is not None:  # the config's, else this
        mpe = config.get("original_max_position_embeddings")
    if kind == "longrope" and mpe is None and config is not None:  # factor = max_pos / orig
        omax = config.get("original_max_position_embeddings", 4096)
        mpe = round(float(config.get("factor", 1.0)) * omax)
    if kind == "dynamic" and mpe is None:
        raise InvalidArgument(
            "engine mlx's dynamic NTK needs max_position_embeddings (a config's, or "
            "scaling.original_max_position_embeddings)",
            field="scaling",
        )
    scale = 1.0
    if kind == "linear":
        scale = float(np.float32(1.0 / float(scaling["factor"])))  # type: ignore[index]
    traditional = layout == "interleaved" and kind != "longrope"
    return MlxRope(
        rotary_dim,
        traditional,
        float(base),
        scale,
        rope_type=kind,
        scaling_config=config,
        max_position_embeddings=None if mpe is None else int(mpe),
    )


__all__ = [
    "MLX_TYPES",
    "MlxRope",
    "mlx_base",
    "mlx_exact_tables",
    "mlx_exp",
    "mlx_freqs",
    "mlx_inv_freq",
    "mlx_magnitude",
    "mlx_power",
    "mlx_rope_for",
    "mlx_rope_tables",
    "mlx_speeds",
]
