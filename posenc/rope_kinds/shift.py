"""Keys that move: the rotation that takes keys cached at ``from`` positions to ``to``
positions (``POST /v1/rope/shift``).

Attention sinks, context shift, cache eviction and position-independent caching move cached
keys instead of recomputing them: a key rotated at position ``m`` with angles ``θ_from·m`` is
turned by ``θ_to·n − θ_from·m`` to stand at ``n``. The frequencies may change on the way:
LongRoPE's short factors give way to its long ones past the original length, and dynamic NTK's
base grows with the sequence (``from_seq_len``, ``to_seq_len``; each defaults to its
positions' largest value plus one, as transformers chooses them). The magnitude then changes by
``a_to / a_from`` (``meta.attention_scaling_ratio``).

- ``precision: "exact"``: float64 angles ``θ_to·to − θ_from·from`` from the engine's rule, the
  rotation of ``k`` in float64, cast once to ``k``'s dtype. Rotating at ``from`` and then
  shifting equals rotating at ``to`` within float64 rounding.
- ``precision: "engine"``: what the engine runs. llama.cpp's K-shift is ``ggml_rope_ext`` on the
  cached F32 keys at the delta positions (:mod:`posenc.rope.llamacpp_rotate`), ``steps`` times;
  transformers and vLLM have no shift of their own, so theirs is their float32 rotation by
  their float32 table at the delta (:mod:`posenc.engines.key_shift`). Each is the engine's
  ``shift`` hook in the registry (:func:`posenc.engines.registry.engine_hook`), which refuses an
  engine without one by name. ``meta.drift`` is the largest ``|k_out − k rotated exactly by
  θ·(to − from)|``.

Notation: ``T`` tokens, ``H`` key heads, ``D`` head dimension, ``R`` rotary dimension.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.core import kinds, slices
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.engines.key_shift import (
    llamacpp_shift_rope,
    rotation_sign,
    step_deltas,
)
from posenc.engines.registry import engine_hook, engine_named
from posenc.engines.rotation import rotate_pairs, seeded_vectors
from posenc.rope.precision import widen
from posenc.rope_kinds.kind import ROPE

#: The rope kind's fields the shift takes as they are (settings, engine, precision).
_ROPE_FIELDS = tuple(
    f for f in ROPE.fields if f.name not in ("seq_len", "positions", "dual_chunk_cache", "dtype")
)


def shift_positions(p: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """``(from, to)`` positions of fields: explicit, or ``positions`` and ``positions + steps ·
    delta``."""
    if p.get("from_positions") is not None:
        return list(p["from_positions"]), list(p["to_positions"])
    step = int(p.get("steps") or 1) * int(p["delta"])
    return list(p["positions"]), [int(x) + step for x in p["positions"]]


def frequencies(p: Mapping[str, Any], seq_len: int) -> tuple[Tensor, float]:
    """The engine's float64 ``(R/2,)`` angle per position and its magnitude for a sequence of
    ``seq_len`` (:meth:`posenc.engines.base.Engine.frequencies`: only transformers' and MLX's
    dynamic rules, and transformers' LongRoPE, read it; vLLM and llama.cpp fix theirs once per
    server)."""
    return engine_named(p.get("engine", "transformers")).frequencies(p, seq_len)


def shift_angles(p: Mapping[str, Any]) -> tuple[Tensor, float, float]:
    """``(T, R/2)`` float64 angles ``θ_to·to − θ_from·from``, and ``a_from``, ``a_to``."""
    source, target = shift_positions(p)
    inv_from, a_from = frequencies(p, int(p["from_seq_len"]))
    inv_to, a_to = frequencies(p, int(p["to_seq_len"]))
    m = slices.nested_tensor(source, torch.float64)[:, None]
    n = slices.nested_tensor(target, torch.float64)[:, None]
    return n * inv_to[None, :] - m * inv_from[None, :], a_from, a_to


def exact_shift(k: Tensor, p: Mapping[str, Any]) -> Tensor:
    """``k`` ``(T, H, D)`` at ``to``: float64 angles, a float64 rotation, ``a_to / a_from``
    applied once; float64 (cast by the caller)."""
    angles, a_from, a_to = shift_angles(p)
    out = rotate_pairs(
        k.to(torch.float64), angles.cos(), rotation_sign(p) * angles.sin(), p["layout"]
    )
    r = 2 * angles.shape[-1]
    out[..., :r] *= a_to / a_from
    return out


def _check_engine(p: Mapping[str, Any]) -> None:
    """An engine's own shift (its ``shift`` hook: the registry refuses an engine without one by
    name) rotates by its table at the delta: the frequencies at ``from`` and ``to`` must be the
    same (:meth:`posenc.engines.base.Engine.frequencies_differ`)."""
    engine = engine_named(p.get("engine", "transformers"))
    try:
        engine_hook(engine.name, "shift", field="precision")
    except InvalidArgument as err:
        raise InvalidArgument(f'{err}; ask precision "exact"', field="precision") from None
    if engine.frequencies_differ(p, int(p["from_seq_len"]), int(p["to_seq_len"])):
        raise InvalidArgument(
            f"the frequencies at from_seq_len {p['from_seq_len']} and to_seq_len "
            f"{p['to_seq_len']} differ (LongRoPE's switch, dynamic NTK's base): "
            f"{p['engine']} has no shift across them (it recomputes the keys); ask precision "
            '"exact" for the rotation between them',
            field="precision",
        )


def _ints(positions: Sequence[int]) -> Tensor:
    """``(T,)`` int64 of a list of positions (:func:`posenc.core.slices.nested_tensor`)."""
    return slices.nested_tensor(positions, torch.int64)


def _deltas(p: Mapping[str, Any]) -> tuple[Tensor, int]:
    """Each token's delta per step ``(T,)`` int64, and the number of steps."""
    source, target = shift_positions(p)
    return step_deltas(_ints(source), _ints(target), p)


