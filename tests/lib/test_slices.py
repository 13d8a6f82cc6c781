"""posenc.core.slices: large lists made into tensors a slice at a time (issue 39).

Each function must give what the one C call it replaces gives (``torch.tensor``, ``np.fromiter``,
``max``, ``min``, ``set(map(type, ...))``), with every call on at most ``SLICE_ITEMS`` items and
the GIL offered between calls. ``SLICE_ITEMS`` is made small here so that every shape is cut
somewhere, at every axis.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from posenc.core import slices


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """SLICE_ITEMS of 16, and the pauses counted."""
    monkeypatch.setattr(slices, "SLICE_ITEMS", 16)
    paused: list[float] = []
    monkeypatch.setattr(slices, "pause", lambda: paused.append(0.0))
    return paused


SHAPES = [(5,), (40,), (1, 1, 70), (33, 3, 4), (5, 20), (7, 0), (0,), (3, 1, 17), (2, 2, 2, 9)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int64])
def test_nested_tensor_is_torch_tensor(
    small_slices: list[float], shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    values = (torch.randn(shape, dtype=torch.float64) * 1000).tolist()
    want = torch.tensor(values, dtype=dtype)
    got = slices.nested_tensor(values, dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)  # the same rounding: float32 cast once from each float


def test_nested_tensor_of_ints_and_bools_is_torch_tensor(small_slices: list[float]) -> None:
    values = [[i, True, -(2**40) + i] for i in range(30)]
    for dtype in (torch.int64, torch.float64):
        assert torch.equal(slices.nested_tensor(values, dtype), torch.tensor(values, dtype=dtype))


def test_nested_tensor_offers_the_gil_between_slices(small_slices: list[float]) -> None:
    values = torch.randn(3, 1, 70).tolist()  # each row over a slice: one level down
    slices.nested_tensor(values, torch.float64)
    assert len(small_slices) >= 3 * 70 // 16
    small_slices.clear()
    slices.nested_tensor(list(range(1000)), torch.int64)
    assert len(small_slices) == 1000 // 16 + 1


def test_a_ragged_list_is_a_value_error_naming_where(small_slices: list[float]) -> None:
    values = torch.randn(40, 3).tolist()
    values[37] = values[37][:2]
    with pytest.raises(ValueError, match=r"^k\[35:40\]: expected sequence of length 3"):
        slices.nested_tensor(values, torch.float64, name="k")
    rows = torch.randn(3, 1, 70).tolist()
    rows[2][0] = rows[2][0][:-1]  # a long row one short: found one level down
    with pytest.raises(ValueError, match=r"^k\[2\]\[0\] holds 69 items, where the first .* 70"):
        slices.nested_tensor(rows, torch.float64, name="k")
    rows = torch.randn(3, 1, 70).tolist()
    rows[1] = [rows[1][0], rows[1][0]]
    with pytest.raises(ValueError, match=r"^k\[1\] holds 2 items, where the first items make 1"):
        slices.nested_tensor(rows, torch.float64, name="k")
    deeper = torch.randn(40, 2).tolist()
    deeper[35] = [[1.0, 2.0], [3.0, 4.0]]  # a level deeper than the first rows
    with pytest.raises((ValueError, TypeError)):
        slices.nested_tensor(deeper, torch.float64)
    with pytest.raises((ValueError, TypeError)):
        torch.tensor(deeper, dtype=torch.float64)  # as the one call says


def test_a_string_is_torch_tensor_s_type_error(small_slices: list[float]) -> None:
    values: list[object] = [float(i) for i in range(100)]
    values[90] = "x"
    with pytest.raises(TypeError) as sliced:
        slices.nested_tensor(values, torch.float64)
    with pytest.raises(TypeError) as whole:
        torch.tensor(values, dtype=torch.float64)
    assert str(sliced.value) == str(whole.value)


def test_flat_ints_is_fromiter_of_the_chained_rows(small_slices: list[float]) -> None:
    rng = random.Random(0)
    sizes = [0, 0, 1, 3, 15, 16, 17, 50]
    rows = [[rng.randrange(-(2**62), 2**62) for _ in range(rng.choice(sizes))] for _ in range(300)]
    rows += [[] for _ in range(40)]  # a run of empty rows longer than a slice
    values, lengths = slices.flat_ints(rows)
    want = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64)
    assert values.dtype == np.int64 and np.array_equal(values, want)
    assert lengths.tolist() == [len(r) for r in rows]
    assert [len(run) for run in slices.runs(rows, lengths)] and all(
        len(run) <= 16 for run in slices.runs(rows, lengths)
    )
    empty_values, empty_lengths = slices.flat_ints([])
    assert empty_values.shape == (0,) and empty_lengths.shape == (0,)


def test_runs_give_every_item_once_in_order(small_slices: list[float]) -> None:
    rows = [list(range(n)) for n in (0, 5, 40, 0, 3, 16, 0, 0, 1)]
    lengths = slices.lengths_of(rows)
    runs = list(slices.runs(rows, lengths))
    assert list(itertools.chain.from_iterable(runs)) == list(itertools.chain.from_iterable(rows))
    assert max(len(run) for run in runs) <= 16


def test_largest_smallest_and_types_are_the_builtins(small_slices: list[float]) -> None:
    rng = random.Random(1)
    for n in (1, 15, 16, 17, 100):
        values = [rng.randrange(-1000, 1000) for _ in range(n)]
        assert slices.largest(values) == max(values)
        assert slices.smallest(values) == min(values)
        assert slices.item_types(values) == {int}
    mixed: list[object] = [1] * 50 + [True] + [2.5]
    assert slices.item_types(mixed) == set(map(type, mixed)) == {int, bool, float}
