"""Sines and cosines by angle addition (:mod:`posenc.core.angles`): ``sin_cos_rows`` against
``math.sin`` / ``math.cos`` of the float64 angle ``fl(p·w)``, element by element (Python floats,
independent of torch), for consecutive rows, explicit positions in any order, positions past
``2**26 / max|w|`` (taken directly) and zero frequencies; and the same values whichever way the
rows are asked (whole or from ``first``)."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.core.angles import sin_cos_rows, split_tables

F64 = torch.float64


def _rows(freqs: torch.Tensor, n: int, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
    """``sin_cos_rows`` gathered into ``(n, D/2)`` tables, copying each chunk it emits."""
    sin = torch.full((n, freqs.numel()), float("nan"), dtype=F64)
    cos = sin.clone()

    def emit(rows: slice, s: torch.Tensor, c: torch.Tensor) -> None:
        sin[rows], cos[rows] = s, c

    sin_cos_rows(freqs, n, emit, **kwargs)  # type: ignore[arg-type]
    return sin, cos


def _direct(freqs: list[float], positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    angles = [[float(p) * w for w in freqs] for p in positions]  # fl(p·w), one rounding each
    sin = torch.tensor([[math.sin(a) for a in row] for row in angles], dtype=F64)
    cos = torch.tensor([[math.cos(a) for a in row] for row in angles], dtype=F64)
    return sin, cos


FREQS = [10000.0 ** (-2 * i / 16) for i in range(8)] + [0.0, 3.0]  # 8 RoPE-like, 0, a fast one


def test_consecutive_rows_are_sin_and_cos_of_the_float64_angle() -> None:
    freqs = torch.tensor(FREQS, dtype=F64)
    sin, cos = _rows(freqs, 300, first=0)
    want_sin, want_cos = _direct(FREQS, list(range(300)))
    torch.testing.assert_close(sin, want_sin, rtol=0, atol=4e-16)
    torch.testing.assert_close(cos, want_cos, rtol=0, atol=4e-16)
    assert bool((sin[:, 8] == 0).all() and (cos[:, 8] == 1).all())  # w = 0: angle 0


@pytest.mark.parametrize("first", [1, 63, 64, 1000, 123_457])
def test_rows_from_first_equal_the_same_positions_explicitly(first: int) -> None:
    freqs = torch.tensor(FREQS, dtype=F64)
    sin, cos = _rows(freqs, 70, first=first)
    given = torch.arange(first, first + 70, dtype=F64).flip(0)  # any order
    sin2, cos2 = _rows(freqs, 70, positions=given, split=split_tables(freqs))
    assert torch.equal(sin, sin2.flip(0)) and torch.equal(cos, cos2.flip(0))
    want_sin, want_cos = _direct(FREQS, list(range(first, first + 70)))
    torch.testing.assert_close(sin, want_sin, rtol=0, atol=1e-15)
    torch.testing.assert_close(cos, want_cos, rtol=0, atol=1e-15)


def test_positions_past_the_sum_limit_are_taken_directly() -> None:
    """With ``max|w| = 3``, positions from ``2**26 / 3`` on skip the angle sum: exactly
    ``math.sin(fl(p·w))``."""
    positions = [0, 5, 2**26 // 3 - 1, 2**26 // 3 + 1, 2**30, 2**40 + 7]
    freqs = torch.tensor(FREQS, dtype=F64)
    sin, cos = _rows(freqs, len(positions), positions=torch.tensor(positions, dtype=F64))
    want_sin, want_cos = _direct(FREQS, positions)
    torch.testing.assert_close(sin[2:], want_sin[2:], rtol=0, atol=1e-15)
    assert torch.equal(sin[3:], want_sin[3:]) and torch.equal(cos[3:], want_cos[3:])


def test_nothing_is_emitted_for_no_rows_or_no_frequencies() -> None:
    calls: list[slice] = []
    sin_cos_rows(torch.tensor(FREQS, dtype=F64), 0, lambda r, s, c: calls.append(r))
    sin_cos_rows(torch.zeros(0, dtype=F64), 5, lambda r, s, c: calls.append(r))
    assert calls == []
