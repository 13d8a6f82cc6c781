"""``POST /v1/rope/apply``: queries and keys rotated as the model applies its rotary embedding.

:func:`rotate` is the library call the endpoint makes: the rope settings as
``/v1/encodings/rope`` takes them (``config``, ``preset`` or the explicit fields), the positions
(``positions`` or ``seq_len``, plus ``offset``), and ``q`` (and ``k``) as ``(T, H, D)`` tensors,
or ``seed`` with ``num_heads`` (and ``num_kv_heads``) for the contract's seeded vectors. The
rotation is :mod:`posenc.engines.rotation`'s: ``exact`` (float64) or the engine's own.

:data:`ROPE_APPLY` is the endpoint's kind: its fields and tensors, sized from the numbers before
anything is read or allocated.

Notation: ``T`` positions, ``H`` query heads, ``H_kv`` key heads, ``D`` head dimension, ``R``
rotary dimension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.attention.layers import layer_rule
from posenc.core import kinds, slices
from posenc.core.errors import InvalidArgument, PosencError
from posenc.engines import engine_named
from posenc.engines.rotation import apply_for, channel_order, check_head_dim, seeded_vectors
from posenc.resolve import resolve_fields
from posenc.rope_kinds.kind import ROPE

#: The fields of ``/v1/rope/apply`` that are not the rope kind's.
APPLY_ONLY: tuple[str, ...] = ("offset", "layer", "seed", "num_heads", "num_kv_heads")


def _offset_positions(request: Mapping[str, Any]) -> list[Any]:
    """``positions`` (or ``0 … seq_len − 1``) with ``offset`` added, as the rope kind takes
    them: a list of ints, or M-RoPE's three rows."""
    offset = int(request.get("offset") or 0)
    positions, seq_len = request.get("positions"), request.get("seq_len")
    if positions is not None and seq_len is not None:
        raise InvalidArgument("give positions or seq_len, not both", field="positions")
    if positions is None:
        if seq_len is None:
            raise InvalidArgument("positions or seq_len is required", field="seq_len")
        return list(range(offset, offset + int(seq_len)))
    rows = list(positions)
    if rows and isinstance(rows[0], list | tuple):
        return [[int(p) + offset for p in row] for row in rows]
    return [int(p) + offset for p in rows]


def _layer_type(request: Mapping[str, Any]) -> Any:
    """``layer`` (an index) as the layer type the rope kind takes, where the config has
    per-type RoPE parameters."""
    layer = request.get("layer")
    if layer is None:
        return request.get("layer_type")
    config = request.get("config")
    if config is None:
        raise InvalidArgument(
            "layer is an index into a config's layers: give config", field="layer"
        )
    return layer_rule(config, layer_type=request.get("layer_type"), layer=int(layer)).layer_type


def apply_fields(
    request: Mapping[str, Any], *, engine: str = "transformers", precision: str = "exact"
) -> dict[str, Any]:
    """The rope kind's resolved fields for an apply request (positions with ``offset`` added);
    the apply-only fields (``offset``, ``layer``, ``seed``, ``num_heads``, ``num_kv_heads``)
    left out."""
    given = {k: v for k, v in request.items() if v is not None and k not in APPLY_ONLY}
    given.pop("seq_len", None)
    given.pop("dtype", None)
    given["positions"] = _offset_positions(request)
    given.update(engine=engine, precision=precision)
    layer_type = _layer_type(request)
    if layer_type is not None:
        given["layer_type"] = layer_type
    try:
        fields = resolve_fields(ROPE, given)
    except InvalidArgument as exc:
        if request.get("layer") is None or exc.field != "layer_type":
            raise
        given.pop("layer_type")  # a layer index into a config with one RoPE for every layer
        fields = resolve_fields(ROPE, given)
    if precision == "exact" and not engine_named(engine).transformers_order:
        fields["layout"] = _transformers_layout(given, str(fields["layout"]))
    return fields


