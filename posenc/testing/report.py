"""The words of a failed check: the largest difference and where, the best match, the diagnosis.

One text for :mod:`posenc.testing`'s assertion messages and for ``posenc check``'s output, from
the answer of :func:`posenc.explain.check.check_table` (``matches`` closest first, ``diagnosis``).
The diagnosis names the mistakes that explain the caller's values (within 1e-6) and no others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.explain.check import TOLERANCE


@dataclass(frozen=True)
class Largest:
    """Where the caller's values differ most from the reference.

    Attributes:
        value: the largest ``|got − want|``; ``tensor``: which tensor (``cos``, ``sin``, ``q``).
        index: its index in the caller's array; ``position``: the position of that row.
        channel: the last axis' index; ``got``, ``want``: the two values there.
        first_position: the first row's position past ``atol`` (None: none).
        count: how many values are past ``atol``; ``total``: how many were compared.
    """

    value: float
    tensor: str
    index: tuple[int, ...]
    position: int
    channel: int
    got: float
    want: float
    first_position: int | None
    count: int
    total: int


def largest(
    named: Sequence[tuple[str, np.ndarray, np.ndarray]], positions: np.ndarray, atol: float
) -> Largest:
    """The largest difference over ``(name, got, want)`` arrays of the same shape, whose
    leading axis is the ``T`` rows at ``positions`` ``(T,)``; NaN counts as infinitely far."""
    deltas = []
    for _name, got, want in named:
        delta = np.abs(got.astype(np.float64) - want.astype(np.float64))
        deltas.append(np.where(np.isnan(delta), np.inf, delta))
    k = max(range(len(named)), key=lambda i: float(deltas[i].max(initial=0.0)))
    name, got, want = named[k]
    delta = deltas[k]
    rows = len(positions)
    over = np.zeros(rows, dtype=bool)
    for d in deltas:
        over |= (d.reshape(rows, -1) > atol).any(axis=1)
    first = np.nonzero(over)[0]
    if not delta.size:
        return Largest(0.0, name, (0,), 0, 0, 0.0, 0.0, None, 0, 0)
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(delta)), delta.shape))
    return Largest(
        value=float(delta[index]),
        tensor=name,
        index=index,
        position=int(positions[index[0]]),
        channel=index[-1],
        got=float(got[index]),
        want=float(want[index]),
        first_position=int(positions[int(first[0])]) if first.size else None,
        count=int(sum(int((d > atol).sum()) for d in deltas)),
        total=int(sum(d.size for d in deltas)),
    )


#: Why a GGUF's values get no diagnosis: the mistakes are built from transformers' rule.
NO_TRANSFORMERS_FORM = (
    "a GGUF with rope_freqs factors has no transformers form to build the mistakes from; "
    "check against the config.json it was converted from"
)


@dataclass(frozen=True)
class CheckReport:
    """A caller's values against one engine, and what ``/v1/configs/check`` says of them.

    Attributes:
        what: ``"RoPE table"`` or ``"rotation"``; ``engine``, ``precision``, ``atol``: asked.
        largest: where they differ most from that engine.
        check: :func:`posenc.explain.check.check_table`'s answer (or the rotation check's), or None
            where it was not asked (a pass) or cannot be given (``unavailable`` says why).
    """

    what: str
    engine: str
    precision: str
    atol: float
    largest: Largest
    check: Mapping[str, Any] | None = None
    unavailable: str | None = None

    @property
    def passed(self) -> bool:
        """Whether the named engine matches within ``atol``."""
        return self.largest.value <= self.atol

    @property
    def explained_by(self) -> list[str]:
        """The mistakes that explain the values (within 1e-6), closest first."""
        if self.check is None:
            return []
        return [d["mistake"] for d in self.check["diagnosis"] if d["explains"]]

    def text(self) -> str:
        """The report: the verdict, where, the best match, the diagnosis, every match."""
        return "\n".join(report_lines(self))


def _where(b: Largest) -> str:
    index = ", ".join(str(i) for i in b.index)
    return (
        f"{b.tensor}[{index}] (position {b.position}, channel {b.channel}): "
        f"got {b.got:.9g}, want {b.want:.9g}"
    )


def _match_line(m: Mapping[str, Any]) -> str:
    exact = ", bit exact" if m.get("bit_exact") else ""
    first = m.get("first_position")
    past = f", first past 1e-6 at position {first}" if first is not None else ""
    extra = f", offset {m['offset']}" if m.get("offset") is not None else ""
    return (
        f"{m['engine']} ({m['precision']}): max |diff| {m['max_abs_diff']:.3g}{past}{exact}{extra}"
    )


def report_lines(r: CheckReport) -> list[str]:
    """:meth:`CheckReport.text`, line by line."""
    b = r.largest
    name = f"{r.engine} ({r.precision})"
    if r.passed:
        head = f"{r.what} matches {name} within atol {r.atol:g}: max |diff| {b.value:.3g}"
    else:
        head = (
            f"{r.what} differs from {name} by {b.value:.3g} (atol {r.atol:g}) at {_where(b)}; "
            f"{b.count} of {b.total} values past atol, the first at position {b.first_position}"
        )
    lines = [head]
    if r.check is None:
        if r.unavailable:
            lines.append(f"diagnosis: not available ({r.unavailable})")
        return lines
    matches = list(r.check["matches"])
    if matches and matches[0]["max_abs_diff"] <= TOLERANCE:
        lines.append(f"best match: {_match_line(matches[0])}")
    elif matches:
        lines.append(f"best match: none within {TOLERANCE:g}; closest {_match_line(matches[0])}")
    named = [d for d in r.check["diagnosis"] if d["explains"]]
    if named:
        said = ", ".join(_mistake(d) for d in named)
        lines.append(f"diagnosis (/v1/configs/check): {said}")
    else:
        lines.append("diagnosis (/v1/configs/check): no known mistake explains it")
    lines.append("matches:")
    lines += [f"  {_match_line(m)}" for m in matches]
    skipped = r.check.get("meta", {}).get("not_compared") or {}
    lines += [f"  {k}: not compared ({v})" for k, v in skipped.items()]
    return lines


def _mistake(d: Mapping[str, Any]) -> str:
    offset = f" (offset {d['offset']})" if d.get("offset") is not None else ""
    return f"{d['mistake']}{offset}"


__all__ = ["NO_TRANSFORMERS_FORM", "CheckReport", "Largest", "largest", "report_lines"]
