"""``POST /v1/configs/check``: is a caller's RoPE table right, and if not, which mistake made it?

The caller sends its own cos and sin with the config (or preset) and the positions. posenc
builds every engine's table for them (transformers, vLLM and llama.cpp, each ``exact`` and,
where posenc has it, in the engine's own ``precision``) and says which the caller's equals
(``matches``, closest first: the largest difference, the first position that differs by more
than 1e-6, and whether it is bit for bit). Then it builds the table of each known mistake from
a fixed catalogue (:data:`MISTAKES`: one function each, from transformers' rule) and names those
that reproduce the caller's table within 1e-6 (``diagnosis``).

A table may be ``(T, R)`` in either layout (``half``: ``cat(c, c)``; ``interleaved``: each value
twice in place) or ``(T, R/2)``; each comparison reads it in the layout the candidate uses.

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.core import slices
from posenc.core.errors import InvalidArgument, PosencError
from posenc.engines import ENGINES, check_candidates
from posenc.engines.rotation import deinterleaves
from posenc.resolve import compute, resolve_fields
from posenc.rope import RopeScaling, rope_inv_freq
from posenc.rope.precision import transformers_inv_freq, widen
from posenc.rope.sections import mrope_channel_axes
from posenc.rope_kinds.kind import ROPE
from posenc.rope_kinds.rotate import apply_fields, rotate

#: A caller's table explains a mistake (or matches an engine) within this.
TOLERANCE = 1e-6

#: The reference every mistake is built from: transformers' rule, exact.
REFERENCE: tuple[str, str] = (ENGINES["transformers"].name, "exact")


def candidates() -> tuple[tuple[str, str], ...]:
    """The engines and precisions a table is compared with, in this order: every text-RoPE
    engine of the registry with the precisions it is checked in (``Engine.checked``)."""
    return check_candidates()


@dataclass(frozen=True)
class Reference:
    """transformers' rule for the request, the base every mistake is built from.

    Attributes:
        fields: the rope kind's resolved fields (engine transformers, exact).
        positions: ``(T,)`` int64, or ``(3, T)`` M-RoPE rows.
        inv_freq: ``(R/2,)`` float64; ``scale``: the attention scaling.
        scaling: the scaling, or None.
    """

    fields: Mapping[str, Any]
    positions: Tensor
    inv_freq: Tensor
    scale: float
    scaling: RopeScaling | None

    @property
    def rotary_dim(self) -> int:
        return int(self.fields["rotary_dim"])

    @property
    def layout(self) -> str:
        return str(self.fields["layout"])

    @property
    def length(self) -> int:
        return int(self.positions.max()) + 1


def _angles(ref: Reference, inv: Tensor, positions: Tensor | None = None) -> Tensor:
    """``(T, R/2)`` float64 angles ``p · inv`` (M-RoPE: each frequency's own row)."""
    pos = (ref.positions if positions is None else positions).to(torch.float64)
    if pos.dim() == 1:
        return pos[:, None] * inv[None, :]
    f = ref.fields
    axes = mrope_channel_axes(
        ref.rotary_dim, f["mrope_section"], interleaved=bool(f["mrope_interleaved"])
    )
    return pos[axes, :].T * inv[None, :]


def _half(angles: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    return angles.cos() * scale, angles.sin() * scale


def _inv(ref: Reference, **changes: Any) -> tuple[Tensor, float]:
    scaling = changes.get("scaling", ref.scaling)
    return rope_inv_freq(
        changes.get("rotary_dim", ref.rotary_dim),
        changes.get("base", float(ref.fields["base"])),
        scaling,
        seq_len=changes.get("seq_len", ref.length),
        exponent_dim=ref.fields.get("exponent_dim"),
    )


# --------------------------------------------------------------------------------- mistakes
# Each returns the (T, R/2) cos and sin the mistake gives, or None where it does not apply.

Half = tuple[Tensor, Tensor]


def float32_angles(ref: Reference) -> list[Half] | None:
    """Angles multiplied out in float32 (``p.float() * inv_freq``), with ``inv_freq`` computed
    in float32 as transformers does, or the float64 one rounded to float32."""
    out = []
    own, _scale = transformers_inv_freq(
        ref.rotary_dim,
        float(ref.fields["base"]),
        ref.scaling,
        seq_len=ref.length,
        exponent_dim=ref.fields.get("exponent_dim"),
    )
    for inv in (own, ref.inv_freq.float()):
        angles = _angles(ref, inv.double()).float().double()
        out.append(_half(angles, ref.scale))
    return out


def missing_attention_factor(ref: Reference) -> Half | None:
    """cos and sin left unscaled though the rule has an attention factor (LongRoPE, or YaRN's
    explicit ``attention_factor``)."""
    s = ref.scaling
    explicit = s is not None and (s.type == "longrope" or s.attention_factor is not None)
    if not explicit or abs(ref.scale - 1.0) <= TOLERANCE:
        return None
    return _half(_angles(ref, ref.inv_freq), 1.0)


def yarn_mscale_dropped(ref: Reference) -> Half | None:
    """YaRN without its magnitude ``0.1·mscale·ln(factor) + 1`` (no explicit factor)."""
    s = ref.scaling
    if s is None or s.type != "yarn" or s.attention_factor is not None:
        return None
    if abs(ref.scale - 1.0) <= TOLERANCE:
        return None
    return _half(_angles(ref, ref.inv_freq), 1.0)


def dynamic_base_not_rescaled(ref: Reference) -> Half | None:
    """Dynamic NTK past the original length with the base left as it was."""
    s = ref.scaling
    omax = None if s is None else s.original_max_position_embeddings
    if s is None or s.type != "dynamic" or omax is None or ref.length <= omax:
        return None
    inv, scale = _inv(ref, scaling=None)
    return _half(_angles(ref, inv), scale)


def positions_off_by_one(ref: Reference) -> Half | None:
    """Every position one too far (counted from 1)."""
    return _half(_angles(ref, ref.inv_freq, ref.positions + 1), ref.scale)


def longrope_wrong_switch(ref: Reference) -> Half | None:
    """LongRoPE's other factor set: long where the rule takes short, or short for long (the
    switch tested against the wrong length)."""
    s = ref.scaling
    if s is None or s.type != "longrope" or s.original_max_position_embeddings is None:
        return None
    omax = int(s.original_max_position_embeddings)
    other = omax + 1 if ref.length <= omax else omax
    inv, _scale = _inv(ref, seq_len=other)
    return _half(_angles(ref, inv), ref.scale)


def sections_misassigned(ref: Reference) -> Half | None:
    """M-RoPE's sections assigned the other way (Qwen2-VL's contiguous blocks against
    Qwen3-VL's interleaving)."""
    f = ref.fields
    if ref.positions.dim() != 2 or f.get("mrope_section") is None:
        return None
    axes = mrope_channel_axes(
        ref.rotary_dim, f["mrope_section"], interleaved=not bool(f["mrope_interleaved"])
    )
    angles = ref.positions.to(torch.float64)[axes, :].T * ref.inv_freq[None, :]
    return _half(angles, ref.scale)


def theta_by_repeated_multiplication(ref: Reference) -> Half | None:
    """llama.cpp's angles: ``theta = p`` then ``theta *= base^(-2/R)`` in float32 per pair,
    divided by the linear factor."""
    s = ref.scaling
    if s is not None and s.type != "linear":
        return None
    step = np.float32(math.pow(float(np.float32(ref.fields["base"])), -2.0 / ref.rotary_dim))
    theta = ref.positions.numpy().astype(np.float32)
    if theta.ndim != 1:
        return None
    out = np.empty((theta.shape[0], ref.rotary_dim // 2), dtype=np.float32)
    for i in range(ref.rotary_dim // 2):
        out[:, i] = theta
        theta = theta * step
    angles = torch.from_numpy(out).double()
    if s is not None and s.factor:
        angles = (angles.float() / float(np.float32(s.factor))).double()
    return _half(angles, ref.scale)


def wrong_base(ref: Reference) -> Half | None:
    """The default base 10000 in place of the config's ``rope_theta``."""
    if float(ref.fields["base"]) == 10000.0:
        return None
    inv, scale = _inv(ref, base=10000.0)
    return _half(_angles(ref, inv), scale)


def wrong_rotary_dim(ref: Reference) -> Half | None:
    """Partial rotary with the exponents over the whole head: ``base^(-2i/Dh)`` for the
    ``R/2`` rotated frequencies."""
    head_dim = int(ref.fields["head_dim"])
    if head_dim == ref.rotary_dim:
        return None
    inv, scale = _inv(ref, rotary_dim=head_dim)
    return _half(_angles(ref, inv[: ref.rotary_dim // 2]), scale)


#: The catalogue: mistake name -> the function that builds its table. ``wrong_layout`` is the
#: reference's own values in the other layout (see :func:`check_table`).
MISTAKES: dict[str, Callable[[Reference], Half | list[Half] | None]] = {
    "float32_angles": float32_angles,
    "missing_attention_factor": missing_attention_factor,
    "yarn_mscale_dropped": yarn_mscale_dropped,
    "dynamic_base_not_rescaled": dynamic_base_not_rescaled,
    "positions_off_by_one": positions_off_by_one,
    "longrope_wrong_switch": longrope_wrong_switch,
    "sections_misassigned": sections_misassigned,
    "theta_by_repeated_multiplication": theta_by_repeated_multiplication,
    "wrong_base": wrong_base,
    "wrong_rotary_dim": wrong_rotary_dim,
}
MISTAKE_NAMES: tuple[str, ...] = ("wrong_layout", *MISTAKES)


# ------------------------------------------------------------------------------ comparison


def _reference_dtype(table: Tensor) -> torch.dtype:
    """The dtype the caller's table was made in: float32 when its float64 values (JSON) are all
    float32 numbers."""
    if table.dtype == torch.float64 and torch.equal(table.float().double(), table):
        return torch.float32
    return table.dtype


def _difference(
    caller: tuple[Tensor, Tensor], want: Half, layout: str, positions: Tensor
) -> dict[str, Any]:
    """``max_abs_diff``, ``first_position`` and ``bit_exact`` of the caller's table against
    ``want`` (``(T, R/2)`` float64), widened in ``layout`` when the caller's is ``(T, R)``."""
    half = want[0].shape[-1]
    if caller[0].shape[-1] != half:
        want = (widen(want[0], layout), widen(want[1], layout))
    cos, sin = caller
    delta = torch.maximum(
        (cos.double() - want[0]).abs().amax(-1), (sin.double() - want[1]).abs().amax(-1)
    )  # (T,)
    over = torch.nonzero(delta > TOLERANCE)
    rows = positions if positions.dim() == 1 else positions[0]
    dtype = _reference_dtype(cos)
    bit = bool(
        torch.equal(cos.to(dtype), want[0].to(dtype))
        and torch.equal(sin.to(dtype), want[1].to(dtype))
    )
    return {
        "max_abs_diff": float(delta.max()) if delta.numel() else 0.0,
        "first_position": int(rows[int(over[0, 0])]) if over.numel() else None,
        "bit_exact": bit,
    }


def _fields(request: Mapping[str, Any], engine: str, precision: str) -> dict[str, Any]:
    # an engine's own fields (a GGUF's ggml_rope_ext arguments) reach that engine's rows only
    foreign = {f for e in ENGINES.values() if e.name != engine for f in e.own_fields}
    given = {k: v for k, v in request.items() if v is not None and k not in foreign}
    return resolve_fields(
        ROPE, {**given, "engine": engine, "precision": precision, "dtype": "float64"}
    )


def _positions(fields: Mapping[str, Any]) -> Tensor:
    if fields["positions"] is not None:
        return slices.nested_tensor(fields["positions"], torch.int64)
    return torch.arange(int(fields["seq_len"]), dtype=torch.int64)


def _as_half(cos: Tensor, sin: Tensor, layout: str) -> Half:
    """A ``(T, R)`` table of the rope kind as ``(T, R/2)`` values."""
    half = cos.shape[-1] // 2
    if layout == "half":
        return cos[:, :half], sin[:, :half]
    return cos[:, 0::2], sin[:, 0::2]


def check_table(
    request: Mapping[str, Any], cos: Tensor | np.ndarray, sin: Tensor | np.ndarray
) -> dict[str, Any]:
    """Which engine's table ``cos``/``sin`` equals, and which known mistakes explain it.

    Args:
        request: the rope kind's fields: ``config`` or ``preset``, ``positions`` or
            ``seq_len``, and ``layer_type``, ``max_model_len`` … as ``/v1/encodings/rope``
            takes them (no ``engine``, ``precision`` or ``dtype``).
        cos, sin: the caller's ``(T, R)`` (either layout) or ``(T, R/2)`` tables.

    Returns:
        ``{"matches": [...], "diagnosis": [...], "meta": {...}}``: ``matches`` are
        ``{"engine", "precision", "max_abs_diff", "first_position", "bit_exact"}`` closest
        first; ``diagnosis`` are ``{"mistake", "explains", "max_abs_diff"}`` for every mistake
        that applies to the config (explains: within 1e-6), closest first.

    Raises:
        InvalidArgument: bad fields; tables of another shape than ``(T, R)``/``(T, R/2)``.
    """
    for name in ("engine", "precision", "dtype"):
        if request.get(name) is not None:
            raise InvalidArgument(
                f"{name} is chosen by the check itself (every engine is compared)", field=name
            )
    c, s = torch.as_tensor(np.asarray(cos)), torch.as_tensor(np.asarray(sin))
    base = _fields(request, *REFERENCE)
    positions = _positions(base)
    t, r = positions.shape[-1], int(base["rotary_dim"])
    for name, table in (("cos", c), ("sin", s)):
        if table.dim() != 2 or table.shape[0] != t or table.shape[1] not in (r, r // 2):
            raise InvalidArgument(
                f"{name} must be ({t}, {r}) or ({t}, {r // 2}) for these positions and "
                f"rotary_dim {r}, got {tuple(table.shape)}",
                field=name,
            )
    if not (c.is_floating_point() and s.is_floating_point()):
        raise InvalidArgument("cos and sin must be floating-point tables", field="cos")
    caller = (c, s)
    matches: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for engine, precision in candidates():
        try:
            fields = (
                base if (engine, precision) == REFERENCE else _fields(request, engine, precision)
            )
            out = dict(compute(ROPE, fields))
        except PosencError as exc:
            skipped[f"{engine}/{precision}"] = exc.message
            continue
        want = _as_half(out["cos"], out["sin"], fields["layout"])
        diff = _difference(caller, want, fields["layout"], positions)
        matches.append({"engine": engine, "precision": precision, **diff})
    matches.sort(key=lambda m: (m["max_abs_diff"], not m["bit_exact"]))
    scaling = RopeScaling.from_dict(base["scaling"]) if base["scaling"] is not None else None
    length = int(positions.max()) + 1
    inv, scale = rope_inv_freq(
        r, float(base["base"]), scaling, seq_len=length, exponent_dim=base["exponent_dim"]
    )
    ref = Reference(base, positions, inv, scale, scaling)
    correct = _half(_angles(ref, inv), scale)
    diagnosis = []
    other = "interleaved" if ref.layout == "half" else "half"
    if c.shape[-1] == r:
        d = _difference(caller, correct, other, positions)
        diagnosis.append(_named("wrong_layout", d["max_abs_diff"]))
    for name, build in MISTAKES.items():
        built = build(ref)
        variants = [built] if isinstance(built, tuple) else built or []
        # a variant that gives the correct table here says nothing about the caller's
        variants = [v for v in variants if _apart(v, correct) > TOLERANCE]
        if variants:
            best = min(
                _difference(caller, v, ref.layout, positions)["max_abs_diff"] for v in variants
            )
            diagnosis.append(_named(name, best))
    diagnosis.sort(key=lambda m: m["max_abs_diff"])
    return {
        "matches": matches,
        "diagnosis": diagnosis,
        "meta": {
            "rotary_dim": r,
            "layout": ref.layout,
            "width": int(c.shape[-1]),
            "positions": t,
            "tolerance": TOLERANCE,
            "not_compared": skipped,
        },
    }


def _apart(a: Half, b: Half) -> float:
    return float(max((a[0] - b[0]).abs().max(), (a[1] - b[1]).abs().max()))


def _named(mistake: str, difference: float) -> dict[str, Any]:
    return {"mistake": mistake, "explains": difference <= TOLERANCE, "max_abs_diff": difference}


__all__ = [
    "MISTAKES",
    "MISTAKE_NAMES",
    "REFERENCE",
    "TOLERANCE",
    "Reference",
    "candidates",
    "check_table",
]


# --------------------------------------------------------------------------- rotations (1.4)
# A caller's rotated q (and k) against every engine's apply, and the mistakes that explain it.

#: The mistakes of applying a (right or wrong) table to the vectors, in addition to
#: :data:`MISTAKE_NAMES`' table mistakes, each applied as a float64 rotation.
ROTATION_MISTAKE_NAMES: tuple[str, ...] = (
    "wrong_pairing",
    "rotated_twice",
    "not_rotated",
    "partial_rotary_ignored",
    "rotary_on_last_channels",
    "positions_offset",
    "attention_scaling_twice",
)


def _rotate_half_table(
    x: Tensor, half: Half, layout: str, *, deinterleave: bool = False, leading: bool = True
) -> Tensor:
    """``x`` ``(T, H, D)`` float64 rotated by a ``(T, R/2)`` float64 table: the pairs of
    ``layout`` (``half``: ``i, i + R/2``; ``interleaved``: ``2i, 2i + 1``) of the first ``R``
    channels (the last with ``leading`` false), in transformers' channel order (``deinterleave``:
    DeepSeek's evens then odds)."""
    r = 2 * half[0].shape[-1]
    d = x.shape[-1]
    c, s = half[0][:, None, :], half[1][:, None, :]  # (T, 1, R/2)
    rot, before, after = (
        (x[..., :r], x[..., :0], x[..., r:])
        if leading
        else (x[..., d - r :], x[..., : d - r], x[..., :0])
    )
    if layout == "half":
        x1, x2 = rot[..., : r // 2], rot[..., r // 2 :]
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    if layout == "half" or deinterleave:
        out = torch.cat((o1, o2), -1)
    else:
        out = torch.stack((o1, o2), -1).flatten(-2)
    return torch.cat((before, out, after), -1)


def _rotation_difference(
    caller: list[tuple[Tensor, Tensor]], want: list[Tensor], positions: Tensor
) -> dict[str, Any]:
    """``max_abs_diff``, ``first_position`` and ``bit_exact`` of the caller's outputs against
    ``want`` (one per output, ``(T, H, D)``)."""
    rows = positions if positions.dim() == 1 else positions[0]
    delta = torch.zeros(rows.shape[0], dtype=torch.float64)
    bit = True
    for (_x, out), w in zip(caller, want, strict=True):
        if w.shape != out.shape:
            return {"max_abs_diff": math.inf, "first_position": int(rows[0]), "bit_exact": False}
        delta = torch.maximum(delta, (out.double() - w.double()).abs().flatten(1).amax(-1))
        bit = bit and torch.equal(out, w.to(out.dtype))
    over = torch.nonzero(delta > TOLERANCE)
    return {
        "max_abs_diff": float(delta.max()) if delta.numel() else 0.0,
        "first_position": int(rows[int(over[0, 0])]) if over.numel() else None,
        "bit_exact": bit,
    }


def _estimate_offset(x: Tensor, out: Tensor, ref: Reference, *, deinterleave: bool) -> int | None:
    """The position the caller rotated its first row by, unwrapped from the lowest frequency up,
    minus the requested one (None when no pair carries an angle)."""
    if ref.positions.dim() != 1:
        return None
    half = ref.rotary_dim // 2
    x0, y0 = x[0].double(), out[0].double()  # (H, D)
    if ref.layout == "half":
        a1, a2 = x0[:, :half], x0[:, half : 2 * half]
    else:
        a1, a2 = x0[:, 0 : 2 * half : 2], x0[:, 1 : 2 * half : 2]
    if ref.layout == "half" or deinterleave:
        b1, b2 = y0[:, :half], y0[:, half : 2 * half]
    else:
        b1, b2 = y0[:, 0 : 2 * half : 2], y0[:, 1 : 2 * half : 2]
    # angle of b relative to a, per pair, from the head with the largest pair
    cross = (a1 * b2 - a2 * b1).sum(0)
    dot = (a1 * b1 + a2 * b2).sum(0)
    angle = torch.atan2(cross, dot)  # (R/2,)
    inv = ref.inv_freq
    order = torch.argsort(inv)
    estimate: float | None = None
    for i in order.tolist():
        w = float(inv[i])
        if w <= 0:
            continue
        a = float(angle[i])
        if estimate is None:  # the lowest frequency turns less than once
            estimate = (a % (2 * math.pi)) / w
            continue
        turns = round((estimate * w - a) / (2 * math.pi))
        estimate = (a + 2 * math.pi * turns) / w
    if estimate is None:
        return None
    return round(estimate) - int(ref.positions[0])


def _rotation_mistakes(
    ref: Reference, correct: Half, deinterleave: bool, caller: list[tuple[Tensor, Tensor]]
) -> dict[str, tuple[list[Tensor], dict[str, Any]]]:
    """Each rotation mistake that applies here: its float64 outputs (one per caller pair) and
    what the diagnosis entry adds (``positions_offset``'s ``offset``)."""
    r, d = ref.rotary_dim, int(ref.fields["head_dim"])
    scale = ref.scale

    def rotated(x: Tensor, half: Half, **kw: Any) -> Tensor:
        kw.setdefault("deinterleave", deinterleave)
        return _rotate_half_table(x.double(), half, kw.pop("layout", ref.layout), **kw)

    out: dict[str, tuple[list[Tensor], dict[str, Any]]] = {}
    xs = [x for x, _out in caller]
    other = "interleaved" if ref.layout == "half" else "half"
    out["wrong_pairing"] = ([rotated(x, correct, layout=other, deinterleave=False) for x in xs], {})
    out["rotated_twice"] = ([rotated(rotated(x, correct), correct) for x in xs], {})
    out["not_rotated"] = ([x.double() for x in xs], {})
    if r < d:
        full_inv, full_scale = _inv(ref, rotary_dim=d)
        full = _half(_angles_any(ref, full_inv), full_scale)
        out["partial_rotary_ignored"] = ([rotated(x, full) for x in xs], {})
        out["rotary_on_last_channels"] = ([rotated(x, correct, leading=False) for x in xs], {})
    if abs(scale - 1.0) > TOLERANCE:
        twice = (correct[0] * scale, correct[1] * scale)
        out["attention_scaling_twice"] = ([rotated(x, twice) for x in xs], {})
    x0, y0 = caller[0]
    offset = _estimate_offset(x0, y0, ref, deinterleave=deinterleave)
    if offset:
        shifted = _half(_angles(ref, ref.inv_freq, ref.positions + offset), scale)
        out["positions_offset"] = ([rotated(x, shifted) for x in xs], {"offset": offset})
    return out


def _angles_any(ref: Reference, inv: Tensor) -> Tensor:
    """``(T, R'/2)`` angles for an ``inv`` of another width (1-D positions, or M-RoPE's first
    row)."""
    pos = ref.positions if ref.positions.dim() == 1 else ref.positions[0]
    return pos.to(torch.float64)[:, None] * inv[None, :]


def _rotation_inputs(
    q_in: Any, q_out: Any, k_in: Any, k_out: Any, t: int, d: int
) -> list[tuple[Tensor, Tensor]]:
    """The caller's ``(input, output)`` pairs as CPU tensors, shapes checked."""
    pairs = [("q", q_in, q_out)]
    if (k_in is None) != (k_out is None):
        raise InvalidArgument("give k_in with k_out, or neither", field="k_in")
    if k_in is not None:
        pairs.append(("k", k_in, k_out))
    out = []
    for name, x, y in pairs:
        x, y = torch.as_tensor(np.asarray(x)), torch.as_tensor(np.asarray(y))
        for label, v in ((f"{name}_in", x), (f"{name}_out", y)):
            if v.dim() != 3 or v.shape[0] != t or v.shape[-1] != d or not v.is_floating_point():
                raise InvalidArgument(
                    f"{label} must be floating-point (T, H, D) = ({t}, H, {d}) for these "
                    f"positions and the model's head_dim {d}, got {tuple(v.shape)} {v.dtype}",
                    field=label,
                )
        if x.shape != y.shape:
            raise InvalidArgument(
                f"{name}_in {tuple(x.shape)} and {name}_out {tuple(y.shape)} differ",
                field=f"{name}_out",
            )
        out.append((x, y))
    return out


def check_rotation(
    request: Mapping[str, Any],
    q_in: Tensor | np.ndarray,
    q_out: Tensor | np.ndarray,
    k_in: Tensor | np.ndarray | None = None,
    k_out: Tensor | np.ndarray | None = None,
) -> dict[str, Any]:
    """Which engine's apply ``q_out`` (and ``k_out``) equals, and which known mistakes explain it.

    Args:
        request: the rope kind's fields as :func:`check_table` takes them (``config`` or
            ``preset``, ``positions`` or ``seq_len``, ``layer_type`` …; ``offset`` and
            ``layer`` as ``/v1/rope/apply`` takes them).
        q_in, q_out: the caller's ``(T, H, D)`` queries before and after its rotation.
        k_in, k_out: the same for keys, or None.

    Returns:
        ``{"matches", "diagnosis", "meta"}`` as :func:`check_table`: each candidate engine and
        precision's apply (:func:`posenc.rope_kinds.rotate.rotate`) against the caller's outputs; each
        rotation mistake (:data:`ROTATION_MISTAKE_NAMES`) and each table mistake
        (:data:`MISTAKE_NAMES`, its table applied) as a float64 rotation of the inputs,
        ``explains`` where within 1e-6; ``positions_offset`` gives the ``offset`` found.
    """
    for name in ("engine", "precision", "dtype"):
        if request.get(name) is not None:
            raise InvalidArgument(
                f"{name} is chosen by the check itself (every engine is compared)", field=name
            )
    base = apply_fields(request)
    positions = slices.nested_tensor(base["positions"], torch.int64)
    t, d, r = positions.shape[-1], int(base["head_dim"]), int(base["rotary_dim"])
    caller = _rotation_inputs(q_in, q_out, k_in, k_out, t, d)
    matches, skipped = [], {}
    for engine, precision in candidates():
        try:
            got = rotate(
                request,
                caller[0][0],
                caller[1][0] if len(caller) > 1 else None,
                engine=engine,
                precision=precision,
            )
        except PosencError as exc:
            skipped[f"{engine}/{precision}"] = exc.message
            continue
        want = [got["q"]] + ([got["k"]] if len(caller) > 1 else [])
        diff = _rotation_difference(caller, want, positions)
        matches.append({"engine": engine, "precision": precision, **diff})
    matches.sort(key=lambda m: (m["max_abs_diff"], not m["bit_exact"]))
    diagnosis = _rotation_diagnosis(base, positions, caller)
    return {
        "matches": matches,
        "diagnosis": diagnosis,
        "meta": {
            "rotary_dim": r,
            "head_dim": d,
            "layout": base["layout"],
            "positions": t,
            "tolerance": TOLERANCE,
            "not_compared": skipped,
        },
    }


def _rotation_diagnosis(
    base: Mapping[str, Any], positions: Tensor, caller: list[tuple[Tensor, Tensor]]
) -> list[dict[str, Any]]:
    """Every rotation mistake and every table mistake that applies, closest first."""
    r = int(base["rotary_dim"])
    scaling = RopeScaling.from_dict(base["scaling"]) if base["scaling"] is not None else None
    length = int(positions.max()) + 1
    inv, scale = rope_inv_freq(
        r, float(base["base"]), scaling, seq_len=length, exponent_dim=base["exponent_dim"]
    )
    ref = Reference(base, positions, inv, scale, scaling)
    correct = _half(_angles(ref, inv), scale)
    flip = deinterleaves(base)
    exact = [
        _rotate_half_table(x.double(), correct, ref.layout, deinterleave=flip) for x, _ in caller
    ]
    diagnosis = []
    for name, (want, extra) in _rotation_mistakes(ref, correct, flip, caller).items():
        if _apart_rotations(want, exact) <= TOLERANCE:
            continue  # the mistake changes nothing here
        d = _rotation_difference(caller, want, positions)["max_abs_diff"]
        diagnosis.append({**_named(name, d), **extra})
    other = "interleaved" if ref.layout == "half" else "half"
    # wrong_layout: the right values laid out in the other layout, applied by the model's rotation
    wrong = [_wrong_layout_rotation(x.double(), correct, ref.layout, other) for x, _ in caller]
    if _apart_rotations(wrong, exact) > TOLERANCE:
        d = _rotation_difference(caller, wrong, positions)["max_abs_diff"]
        diagnosis.append(_named("wrong_layout", d))
    for name, build in MISTAKES.items():
        built = build(ref)
        variants = [built] if isinstance(built, tuple) else built or []
        variants = [v for v in variants if _apart(v, correct) > TOLERANCE]
        if variants:
            best = min(
                _rotation_difference(
                    caller,
                    [
                        _rotate_half_table(x.double(), v, ref.layout, deinterleave=flip)
                        for x, _ in caller
                    ],
                    positions,
                )["max_abs_diff"]
                for v in variants
            )
            diagnosis.append(_named(name, best))
    diagnosis.sort(key=lambda m: m["max_abs_diff"])
    return diagnosis


def _wrong_layout_rotation(x: Tensor, correct: Half, layout: str, other: str) -> Tensor:
    """The model's own rotation (``layout``'s pairing) of a table widened in the other layout:
    ``x · cos' + rotate(x) · sin'`` with ``cos' = widen(cos, other)``."""
    r = 2 * correct[0].shape[-1]
    cos, sin = widen(correct[0], other)[:, None, :], widen(correct[1], other)[:, None, :]
    rot, rest = x[..., :r], x[..., r:]
    if layout == "half":
        turned = torch.cat((-rot[..., r // 2 :], rot[..., : r // 2]), -1)
    else:
        turned = torch.stack((-rot[..., 1::2], rot[..., 0::2]), -1).flatten(-2)
    return torch.cat((rot * cos + turned * sin, rest), -1)


def _apart_rotations(a: list[Tensor], b: list[Tensor]) -> float:
    return max(float((x - y).abs().max()) if x.numel() else 0.0 for x, y in zip(a, b, strict=True))


__all__ += ["ROTATION_MISTAKE_NAMES", "check_rotation"]
