"""Rotated queries and keys in a caller's tests: the reference rotation, and the check of one.

``reference_rotation`` rotates ``q`` ``(T, H, D)`` by the RoPE table of the engine asked for
(:func:`posenc.testing.tables.reference_table`'s, in float64) with the library's
:func:`posenc.rope.apply_rope` in float64: the first ``R`` channels of each head rotated in the
model's layout, the channels from ``R`` on returned unchanged bit for bit, cast once to ``q``'s
dtype. ``assert_rotated`` compares a caller's ``q_out`` with the rotation of ``q_in`` and, on a
difference past ``atol``, says which engine's rotation it equals.

Notation: ``T`` positions, ``H`` heads, ``D`` head dimension, ``R`` rotary dimension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from posenc.check import CANDIDATES
from posenc.errors import PosencError
from posenc.rope import apply_rope
from posenc.testing.inputs import ConfigArg, as_array, rope_request, squeeze_leading
from posenc.testing.report import CheckReport, largest
from posenc.testing.tables import positions_of, resolved_rope, table_of


def _rotate(q: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """``q`` ``(T, H, D)`` rotated in float64 by resolved rope fields ``p``' table."""
    cos, sin = table_of(p)
    t, _heads, d = q.shape
    r = cos.shape[-1]
    if cos.shape[0] != t:
        raise AssertionError(f"q has {t} rows; the positions asked for have {cos.shape[0]}")
    if r > d:
        raise AssertionError(f"q's head dimension {d} is smaller than rotary_dim {r}")
    x = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float64)).permute(1, 0, 2)[None]
    out = apply_rope(x, torch.from_numpy(cos), torch.from_numpy(sin), layout=p["layout"])
    rotated = out[0].permute(1, 0, 2).numpy()
    rotated[..., r:] = q[..., r:]  # the channels past R, as given, bit for bit
    return rotated


def _heads(value: Any, name: str) -> np.ndarray:
    """A caller's ``(T, H, D)`` array (``(1, T, H, D)`` and ``(T, D)`` too)."""
    array = squeeze_leading(as_array(value, name), 3)
    if array.ndim == 2:
        array = array[:, None, :]
    if array.ndim != 3:
        raise AssertionError(f"{name} must be (T, H, D), got shape {tuple(array.shape)}")
    return array


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
    """``q`` rotated as the model applies its rotary embedding, by the engine's table.

    Args:
        q: ``(T, H, D)`` queries or keys (numpy or torch; ``(T, D)`` for one head).
        config, preset, positions, seq_len, engine, precision, fields: as
            :func:`posenc.testing.reference_table`.

    Returns:
        The rotated array ``(T, H, D)`` in ``q``'s dtype (float64 for integer input), rotated
        in float64 and rounded once; channels from ``R`` on unchanged.
    """
    array = _heads(q, "q")
    request = rope_request(config, preset, positions, seq_len, fields)
    out = _rotate(array.astype(np.float64), resolved_rope(request, engine, precision))
    dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.float64
    return out.astype(dtype)


def _candidates(request: Mapping[str, Any], q_in: np.ndarray, q_out: np.ndarray) -> list[dict[str, Any]]:  # fmt: skip
    """Every engine's rotation of ``q_in`` against ``q_out``, closest first."""
    matches = []
    for engine, precision in CANDIDATES:
        try:
            p = resolved_rope(request, engine, precision)
            want = _rotate(q_in, p)
        except (PosencError, AssertionError):
            continue
        delta = np.abs(q_out.astype(np.float64) - want)
        over = np.nonzero((delta > 1e-6).reshape(delta.shape[0], -1).any(axis=1))[0]
        pos = positions_of(p)
        matches.append({
            "engine": engine,
            "precision": precision,
            "max_abs_diff": float(delta.max(initial=0.0)),
            "first_position": int(pos[int(over[0])]) if over.size else None,
            "bit_exact": bool(np.array_equal(want.astype(q_out.dtype), q_out)),
        })  # fmt: skip
    matches.sort(key=lambda m: (m["max_abs_diff"], not m["bit_exact"]))
    return matches


def rotation_report(
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
    diagnose: bool | None = None,
    **fields: Any,
) -> CheckReport:
    """``q_out`` against ``q_in`` rotated by one engine, with every engine's rotation compared
    when it differs (``diagnose`` as :func:`posenc.testing.tables.table_report`'s)."""
    given, got = _heads(q_in, "q_in"), _heads(q_out, "q_out")
    if given.shape != got.shape:
        raise AssertionError(f"q_in {given.shape} and q_out {got.shape} differ in shape")
    request = rope_request(config, preset, positions, seq_len, fields)
    p = resolved_rope(request, engine, precision)
    want = _rotate(given.astype(np.float64), p)
    where = largest([("q", got, want)], positions_of(p), atol)
    report = CheckReport("rotation", engine, precision, atol, where)
    if diagnose is False or (diagnose is None and report.passed):
        return report
    check = {"matches": _candidates(request, given.astype(np.float64), got), "diagnosis": []}
    return CheckReport(
        "rotation", engine, precision, atol, where, check=check,
        unavailable=None,
    )  # fmt: skip


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
    **fields: Any,
) -> None:
    """Assert that ``q_out`` is ``q_in`` rotated as the engine rotates it, within ``atol``.

    Args:
        q_in, q_out: ``(T, H, D)`` (numpy or torch), before and after the rotation.
        config, preset, positions, seq_len, engine, precision, fields: as
            :func:`reference_rotation`.
        atol: the largest |difference| allowed.

    Raises:
        AssertionError: the largest difference and where (position, head, channel), and the
            engine whose rotation matches best.
    """
    report = rotation_report(
        q_in, q_out, config=config, preset=preset, positions=positions, seq_len=seq_len,
        engine=engine, precision=precision, atol=atol, **fields,
    )  # fmt: skip
    if not report.passed:
        raise AssertionError(report.text())


__all__ = ["assert_rotated", "reference_rotation", "rotation_report"]
