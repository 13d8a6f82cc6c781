"""RoPE as llama.cpp applies it: ggml's rope, its parameters, and what it reads from a model.

llama.cpp rotates queries and keys with ``ggml_rope_ext`` (``ggml_rope_multi`` for M-RoPE),
whose CPU kernel (``ggml/src/ggml-cpu/ops.cpp``: ``ggml_rope_cache_init``, ``rope_yarn``,
``ggml_mrope_cache_init``) builds, for each position ``p``, one cache row of ``R/2`` (cos, sin)
pairs in float32:

- ``theta_scale = powf(freq_base, -2.0f / n_dims)``, and ``theta`` starts at ``(float) p`` and
  is **advanced by repeated multiplication**, ``theta *= theta_scale`` after each pair (not
  ``p · base^(-2i/n)`` computed afresh);
- pair ``i`` uses ``theta_extrap = theta / freq_factors[i]`` (LongRoPE's and Llama 3's factors,
  the ``rope_freqs`` / ``rope_long`` / ``rope_short`` tensors of a GGUF), ``theta_interp =
  freq_scale · theta_extrap``; with YaRN (``ext_factor != 0``) the two mix by the ramp
  ``1 − clamp((i − low) / max(0.001, high − low), 0, 1)`` times ``ext_factor`` (``low``,
  ``high`` from ``ggml_rope_yarn_corr_dims``: floor/ceil of ``n · ln(n_ctx_orig / (β · 2π)) /
  (2 ln base)``), and the magnitude ``attn_factor`` is multiplied by ``1 + 0.1 · ln(1 /
  freq_scale)``;
- ``cos = cosf(theta) · mscale``, ``sin = sinf(theta) · mscale``.

Layouts: ``normal`` mode (0: Llama, Mistral, DeepSeek, whose converter permutes Q/K so that
pairs are adjacent) rotates ``(x[2i], x[2i+1])``, the ``interleaved`` layout; ``neox`` (2),
``mrope`` (8: Qwen2-VL, sections of the frequency index per position row) and ``imrope`` (40:
Qwen3-VL, sections interleaved) rotate ``(x[i], x[i + R/2])``, the ``half`` layout.

:func:`ggml_rope_tables` is that arithmetic in float32, step for step (NumPy), for ``precision:
"engine"``; :func:`llamacpp_rope_tables` the same rule in float64 (``precision: "exact"``).
:func:`llamacpp_rope_from_config` is what llama.cpp's converter (``convert_hf_to_gguf.py``)
writes for a Hugging Face config and what ``llama_context`` then passes ``ggml_rope_ext``;
:func:`llamacpp_rope_from_gguf` reads the same from a GGUF's metadata.

Notation: ``T`` positions, ``R`` rotary dimension (``n_dims`` / ``n_rot``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.facts.families import FAMILIES, family, types_where

#: ggml's rope modes (``GGML_ROPE_TYPE_*``) by name.
ROPE_MODES: dict[str, int] = {"normal": 0, "neox": 2, "mrope": 8, "imrope": 40, "vision": 24}
_MODE_NAMES = {v: k for k, v in ROPE_MODES.items()}


@dataclass(frozen=True)
class LlamaCppRope:
    """The arguments llama.cpp passes ``ggml_rope_ext`` / ``ggml_rope_multi`` for one model.

    Attributes:
        n_dims: ``R``, the rotated dimensions (GGUF ``rope.dimension_count``).
        mode: ``normal``, ``neox``, ``mrope`` or ``imrope``.
        freq_base: ``rope.freq_base`` (rope_theta).
        freq_scale: ``1 / rope.scaling.factor`` for linear and YaRN scaling, else 1.
        ext_factor: YaRN's extrapolation mix (1 with YaRN, else 0).
        attn_factor: the magnitude passed to ggml (before ggml's own YaRN ``mscale``).
        beta_fast, beta_slow: YaRN's ramp ends (32 and 1 by default).
        n_ctx_orig: ``rope.scaling.original_context_length`` (else the training context).
        sections: M-RoPE's four sections (``rope.dimension_sections``), or None.
        freq_factors: the ``R/2`` divisors of the ``rope_freqs`` (Llama 3) or ``rope_long`` /
            ``rope_short`` (LongRoPE) tensor in use, as float32 values, or None.
        notes: how llama.cpp read the model (one sentence each).
    """

    n_dims: int
    mode: str = "neox"
    freq_base: float = 10000.0
    freq_scale: float = 1.0
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    n_ctx_orig: int = 0
    sections: tuple[int, int, int, int] | None = None
    freq_factors: tuple[float, ...] | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def layout(self) -> str:
        """posenc's layout of the table: ``interleaved`` for normal mode, else ``half``."""
        return "interleaved" if self.mode == "normal" else "half"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``meta.llamacpp`` gives it."""
        return {
            "n_dims": self.n_dims,
            "mode": self.mode,
            "freq_base": self.freq_base,
            "freq_scale": self.freq_scale,
            "ext_factor": self.ext_factor,
            "attn_factor": self.attn_factor,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
            "n_ctx_orig": self.n_ctx_orig,
            "sections": list(self.sections) if self.sections is not None else None,
            "freq_factors": list(self.freq_factors) if self.freq_factors is not None else None,
        }


def _f32(x: float) -> np.float32:
    return np.float32(x)


def _logf(x: np.float32) -> np.float32:
    """``logf``: the float64 logarithm of a float32, rounded once (glibc's is correctly
    rounded)."""
    value = float(x)
    return np.float32(math.log(value)) if value > 0 else np.float32(-math.inf)


def yarn_corr_dims(rope: LlamaCppRope) -> tuple[np.float32, np.float32]:
    """``ggml_rope_yarn_corr_dims`` in float32: the ramp's ``(low, high)``."""
    n = _f32(rope.n_dims)
    two_pi = np.float32(2) * np.float32(math.pi)

    def corr_dim(rot: float) -> np.float32:
        ratio = np.float32(rope.n_ctx_orig) / (np.float32(rot) * two_pi)
        return n * _logf(ratio) / (np.float32(2) * _logf(_f32(rope.freq_base)))

    with np.errstate(divide="ignore", invalid="ignore"):  # n_ctx_orig 0: floorf(-inf)
        start = np.floor(corr_dim(rope.beta_fast))
        end = np.ceil(corr_dim(rope.beta_slow))
    return max(np.float32(0), start), min(np.float32(rope.n_dims - 1), end)


def _rows(
    positions: Tensor | Sequence[int] | Sequence[Sequence[int]], rope: LlamaCppRope
) -> Tensor:
    """Positions as ``(T,)`` int64, or ``(4, T)`` rows for M-RoPE (missing rows repeat the
    first: text tokens have the same position on every axis)."""
    pos = torch.as_tensor(positions, dtype=torch.int64)
    if rope.sections is None:
        if pos.dim() != 1:
            raise InvalidArgument(
                f"llama.cpp's {rope.mode} rope takes one row of positions, got {pos.dim()} rows",
                field="positions",
            )
        return pos
    if pos.dim() == 1:
        pos = pos[None]
    return torch.cat((pos, pos[:1].expand(4 - pos.shape[0], -1)), 0) if pos.shape[0] < 4 else pos


def _section_rows(rope: LlamaCppRope) -> list[int]:
    """Which position row (0 t, 1 h, 2 w, 3 e) turns each of the ``R/2`` frequencies, as
    ``ggml_mrope_cache_init`` chooses it (``sector = i mod sum(sections)``)."""
    return [int(r) for r in _section_row_array(rope)]


def _section_row_array(rope: LlamaCppRope) -> np.ndarray:
    """:func:`_section_rows` as an ``(R/2,)`` int64 array, computed over all the frequencies at
    once (no Python step per frequency)."""
    s = rope.sections or (0, 0, 0, 0)
    sector = np.arange(rope.n_dims // 2, dtype=np.int64) % sum(s)
    if rope.mode == "imrope":
        return np.select(
            [
                (sector % 3 == 1) & (sector < 3 * s[1]),
                (sector % 3 == 2) & (sector < 3 * s[2]),
                (sector % 3 == 0) & (sector < 3 * s[0]),
            ],
            [1, 2, 0],
            default=3,
        )
    return np.select(
        [sector < s[0], sector < s[0] + s[1], sector < s[0] + s[1] + s[2]], [0, 1, 2], default=3
    )


def ggml_rope_tables(
    positions: Tensor | Sequence[int] | Sequence[Sequence[int]], rope: LlamaCppRope
) -> tuple[Tensor, Tensor]:
    """ggml's CPU rope cache in its own float32 arithmetic: ``(cos, sin)``, ``(T, R/2)`` each.

    ``theta`` advances by ``theta *= theta_scale`` in float32; each step, the YaRN mix and the
    magnitude are float32 operations in ggml's order; ``cosf``/``sinf`` are the float64 values
    of the float32 angle rounded once (glibc's are correctly rounded to within an ulp).
    """
    pos = _rows(positions, rope)
    half = rope.n_dims // 2
    theta_scale = np.float32(
        math.pow(float(_f32(rope.freq_base)), float(np.float32(-2.0) / np.float32(rope.n_dims)))
    )
    low, high = yarn_corr_dims(rope)
    freq_scale = _f32(rope.freq_scale)
    ext = _f32(rope.ext_factor)
    mscale = _f32(rope.attn_factor)
    if ext != 0:
        mscale = mscale * (np.float32(1.0) + np.float32(0.1) * _logf(np.float32(1.0) / freq_scale))
    factors = (
        np.asarray(rope.freq_factors, dtype=np.float32)
        if rope.freq_factors is not None
        else np.ones(half, dtype=np.float32)
    )
    if factors.shape[0] < half:
        raise InvalidArgument(
            f"llama.cpp's freq_factors need {half} values (n_dims/2), got {factors.shape[0]}",
            field="config",
        )
    start = pos.numpy().astype(np.float32)  # (T,) or (4, T): float(p), exact below 2**24
    # theta before pair i is p · theta_scale^i rounded after every step: a running product in
    # float32, which np.multiply.accumulate computes in C one rounding a step, as ggml does
    steps = np.empty((*start.shape, half), dtype=np.float32)  # (T, R/2) or (4, T, R/2)
    steps[..., 0] = start
    steps[..., 1:] = theta_scale
    theta = np.multiply.accumulate(steps, axis=-1)
    if rope.sections is not None:  # each pair turns with its section's position row
        rows = _section_row_array(rope)
        theta = theta[rows, :, np.arange(half)].T  # (T, R/2)
    extrap = theta / factors[None, :half]
    interp = freq_scale * extrap
    if ext != 0:
        i = np.arange(half).astype(np.float32)
        y = (i - low) / max(np.float32(0.001), high - low)
        ramp = (np.float32(1) - np.minimum(np.float32(1), np.maximum(np.float32(0), y))) * ext
        # ggml writes interp * (1 - ramp) + extrap * ramp; built with -march=native the
        # compiler fuses it into fma(interp, 1 - ramp, extrap * ramp): the product of two
        # float32 is exact in float64, so one rounding of the float64 sum is that fma
        extra = extrap * ramp[None, :]
        angles = (
            interp.astype(np.float64) * (np.float32(1) - ramp).astype(np.float64)[None, :]
            + extra.astype(np.float64)
        ).astype(np.float32)
    else:
        angles = interp
    wide = angles.astype(np.float64)
    cos = np.cos(wide).astype(np.float32) * mscale
    sin = np.sin(wide).astype(np.float32) * mscale
    return torch.from_numpy(cos), torch.from_numpy(sin)


def llamacpp_inv_freq(rope: LlamaCppRope) -> tuple[Tensor, float]:
    """The rule in float64: ``(R/2,)`` angular speeds (angle = p · speed, YaRN mixed) and the
    magnitude (``attn_factor``, with YaRN's ``1 + 0.1 ln(1/freq_scale)``)."""
    half = rope.n_dims // 2
    i = torch.arange(half, dtype=torch.float64)
    speed = float(rope.freq_base) ** (-2.0 * i / rope.n_dims)
    if rope.freq_factors is not None:
        speed = speed / torch.tensor(rope.freq_factors[:half], dtype=torch.float64)
    interp = rope.freq_scale * speed
    scale = float(rope.attn_factor)
    if rope.ext_factor != 0:
        low, high = (float(v) for v in yarn_corr_dims(rope))
        y = (i - low) / max(0.001, high - low)
        ramp = (1 - y.clamp(0, 1)) * rope.ext_factor
        speed = interp * (1 - ramp) + speed * ramp
        scale *= 1.0 + 0.1 * math.log(1.0 / rope.freq_scale)
    else:
        speed = interp
    return speed, scale


def llamacpp_rope_tables(
    positions: Tensor | Sequence[int] | Sequence[Sequence[int]], rope: LlamaCppRope
) -> tuple[Tensor, Tensor]:
    """The same rule exactly: float64 ``(cos, sin)``, ``(T, R/2)`` each."""
    pos = _rows(positions, rope).to(torch.float64)
    speed, scale = llamacpp_inv_freq(rope)
    if rope.sections is None:
        angles = pos[:, None] * speed[None, :]
    else:
        rows = torch.tensor(_section_rows(rope))
        angles = pos[rows, :].T * speed[None, :]  # (T, R/2)
    return angles.cos() * scale, angles.sin() * scale


#: Hugging Face ``model_type`` -> ggml rope mode, as ``llama_model_rope_type`` gives it for the
#: architecture llama.cpp's converter maps the model to (the records' ``llamacpp_rope``).
#: Llama-architecture models are ``normal``: the converter permutes Q and K so that the rotated
#: pairs are adjacent.
MODEL_TYPE_MODES: Mapping[str, str] = MappingProxyType(
    {t: f.llamacpp_rope for t, f in FAMILIES.items() if f.llamacpp_rope not in (None, "none")}
)

#: Model types llama.cpp runs without RoPE (``LLAMA_ROPE_TYPE_NONE``) though transformers'
#: model rotates: GPT-J.
NO_ROPE_MODEL_TYPES: frozenset[str] = types_where(lambda f: f.llamacpp_rope == "none")


def _get_mscale(scale: np.float32, mscale: np.float32) -> np.float32:
    """llama_context's ``get_mscale`` in float32."""
    if scale <= 1:
        return np.float32(1.0)
    return np.float32(0.1) * mscale * _logf(scale) + np.float32(1.0)


def llama3_freq_factors(
    rotary_dim: int, base: float, scaling: Mapping[str, Any]
) -> tuple[float, ...]:
    """The ``rope_freqs`` tensor llama.cpp's converter writes for a ``llama3`` config
    (``LlamaModel.generate_extra_tensors``): a float32 torch ``freqs``, each factor 1, ``factor``
    or ``1 / ((1 - smooth) / factor + smooth)``, stored as float32."""
    freqs = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    factor = scaling.get("factor", 8.0)
    low = scaling.get("low_freq_factor", 1.0)
    high = scaling.get("high_freq_factor", 4.0)
    old = scaling.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    out: list[Any] = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return tuple(float(v) for v in torch.tensor(out, dtype=torch.float32))


def _yarn_arguments(
    s: Mapping[str, Any], model_type: str, n_ctx_train: int, notes: list[str]
) -> dict[str, Any]:
    """llama.cpp's YaRN arguments from a scaling (transformers' names): ``freq_scale``,
    ``ext_factor`` 1, the original context, the betas and the magnitude in float32 as its
    converter and ``llama_context`` compute it (DeepSeek's log multiplier where the family has
    one); what it ignores goes to ``notes``."""
    factor = np.float32(s["factor"])
    freq_scale = np.float32(1.0) / factor
    kw: dict[str, Any] = {"freq_scale": float(freq_scale), "ext_factor": 1.0}
    kw["n_ctx_orig"] = int(s.get("original_max_position_embeddings") or n_ctx_train)
    kw["beta_fast"] = float(s.get("beta_fast") or 32.0)
    kw["beta_slow"] = float(s.get("beta_slow") or 1.0)
    back = np.float32(1.0) / freq_scale
    if family(model_type).llamacpp_yarn_log_multiplier and s.get("mscale_all_dim"):
        log_mul = np.float32(np.float32(0.1 * float(s["mscale_all_dim"])) / np.float32(0.1))
        mscale = log_mul if log_mul != 1 else np.float32(1.0)
        attn = _get_mscale(back, mscale) / _get_mscale(back, log_mul)
    else:
        attn = _get_mscale(back, np.float32(1.0))
    attn = attn * (np.float32(1.0) / (np.float32(1.0) + np.float32(0.1) * _logf(back)))
    kw["attn_factor"] = float(attn)
    if s.get("truncate") is False:
        notes.append("YaRN: llama.cpp always rounds the ramp's ends (truncate: false ignored)")
    if s.get("attention_factor") is not None:
        notes.append(
            "YaRN: llama.cpp computes the magnitude from factor; attention_factor is ignored"
        )
    return kw


def llamacpp_rope_for(
    *,
    model_type: str,
    rotary_dim: int,
    base: float,
    layout: str = "half",
    scaling: Mapping[str, Any] | None = None,
    max_position_embeddings: int | None = None,
    n_ctx: int | None = None,
    mrope_section: Sequence[int] | None = None,
) -> LlamaCppRope:
    """What llama.cpp passes ``ggml_rope_ext`` for a model read from its Hugging Face config:
    the converter's GGUF keys and tensors, then ``llama_context``'s parameters.

    Args:
        model_type: the text model's ``model_type`` (``""``: unknown, mode from ``layout``).
        rotary_dim, base, scaling: posenc's reading of the config (transformers' names).
        max_position_embeddings: the training context (``n_ctx_train``).
        n_ctx: the context llama.cpp runs with (``--ctx-size``; default the training context):
            LongRoPE uses its long factors when it exceeds the original context.
        mrope_section: M-RoPE's three sections (written as four, the last 0).

    Raises:
        InvalidArgument: a model llama.cpp runs without RoPE, a scaling type it lacks.
    """
    notes: list[str] = []
    if model_type in NO_ROPE_MODEL_TYPES:
        raise InvalidArgument(
            f"llama.cpp runs model_type {model_type!r} without RoPE (LLAMA_ROPE_TYPE_NONE)",
            field="engine",
        )
    mode = MODEL_TYPE_MODES.get(model_type) or ("normal" if layout == "interleaved" else "neox")
    if mrope_section is not None and mode not in ("mrope", "imrope"):
        mode = "mrope"
    if mode == "normal" and layout == "half":
        notes.append(
            "normal mode: llama.cpp's converter permutes Q and K so that rotated pairs are "
            "adjacent; the table is in the interleaved layout"
        )
    s = dict(scaling or {})
    kind = s.get("type") or s.get("rope_type") or "default"
    n_ctx_train = int(max_position_embeddings or s.get("original_max_position_embeddings") or 4096)
    ctx = int(n_ctx or n_ctx_train)
    kw: dict[str, Any] = {"n_ctx_orig": n_ctx_train}
    if kind == "linear":
        kw["freq_scale"] = float(np.float32(1.0) / np.float32(s["factor"]))
    elif kind == "yarn":
        kw.update(_yarn_arguments(s, model_type, n_ctx_train, notes))
    elif kind == "longrope":
        omax = int(s["original_max_position_embeddings"])
        scale = float(s.get("factor") or (n_ctx_train / omax))
        magnitude = math.sqrt(1 + math.log(scale) / math.log(omax)) if scale > 1.0 else 1.0
        long = ctx > omax
        factors = s["long_factor"] if long else s["short_factor"]
        kw.update(
            attn_factor=float(np.float32(magnitude)),
            freq_factors=tuple(float(np.float32(f)) for f in factors),
            n_ctx_orig=omax,
        )
        notes.append(
            f"LongRoPE: llama.cpp picks the {'long' if long else 'short'} factors for every "
            f"position from the context size n_ctx {ctx} (long above {omax}), not from the "
            "sequence"
        )
    elif kind == "llama3":
        kw["freq_factors"] = llama3_freq_factors(rotary_dim, base, s)
    elif kind == "dynamic":
        notes.append("dynamic NTK: llama.cpp has no dynamic scaling; the base is not rescaled")
    elif kind != "default":
        raise InvalidArgument(f"llama.cpp has no rule for rope type {kind!r}", field="engine")
    sections = None
    if mrope_section is not None:
        sec = [int(v) for v in mrope_section][:4]
        sections = (*sec, *([0] * (4 - len(sec))))
    return LlamaCppRope(
        n_dims=int(rotary_dim),
        mode=mode,
        freq_base=float(np.float32(base)),
        sections=sections,  # type: ignore[arg-type]
        notes=tuple(notes),
        **kw,
    )


def mode_name(mode: int) -> str:
    """``GGML_ROPE_TYPE_*`` value to name (``normal``, ``neox``, ``mrope``, ``imrope``)."""
    if mode not in _MODE_NAMES:
        raise InvalidArgument(f"unknown ggml rope mode {mode}", field="config")
    return _MODE_NAMES[mode]


__all__ = [
    "MODEL_TYPE_MODES",
    "NO_ROPE_MODEL_TYPES",
    "ROPE_MODES",
    "LlamaCppRope",
    "ggml_rope_tables",
    "llama3_freq_factors",
    "llamacpp_inv_freq",
    "llamacpp_rope_for",
    "llamacpp_rope_tables",
    "mode_name",
    "yarn_corr_dims",
]
