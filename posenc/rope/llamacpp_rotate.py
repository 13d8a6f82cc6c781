"""llama.cpp's rotation of vectors: ``ggml_rope_ext`` (and ``ggml_rope_multi``) on F32 tensors,
as libggml's CPU build computes it, for its apply and its K-shift.

libggml's CPU kernel (``ggml/src/ggml-cpu/ops.cpp``, ``ggml_compute_forward_rope_flt``) fills,
per token, a cache row of ``R/2`` float32 ``(cos, sin)`` pairs (``ggml_rope_cache_init`` and
``rope_yarn``: :func:`posenc.rope.llamacpp.ggml_rope_tables` reproduces it), then rotates each
head's pairs (``rotate_pairs``)::

    dst[0]        = x0*cos_theta - x1*sin_theta
    dst[n_offset] = x0*sin_theta + x1*cos_theta

with ``x0 = src[0]``, ``x1 = src[n_offset]``: adjacent pairs in ``normal`` mode (``n_offset``
1), the halves ``x[i]``, ``x[i + R/2]`` in ``neox``, ``mrope`` and ``imrope`` mode. Built for the
host (``-march=native``, GCC's default ``-ffp-contract=fast``), each expression becomes one
fused multiply-add on its first product: ``fma(x0, cos, -(x1*sin))`` and ``fma(x0, sin,
x1*cos)``, the second product rounded to float32 first. Channels from ``R`` on are copied.

llama.cpp's K-shift (``llama_kv_cache::build_rope_shift``) is that same ``ggml_rope_ext``
(``ggml_rope_ext_inplace`` on F32 keys) on the cached keys, at positions holding each cell's
``delta``, with the model's frequency arguments; M-RoPE models shift in ``neox`` mode, and
DeepSeek-V2/V3 pass ``attn_factor = 1 / (1 + 0.1 ln(1 / freq_scale))`` so that YaRN's
magnitude is not applied again. Every other model passes its own ``attn_factor``, so a key
shifted ``n`` times carries the magnitude ``n + 1`` times.

Notation: ``T`` tokens, ``H`` heads, ``D`` head dimension, ``R`` rotary dimension
(``n_dims``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.facts.families import family
from posenc.rope.llamacpp import LlamaCppRope, ggml_rope_tables
from posenc.rope.precision import llamacpp_complete


def rope_from_dict(spec: Mapping[str, Any]) -> LlamaCppRope:
    """:class:`LlamaCppRope` from its :meth:`~LlamaCppRope.to_dict` form (``meta.llamacpp``)."""
    d = {k: v for k, v in dict(spec).items() if k in LlamaCppRope.__dataclass_fields__}
    sections, factors = d.pop("sections", None), d.pop("freq_factors", None)
    return LlamaCppRope(
        **d,
        sections=tuple(sections) if sections is not None else None,
        freq_factors=tuple(factors) if factors is not None else None,
    )


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fmaf(a, b, c)`` of float32 arrays: the product is exact in float64, the sum is rounded
    once to float64 and then to float32 (the two roundings differ from one only at exact
    float32 ties: within an ulp)."""
    wide = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    return wide.astype(np.float32)


