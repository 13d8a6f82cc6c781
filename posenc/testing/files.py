"""``posenc check FILE``'s library half: a caller's tables or rotations read from a file, checked.

The file is ``.npz`` or ``.safetensors`` with tensors ``cos`` and ``sin`` (a table) or ``q_in``
and ``q_out`` (a rotation; ``k_in`` and ``k_out`` too), or ``.npy`` holding them stacked:
``(2, T, R)`` is ``[cos, sin]`` and ``(2, T, H, D)`` is ``[q_in, q_out]``. A safetensors file's
``__metadata__["request"]`` may hold the check's JSON fields, as ``/v1/configs/check`` takes
them, and a ``positions`` tensor in an ``.npz`` or ``.safetensors`` gives the rows' positions;
the arguments given win over both. Without positions, the rows are ``0 … T−1``.

Notation: ``T`` positions, ``R`` rotary dimension, ``H`` heads, ``D`` head dimension.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from posenc.core import codec
from posenc.core.errors import InvalidArgument
from posenc.testing.report import CheckReport
from posenc.testing.rotations import rotation_report
from posenc.testing.tables import table_report

#: The tensor pairs a file may hold: (before or cos, after or sin).
PAIRS: tuple[tuple[str, str], ...] = (("cos", "sin"), ("q_in", "q_out"), ("k_in", "k_out"))


def _npy(path: Path) -> dict[str, np.ndarray]:
    array = np.load(path, allow_pickle=False)
    if array.ndim == 3 and array.shape[0] == 2:
        return {"cos": array[0], "sin": array[1]}
    if array.ndim == 4 and array.shape[0] == 2:
        return {"q_in": array[0], "q_out": array[1]}
    raise InvalidArgument(
        f"{path}: a .npy holds [cos, sin] stacked as (2, T, R) or [q_in, q_out] as (2, T, H, D), "
        f"got shape {tuple(array.shape)}",
        field="file",
    )


def read_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tensors of a ``.npy``, ``.npz`` or ``.safetensors`` file, and the request fields its
    metadata holds (safetensors' ``__metadata__["request"]``; else none).

    Raises:
        InvalidArgument: an unreadable file, another extension, or a malformed file.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            return _npy(p), {}
        if suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                return {name: z[name] for name in z.files}, {}
        if suffix == ".safetensors":
            tensors, metadata = codec.decode_safetensors(p.read_bytes())
            request = json.loads((metadata or {}).get("request") or "{}")
            if not isinstance(request, dict):
                raise InvalidArgument(f"{p}: __metadata__.request must be a JSON object")
            return dict(tensors), request
    except (OSError, ValueError) as exc:  # CodecError, JSONDecodeError and numpy's are ValueErrors
        if isinstance(exc, InvalidArgument):
            raise
        raise InvalidArgument(f"{p}: cannot be read ({exc})", field="file") from None
    raise InvalidArgument(
        f"{p}: the file must be .npy, .npz or .safetensors, got {suffix or 'no extension'!r}",
        field="file",
    )


def _pair(tensors: Mapping[str, Any], path: str) -> tuple[str, str]:
    for pair in PAIRS:
        if all(n in tensors for n in pair):
            return pair
    raise InvalidArgument(
        f"{path} holds {sorted(tensors)}; posenc check reads cos and sin, or q_in and q_out "
        "(k_in and k_out)",
        field="file",
    )


def check_file(
    path: str | os.PathLike[str], *, atol: float = 1e-6, **arguments: Any
) -> list[CheckReport]:
    """Check the table or rotation(s) in a file against an engine, with the diagnosis.

    Args:
        path: the file (module docstring).
        atol: the largest |difference| allowed.
        arguments: :func:`posenc.testing.assert_rope_table`'s keywords (``config``, ``preset``,
            ``positions``, ``seq_len``, ``engine``, ``precision``, rope fields); ``None``
            values are left out. Without positions, ``seq_len`` is the file's rows.

    Returns:
        One report per pair in the file (``cos``/``sin``, or ``q``, then ``k``), diagnosed.

    Raises:
        InvalidArgument: an unreadable file, no pair in it, or bad fields.
    """
    tensors, stored = read_file(path)
    asked = {k: v for k, v in arguments.items() if v is not None}
    for pair in (("config", "preset"), ("positions", "seq_len")):
        if any(k in asked for k in pair):  # the model or positions given win over the file's
            stored = {k: v for k, v in stored.items() if k not in pair}
    given = {**stored, **asked}
    first = _pair(tensors, os.fspath(path))
    if "positions" in tensors and given.get("positions") is None and given.get("seq_len") is None:
        given["positions"] = np.asarray(tensors["positions"]).astype(np.int64).tolist()
    if first == ("cos", "sin"):
        return [table_report(tensors["cos"], tensors["sin"], atol=atol, diagnose=True, **given)]
    reports = []
    for before, after in PAIRS[1:]:
        if before in tensors and after in tensors:
            reports.append(
                rotation_report(tensors[before], tensors[after], atol=atol, diagnose=True, **given)
            )
    return reports


__all__ = ["PAIRS", "check_file", "read_file"]
