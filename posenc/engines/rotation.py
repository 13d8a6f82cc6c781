"""Rotating queries and keys: each engine's own apply, and the exact float64 rotation.

Every function here has the signature ``apply(x, positions, fields) -> Tensor``:

- ``x``: ``(T, H, D)`` queries or keys, ``D`` the model's head dimension;
- ``positions``: ``(T,)`` int64, or ``(3, T)`` M-RoPE rows;
- ``fields``: the rope kind's resolved fields (:data:`posenc.rope_kinds.kind.ROPE`), whose
  ``positions`` are these.

It returns ``x`` rotated, of ``x``'s shape and dtype, in the engine's own channel order; channels
at and past ``rotary_dim`` come back unchanged, bit for bit.

The cos and sin come from the rope kind itself: ``precision: "engine"`` gives each engine's own
float32 tables (bit for bit transformers' rotary module and vLLM's ``cos_sin_cache``; MLX's within
2 ulp), ``exact`` float64 angles from the engine's rule. The rotation is then the engine's own:

- transformers: the modeling file's ``apply_rotary_pos_emb`` — ``(x * cos) + (rotate(x) * sin)``
  in ``x``'s dtype with cos and sin cast to it (the rotary module's ``.to(x.dtype)``), where
  ``rotate`` is ``rotate_half`` (Llama, GPT-NeoX, Phi-3, Qwen2, Gemma 3; Qwen2-VL's
  ``apply_multimodal_rotary_pos_emb`` after its sections are gathered) or ``rotate_every_two``
  on a ``repeat_interleave`` table (GPT-J, GLM, Cohere, which computes in float32 and casts
  back); partial rotary rotates ``x[..., :R]`` and concatenates ``x[..., R:]`` unchanged.
  DeepSeek-V3's ``apply_rotary_pos_emb_interleave`` (with ``rope_interleave``) rotates the
  pairs ``(x[2i], x[2i+1])`` and returns ``cat([x1·c − x2·s, x2·c + x1·s])``: the rotated even
  channels, then the odd ones.
- vLLM: ``RotaryEmbedding.forward_native`` (``ApplyRotaryEmb.forward_static``): the cache cast to
  ``x``'s dtype, ``o1 = x1 * cos − x2 * sin``, ``o2 = x2 * cos + x1 * sin`` over the halves
  (``is_neox_style``) or the even and odd channels (GPT-J style), pairs put back in place.
- MLX: ``mx.fast.rope`` with ``traditional`` (adjacent pairs) or not (halves), in place, on
  MLX's own float32 table (its magnitude folded into cos and sin: within 2 ulp).
- exact: float64 angles and a float64 rotation of the inputs, rounded once to ``x``'s dtype, in
  transformers' channel order.

Each engine's ``precision: "engine"`` function is its ``apply`` hook in the registry
(:mod:`posenc.engines`: ``apply = staticmethod(transformers_apply)`` in its module);
:func:`apply_for` asks :func:`posenc.engines.registry.engine_hook`, which refuses an engine
without one by name. The rope kind's tables are read from the registry of kinds when a request
comes (:func:`rope_tables`), so the engines' modules import this one below the kind.

Notation: ``T`` positions, ``H`` heads, ``D`` head dimension, ``R`` rotary dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.engines.registry import TEXT_ROPE, engine_hook, engine_named
from posenc.facts.families import types_where
from posenc.rope.precision import model_type_of, widen

ApplyFn = Callable[[Tensor, Tensor, Mapping[str, Any]], Tensor]

#: transformers' model types whose ``apply_rotary_pos_emb_interleave`` returns the rotated even
#: channels, then the odd ones (when the config's ``rope_interleave`` holds: layout
#: ``interleaved``); their records in :mod:`posenc.facts.families` say ``apply_evens_first``.
DEINTERLEAVING_TYPES: frozenset[str] = types_where(lambda f: f.apply_evens_first)

#: transformers' model types whose ``apply_rotary_pos_emb`` computes in float32 (``q.float()``)
#: and casts the result back to the input's dtype (Cohere: ``apply_in_float32``).
UPCASTING_TYPES: frozenset[str] = types_where(lambda f: f.apply_in_float32)


def check_head_dim(x: Tensor, fields: Mapping[str, Any], name: str = "q") -> None:
    """``x`` must be ``(T, H, D)`` with ``D`` the model's head dimension (422 naming both)."""
    head_dim = int(fields["head_dim"])
    if x.dim() != 3:
        raise InvalidArgument(f"{name} must be (T, H, D), got shape {tuple(x.shape)}", field=name)
    if x.shape[-1] != head_dim:
        raise InvalidArgument(
            f"{name} has D = {x.shape[-1]} channels per head but the model's head_dim is "
            f"{head_dim}",
            field=name,
        )
    if not x.is_floating_point():
        raise InvalidArgument(f"{name} must be a floating-point tensor, got {x.dtype}", field=name)