def engine_tables(p: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
    """The engine's own ``(T, R/2)`` float32 table at each token's delta (one step): what its
    ``shift`` hook rotates by (:meth:`posenc.engines.base.Engine.shift_tables`)."""
    delta, _steps = _deltas(p)
    return engine_named(p.get("engine", "transformers")).shift_tables(p, delta)


def engine_rotation(k: Tensor, p: Mapping[str, Any]) -> Tensor:
    """``k`` ``(T, H, D)`` moved by the engine's own arithmetic, ``steps`` times: its ``shift``
    hook (:data:`posenc.engines.base.ShiftHook`, :mod:`posenc.engines.key_shift`)."""
    source, target = shift_positions(p)
    shift = engine_hook(p.get("engine", "transformers"), "shift", field="precision")
    out: Tensor = shift(k, _ints(source), _ints(target), p)
    return out


# --------------------------------------------------------------------------------- the kind


def _length(p: Mapping[str, Any]) -> int:
    rows = p.get("from_positions") if p.get("from_positions") is not None else p.get("positions")
    return len(rows) if rows is not None else 0


def _check(p: Mapping[str, Any]) -> None:
    """Either ``positions`` with ``delta`` or ``from_positions`` with ``to_positions``; ``k`` or
    ``seed``, not both."""
    explicit = p.get("from_positions") is not None or p.get("to_positions") is not None
    by_delta = p.get("positions") is not None or p.get("delta") is not None
    if explicit == by_delta:
        raise InvalidArgument(
            "give positions with delta, or from_positions with to_positions (one pair)",
            field="positions" if not explicit else "from_positions",
        )
    if explicit and (p.get("from_positions") is None or p.get("to_positions") is None):
        raise InvalidArgument("from_positions and to_positions go together", field="to_positions")
    if by_delta and (p.get("positions") is None or p.get("delta") is None):
        raise InvalidArgument("positions and delta go together", field="delta")
    if explicit and len(p["from_positions"]) != len(p["to_positions"]):
        raise InvalidArgument(
            f"from_positions has {len(p['from_positions'])} items and to_positions "
            f"{len(p['to_positions'])}; they must be as many",
            field="to_positions",
        )
    if explicit and p.get("steps") not in (None, 1):
        raise InvalidArgument("steps goes with delta, not with to_positions", field="steps")
    if p.get("k") is not None and p.get("seed") is not None:
        raise InvalidArgument("give k or seed, not both", field="seed")
    if p.get("seed") is not None and p.get("num_heads") is None:
        raise InvalidArgument("seed needs num_heads (and num_kv_heads)", field="num_heads")


def _key_shape(p: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """``(T, H, D)`` of the key given or seeded, from the numbers; None without one."""
    if p.get("k") is not None:
        t, h, d = kinds.tensor_shape(p["k"])
        return t, h, d
    if p.get("seed") is not None:
        heads = p.get("num_kv_heads") or p["num_heads"]
        return _length(p), int(heads), int(p["head_dim"])
    return None


def _complete(p: dict[str, Any], models: Any) -> dict[str, Any]:
    """The rope settings completed as the rope kind completes them, the sequence lengths
    defaulted, and the key's shape checked against the positions and the head."""
    source, target = shift_positions(p)
    lowest = slices.smallest(target)
    if lowest < 0:
        where = "to_positions" if p.get("to_positions") is not None else "delta"
        raise InvalidArgument(
            f"the key at position {source[target.index(lowest)]} would move to "
            f"{lowest}; positions must stay >= 0",
            field=where,
        )
    p = {**p}
    p["from_seq_len"] = p.get("from_seq_len") or slices.largest(source) + 1
    p["to_seq_len"] = p.get("to_seq_len") or slices.largest(target) + 1
    rope = {k: v for k, v in p.items() if k not in _OWN}
    rope.update(positions=source + target, seq_len=None, dual_chunk_cache=None)
    if ROPE.check is not None:
        ROPE.check(rope)
    done = ROPE.complete(rope, models)  # type: ignore[misc]
    p.update({k: v for k, v in done.items() if k not in ("positions", "seq_len")})
    shape = _key_shape(p)
    if shape is not None:
        t, _h, d = shape
        if t != len(source):
            raise InvalidArgument(
                f"k has {t} tokens and the positions {len(source)}; they must be as many",
                field="k",
            )
        if d != int(p["head_dim"]):
            raise InvalidArgument(
                f"k's last dimension {d} is not the model's head_dim {p['head_dim']}", field="k"
            )
    if p.get("precision") == "engine":
        _check_engine(p)
    return p


def seeded_key(p: Mapping[str, Any]) -> Tensor:
    """The key ``/v1/rope/apply`` seeds (:func:`posenc.engines.rotation.seeded_vectors`'s ``k``:
    ``q = randn(T, H, D)``, then ``k = randn(T, H_kv, D)`` from one generator), float32."""
    heads = int(p["num_heads"])
    kv = int(p.get("num_kv_heads") or heads)
    _q, k = seeded_vectors(_length(p), heads, kv, int(p["head_dim"]), int(p["seed"]))
    return k


def given_key(p: Mapping[str, Any]) -> Tensor:
    """The key as sent: a binary body's tensor in its dtype, JSON lists in ``dtype``, or the
    seeded key."""
    if p.get("seed") is not None:
        return seeded_key(p)
    k = p["k"]
    if isinstance(k, Tensor):
        return k.detach().cpu()
    # in slices: one torch.tensor over a 16 MiB body's numbers holds the GIL for 0.3 s
    return slices.nested_tensor(k, torch.float64, name="k").to(resolve_dtype(p.get("dtype")))


_LOCK = threading.Lock()
_DONE: dict[int, tuple[Mapping[str, Any], Tensor, float]] = {}


def shifted_key(p: Mapping[str, Any]) -> tuple[Tensor, float]:
    """The key at ``to`` (in its own dtype) and its drift, computed once for these fields (the
    compute and the meta of one request share it)."""
    with _LOCK:
        held = _DONE.get(id(p))
        if held is not None and held[0] is p:
            return held[1], held[2]
    k = given_key(p)
    if p.get("precision") == "engine":
        out, reference = engine_rotation(k, p).to(k.dtype), _drift_reference(k, p)
    else:
        reference = exact_shift(k, p)
        out = reference.to(k.dtype)
    drift = float((out.to(torch.float64) - reference).abs().max()) if out.numel() else 0.0
    with _LOCK:
        if len(_DONE) > 8:
            _DONE.clear()
        _DONE[id(p)] = (p, out, drift)
    return out, drift


def _drift_reference(k: Tensor, p: Mapping[str, Any]) -> Tensor:
    """``k`` rotated exactly, in float64, by ``θ·(to − from)`` (no magnitude)."""
    source, target = shift_positions(p)
    inv, _scale = frequencies(p, int(p["to_seq_len"]))
    diff = slices.nested_tensor(target, torch.float64) - slices.nested_tensor(source, torch.float64)
    angles = diff[:, None] * inv[None, :]
    return rotate_pairs(
        k.to(torch.float64), angles.cos(), rotation_sign(p) * angles.sin(), p["layout"]
    )


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    if p.get("precision") == "engine":
        cos, sin = engine_tables(p)
        cos, sin = cos.to(torch.float64), rotation_sign(p) * sin.to(torch.float64)
    else:
        angles, _a, _b = shift_angles(p)
        cos, sin = angles.cos(), rotation_sign(p) * angles.sin()
    layout = p["layout"]
    out = {
        "cos": widen(cos, layout).to(device=ctx.device, dtype=ctx.dtype),
        "sin": widen(sin, layout).to(device=ctx.device, dtype=ctx.dtype),
    }
    if _key_shape(p) is not None:
        out["k"] = shifted_key(p)[0].to(ctx.device)
    return out


def _shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    t, r = _length(p), int(p["rotary_dim"])
    shapes: dict[str, tuple[int, ...]] = {"cos": (t, r), "sin": (t, r)}
    key = _key_shape(p)
    if key is not None:
        shapes["k"] = key
    return shapes


def _allocations(p: Mapping[str, Any]) -> dict[str, int]:
    """A repeated shift works on the key once per step."""
    key = _key_shape(p)
    if key is None:
        return {}
    return {"steps": int(np.prod(key)) * int(p.get("steps") or 1)}


def _meta(p: Mapping[str, Any]) -> dict[str, Any]:
    _angles, a_from, a_to = shift_angles(p) if _length(p) else (None, 1.0, 1.0)
    _delta, steps = _deltas(p)
    meta: dict[str, Any] = {
        "kind": "rope_shift",
        "engine": p.get("engine", "transformers"),
        "precision": p.get("precision", "exact"),
        "layout": p["layout"],
        "rotary_dim": p["rotary_dim"],
        "head_dim": p["head_dim"],
        "rope_type": (p.get("scaling") or {}).get("type", "default"),
        "from_seq_len": p["from_seq_len"],
        "to_seq_len": p["to_seq_len"],
        "attention_scaling_from": a_from,
        "attention_scaling_to": a_to,
        "attention_scaling_ratio": a_to / a_from,
        "steps": steps,
        "delta": p.get("delta"),
        "dtype": p["dtype"],
        **{k: p[k] for k in ("config_model_type", "preset", "layer_type") if p.get(k)},
    }
    if p.get("llamacpp") is not None:
        rope = llamacpp_shift_rope(p)
        meta["llamacpp"] = dict(p["llamacpp"])
        meta["llamacpp_kshift"] = rope.to_dict()
    if _key_shape(p) is not None:
        key, drift = shifted_key(p)
        meta["drift"] = drift
        meta["k_dtype"] = str(key.dtype).removeprefix("torch.")
    return meta


_SHIFT_FIELDS = (
    kinds.FieldSpec(
        "positions",
        "ints",
        "the keys' positions now (ints >= 0), with delta",
        None,
        minimum=0,
        example=[0, 1, 2, 3],
    ),
    kinds.FieldSpec(
        "delta",
        "int",
        "how far every key moves (negative: towards 0, as a context shift); to = positions + "
        "steps x delta",
        None,
        minimum=-(2**53),
        example=-2,
    ),
    kinds.FieldSpec(
        "from_positions", "ints", "the keys' positions now, with to_positions", None, minimum=0
    ),
    kinds.FieldSpec(
        "to_positions", "ints", "where each key moves (as many as from_positions)", None, minimum=0
    ),
    kinds.FieldSpec(
        "from_seq_len",
        "int",
        "the sequence length whose frequencies rotated the keys (LongRoPE's factors, dynamic "
        "NTK's base); default max(from) + 1, as transformers chooses",
        None,
        minimum=1,
    ),
    kinds.FieldSpec(
        "to_seq_len",
        "int",
        "the sequence length whose frequencies apply at to; default max(to) + 1",
        None,
        minimum=1,
    ),
    kinds.FieldSpec(
        "steps",
        "int",
        "with delta: repeat the shift this many times (precision engine: the engine's own "
        "rotation each time, as a cache shifted again and again)",
        1,
        minimum=1,
        maximum=10_000,
    ),
    kinds.FieldSpec(
        "k",
        "tensor",
        "the cached keys (T, H, D), already rotated at from: nested lists read in dtype, or "
        "the tensor k of a safetensors body in its own dtype",
        None,
        length=3,
    ),
    kinds.FieldSpec(
        "seed",
        "int",
        "instead of k: the key /v1/rope/apply seeds (q = randn(T, H, D), then k = randn(T, "
        "H_kv, D) from torch.Generator().manual_seed(seed)), float32",
        None,
        minimum=0,
    ),
    kinds.FieldSpec("num_heads", "int", "with seed: H, the query heads", None, minimum=1),
    kinds.FieldSpec(
        "num_kv_heads", "int", "with seed: H_kv, the key heads (default num_heads)", None, minimum=1
    ),
)

_OWN = frozenset(f.name for f in _SHIFT_FIELDS) | {"from_seq_len", "to_seq_len"}

ROPE_SHIFT: kinds.Kind = kinds.Kind(
    name="rope_shift",
    path="/v1/rope/shift",
    tag="rope",
    summary="Move cached keys from one position to another",
    description="The rotation that moves keys rotated at `from` to `to` (attention sinks, "
    "context shift, cache eviction, position-independent caching), also across a change of "
    "frequencies (LongRoPE's short to long factors, dynamic NTK's base: `from_seq_len`, "
    "`to_seq_len`). `cos` and `sin` (T, R) in the model's layout hold θ_to·to − θ_from·from, "
    "with no attention factor; `meta.attention_scaling_ratio` is a_to / a_from. With `k` "
    "(T, H, D) the answer's `k` is that key at `to`, the ratio applied once, in k's dtype. "
    'engine llama.cpp with precision "engine" is its K-shift (ggml_rope_ext on the cached '
    "F32 keys at the delta, `steps` times); `meta.drift` is the largest difference from the "
    "key rotated exactly.",
    fields=(*_SHIFT_FIELDS, *_ROPE_FIELDS),
    tensors=(
        kinds.TensorSpec("cos", ("T", "R")),
        kinds.TensorSpec("sin", ("T", "R")),
        kinds.TensorSpec("k", ("T", "H", "D")),
    ),
    shapes=_shapes,
    compute=_compute,
    check=_check,
    meta=_meta,
    get=False,
    sources=ROPE.sources,
    complete=_complete,
    allocations=_allocations,
    examples=(
        {"positions": [4, 5, 6, 7], "delta": -2, "preset": "llama-3.1-8b"},
        {
            "from_positions": [100],
            "to_positions": [5000],
            "preset": "phi-3.5-mini",
            "seed": 0,
            "num_heads": 1,
        },
    ),
)
"""The rope_shift endpoint kind (see :mod:`posenc.core.kinds`)."""


def positions_of(p: Mapping[str, Any]) -> Sequence[int]:
    """The positions the keys hold now."""
    return shift_positions(p)[0]


__all__ = [
    "ROPE_SHIFT",
    "engine_rotation",
    "engine_tables",
    "exact_shift",
    "frequencies",
    "given_key",
    "positions_of",
    "rotate_pairs",
    "seeded_key",
    "shift_angles",
    "shift_positions",
    "shifted_key",
]
