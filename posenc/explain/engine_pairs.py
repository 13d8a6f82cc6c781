"""``POST /v1/configs/compare`` over any engines: every pair of the tables asked for.

Items are a text-RoPE engine's name (the registry's: :func:`posenc.engines.engine_names`),
``"exact"`` (posenc's exact table: transformers' rule in float64), or ``{"engine",
"precision"}``. Each pair answers as the 1.2 comparison does
(:func:`posenc.explain.vllm_compare.compare_engines`): ``cos``, ``sin``,
``attention_scaling`` and ``softmax_scale`` as ``{"max_abs_diff", "first_position"}`` (values
per position and frequency, magnitude included, whatever the layouts; first position past 1e-6),
``trend`` (the largest difference up to each power of two, how it grows with position) and
``differences`` (one sentence per rule).

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements, sequence_length
from posenc.engines import ENGINES, engine_named, engine_names
from posenc.explain.vllm_compare import TRANSFORMERS, VLLM, compare_engines, positions_for_engine
from posenc.resolve import compute, resolve_fields
from posenc.rope_kinds.kind import ROPE

#: What ``engines`` defaults to: the 1.2 comparison, explained rule by rule.
DEFAULT_ENGINES: tuple[str, ...] = (TRANSFORMERS.name, VLLM.name)
_TOL = 1e-6


def parse_engines(items: Sequence[Any]) -> list[tuple[str, str, str]]:
    """``(label, engine, precision)`` of each item; ``"exact"`` is transformers' exact table.

    Raises:
        InvalidArgument: fewer than two items, an unknown engine or precision, a repeat.
    """
    if not isinstance(items, list | tuple) or len(items) < 2:
        raise InvalidArgument("engines must list two or more engines", field="engines")
    out: list[tuple[str, str, str]] = []
    for n, item in enumerate(items):
        if item == "exact":
            engine, precision = TRANSFORMERS.name, "exact"
        elif isinstance(item, str):
            engine, precision = item, "exact"
        elif isinstance(item, Mapping) and set(item) <= {"engine", "precision"}:
            engine, precision = str(item.get("engine")), str(item.get("precision", "exact"))
        else:
            raise InvalidArgument(
                f'engines[{n}] must be an engine name, "exact" or {{engine, precision}}, '
                f"got {item!r}",
                field=f"engines[{n}]",
            )
        known = ENGINES.get(engine)
        if known is None or engine not in engine_names() or precision not in known.precisions:
            raise InvalidArgument(
                f"engines[{n}]: engine one of {', '.join(engine_names())} and precision exact "
                f"or engine, got {item!r}",
                field=f"engines[{n}]",
            )
        label = (
            "exact"
            if item == "exact"
            else (engine if precision == "exact" else f"{engine} ({precision})")
        )
        if any(o[1:] == (engine, precision) for o in out):
            raise InvalidArgument(f"engines[{n}] repeats {label}", field=f"engines[{n}]")
        out.append((label, engine, precision))
    return out


def _half(out: Mapping[str, Tensor], layout: str) -> tuple[Tensor, Tensor]:
    cos, sin = out["cos"], out["sin"]
    r = cos.shape[-1] // 2
    if layout == "half":
        return cos[:, :r], sin[:, :r]
    return cos[:, 0::2], sin[:, 0::2]


def _diff(a: Tensor, b: Tensor, pos: Tensor) -> dict[str, Any]:
    delta = (a - b).abs().amax(-1)  # (T,)
    over = torch.nonzero(delta > _TOL)
    return {
        "max_abs_diff": float(delta.max()) if delta.numel() else 0.0,
        "first_position": int(pos[int(over[0, 0])]) if over.numel() else None,
    }


def _trend(delta: Tensor, pos: Tensor) -> list[dict[str, Any]]:
    """The largest difference up to each power of two (and the last position)."""
    out = []
    bound = 1
    last = int(pos.max()) if pos.numel() else 0
    while True:
        mask = pos < bound
        if mask.any():
            out.append({"up_to": bound - 1, "max_abs_diff": float(delta[mask].max())})
        if bound > last:
            return out
        bound *= 2


def _scalar(a: float | None, b: float | None, first: int) -> dict[str, Any]:
    if a is None or b is None:
        return {"max_abs_diff": None, "first_position": None, "a": a, "b": b}
    d = abs(a - b)
    return {"max_abs_diff": d, "first_position": first if d > _TOL else None, "a": a, "b": b}


def compare_pairs(
    config: Mapping[str, Any],
    engines: Sequence[Any],
    *,
    seq_len: int | None = None,
    positions: Sequence[int] | None = None,
    max_model_len: int | None = None,
    layer_type: str | None = None,
    max_elements: int | None = None,
) -> dict[str, Any]:
    """Every pair of the engines' tables for ``config`` at the requested positions.

    With two items the answer has the 1.2 shape (``cos``, ``sin``, ``attention_scaling``,
    ``softmax_scale``, ``differences`` at the top) and ``pairs`` too; with more, ``pairs``.

    Raises:
        InvalidArgument: bad engines or fields; TooLarge: too many values to compare.
    """
    answer, _, _ = pair_curves(
        config,
        engines,
        seq_len=seq_len,
        positions=positions,
        max_model_len=max_model_len,
        layer_type=layer_type,
        max_elements=max_elements,
    )
    return answer


def pair_curves(
    config: Mapping[str, Any],
    engines: Sequence[Any],
    *,
    seq_len: int | None = None,
    positions: Sequence[int] | None = None,
    max_model_len: int | None = None,
    layer_type: str | None = None,
    max_elements: int | None = None,
) -> tuple[dict[str, Any], Tensor, list[Tensor]]:
    """:func:`compare_pairs`' answer, the positions compared ``(T,)`` and, per pair in the
    answer's order, its largest |difference| of cos or sin at each position ``(T,)``."""
    parsed = parse_engines(list(engines))
    count = sequence_length(positions, seq_len)
    given: dict[str, Any] = {"config": dict(config), "dtype": "float64"}
    given.update(
        {
            k: v
            for k, v in {
                "seq_len": seq_len,
                "positions": list(positions) if positions is not None else None,
                "layer_type": layer_type,
            }.items()
            if v is not None
        }
    )
    tables: dict[str, tuple[Tensor, Tensor]] = {}
    scales: dict[str, float] = {}
    softmax: dict[str, float | None] = {}
    notes: dict[str, list[str]] = {}
    pos: Tensor | None = None
    for label, engine, precision in parsed:
        fields = {**given, "engine": engine, "precision": precision}
        reader = engine_named(engine)
        if reader.takes_max_model_len and max_model_len is not None:
            fields["max_model_len"] = max_model_len
        p = resolve_fields(ROPE, fields)
        if count is not None:
            check_elements(
                4 * count * int(p["rotary_dim"]) * len(parsed),
                what="the compared tables",
                max_elements=max_elements,
            )
        tables[label] = _half(dict(compute(ROPE, p)), p["layout"])
        meta = ROPE.meta(p)  # type: ignore[misc]
        scales[label] = float(meta["attention_scaling"])
        notes[label] = reader.notes(p)
        reading = positions_for_engine(  # the softmax scale of its attention
            config, engine if reader.scales_softmax else TRANSFORMERS.name, max_model_len
        )
        softmax[label] = reading.get("softmax_scale")
        if pos is None:
            rows = p["positions"]
            pos = torch.tensor(rows) if rows is not None else torch.arange(int(p["seq_len"]))
    assert pos is not None
    pairs, deltas = [], []
    for (a, ea, pa), (b, eb, pb) in combinations(parsed, 2):
        ca, sa = tables[a]
        cb, sb = tables[b]
        delta = torch.maximum((ca - cb).abs().amax(-1), (sa - sb).abs().amax(-1))
        pair: dict[str, Any] = {
            "a": a,
            "b": b,
            "cos": _diff(ca, cb, pos),
            "sin": _diff(sa, sb, pos),
            "attention_scaling": _scalar(scales[a], scales[b], int(pos[0])),
            "softmax_scale": _scalar(softmax[a], softmax[b], int(pos[0])),
            "trend": _trend(delta, pos),
            "differences": _sentences(config, (a, ea, pa), (b, eb, pb), notes, delta, pos, given),
        }
        pairs.append(pair)
        deltas.append(delta)
    out: dict[str, Any] = {
        "engines": [label for label, _, _ in parsed],
        "pairs": pairs,
        "meta": {"positions_compared": int(pos.numel()), "layer_type": layer_type},
    }
    if len(parsed) == 2:
        first = pairs[0]
        out.update({k: first[k] for k in ("cos", "sin", "attention_scaling", "softmax_scale")})
        out["differences"] = first["differences"]
    return out, pos, deltas