def _pairs(x: np.ndarray, n_dims: int, mode: str) -> tuple[Any, Any]:
    """The index expressions of the rotated pairs' two members in the last axis."""
    if mode == "normal":
        return slice(0, n_dims, 2), slice(1, n_dims, 2)
    return slice(0, n_dims // 2), slice(n_dims // 2, n_dims)


def ggml_rotate(x: Tensor, positions: Tensor | Sequence[int], rope: LlamaCppRope) -> Tensor:
    """``ggml_rope_ext`` (``ggml_rope_multi`` for ``mrope``/``imrope``) on F32 vectors.

    Args:
        x: ``(T, H, D)`` float32, in the channel order llama.cpp holds (its converter's
            permutation applied: adjacent pairs in ``normal`` mode).
        positions: ``(T,)`` ints (negative allowed, as a K-shift's deltas), or ``(3, T)`` /
            ``(4, T)`` rows for M-RoPE.
        rope: the arguments llama.cpp passes.

    Returns:
        ``(T, H, D)`` float32: the first ``R`` channels rotated, the rest copied bit for bit.
    """
    if x.dim() != 3:
        raise InvalidArgument(f"x must be (T, H, D), got shape {tuple(x.shape)}", field="k")
    n = int(rope.n_dims)
    if rope.mode not in ("normal", "neox", "mrope", "imrope"):
        raise InvalidArgument(
            f"llama.cpp's {rope.mode} rope (vision towers) is not rotated here; normal, neox, "
            "mrope and imrope are",
            field="llamacpp.mode",
        )
    if n > x.shape[-1]:
        raise InvalidArgument(
            f"llama.cpp's n_dims {n} is more than the head dimension {x.shape[-1]}", field="k"
        )
    cos, sin = ggml_rope_tables(positions, rope)  # (T, R/2) float32, attn_factor applied
    c = cos.numpy()[:, None, :]
    s = sin.numpy()[:, None, :]
    src = x.detach().to(device="cpu", dtype=torch.float32).numpy()
    out = src.copy()
    first, second = _pairs(src, n, rope.mode)
    x0, x1 = src[..., first], src[..., second]
    out[..., first] = _fma(x0, c, -(x1 * s))
    out[..., second] = _fma(x0, s, x1 * c)
    return torch.from_numpy(out)


def llamacpp_rope_of(fields: Mapping[str, Any]) -> LlamaCppRope:
    """The arguments llama.cpp passes for resolved rope fields: their ``llamacpp`` (given, or
    filled in by :func:`posenc.rope.precision.llamacpp_complete`), else read from them."""
    if fields.get("llamacpp") is None or "llamacpp_notes" not in fields:
        fields = llamacpp_complete(dict(fields))
    return rope_from_dict(fields["llamacpp"])


def llamacpp_apply(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """q or k rotated as llama.cpp rotates them: ``ggml_rope_ext`` on F32 (``ggml_rope_multi``
    for M-RoPE), within 2 float32 ulp of each rotated pair's magnitude of libggml's CPU build.

    Args:
        x: ``(T, H, D)``, in llama.cpp's channel order; computed in float32.
        positions: ``(T,)`` int64 (``(3, T)`` for M-RoPE).
        fields: resolved rope fields (``rotary_dim``, ``base``, ``layout``, ``scaling``, the
            config's model type; or ``llamacpp``, ggml's arguments given directly).

    Returns:
        ``(T, H, D)`` in ``x``'s dtype.
    """
    rope = llamacpp_rope_of(fields)
    return ggml_rotate(x, positions, rope).to(x.dtype)


def kshift_rope(rope: LlamaCppRope, *, model_type: str = "") -> LlamaCppRope:
    """The arguments ``build_rope_shift`` passes: M-RoPE shifts in ``neox`` mode (no
    sections); DeepSeek-V2/V3 (llama.cpp's ``deepseek2``) undo YaRN's magnitude."""
    if rope.mode in ("mrope", "imrope"):
        rope = dataclasses.replace(rope, mode="neox", sections=None)
    # LLM_ARCH_DEEPSEEK2: the model types whose converter writes yarn_log_multiplier
    if family(model_type).llamacpp_yarn_log_multiplier and rope.ext_factor != 0:
        back = np.float32(1.0) / np.float32(rope.freq_scale)
        attn = np.float32(1.0) / (np.float32(1.0) + np.float32(0.1) * np.log(back))
        rope = dataclasses.replace(rope, attn_factor=float(np.float32(attn)))
    return rope


def llamacpp_kshift(
    k: Tensor, delta: Tensor | Sequence[int], rope: LlamaCppRope, *, steps: int = 1
) -> Tensor:
    """llama.cpp's K-shift, ``steps`` times: ``ggml_rope_ext`` on the cached F32 keys at the
    positions ``delta`` (one per token), each step rotating the previous step's output.

    Args:
        k: ``(T, H, D)`` cached keys (cast to float32, as F32 cache cells hold them).
        delta: ``(T,)`` ints: each token's shift.
        rope: the K-shift's arguments (:func:`kshift_rope`).
        steps: how many shifts in a row.

    Returns:
        ``(T, H, D)`` float32.
    """
    shift = torch.as_tensor(delta, dtype=torch.int64)
    out = k.detach().to(device="cpu", dtype=torch.float32)
    for _ in range(int(steps)):
        out = ggml_rotate(out, shift, rope)
    return out


__all__ = [
    "ggml_rotate",
    "kshift_rope",
    "llamacpp_apply",
    "llamacpp_kshift",
    "llamacpp_rope_of",
    "rope_from_dict",
]