def _positions_field(positions: Tensor) -> list[Any]:
    return (
        [list(map(int, r)) for r in positions.tolist()]
        if positions.dim() == 2
        else [int(p) for p in positions.tolist()]
    )


def seeded_vectors(
    seq_len: int, num_heads: int, num_kv_heads: int, head_dim: int, seed: int
) -> tuple[Tensor, Tensor]:
    """The contract's seeded ``q (T, H, D)`` and ``k (T, H_kv, D)``, float32:
    ``g = torch.Generator().manual_seed(seed)``, ``q = torch.randn(T, H, D, generator=g)``, then
    ``k`` from the same generator (``/v1/rope/apply``'s and ``/v1/rope/shift``'s ``seed``)."""
    g = torch.Generator().manual_seed(int(seed))
    q = torch.randn(seq_len, num_heads, head_dim, generator=g)
    k = torch.randn(seq_len, num_kv_heads, head_dim, generator=g)
    return q, k


def rope_tables(
    positions: Tensor, fields: Mapping[str, Any], dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """The rope kind's ``(T, R)`` cos and sin at ``positions`` for ``fields``, in its layout
    (the engine's own float32 for ``precision: "engine"``; exact values for ``exact``), as
    ``dtype``."""
    p = {**fields, "positions": _positions_field(positions), "seq_len": None}
    ctx = kinds.Context(
        device=torch.device("cpu"), dtype=dtype, models=lambda _name: None, allocator=None
    )
    rope = kinds.REGISTRY[TEXT_ROPE]  # the rope kind (posenc.catalog registers it)
    out = rope.compute(p, ctx)
    return out["cos"], out["sin"]


def deinterleaves(fields: Mapping[str, Any]) -> bool:
    """Whether transformers answers this model's rotated channels evens first, then odds."""
    return fields["layout"] == "interleaved" and model_type_of(fields) in DEINTERLEAVING_TYPES


def _rotate_into(
    dst: Tensor, x: Tensor, cos: Tensor, sin: Tensor, layout: str, *, evens_first: bool,
    fused: bool,
) -> None:  # fmt: skip
    """Write ``x`` ``(n, H, R)`` rotated by ``cos``/``sin`` ``(n, R)`` (the rope kind's table in
    ``layout``, in ``x``'s dtype) into ``dst`` ``(n, H, R)``, cast to ``dst``'s dtype.

    With ``x1, x2`` the pairs' first and second members (halves, or even and odd channels) and
    ``c1, c2, s1, s2`` the table's values at them: ``o1 = x1·c1 − x2·s1``, ``o2 = x2·c2 +
    x1·s2``. Unfused, these are the same roundings as transformers' ``(x * cos) +
    (rotate(x) * sin)`` (``rotate`` gives ``−x2`` and ``x1``, and ``a + (−b) = a − b`` exactly),
    DeepSeek-V3's ``apply_rotary_pos_emb_interleave`` and vLLM's ``forward_static``.
    ``fused``: ``addcmul`` (the exact float64 path, one rounding fewer). ``evens_first``: the
    pairs' results as ``cat(o1, o2)`` (DeepSeek-V3), else back in place."""
    h = x.shape[-1] // 2
    if layout == "half":
        x1, x2, c1, c2 = x[..., :h], x[..., h:], cos[:, None, :h], cos[:, None, h:]
        s1, s2 = sin[:, None, :h], sin[:, None, h:]
    else:
        x1, x2, c1, c2 = x[..., 0::2], x[..., 1::2], cos[:, None, 0::2], cos[:, None, 1::2]
        s1, s2 = sin[:, None, 0::2], sin[:, None, 1::2]
    if layout == "half" or evens_first:
        d1, d2 = dst[..., :h], dst[..., h:]
    else:
        d1, d2 = dst[..., 0::2], dst[..., 1::2]
    if fused:
        d1.copy_(torch.addcmul(x1 * c1, x2, s1, value=-1))
        d2.copy_(torch.addcmul(x2 * c2, x1, s2))
    else:
        d1.copy_(x1 * c1 - x2 * s1)
        d2.copy_(x2 * c2 + x1 * s2)


#: Elements of ``x`` rotated at a time: each block's intermediates stay small, and the answer is
#: the same whatever the block (every operation is elementwise).
BLOCK_ELEMENTS = 1 << 20


def _blocks(
    x: Tensor, fields: Mapping[str, Any], cos: Tensor, sin: Tensor, compute: torch.dtype, *,
    evens_first: bool, fused: bool = False,
) -> Tensor:  # fmt: skip
    """``x`` ``(T, H, D)`` with its first ``R`` channels rotated (:func:`_rotate_into`, in
    ``compute``, the table ``(T, R)`` cast to it), a block of rows at a time; channels at and
    past ``R`` copied unchanged."""
    r = int(fields["rotary_dim"])
    t, h, _d = x.shape
    out = torch.empty_like(x)
    if r < x.shape[-1]:
        out[..., r:] = x[..., r:]
    cos, sin = cos.to(compute), sin.to(compute)
    layout = str(fields["layout"])
    rows = max(1, BLOCK_ELEMENTS // max(1, h * r))
    for a in range(0, t, rows):
        b = min(t, a + rows)
        x_rot = x[a:b, :, :r].to(compute)
        _rotate_into(out[a:b, :, :r], x_rot, cos[a:b], sin[a:b], layout,
                     evens_first=evens_first, fused=fused)  # fmt: skip
    return out


def transformers_apply(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """transformers' ``apply_rotary_pos_emb`` of the model on its rotary module's cos and sin
    (bit for bit, see the module docstring). ``x`` ``(T, H, D)``: the products in ``x``'s
    dtype with cos and sin cast to it (the rotary module's ``.to(x.dtype)``), or in float32
    for Cohere (``q.float()``), cast back."""
    cos, sin = rope_tables(positions, fields, torch.float32)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # the rotary module's cast
    compute = torch.float32 if model_type_of(fields) in UPCASTING_TYPES else x.dtype
    return _blocks(x, fields, cos, sin, compute, evens_first=deinterleaves(fields))


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """``x`` ``(T, H, D)`` with its first ``R`` channels turned by a table of one value per pair,
    ``cos``/``sin`` ``(T, R/2)`` cast to ``x``'s dtype (``half``: pairs ``(x[i], x[i + R/2])``;
    ``interleaved``: ``(x[2i], x[2i+1])``), computed in ``x``'s dtype and put back in place:
    ``x1·c − x2·s``, ``x2·c + x1·s``, unfused (vLLM's ``forward_native`` with a given table;
    ``/v1/rope/shift`` turns keys by the delta with it). The rest is copied."""
    table = {"rotary_dim": 2 * cos.shape[-1], "layout": layout}
    cos, sin = widen(cos, layout).to(x.dtype), widen(sin, layout).to(x.dtype)
    return _blocks(x, table, cos, sin, x.dtype, evens_first=False)


def _engine_pairs(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """vLLM's ``forward_native`` / MLX's rope: the engine's float32 table cast to ``x``'s dtype,
    pairs rotated in place."""
    cos, sin = rope_tables(positions, fields, torch.float32)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # _match_cos_sin_cache_dtype
    return _blocks(x, fields, cos, sin, x.dtype, evens_first=False)


def vllm_apply(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """vLLM's rotary class's ``forward_native`` on its float32 ``cos_sin_cache`` (bit for bit):
    ``is_neox_style`` rotates the halves, else the even and odd channels, in place; the cache
    is cast to ``x``'s dtype first (``_match_cos_sin_cache_dtype``). ``x`` ``(T, H, D)``."""
    return _engine_pairs(x, positions, fields)


def mlx_apply(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """What the model's mlx-lm file calls: ``mx.fast.rope(x, dims=R, traditional=…, base=…,
    scale=…, offset=…)`` (or with ``freqs``), the pairs rotated in place in float32 on MLX's own
    table (:func:`posenc.rope.mlx.mlx_rope_tables`): within 2 float32 ulp of each rotated
    pair's magnitude. ``x`` ``(T, H, D)``."""
    return _engine_pairs(x, positions, fields)


def exact_apply(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """float64 angles (the engine's rule, :func:`rope_tables` in float64) and a float64
    rotation of ``x``, rounded once to ``x``'s dtype, in transformers' channel order (DeepSeek's
    evens then odds). ``x`` ``(T, H, D)``."""
    cos, sin = rope_tables(positions, fields, torch.float64)
    return _blocks(
        x, fields, cos, sin, torch.float64, evens_first=deinterleaves(fields), fused=True
    )


def apply_for(fields: Mapping[str, Any]) -> ApplyFn:
    """The apply function of resolved fields: :func:`exact_apply`, or the engine's own (its
    ``apply`` hook; an engine without one is refused by name)."""
    if fields.get("precision", "exact") == "exact":
        return exact_apply
    hook: ApplyFn = engine_hook(fields.get("engine", "transformers"), "apply")
    return hook


def channel_order(fields: Mapping[str, Any]) -> str:
    """``"in_place"`` or ``"evens_then_odds"`` (transformers' DeepSeek-V3 with
    ``rope_interleave``, and ``exact`` for it:
    :attr:`posenc.engines.base.Engine.transformers_order`)."""
    engine = engine_named(fields.get("engine", "transformers"))
    exact = fields.get("precision", "exact") == "exact"
    if deinterleaves(fields) and (exact or engine.transformers_order):
        return "evens_then_odds"
    return "in_place"


__all__ = [
    "DEINTERLEAVING_TYPES",
    "UPCASTING_TYPES",
    "ApplyFn",
    "apply_for",
    "channel_order",
    "check_head_dim",
    "deinterleaves",
    "exact_apply",
    "mlx_apply",
    "rope_tables",
    "rotate_pairs",
    "seeded_vectors",
    "transformers_apply",
    "vllm_apply",
]
