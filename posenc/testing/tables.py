"""RoPE tables in a caller's tests: the reference table, and the check of the caller's own.

``reference_table`` is ``/v1/encodings/rope``'s table (the rope kind, :data:`posenc.rope_kinds.kind.ROPE`)
in float64 for the engine and precision asked. ``assert_rope_table`` compares the caller's
``cos``/``sin`` with it; on a difference past ``atol`` it asks :func:`posenc.explain.check.check_table`
(``/v1/configs/check``'s own code) which engine the table equals and which known mistakes
explain it, and raises ``AssertionError`` with those words (:mod:`posenc.testing.report`).

Notation: ``T`` positions, ``R`` rotary dimension; tables are ``(T, R)`` in the model's layout
(``half``: ``cat(c, c)``; ``interleaved``: each value twice in place) or ``(T, R/2)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from posenc.explain.check import check_table
from posenc.resolve import compute, resolve_fields
from posenc.rope_kinds.kind import ROPE
from posenc.testing.inputs import (
    ConfigArg,
    as_array,
    check_request,
    engine_request,
    rope_request,
    squeeze_leading,
)
from posenc.testing.report import NO_TRANSFORMERS_FORM, CheckReport, largest


def resolved_rope(request: Mapping[str, Any], engine: str, precision: str) -> dict[str, Any]:
    """The rope kind's resolved fields for one engine and precision, in float64."""
    given = {**engine_request(request, engine), "engine": engine, "precision": precision}
    return resolve_fields(ROPE, {**given, "dtype": "float64"})


def positions_of(fields: Mapping[str, Any]) -> np.ndarray:
    """``(T,)`` the positions of the table's rows (M-RoPE: the temporal row)."""
    if fields["positions"] is not None:
        rows = np.asarray(fields["positions"], dtype=np.int64)
        return rows if rows.ndim == 1 else rows[0]
    return np.arange(int(fields["seq_len"]), dtype=np.int64)


def table_of(fields: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)`` ``(T, R)`` float64 of resolved rope fields."""
    out = compute(ROPE, fields)
    return out["cos"].numpy(), out["sin"].numpy()


def reference_table(
    *,
    config: ConfigArg = None,
    preset: str | None = None,
    positions: Any = None,
    seq_len: int | None = None,
    engine: str = "transformers",
    precision: str = "exact",
    **fields: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """The RoPE table an engine gives, as ``/v1/encodings/rope`` answers it.

    Args:
        config: a ``config.json`` dict or path, or a GGUF file's path; or ``preset``.
        positions: ``(T,)`` ints (M-RoPE: ``(3, T)``), or ``seq_len`` for ``0 … T−1``.
        engine: ``transformers``, ``vllm``, ``llama.cpp`` or ``mlx``.
        precision: ``exact`` (float64 angles) or ``engine`` (the engine's own arithmetic).
        fields: any other field of ``/v1/encodings/rope`` (``layer_type``, ``head_dim``,
            ``rotary_dim``, ``base``, ``layout``, ``scaling``, ``max_model_len`` ...).

    Returns:
        ``(cos, sin)``, float64 numpy arrays ``(T, R)`` in the model's layout, the attention
        scaling multiplied in.

    Raises:
        posenc.core.errors.InvalidArgument: bad fields, as the endpoint's 422 says them.
    """
    request = rope_request(config, preset, positions, seq_len, fields)
    return table_of(resolved_rope(request, engine, precision))


def _half(table: np.ndarray, layout: str) -> np.ndarray:
    """A ``(T, R)`` table's ``(T, R/2)`` values."""
    r = table.shape[-1] // 2
    return table[:, :r] if layout == "half" else table[:, 0::2]


def _caller_tables(cos: Any, sin: Any, t: int, r: int) -> tuple[np.ndarray, np.ndarray] | str:
    """The caller's ``(T, W)`` tables, or why they cannot be compared."""
    c, s = (squeeze_leading(as_array(x, n), 2) for x, n in ((cos, "cos"), (sin, "sin")))
    for name, table in (("cos", c), ("sin", s)):
        if table.ndim != 2 or table.shape[0] != t or table.shape[1] not in (r, r // 2):
            return (
                f"{name} has shape {tuple(table.shape)}; the reference is ({t}, {r}) "
                f"(or ({t}, {r // 2})) for these positions and rotary_dim {r}"
            )
    if c.shape != s.shape:
        return f"cos {tuple(c.shape)} and sin {tuple(s.shape)} differ in shape"
    return c, s


def table_report(
    cos: Any,
    sin: Any,
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
    """The caller's ``cos``/``sin`` against one engine, with ``/v1/configs/check``'s answer.

    Args: as :func:`assert_rope_table`; ``diagnose``: ask the check (every engine and the
        catalogue of mistakes) always (True), never (False), or on a failure only (None).

    Raises:
        AssertionError: tables of another shape than the reference's.
        posenc.core.errors.InvalidArgument: bad fields.
    """
    if positions is None and seq_len is None:  # the table's rows are positions 0 … T−1
        seq_len = int(squeeze_leading(as_array(cos, "cos"), 2).shape[0])
    request = rope_request(config, preset, positions, seq_len, fields)
    p = resolved_rope(request, engine, precision)
    want_cos, want_sin = table_of(p)
    pos = positions_of(p)
    t, r = want_cos.shape
    caller = _caller_tables(cos, sin, t, r)
    if isinstance(caller, str):
        raise AssertionError(f"RoPE table: {caller}")
    c, s = caller
    if c.shape[1] != r:
        want_cos, want_sin = _half(want_cos, p["layout"]), _half(want_sin, p["layout"])
    where = largest([("cos", c, want_cos), ("sin", s, want_sin)], pos, atol)
    report = CheckReport("RoPE table", engine, precision, atol, where)
    if diagnose is False or (diagnose is None and report.passed):
        return report
    if not request.get("gguf_transformers_form", True):
        return CheckReport(
            "RoPE table", engine, precision, atol, where,
            unavailable=NO_TRANSFORMERS_FORM,
        )  # fmt: skip
    answer = check_table(check_request(request), c, s)
    return CheckReport("RoPE table", engine, precision, atol, where, check=answer)


def assert_rope_table(
    cos: Any,
    sin: Any,
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
    """Assert that a RoPE table equals an engine's within ``atol``.

    Args:
        cos, sin: the caller's tables, numpy arrays or torch tensors, ``(T, R)`` in either
            layout or ``(T, R/2)`` (leading axes of size one are dropped: ``(1, T, R)``).
        config, preset, positions, seq_len, engine, precision, fields: as
            :func:`reference_table`; without positions or seq_len, the rows are ``0 … T−1``.
        atol: the largest |difference| allowed, of any value.

    Raises:
        AssertionError: the largest difference and where (position, channel), the engine and
            precision that match best, and the mistakes of ``/v1/configs/check``'s catalogue
            that explain the table (and no others).
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not posenc's
    report = table_report(
        cos, sin, config=config, preset=preset, positions=positions, seq_len=seq_len,
        engine=engine, precision=precision, atol=atol, **fields,
    )  # fmt: skip
    if not report.passed:
        raise AssertionError(report.text())


__all__ = ["assert_rope_table", "reference_table", "resolved_rope", "table_report"]
