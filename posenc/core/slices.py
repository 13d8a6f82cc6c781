"""Large Python lists made into tensors and arrays a slice at a time (issue 39).

``torch.tensor(lists)``, ``np.array(lists)`` and ``np.fromiter`` over a Python list are one C
call each, which holds the GIL from the first item to the last: 0.1-0.3 s for the 2-8 M numbers
a 16 MiB JSON body holds, on a 2-core machine. A service's event loop cannot run meanwhile,
whichever thread makes the call (Python hands the GIL over only between bytecodes). The
functions here give the same values with every such call on at most :data:`SLICE_ITEMS` numbers
and the GIL offered to another thread between calls.

Notation: ``N`` numbers in all, ``B`` rows.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

#: The most numbers one ``torch.tensor`` or ``np.fromiter`` call converts (about 1-3 ms).
SLICE_ITEMS = 1 << 15


def pause() -> None:
    """Offer the GIL to whoever waits for it (the event loop)."""
    time.sleep(0)


def first_shape(value: Any) -> tuple[int, ...]:
    """The shape nested lists would have, read down their first items (``torch.tensor`` infers
    it the same way), without copying them."""
    shape: list[int] = []
    while isinstance(value, list | tuple):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def nested_tensor(value: Any, dtype: torch.dtype, *, name: str = "value") -> Tensor:
    """``torch.tensor(value, dtype=dtype)`` of nested lists (any rank), converted at most
    :data:`SLICE_ITEMS` numbers a call along the outer axes.

    Raises:
        ValueError: lists of unequal lengths (or depths), naming where, as
            ``name[i]`` or ``name[i:j]``.
        TypeError: an item that is not a number (``torch.tensor``'s own message).
    """
    shape = first_shape(value)
    if math.prod(shape) <= SLICE_ITEMS:
        return torch.tensor(value, dtype=dtype)
    out = torch.empty(shape, dtype=dtype)
    _fill(out, value, shape, name)
    return out


def _fill(out: Tensor, value: Any, shape: tuple[int, ...], where: str) -> None:
    """``out`` (of ``shape``) filled from ``value``; ``where``: its name and index."""
    if not isinstance(value, list | tuple) or len(value) != shape[0]:
        got = f"{len(value)} items" if isinstance(value, list | tuple) else repr(value)[:40]
        raise ValueError(f"{where} holds {got}, where the first items make {shape[0]}")
    per_row = math.prod(shape[1:])
    if per_row > SLICE_ITEMS:  # each row alone is large: one level down
        for i, row in enumerate(value):
            _fill(out[i], row, shape[1:], f"{where}[{i}]")
        return
    step = max(1, SLICE_ITEMS // max(per_row, 1))
    for lo in range(0, shape[0], step):
        part = value[lo : lo + step]
        span = f"{where}[{lo}:{lo + len(part)}]"
        try:
            piece = torch.tensor(part, dtype=out.dtype)
        except ValueError as exc:
            raise ValueError(f"{span}: {exc}") from None
        if tuple(piece.shape[1:]) != shape[1:]:
            raise ValueError(
                f"{span} holds items of shape {tuple(piece.shape[1:])}, where the first items "
                f"make {shape[1:]}"
            )
        out[lo : lo + len(part)] = piece
        pause()


def lengths_of(rows: Sequence[Sequence[Any]]) -> NDArray[np.int64]:
    """``(B,)`` int64: the length of each row."""
    lengths = np.empty(len(rows), dtype=np.int64)
    for lo in range(0, len(rows), SLICE_ITEMS):
        part = rows[lo : lo + SLICE_ITEMS]
        lengths[lo : lo + len(part)] = np.fromiter(map(len, part), dtype=np.int64, count=len(part))
        pause()
    return lengths


def runs(rows: Sequence[Sequence[Any]], lengths: NDArray[np.int64]) -> Iterator[list[Any]]:
    """The items of ragged ``rows`` (their ``lengths``), row-major, as lists of at most
    :data:`SLICE_ITEMS` items: runs of whole rows, or slices of a longer row (the GIL offered
    between them)."""
    ends = np.cumsum(lengths)  # (B,) where each row's items end
    lo = 0
    while lo < len(rows):
        at = int(ends[lo] - lengths[lo])
        # rows lo..hi-1 hold at most SLICE_ITEMS items (a longer row stops the run)
        hi = min(int(np.searchsorted(ends, at + SLICE_ITEMS, side="right")), lo + SLICE_ITEMS)
        if hi == lo:  # a long row by itself, in slices
            row = rows[lo]
            for start in range(0, len(row), SLICE_ITEMS):
                yield list(row[start : start + SLICE_ITEMS])
                pause()
            lo += 1
            continue
        yield list(itertools.chain.from_iterable(rows[lo:hi]))
        lo = hi
        pause()


def flat_ints(rows: Sequence[Sequence[int]]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Ragged rows of ints as ``(values (N,), lengths (B,))`` int64, row-major: what
    ``np.fromiter(itertools.chain.from_iterable(rows), np.int64)`` gives, at most
    :data:`SLICE_ITEMS` rows or numbers a call."""
    lengths = lengths_of(rows)
    values = np.empty(int(lengths.sum()), dtype=np.int64)
    at = 0
    for run in runs(rows, lengths):
        values[at : at + len(run)] = np.fromiter(run, dtype=np.int64, count=len(run))
        at += len(run)
    return values, lengths


def _reduced(values: Sequence[Any], reduce: Callable[[Iterable[Any]], Any]) -> Any:
    """``reduce(values)`` for ``max`` or ``min`` (a non-empty sequence), at most
    :data:`SLICE_ITEMS` items a call."""
    if len(values) <= SLICE_ITEMS:
        return reduce(values)
    best = reduce(values[:SLICE_ITEMS])
    for lo in range(SLICE_ITEMS, len(values), SLICE_ITEMS):
        best = reduce((best, reduce(values[lo : lo + SLICE_ITEMS])))
        pause()
    return best


def largest(values: Sequence[Any]) -> Any:
    """``max(values)`` (a non-empty sequence), at most :data:`SLICE_ITEMS` items a call."""
    return _reduced(values, max)


def smallest(values: Sequence[Any]) -> Any:
    """``min(values)`` (a non-empty sequence), at most :data:`SLICE_ITEMS` items a call."""
    return _reduced(values, min)


def item_types(values: Sequence[Any]) -> set[type]:
    """``set(map(type, values))``, at most :data:`SLICE_ITEMS` items a call."""
    if len(values) <= SLICE_ITEMS:
        return set(map(type, values))
    found: set[type] = set()
    for lo in range(0, len(values), SLICE_ITEMS):
        found.update(map(type, values[lo : lo + SLICE_ITEMS]))
        pause()
    return found


__all__ = [
    "SLICE_ITEMS",
    "first_shape",
    "flat_ints",
    "item_types",
    "largest",
    "lengths_of",
    "nested_tensor",
    "pause",
    "runs",
    "smallest",
]