def _transformers_layout(given: Mapping[str, Any], own: str) -> str:
    """The layout transformers applies for these fields: ``exact`` answers in transformers'
    channel order whatever engine's angles it takes (llama.cpp rotates Llama's adjacent pairs
    on weights its converter permuted; transformers rotates the halves). The engine's own
    layout where transformers has no reading of these fields."""
    try:
        return str(resolve_fields(ROPE, {**given, "engine": "transformers"})["layout"])
    except PosencError:
        return own


def _positions(fields: Mapping[str, Any]) -> Tensor:
    return slices.nested_tensor(fields["positions"], torch.int64)


def _tensor(x: Tensor | np.ndarray, name: str) -> Tensor:
    t = torch.as_tensor(np.asarray(x)) if isinstance(x, np.ndarray) else x
    if not isinstance(t, Tensor):
        raise InvalidArgument(f"{name} must be a tensor or an array", field=name)
    return t.detach().cpu()


def apply_meta(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` of an apply answer: ``layout`` (``neox``/``gptj``), ``rotary_dim``,
    ``attention_scaling``, ``engine``, ``precision`` and the channel order."""
    meta = ROPE.make_meta(fields)  # the engine's own part too (Engine.meta)
    return {
        "kind": "rope_apply",
        "layout": "neox" if fields["layout"] == "half" else "gptj",
        "rotary_dim": int(fields["rotary_dim"]),
        "head_dim": int(fields["head_dim"]),
        "attention_scaling": float(meta.get("attention_scaling", 1.0)),
        "engine": fields.get("engine", "transformers"),
        "precision": fields.get("precision", "exact"),
        "channel_order": channel_order(fields),
        "rope_type": meta.get("rope_type"),
        "positions": len(fields["positions"][0])
        if isinstance(fields["positions"][0], list)
        else len(fields["positions"]),
    }


def rotate(
    request: Mapping[str, Any],
    q: Tensor | np.ndarray | None,
    k: Tensor | np.ndarray | None = None,
    *,
    engine: str = "transformers",
    precision: str = "exact",
) -> dict[str, Any]:
    """``q`` (and ``k``) rotated at the request's positions with the model's rule.

    Args:
        request: the rope kind's fields (``config`` or ``preset`` or the explicit ones,
            ``layer_type``, ``max_model_len`` …), ``positions`` or ``seq_len``, and ``offset``
            (added to either), ``layer`` (an index into the config's layers); without ``q``:
            ``seed``, ``num_heads`` and ``num_kv_heads`` (default ``num_heads``).
        q: ``(T, H, D)`` queries, D the model's head dimension; None for the seeded ones.
        k: ``(T, H_kv, D)`` keys, or None.
        engine: ``transformers``, ``vllm``, ``llama.cpp`` or ``mlx``.
        precision: ``exact`` (float64 angles and rotation, rounded once) or ``engine`` (the
            engine's own apply: its ``apply`` hook, :func:`posenc.engines.rotation.apply_for`).

    Returns:
        ``{"q": Tensor, "k": Tensor | None, "meta": dict}``: the rotated tensors in the
        inputs' shapes and dtypes, in the engine's channel order.

    Raises:
        InvalidArgument: bad fields; D other than the head dimension; T other than the number
            of positions.
    """
    fields = apply_fields(request, engine=engine, precision=precision)
    positions = _positions(fields)
    t = positions.shape[-1]
    if q is None:
        heads = request.get("num_heads")
        if heads is None or request.get("seed") is None:
            raise InvalidArgument(
                "give q (and k), or seed with num_heads for seeded vectors", field="q"
            )
        kv = request.get("num_kv_heads") or heads
        q, k = seeded_vectors(t, int(heads), int(kv), int(fields["head_dim"]), int(request["seed"]))
    given = {"q": _tensor(q, "q")} | ({} if k is None else {"k": _tensor(k, "k")})
    rotate_fn = apply_for(fields)
    out: dict[str, Any] = {"q": None, "k": None}
    for name, x in given.items():
        check_head_dim(x, fields, name)
        if x.shape[0] != t:
            raise InvalidArgument(
                f"{name} has T = {x.shape[0]} rows but there are {t} positions", field=name
            )
        out[name] = rotate_fn(x, positions, fields)
    out["meta"] = apply_meta(fields)
    return out


def _apply_shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """``q (T, H, D)`` and ``k (T, H_kv, D)`` from the numbers."""
    rows = p["positions"]
    t = len(rows[0]) if isinstance(rows[0], list) else len(rows)
    d = int(p["head_dim"])
    shapes: dict[str, tuple[int, ...]] = {"q": (t, int(p["num_heads"]), d)}
    if p.get("num_kv_heads"):
        shapes["k"] = (t, int(p["num_kv_heads"]), d)
    return shapes


def kind_fields(request: Mapping[str, Any], q_shape: tuple[int, ...] | None,
                k_shape: tuple[int, ...] | None, *, engine: str,
                precision: str) -> dict[str, Any]:  # fmt: skip
    """The resolved fields of an apply request as :data:`ROPE_APPLY` sizes them: the rope
    fields, and ``num_heads``/``num_kv_heads`` (from the tensors' shapes where given), checked
    against the head dimension before anything is read."""
    fields = apply_fields(request, engine=engine, precision=precision)
    d = int(fields["head_dim"])
    rows = fields["positions"]
    t = len(rows[0]) if isinstance(rows[0], list) else len(rows)
    for name, shape in (("q", q_shape), ("k", k_shape)):
        if shape is not None and (len(shape) != 3 or shape[-1] != d or shape[0] != t):
            raise InvalidArgument(
                f"{name} must be (T, H, D) = ({t}, H, {d}) for {t} positions and the model's "
                f"head_dim {d} (D = {shape[-1] if shape else None}), got shape {tuple(shape)}",
                field=name,
            )
    if q_shape is not None:
        heads, kv = q_shape[1], (k_shape[1] if k_shape is not None else 0)
    else:
        if request.get("num_heads") is None or request.get("seed") is None:
            raise InvalidArgument(
                "give q (and k), or seed with num_heads for seeded vectors", field="q"
            )
        heads = int(request["num_heads"])
        kv = int(request.get("num_kv_heads") or heads)
    return {**fields, "num_heads": heads, "num_kv_heads": kv, "seed": request.get("seed")}


def _seeded_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    positions = _positions(p)
    q, k = seeded_vectors(
        positions.shape[-1], p["num_heads"], p["num_kv_heads"], p["head_dim"], p["seed"]
    )
    fn = apply_for(p)
    return {"q": fn(q, positions, p), "k": fn(k, positions, p)}


ROPE_APPLY: kinds.Kind = kinds.Kind(
    name="rope_apply",
    path="/v1/rope/apply",
    tag="rope",
    summary="Queries and keys rotated as the model applies RoPE",
    description="q (T, H, D) and k (T, H_kv, D) rotated at the positions with the model's "
    "rule: precision exact (float64 angles and rotation, rounded once, transformers' channel "
    "order) or engine (transformers' apply_rotary_pos_emb, vLLM's forward_native, MLX's "
    "mx.fast.rope, llama.cpp's ggml_rope_ext on F32 vectors: each engine's apply hook).",
    fields=(
        kinds.FieldSpec("seq_len", "int", "T: positions 0 … T−1", None, minimum=1),
        kinds.FieldSpec("num_heads", "int", "H (seeded vectors)", None, minimum=1),
        kinds.FieldSpec("num_kv_heads", "int", "H_kv (seeded vectors)", None, minimum=0),
        kinds.FieldSpec("head_dim", "int", "D", None, minimum=2),
        kinds.FieldSpec("seed", "int", "seed of the seeded vectors", None, minimum=0),
    ),
    tensors=(kinds.TensorSpec("q", ("T", "H", "D")), kinds.TensorSpec("k", ("T", "H_kv", "D"))),
    shapes=_apply_shapes,
    compute=_seeded_compute,
    meta=apply_meta,
    get=False,
    cache_tensors=False,
)
"""The apply endpoint's kind (not in the registry: its route reads tensors,
``service/routes/apply.py``)."""


__all__ = [
    "APPLY_ONLY",
    "ROPE_APPLY",
    "apply_fields",
    "apply_meta",
    "kind_fields",
    "rotate",
    "seeded_vectors",
]
