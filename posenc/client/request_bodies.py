"""Token ids as binary request bodies, for the client (private).

A kind with ``binary_fields`` (:class:`posenc.core.kinds.Kind`: ``/v1/embed`` and
``/v1/position-ids``) reads ``application/x-npy`` (the first, ``input_ids``, alone) and
``application/vnd.safetensors`` (``input_ids`` with ``attention_mask`` / ``position_ids``), the
other fields as query parameters (``docs/api.md``, ``POST /v1/embed``). Sending a numpy
array or torch tensor this way skips turning every id into JSON text and back: the bytes go as
they are (one cast to int64 where the array holds another type).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.core import codec

NPY_TYPE = "application/x-npy"
SAFETENSORS_TYPE = "application/vnd.safetensors"


@dataclass(frozen=True)
class TokenBody:
    """A binary body and the fields left for the query string."""

    content: bytes
    content_type: str
    fields: dict[str, Any]


def _as_array(value: Any) -> np.ndarray | None:
    """A 2-D integer (or bool) numpy array of a numpy array or torch tensor, else None."""
    if isinstance(value, np.ndarray):
        array = value
    elif type(value).__module__.startswith("torch") and hasattr(value, "numpy"):
        array = value.detach().cpu().numpy()
    else:
        return None
    if array.ndim != 2 or array.dtype.kind not in "iub":
        return None
    return array


def token_body(fields: Mapping[str, Any], names: Sequence[str]) -> TokenBody | None:
    """The binary body of a token request whose first binary field (``input_ids``) is a 2-D
    integer numpy array or torch tensor (and whose other ``names``, when given, are too); None
    otherwise (lists stay JSON, as does a request of a kind without binary fields).

    npy when the first is the only tensor, else safetensors.
    """
    if not names:
        return None
    arrays = {n: _as_array(fields.get(n)) for n in names}
    given = [n for n in names if fields.get(n) is not None]
    if arrays[names[0]] is None or any(arrays[n] is None for n in given):
        return None
    rest = {k: v for k, v in fields.items() if k not in names}
    if given == [names[0]]:
        first = arrays[names[0]]
        assert first is not None  # for the type checker: checked above
        return TokenBody(codec.encode_npy(first), NPY_TYPE, rest)
    tensors: dict[str, np.ndarray] = {}
    for n in given:
        array = arrays[n]
        assert array is not None  # for the type checker: every given name has an array
        tensors[n] = np.ascontiguousarray(
            array if array.dtype.kind != "b" or n == "attention_mask" else array.astype(np.int64)
        )
    return TokenBody(codec.encode_safetensors(tensors), SAFETENSORS_TYPE, rest)


def _float_tensor(value: Any) -> Any:
    """A float numpy array or torch tensor as a CPU tensor or array for safetensors, else None."""
    if isinstance(value, np.ndarray):
        return value if value.dtype.kind == "f" else None
    if type(value).__module__.startswith("torch") and hasattr(value, "is_floating_point"):
        return value.detach().cpu().contiguous() if value.is_floating_point() else None
    return None


def tensor_body(
    fields: Mapping[str, Any], names: Sequence[str], json_fields: Mapping[str, Any]
) -> TokenBody | None:
    """A safetensors body for a kind whose ``tensor`` fields (``names``: ``k`` of
    ``/v1/rope/shift``) are given as float numpy arrays or torch tensors: they keep their own
    dtype, and the other fields (``json_fields``, the JSON body without them) go as JSON text
    under ``__metadata__["request"]``. None when no such field is an array."""
    tensors = {n: _float_tensor(fields.get(n)) for n in names}
    tensors = {n: t for n, t in tensors.items() if t is not None}
    if not tensors:
        return None
    rest = {k: v for k, v in json_fields.items() if k not in tensors}
    metadata = {"request": json.dumps(rest, separators=(",", ":"))}
    return TokenBody(codec.encode_safetensors(tensors, metadata=metadata), SAFETENSORS_TYPE, {})