def _sentences(
    config: Mapping[str, Any],
    a: tuple[str, str, str],
    b: tuple[str, str, str],
    notes: Mapping[str, list[str]],
    delta: Tensor,
    pos: Tensor,
    given: Mapping[str, Any],
) -> list[str]:
    """One sentence per rule on which the two differ here."""
    said: list[str] = []
    if delta.numel() == 0 or float(delta.max()) <= _TOL:
        return said
    if {a[1], b[1]} == set(DEFAULT_ENGINES) and a[2] == b[2] == "exact":
        return list(
            compare_engines(
                config,
                seq_len=given.get("seq_len"),
                positions=given.get("positions"),
                layer_type=given.get("layer_type"),
            )["differences"]
        )
    for label, _engine, precision in (a, b):
        if precision == "engine":
            said.append(
                f"{label}: the engine's own float32 arithmetic; its angles are off by about "
                "p·2^-24 radians at position p"
            )
        said.extend(f"{label}: {n}" for n in notes.get(label, []))
    if not said:
        over = torch.nonzero(delta > _TOL)
        said.append(
            f"{a[0]} and {b[0]} give other angles from position {int(pos[int(over[0, 0])])} "
            f"(largest difference {float(delta.max()):.3g})"
        )
    return said


__all__ = ["DEFAULT_ENGINES", "compare_pairs", "parse_engines"]
