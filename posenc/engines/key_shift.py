"""Each engine's own shift of cached keys: the ``shift`` hooks of :mod:`posenc.engines`.

A shift turns keys rotated at ``from`` positions by each token's ``delta = to − from`` (per step,
``steps`` times). What an engine runs for it:

- llama.cpp: its K-shift, ``ggml_rope_ext`` on the cached F32 keys at the delta positions with
  ``build_rope_shift``'s arguments (:func:`posenc.rope.llamacpp_rotate.llamacpp_kshift`), its
  ``attn_factor`` included as libggml multiplies it in;
- transformers and vLLM have no shift of their own: theirs is their float32 rotation
  (``apply_rotary_pos_emb``, ``forward_native``: ``x0·cos − x1·sin``, ``x1·cos + x0·sin`` in
  ``k``'s dtype, the table cast to it: :func:`posenc.engines.rotation.rotate_pairs`, the arithmetic
  of their apply hooks) by their float32 table at the delta, without the
  attention factor (the keys carry it from their first rotation): transformers' float32
  ``inv_freq`` at ``to_seq_len``, vLLM's ``_compute_cos_sin_cache`` rows.

Every function takes the shift's resolved fields (:data:`posenc.rope_kinds.shift.ROPE_SHIFT`: the
rope kind's fields, ``from_seq_len``, ``to_seq_len``, ``delta``, ``steps``). The hooks have
:data:`posenc.engines.base.ShiftHook`'s signature.

Notation: ``T`` tokens, ``H`` key heads, ``D`` head dimension, ``R`` rotary dimension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posenc.engines.rotation import rotate_pairs
from posenc.rope.llamacpp import LlamaCppRope, ggml_rope_tables
from posenc.rope.llamacpp_rotate import kshift_rope, llamacpp_kshift, rope_from_dict
from posenc.rope.precision import (
    model_type_of,
    transformers_half_tables,
    transformers_inv_freq,
    vllm_inv_freq,
)
from posenc.rope.scaling import RopeScaling
from posenc.rope.vllm import vllm_for_fields


def rotation_sign(p: Mapping[str, Any]) -> float:
    """``-1`` for ``rotation: "negative"`` (the sines negated), else ``1``."""
    return -1.0 if p.get("rotation") == "negative" else 1.0


def step_deltas(
    from_positions: Tensor, to_positions: Tensor, p: Mapping[str, Any]
) -> tuple[Tensor, int]:
    """Each token's delta per step ``(T,)`` int64 and the number of steps (``steps`` goes with
    ``delta``; explicit ``to_positions`` are one step)."""
    steps = int(p.get("steps") or 1) if p.get("delta") is not None else 1
    delta = (to_positions.to(torch.int64) - from_positions.to(torch.int64)) // steps
    return delta, steps


def llamacpp_shift_rope(p: Mapping[str, Any]) -> LlamaCppRope:
    """The arguments llama.cpp's ``build_rope_shift`` passes for resolved fields."""
    return kshift_rope(rope_from_dict(p["llamacpp"]), model_type=model_type_of(p))


def llamacpp_delta_tables(p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
    """ggml's ``(T, R/2)`` float32 cache rows at ``delta`` for the K-shift's arguments."""
    return ggml_rope_tables(delta, llamacpp_shift_rope(p))


def transformers_delta_tables(p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
    """transformers' ``(T, R/2)`` float32 angles at ``delta`` with its float32 ``inv_freq`` at
    ``to_seq_len``, without the attention factor."""
    scaling = RopeScaling.from_dict(p["scaling"]) if p.get("scaling") is not None else None
    inv, _scale = transformers_inv_freq(
        int(p["rotary_dim"]),
        float(p["base"]),
        scaling,
        seq_len=int(p["to_seq_len"]),
        exponent_dim=p.get("exponent_dim"),
    )
    return transformers_half_tables(delta, inv, 1.0)


def vllm_delta_tables(p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
    """vLLM's ``_compute_cos_sin_cache`` float32 rows at ``delta`` ``(T, R/2)``, before its
    magnitude (the linear class divides the positions by its factor first)."""
    vllm = vllm_for_fields(p)
    inv = vllm_inv_freq(p, vllm)
    t = delta.to(torch.float)
    if vllm.rope_type == "linear":
        t = t / float(p["scaling"]["factor"])
    freqs = t[:, None] * inv[None, :]
    return freqs.cos(), freqs.sin()


def _table_shift(k: Tensor, cos: Tensor, sin: Tensor, steps: int, p: Mapping[str, Any]) -> Tensor:
    """``k`` rotated ``steps`` times by ``(cos, sin)`` ``(T, R/2)`` cast to its dtype."""
    cos, sin = cos.to(k.dtype), (rotation_sign(p) * sin).to(k.dtype)
    out = k
    for _ in range(steps):
        out = rotate_pairs(out, cos, sin, p["layout"])
    return out


def transformers_shift(
    k: Tensor, from_positions: Tensor, to_positions: Tensor, p: Mapping[str, Any]
) -> Tensor:
    """transformers' float32 rotation of ``k`` ``(T, H, D)`` by its table at the delta,
    ``steps`` times; ``(T, H, D)`` in ``k``'s dtype."""
    delta, steps = step_deltas(from_positions, to_positions, p)
    cos, sin = transformers_delta_tables(p, delta)
    return _table_shift(k, cos, sin, steps, p)


def vllm_shift(
    k: Tensor, from_positions: Tensor, to_positions: Tensor, p: Mapping[str, Any]
) -> Tensor:
    """vLLM's ``forward_native`` of ``k`` ``(T, H, D)`` by its cache rows at the delta,
    ``steps`` times; ``(T, H, D)`` in ``k``'s dtype."""
    delta, steps = step_deltas(from_positions, to_positions, p)
    cos, sin = vllm_delta_tables(p, delta)
    return _table_shift(k, cos, sin, steps, p)


def llamacpp_shift(
    k: Tensor, from_positions: Tensor, to_positions: Tensor, p: Mapping[str, Any]
) -> Tensor:
    """llama.cpp's K-shift of ``k`` ``(T, H, D)``, ``steps`` times; ``(T, H, D)`` float32 (the
    F32 cache cells)."""
    delta, steps = step_deltas(from_positions, to_positions, p)
    return llamacpp_kshift(k, delta, llamacpp_shift_rope(p), steps=steps)


__all__ = [
    "llamacpp_delta_tables",
    "llamacpp_shift",
    "llamacpp_shift_rope",
    "rotation_sign",
    "step_deltas",
    "transformers_delta_tables",
    "transformers_shift",
    "vllm_delta_tables",
    "vllm_shift",
]
