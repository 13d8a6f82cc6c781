"""Rotating queries and keys: each engine's own apply, and the exact float64 rotation.

Every function here has the signature ``apply(x, positions, fields) -> Tensor``:

- ``x``: ``(T, H, D)`` queries or keys, ``D`` the model's head dimension;
- ``positions``: ``(T,)`` int64, or ``(3, T)`` M-RoPE rows;
- ``fields``: the rope kind's resolved fields (:data:`posenc.rope.kind.ROPE`), whose
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

from posenc import kinds
from posenc.engines.registry import TEXT_ROPE, engine_hook, engine_named
from posenc.errors import InvalidArgument
from posenc.rope.precision import model_type_of

ApplyFn = Callable[[Tensor, Tensor, Mapping[str, Any]], Tensor]

#: transformers' model types whose ``apply_rotary_pos_emb_interleave`` returns the rotated even
#: channels, then the odd ones (used when the config's ``rope_interleave`` holds: layout
#: ``interleaved``). From ``grep "def apply_rotary_pos_emb_interleave"`` over transformers 5.
DEINTERLEAVING_TYPES: frozenset[str] = frozenset(
    {
        "axk1",
        "axk2",
        "bailing_hybrid",
        "deepseek_v3",
        "deepseek_v32",
        "dots3_note",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "longcat_flash",
        "mistral4",
        "mistral_large4",
        "youtu",
    }
)

#: transformers' model types whose ``apply_rotary_pos_emb`` computes in float32 (``q.float()``)
#: and casts the result back to the input's dtype (Cohere).
UPCASTING_TYPES: frozenset[str] = frozenset({"cohere", "cohere2", "cohere2_moe"})


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


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _rotate_every_two(x: Tensor) -> Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def deinterleaves(fields: Mapping[str, Any]) -> bool:
    """Whether transformers answers this model's rotated channels evens first, then odds."""
    return fields["layout"] == "interleaved" and model_type_of(fields) in DEINTERLEAVING_TYPES


def _transformers_rotation(
    x: Tensor, cos: Tensor, sin: Tensor, fields: Mapping[str, Any]
) -> Tensor:
    """``(T, H, R)`` rotated as transformers' apply function does, ``cos``/``sin`` ``(T, R)``
    already in ``x``'s dtype."""
    c, s = cos[:, None, :], sin[:, None, :]  # (T, 1, R)
    if deinterleaves(fields):  # apply_rotary_pos_emb_interleave: the first half of cat(f, f)
        c, s = c[..., 0::2], s[..., 0::2]  # (T, 1, R/2): posenc's table is interleaved
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    rotate = _rotate_half if fields["layout"] == "half" else _rotate_every_two
    return (x * c) + (rotate(x) * s)


def _split(x: Tensor, fields: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
    r = int(fields["rotary_dim"])
    return x[..., :r], x[..., r:]


def transformers_apply(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """transformers' ``apply_rotary_pos_emb`` of the model on its rotary module's cos and sin
    (bit for bit, see the module docstring). ``x`` ``(T, H, D)``."""
    cos, sin = rope_tables(positions, fields, torch.float32)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # the rotary module's cast
    x_rot, x_pass = _split(x, fields)
    if model_type_of(fields) in UPCASTING_TYPES:
        out = _transformers_rotation(x_rot.float(), cos.float(), sin.float(), fields).to(x.dtype)
    else:
        out = _transformers_rotation(x_rot, cos, sin, fields)
    return torch.cat([out, x_pass], dim=-1)


def _pairs(x_rot: Tensor, cos: Tensor, sin: Tensor, neox: bool) -> Tensor:
    """``ApplyRotaryEmb.forward_static`` (vLLM) and ``mx.fast.rope``'s pairing: ``cos``/``sin``
    ``(T, R/2)`` in ``x``'s dtype; the rotated pairs put back where they were."""
    c, s = cos[:, None, :], sin[:, None, :]  # (T, 1, R/2)
    if neox:
        x1, x2 = torch.chunk(x_rot, 2, dim=-1)
    else:
        x1, x2 = x_rot[..., ::2], x_rot[..., 1::2]
    o1 = x1 * c - x2 * s
    o2 = x2 * c + x1 * s
    if neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def _half_of(table: Tensor, layout: str) -> Tensor:
    """A ``(T, R)`` table of the rope kind as its ``(T, R/2)`` values."""
    return table[:, : table.shape[-1] // 2] if layout == "half" else table[:, 0::2]


def _engine_pairs(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """vLLM's ``forward_native`` / MLX's rope: the engine's float32 table cast to ``x``'s dtype,
    pairs rotated in place."""
    cos, sin = rope_tables(positions, fields, torch.float32)
    layout = str(fields["layout"])
    c, s = _half_of(cos, layout).to(x.dtype), _half_of(sin, layout).to(x.dtype)
    x_rot, x_pass = _split(x, fields)
    return torch.cat((_pairs(x_rot, c, s, layout == "half"), x_pass), dim=-1)


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
    x_rot, x_pass = _split(x, fields)
    out = _transformers_rotation(x_rot.double(), cos, sin, fields).to(x.dtype)
    return torch.cat([out, x_pass], dim=-1)


def apply_for(fields: Mapping[str, Any]) -> ApplyFn:
    """The apply function of resolved fields: :func:`exact_apply`, or the engine's own (its
    ``apply`` hook; an engine without one is refused by name)."""
    if fields.get("precision", "exact") == "exact":
        return exact_apply
    hook: ApplyFn = engine_hook(fields.get("engine", "transformers"), "apply")
    return hook


def channel_order(fields: Mapping[str, Any]) -> str:
    """``"in_place"`` or ``"evens_then_odds"`` (transformers' DeepSeek-V3 with
    ``rope_interleave``, and ``exact`` for it: :attr:`posenc.engines.base.Engine.evens_first`)."""
    engine = engine_named(fields.get("engine", "transformers"))
    exact = fields.get("precision", "exact") == "exact"
    if deinterleaves(fields) and (exact or engine.evens_first):
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
    "transformers_apply",
    "vllm_apply",
]
