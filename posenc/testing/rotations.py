"""Rotated queries and keys in a caller's tests: the reference rotation, and the check of one.

``reference_rotation`` is ``/v1/rope/apply``'s rotation (:func:`posenc.rope_kinds.rotate.rotate`) for the
engine and precision asked. ``assert_rotated`` compares a caller's ``q_out`` (and ``k_out``)
with the rotation of ``q_in`` (``k_in``); on a difference past ``atol`` it asks
:func:`posenc.explain.check.check_rotation` (``/v1/configs/check``'s code for ``q_in``/``q_out``) which
engine's rotation it equals and which known mistakes explain it.

Notation: ``T`` positions, ``H`` heads, ``D`` head dimension, ``R`` rotary dimension.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from posenc.explain.check import check_rotation
from posenc.rope_kinds.rotate import apply_fields, rotate
from posenc.testing.inputs import (
    ConfigArg,
    as_array,
    check_request,
    engine_request,
    rope_request,
    squeeze_leading,
)
from posenc.testing.report import NO_TRANSFORMERS_FORM, CheckReport, largest


def _heads(value: Any, name: str) -> np.ndarray:
    """A caller's ``(T, H, D)`` array (``(1, T, H, D)``, and ``(T, D)`` as one head)."""
    array = squeeze_leading(as_array(value, name), 3)
    if array.ndim == 2:
        array = array[:, None, :]
    if array.ndim != 3:
        raise AssertionError(f"{name} must be (T, H, D), got shape {tuple(array.shape)}")
    return array


def _input(array: np.ndarray, precision: str) -> torch.Tensor:
    """The tensor the rotation takes: float64 for ``exact`` (the reference before rounding),
    the caller's own float dtype for ``engine`` (the engine's arithmetic is in it)."""
    if precision == "exact" or not np.issubdtype(array.dtype, np.floating):
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
    return torch.from_numpy(np.ascontiguousarray(array))


def reference_rotation(
    q: Any,
    *,
    config: ConfigArg = None,
    preset: str | None = None,
    positions: Any = None,
    seq_len: int | None = None,
    engine: str = "transformers",
    precision: str = "exact",
    **fields: Any,
) -> np.ndarray:
    """``q`` rotated as the model applies its rotary embedding (``/v1/rope/apply``).

    Args:
        q: ``(T, H, D)`` queries or keys (numpy or torch; ``(T, D)`` for one head), ``D`` the
            model's head dimension.
        config, preset, positions, seq_len, engine, precision, fields: as
            :func:`posenc.testing.reference_table` (and ``offset``, ``layer`` as
            ``/v1/rope/apply`` takes them).

    Returns:
        The rotated array, ``q``'s shape and dtype (float64 for integers), in the engine's
        channel order: ``exact`` rotates in float64 and rounds once; ``engine`` is the engine's
        own apply. Channels from ``R`` on come back unchanged.
    """
    array = _heads(q, "q")
    request = engine_request(rope_request(config, preset, positions, seq_len, fields), engine)
    out = rotate(request, _input(array, precision), engine=engine, precision=precision)["q"]
    rotated: np.ndarray = out.numpy().reshape(array.shape)
    dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.float64
    return rotated.astype(dtype)


def rotation_report(
    q_in: Any,
    q_out: Any,
    *,
    k_in: Any = None,
    k_out: Any = None,
    config: ConfigArg = None,
    preset: str | None = None,
    positions: Any = None,
    seq_len: int | None = None,
    engine: str = "transformers",
    precision: str = "exact",
    atol: float = 1e-6,
    diagnose: bool | None = None,
    **fields: Any,
) -> CheckReport:
    """``q_out`` (and ``k_out``) against the engine's rotation of ``q_in`` (``k_in``), with
    :func:`posenc.explain.check.check_rotation`'s answer (``diagnose`` as
    :func:`posenc.testing.tables.table_report`'s)."""
    pairs = [("q", _heads(q_in, "q_in"), _heads(q_out, "q_out"))]
    if (k_in is None) != (k_out is None):
        raise AssertionError("give k_in with k_out, or neither")
    if k_in is not None:
        pairs.append(("k", _heads(k_in, "k_in"), _heads(k_out, "k_out")))
    for name, before, after in pairs:
        if before.shape != after.shape:
            raise AssertionError(f"{name}_in {before.shape} and {name}_out {after.shape} differ")
    if positions is None and seq_len is None:  # the rows are positions 0 … T−1
        seq_len = int(pairs[0][1].shape[0])
    request = rope_request(config, preset, positions, seq_len, fields)
    own = engine_request(request, engine)
    p = apply_fields(own, engine=engine, precision=precision)
    rows = np.asarray(p["positions"], dtype=np.int64)
    named = []
    for name, before, after in pairs:
        want = rotate(own, _input(before, precision), engine=engine, precision=precision)["q"]
        named.append((name, after, want.numpy()))
    where = largest(named, rows if rows.ndim == 1 else rows[0], atol)
    report = CheckReport("rotation", engine, precision, atol, where)
    if diagnose is False or (diagnose is None and report.passed):
        return report
    if not request.get("gguf_transformers_form", True):
        return CheckReport(
            "rotation", engine, precision, atol, where,
            unavailable=NO_TRANSFORMERS_FORM,
        )  # fmt: skip
    k = pairs[1] if len(pairs) > 1 else None
    answer = check_rotation(
        engine_request(check_request(request), "transformers"),
        pairs[0][1],
        pairs[0][2],
        k[1] if k else None,
        k[2] if k else None,
    )
    return CheckReport("rotation", engine, precision, atol, where, check=answer)


def assert_rotated(
    q_in: Any,
    q_out: Any,
    *,
    config: ConfigArg = None,
    preset: str | None = None,
    positions: Any = None,
    seq_len: int | None = None,
    engine: str = "transformers",
    precision: str = "exact",
    atol: float = 1e-6,
    k_in: Any = None,
    k_out: Any = None,
    **fields: Any,
) -> None:
    """Assert that ``q_out`` is ``q_in`` rotated as the engine rotates it, within ``atol``.

    Args:
        q_in, q_out: ``(T, H, D)`` (numpy or torch), before and after the caller's rotation.
        config, preset, positions, seq_len, engine, precision, fields: as
            :func:`reference_rotation`; without positions or seq_len, the rows are ``0 … T−1``.
        atol: the largest |difference| allowed.
        k_in, k_out: keys too, ``(T, H_kv, D)``, checked the same way.

    Raises:
        AssertionError: the largest difference and where (position, head, channel), the engine
            and precision whose rotation matches best, and the mistakes of
            ``/v1/configs/check``'s catalogue that explain the rotation (and no others).
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not posenc's
    report = rotation_report(
        q_in, q_out, k_in=k_in, k_out=k_out, config=config, preset=preset,
        positions=positions, seq_len=seq_len, engine=engine, precision=precision, atol=atol,
        **fields,
    )  # fmt: skip
    if not report.passed:
        raise AssertionError(report.text())


__all__ = ["assert_rotated", "reference_rotation", "rotation_report"]
