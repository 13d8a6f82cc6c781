"""Argument checks shared by the posenc library modules (private).

Every check raises :class:`~posenc.core.errors.InvalidArgument` with ``field`` set and a message that
states the value, in the wording the public functions have always used (tests and service
clients match on it). Where modules word the same check differently, the helper takes the
wording (``noun``) rather than picking one: these helpers must not change any message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from posenc.core.device import resolve_device
from posenc.core.errors import InvalidArgument


def device_or_cpu(device: str | torch.device | None) -> torch.device:
    """The device of a library call: ``None`` means the CPU, anything else goes through
    :func:`~posenc.core.device.resolve_device` (so ``"auto"`` and missing CUDA are handled there)."""
    return torch.device("cpu") if device is None else resolve_device(device)


def is_number(value: object) -> bool:
    """Whether ``value`` is an ``int`` or ``float`` (``bool`` is not a number here)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_int(
    name: str, value: object, minimum: int | None = None, *, noun: str = "an integer"
) -> int:
    """An ``int`` (not ``bool``) and, when ``minimum`` is given, ``>= minimum``.

    Two messages: ``"{name} must be {noun}, got {value!r}"`` for a non-integer, then
    ``"{name} must be >= {minimum}, got {value}"``.

    Returns:
        ``value``, typed as ``int``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be {noun}, got {value!r}", field=name)
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{name} must be >= {minimum}, got {value}", field=name)
    return value


def check_int_at_least(name: str, value: object, minimum: int, *, noun: str = "an int") -> int:
    """An ``int`` (not ``bool``) ``>= minimum``, with one message for either failure:
    ``"{name} must be {noun} >= {minimum}, got {value!r}"``.

    Returns:
        ``value``, typed as ``int``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{name} must be {noun} >= {minimum}, got {value!r}", field=name)
    return value


def check_finite(
    name: str, value: object, *, greater_than: float | None = None, field: str | None = None
) -> float:
    """A finite ``int`` or ``float`` (not ``bool``), ``> greater_than`` when that is given.

    One message: ``"{name} must be a finite number > {greater_than}, got {value!r}"`` (without
    the bound when ``greater_than`` is None). ``field`` defaults to ``name``.

    Returns:
        ``value`` unchanged (an ``int`` stays an ``int``).
    """
    if (
        not is_number(value)
        or not math.isfinite(value)  # type: ignore[arg-type]
        or (greater_than is not None and value <= greater_than)  # type: ignore[operator]
    ):
        bound = "" if greater_than is None else f" > {greater_than}"
        raise InvalidArgument(
            f"{name} must be a finite number{bound}, got {value!r}",
            field=name if field is None else field,
        )
    return value  # type: ignore[return-value]


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """One of ``choices``: ``"{name} must be one of {list(choices)}, got {value!r}"``.

    Returns:
        ``value``, typed as ``str``.
    """
    if value not in choices:
        raise InvalidArgument(f"{name} must be one of {list(choices)}, got {value!r}", field=name)
    return value  # type: ignore[return-value]


def check_lengths(seq_len: object, key_len: object | None) -> tuple[int, int]:
    """Query and key lengths ``(T, S)`` of a bias: both ints >= 1 (:func:`check_int`), ``S``
    defaulting to ``T`` when None, and ``S >= T`` (the queries are the last ``T`` of the ``S``
    positions; ``field`` ``key_len``)."""
    t = check_int("seq_len", seq_len, 1)
    s = t if key_len is None else check_int("key_len", key_len, 1)
    if s < t:
        raise InvalidArgument(
            f"key_len must be >= seq_len (the queries are the last seq_len of key_len "
            f"positions), got key_len={s} and seq_len={t}",
            field="key_len",
        )
    return t, s


def bias_lengths(fields: Mapping[str, Any]) -> tuple[int, int]:
    """``(T, S)`` of a bias kind's fields (:func:`check_lengths` of ``seq_len``, ``key_len``)."""
    return check_lengths(fields["seq_len"], fields.get("key_len"))


def check_bias_lengths(fields: Mapping[str, Any]) -> None:
    """A bias kind's cross-check: ``key_len >= seq_len`` when both are given."""
    if fields.get("seq_len") is not None:
        bias_lengths(fields)


def check_int_matrix(x: torch.Tensor, field: str, *, ints: bool = True) -> None:
    """A 2-D ``(B, T)`` tensor, holding integers (or bool) when ``ints``: floating and complex
    dtypes are refused, with the dtype's name (``float32``) in the message."""
    if x.dim() != 2:
        raise InvalidArgument(
            f"{field} must be 2-D (B, T), got shape {tuple(x.shape)}", field=field
        )
    if ints and (x.dtype.is_floating_point or x.dtype.is_complex):
        raise InvalidArgument(
            f"{field} must hold ints, got dtype {dtype_name(x.dtype)}", field=field
        )


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``, as messages name dtypes."""
    return str(dtype).removeprefix("torch.")


def first_true(bad: torch.Tensor) -> tuple[int, ...]:
    """Index of the first (row-major) True of a bool tensor that has one, e.g. ``(row, col)``."""
    return tuple(int(i) for i in torch.nonzero(bad)[0])


def check_binary_mask(mask: torch.Tensor, field: str) -> None:
    """InvalidArgument naming ``field[row][col]`` of the first entry of a ``(B, T)`` mask that
    is neither 0 nor 1."""
    bad = (mask != 0) & (mask != 1)
    if bool(bad.any()):
        row, col = first_true(bad)
        raise InvalidArgument(
            f"{field} must hold 0 or 1, got {mask[row, col].item()} at {field}[{row}][{col}]",
            field=f"{field}[{row}][{col}]",
        )


__all__ = [
    "check_binary_mask",
    "check_choice",
    "check_finite",
    "check_int",
    "check_int_at_least",
    "check_int_matrix",
    "check_lengths",
    "device_or_cpu",
    "dtype_name",
    "first_true",
    "is_number",
]


def check_seq_len_or_positions(seq_len: object, positions: object) -> None:
    """Exactly one of ``seq_len`` and ``positions`` is given (not None), or InvalidArgument."""
    if (seq_len is None) == (positions is None):
        got = "both" if seq_len is not None else "neither"
        raise InvalidArgument(
            f"give exactly one of seq_len (int >= 1) or positions (list of ints >= 0), got {got}",
            field="seq_len",
        )
