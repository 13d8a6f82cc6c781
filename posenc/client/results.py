"""What a call returns (:class:`TensorResult`, :class:`SavedTable`) and the decoding of every
format into it."""

from __future__ import annotations

import base64 as _base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import numpy as np

from posenc.client.errors import PosencClientError
from posenc.core import codec
from posenc.core.kinds import REGISTRY

ArrayKind = Literal["numpy", "torch"]
"""What tensors are returned as: numpy arrays or torch tensors."""

_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "float64": np.dtype("<f8"),
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype("?"),
}


# --------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class SavedTable:
    """A table written to a file by :meth:`PosencClient.save_table`.

    Attributes:
        path: the file.
        nbytes: bytes written (the whole body).
        headers: the response headers (``X-Tensor-Shape``, ``ETag`` ...).
    """

    path: Any
    nbytes: int
    headers: httpx.Headers


@dataclass
class TensorResult:
    """A decoded bundle: named tensors plus ``meta``.

    Tensors are reachable as ``result["cos"]``, ``result.cos`` or :attr:`primary`; iteration
    gives the names in the endpoint's order.

    Attributes:
        tensors: name -> ``numpy.ndarray`` or ``torch.Tensor``, the endpoint's order. ``npy``
            and ``raw`` hold the primary tensor only; ``png`` holds none.
        meta: the bundle's ``meta`` (``{}`` for ``npy``, ``raw`` and ``png``, which carry none).
        format: the format that was asked for.
        media_type: the response's ``Content-Type``.
        headers: the response headers (``ETag``, ``Server-Timing``, ``X-Tensor-*``...).
        content: the response body as received (e.g. the PNG, or the safetensors file).
    """

    tensors: dict[str, Any]
    meta: dict[str, Any]
    format: str
    media_type: str
    headers: httpx.Headers = field(repr=False)
    content: bytes = field(repr=False)

    @property
    def primary(self) -> Any:
        """The bundle's primary tensor (the first the endpoint lists)."""
        if not self.tensors:
            raise KeyError(f"a {self.format!r} response holds no tensors")
        return next(iter(self.tensors.values()))

    def __getitem__(self, name: str) -> Any:
        return self.tensors[name]

    def __getattr__(self, name: str) -> Any:
        tensors = self.__dict__.get("tensors")
        if tensors is not None and name in tensors:
            return tensors[name]
        raise AttributeError(name)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def keys(self) -> list[str]:
        """The tensor names, the endpoint's order."""
        return list(self.tensors)


# --------------------------------------------------------------------------------------- decoding


def _tensor_order(path: str) -> tuple[str, ...]:
    """The endpoint's tensor names, primary first (its kind's, :data:`posenc.core.kinds.REGISTRY`);
    safetensors files list their tensors in their own order, results follow this one."""
    for kind in REGISTRY.values():
        if kind.path == path:
            return tuple(t.name for t in kind.tensors)
    return ()


def _ordered(path: str, tensors: dict[str, Any]) -> dict[str, Any]:
    order = _tensor_order(path)
    out = {name: tensors[name] for name in order if name in tensors}
    out.update((k, v) for k, v in tensors.items() if k not in out)
    return out


def _convert(arrays: dict[str, Any], as_: ArrayKind, device: str | None) -> dict[str, Any]:
    """numpy arrays or torch tensors -> the kind asked for (bfloat16 -> float32 for numpy)."""
    if as_ == "torch":
        import torch

        out: dict[str, Any] = {}
        for name, a in arrays.items():
            t = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
            out[name] = t.to(device) if device is not None else t
        return out
    out = {}
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray):  # a torch tensor: only bfloat16 gets here
            a = a.float().numpy() if a.dtype.is_floating_point else a.numpy()
        out[name] = a
    return out


def _decode_safetensors(
    body: bytes, as_: ArrayKind, device: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        tensors, metadata = codec.decode_safetensors(body)
    except codec.CodecError as exc:
        raise PosencClientError(f"not a safetensors body: {exc}") from None
    meta_text = metadata.get("meta")
    meta = json.loads(meta_text) if meta_text else {}
    return _convert(tensors, as_, device), meta


def _json_array(spec: Mapping[str, Any], name: str) -> Any:
    """One tensor of a JSON bundle -> numpy (bfloat16 -> a torch tensor)."""
    dtype = str(spec.get("dtype", "float32"))
    shape = tuple(int(s) for s in spec.get("shape", ()))
    data = spec.get("data")
    if isinstance(data, str):  # ?encoding=base64: raw little-endian C-order bytes
        raw = _base64.b64decode(data)
        if dtype == "bfloat16":
            import torch

            return torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).reshape(shape)
        return np.frombuffer(raw, dtype=_numpy_dtype(dtype, name)).reshape(shape).copy()
    if dtype.startswith("int") or dtype in ("uint8", "bool"):
        return np.asarray(data, dtype=_numpy_dtype(dtype, name)).reshape(shape)
    # null (a masked -inf; JSON has no Infinity) becomes NaN under dtype=float, then -inf.
    a = np.asarray(data, dtype=np.float64).reshape(shape)
    a[np.isnan(a)] = -np.inf
    if dtype == "bfloat16":
        import torch

        return torch.from_numpy(a).to(torch.bfloat16)
    return a.astype(_numpy_dtype(dtype, name))


def _numpy_dtype(dtype: str, name: str) -> np.dtype[Any]:
    try:
        return _NUMPY_DTYPES[dtype]
    except KeyError:
        raise PosencClientError(f"tensor {name!r} has an unknown dtype {dtype!r}") from None


def _decode_raw(response: httpx.Response, path: str) -> dict[str, Any]:
    name = response.headers.get("X-Tensor-Name") or (_tensor_order(path) or ("tensor",))[0]
    shape_text = response.headers.get("X-Tensor-Shape", "")
    shape = tuple(int(s) for s in shape_text.split(",") if s.strip())
    dtype = response.headers.get("X-Tensor-Dtype", "float32")
    try:
        return {name: codec.decode_raw(response.content, shape, dtype)}
    except codec.CodecError as exc:
        raise PosencClientError(f"tensor {name!r}: {exc}") from None


def decode_response(
    response: httpx.Response, path: str, fmt: str, as_: ArrayKind, device: str | None
) -> TensorResult:
    meta: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    if fmt == "safetensors":
        tensors, meta = _decode_safetensors(response.content, as_, device)
    elif fmt == "json":
        body = response.json()
        meta = dict(body.get("meta") or {})
        tensors = _convert(
            {k: _json_array(v, k) for k, v in body.get("tensors", {}).items()}, as_, device
        )
    elif fmt == "npy":
        name = (_tensor_order(path) or ("tensor",))[0]
        try:
            a = codec.decode_npy(response.content, name)
        except codec.CodecError as exc:
            raise PosencClientError(f"not an npy body: {exc}") from None
        tensors = _convert({name: a}, as_, device)
    elif fmt == "raw":
        tensors = _convert(_decode_raw(response, path), as_, device)
    return TensorResult(
        tensors=_ordered(path, tensors),
        meta=meta,
        format=fmt,
        media_type=response.headers.get("content-type", ""),
        headers=response.headers,
        content=response.content,
    )
