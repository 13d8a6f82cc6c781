"""The encoders of a bundle of named tensors, and the HTTP response of an encoded body.

Every compute endpoint returns a :class:`Bundle` (named tensors plus a JSON-able ``meta``);
:func:`encode_bundle` turns the bundle into the body of a format (the HTTP contract, ``API.md``
"Output formats"), chosen once per request by :mod:`service.responses.negotiation`:

======================  ==============================  =========================================
format key              media type                      body
======================  ==============================  =========================================
``json``                ``application/json``            ``{"tensors": {NAME: {"shape", "dtype",
                                                        "data"}}, "meta": {...}}``; ``data`` as
                                                        nested lists, or base64 of the raw bytes
``safetensors``         ``application/vnd.safetensors`` every tensor; ``meta`` as JSON text under
                                                        ``__metadata__["meta"]``
``npy``                 ``application/x-npy``           the primary tensor (no bfloat16 in npy)
``raw``                 ``application/octet-stream``    the primary tensor's bytes, C order,
                                                        little-endian, ``X-Tensor-*`` headers
``png``                 ``image/png``                   a heatmap of the primary tensor; its
                                                        panel boxes and colour scale as JSON in
                                                        the tEXt chunk ``posenc:layout``
======================  ==============================  =========================================

The encoders never loop over elements in Python: JSON goes through orjson's numpy path
(shortest round-trip float text; −inf and NaN become ``null``), and the binary formats copy the
tensor's bytes once.
"""

from __future__ import annotations

import secrets
import sys
import time
from base64 import b64encode
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import torch
from starlette.responses import Response

from posenc.core import codec
from posenc.core.heatmap import heatmap_png
from posenc.core.kinds import JsonLayout
from service.observability.timing import server_timing

__all__ = [
    "FORMAT_MEDIA_TYPES",
    "STREAM_FORMATS",
    "Bundle",
    "Encoded",
    "NotAcceptable",
    "bundle_nbytes",
    "dtype_name",
    "encode_bundle",
    "http_response",
    "joined",
    "meta_text",
    "no_bfloat16_npy",
    "tensor_nbytes",
]

# The formats a table is sent in as its row blocks are computed (streamed past max_elements, or
# kept): their bytes are the tensors' rows in order, behind a header worked out from the shapes.
STREAM_FORMATS = ("raw", "npy", "safetensors")

FORMAT_MEDIA_TYPES: dict[str, str] = {
    "json": "application/json",
    "safetensors": "application/vnd.safetensors",
    "npy": "application/x-npy",
    "raw": "application/octet-stream",
    "png": "image/png",
}

_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}


# --------------------------------------------------------------------------------------------
# Bundle and small helpers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    """Named tensors of one response, plus metadata.

    Attributes:
        tensors: name -> tensor, in the endpoint's order; the first is the primary tensor (the
            one npy, raw and png carry). Any device, any layout: encoders move and pack them.
        meta: JSON-able metadata (numbers, strings, lists, dicts).
        json_layout: the kind's JSON layout (:attr:`posenc.core.kinds.Kind.json_layout`), or None
            for ``{"tensors", "meta"}``.
    """

    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)
    json_layout: JsonLayout | None = None

    @property
    def primary_name(self) -> str:
        """Name of the primary (first) tensor; ``ValueError`` for an empty bundle."""
        for name in self.tensors:
            return name
        raise ValueError("the bundle holds no tensors, so it has no primary tensor")

    @property
    def primary(self) -> torch.Tensor:
        """The primary (first) tensor."""
        return self.tensors[self.primary_name]

    @property
    def nbytes(self) -> int:
        """Bytes of all tensors together (their elements, not Python overhead)."""
        return bundle_nbytes(self)


class NotAcceptable(Exception):
    """The requested output format cannot be produced (HTTP 406).

    Attributes:
        detail: what was asked and why it cannot be served, naming the field.
        available: the media types that can be produced instead.
        field: the request field at fault (``"format"``, ``"Accept"`` or ``"dtype"``).
    """

    def __init__(self, detail: str, available: Sequence[str], *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.available = list(available)
        self.field = field


@dataclass(frozen=True)
class Encoded:
    """An encoded body and what the response needs to carry it.

    Attributes:
        body: the response body: ``bytes``, or for raw a ``memoryview`` of the tensor's own
            memory (no copy; it keeps the tensor alive, and cached tensors are never mutated).
        media_type: its ``Content-Type``.
        headers: extra headers (``X-Tensor-Name`` / ``-Shape`` / ``-Dtype`` for raw and npy).
    """

    body: bytes | memoryview
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)


def dtype_name(dtype: torch.dtype) -> str:
    """The API's name of a torch dtype: ``torch.float32 -> "float32"``."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        return str(dtype).removeprefix("torch.")


def tensor_nbytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor's elements: ``numel * element_size``."""
    return tensor.numel() * tensor.element_size()


def bundle_nbytes(bundle: Bundle) -> int:
    """Bytes of all tensors of a bundle together."""
    return sum(tensor_nbytes(t) for t in bundle.tensors.values())


# --------------------------------------------------------------------------------------------
# Array views (one copy at most; none for contiguous CPU tensors)
# --------------------------------------------------------------------------------------------


def _cpu_contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor detached, dense and C-contiguous on the CPU (a view when it already is)."""
    t = tensor.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()  # on its own device: a GPU packs faster than the host
    if t.device.type != "cpu":
        t = t.cpu()
    return t


def _little_endian(arr: np.ndarray) -> np.ndarray:
    """``arr`` with little-endian elements (no copy on a little-endian host)."""
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
        return arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def _storage_array(tensor: torch.Tensor) -> np.ndarray:
    """C-contiguous little-endian numpy view of the tensor's bytes; bfloat16 as its uint16 bits."""
    t = _cpu_contiguous(tensor)
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
        return _little_endian(t.numpy()).view(np.dtype("<u2"))
    return _little_endian(t.numpy())


def _number_array(tensor: torch.Tensor) -> np.ndarray:
    """C-contiguous numpy array of the tensor's values; bfloat16 widened to float32 (exact)."""
    t = _cpu_contiguous(tensor)
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()  # a view: the tensor is already C-contiguous (0-d stays 0-d)


def _byte_view(arr: np.ndarray) -> memoryview:
    """A flat byte view of a C-contiguous array's memory, no copy (also for zero-size arrays)."""
    return arr.reshape(-1).view(np.uint8).data


def _shape_header(shape: Sequence[int]) -> str:
    return ",".join(str(int(n)) for n in shape)


def _tensor_headers(name: str, tensor: torch.Tensor) -> dict[str, str]:
    return {
        "X-Tensor-Name": name,
        "X-Tensor-Shape": _shape_header(tensor.shape),
        "X-Tensor-Dtype": dtype_name(tensor.dtype),
    }


# --------------------------------------------------------------------------------------------
# Encoders
# --------------------------------------------------------------------------------------------

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _json_default(obj: Any) -> Any:
    """orjson fallback for ``meta`` values: small tensors as lists, dtypes by name."""
    if isinstance(obj, torch.Tensor):
        return _number_array(obj).tolist()
    if isinstance(obj, torch.dtype):
        return dtype_name(obj)
    raise TypeError(f"meta value of type {type(obj).__name__} is not JSON-able")


#: The most numbers one ``orjson.dumps`` call of a JSON answer writes (about 4 ms): one call
#: over a whole 16 M-element table held the GIL, hence ``/healthz``, for 1 s (issue 39).
JSON_SLICE = 1 << 16


def _array_pieces(arr: np.ndarray, out: list[bytes]) -> None:
    """``orjson.dumps(arr)`` (numpy mode: compact, non-finite as null) appended to ``out`` in
    pieces, each of one call on at most :data:`JSON_SLICE` numbers: slices along the first
    axis, one level down when a single row is larger; the GIL offered between calls."""
    if arr.ndim == 0 or arr.size <= JSON_SLICE:
        out.append(orjson.dumps(arr, option=_JSON_OPTIONS))
        return
    row = arr[0].size if arr.ndim > 1 else 1
    out.append(b"[")
    if row > JSON_SLICE:
        for i in range(arr.shape[0]):
            if i:
                out.append(b",")
            _array_pieces(arr[i], out)
    else:
        step = max(1, JSON_SLICE // max(row, 1))
        for lo in range(0, arr.shape[0], step):
            if lo:
                out.append(b",")
            out.append(orjson.dumps(arr[lo : lo + step], option=_JSON_OPTIONS)[1:-1])
            time.sleep(0)  # the GIL to the event loop
    out.append(b"]")


def joined(pieces: list[bytes]) -> memoryview:
    """``b"".join(pieces)``, copied a piece at a time into one buffer (one join of a 100 MB
    answer is one C call)."""
    body = np.empty(sum(map(len, pieces)), dtype=np.uint8)  # not zeroed: 80 ms for 128 MB
    at = 0
    for i, piece in enumerate(pieces):
        body[at : at + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
        at += len(piece)
        if i % 64 == 63:
            time.sleep(0)
    return body.data


def _spliced(document: Any, arrays: dict[bytes, np.ndarray]) -> memoryview:
    """``document`` as JSON, each placeholder string of ``arrays`` (its JSON text as the key)
    replaced by its array's text (:func:`_array_pieces`)."""
    skeleton = orjson.dumps(document, default=_json_default, option=_JSON_OPTIONS)
    places = []  # (where, token) of every placeholder the layout kept
    for token in arrays:
        where = skeleton.find(token)
        while where >= 0:
            places.append((where, token))
            where = skeleton.find(token, where + len(token))
    places.sort()
    pieces: list[bytes] = []
    at = 0
    for where, token in places:
        pieces.append(skeleton[at:where])
        _array_pieces(arrays[token], pieces)
        at = where + len(token)
    pieces.append(skeleton[at:])
    return joined(pieces)


def _encode_json(bundle: Bundle, *, base64: bool) -> Encoded:
    large = sum(t.numel() for t in bundle.tensors.values()) > JSON_SLICE and not base64
    arrays: dict[bytes, np.ndarray] = {}  # placeholders of the large answer's arrays
    nonce = secrets.token_hex(16)  # (no text of the answer's own can be a placeholder)
    tensors: dict[str, dict[str, Any]] = {}
    for name, tensor in bundle.tensors.items():
        entry: dict[str, Any] = {"shape": list(tensor.shape), "dtype": dtype_name(tensor.dtype)}
        if base64:
            entry["data"] = b64encode(_byte_view(_storage_array(tensor))).decode("ascii")
        else:
            arr = _number_array(tensor)
            # orjson writes each element in shortest round-trip form (float16 via float32, which
            # parses back to the same float16) and non-finite values as null. It rejects 0-d
            # arrays, which become a plain scalar.
            entry["data"] = arr if arr.ndim else arr.item()
            if large and arr.ndim:  # written in slices, spliced into the document
                token = f"\x00posenc-array-{nonce}-{len(arrays)}\x00"
                arrays[orjson.dumps(token)] = arr
                entry["data"] = token
        tensors[name] = entry
    document: dict[str, Any] = {"tensors": tensors, "meta": bundle.meta}
    if bundle.json_layout is not None:
        document = bundle.json_layout(bundle.tensors, tensors, bundle.meta)
    if arrays:
        return Encoded(_spliced(document, arrays), FORMAT_MEDIA_TYPES["json"])
    body = orjson.dumps(document, default=_json_default, option=_JSON_OPTIONS)
    return Encoded(body, FORMAT_MEDIA_TYPES["json"])


def meta_text(meta: Mapping[str, Any]) -> str:
    """A bundle's ``meta`` as the JSON text safetensors carries under ``__metadata__["meta"]``."""
    return orjson.dumps(meta, default=_json_default, option=_JSON_OPTIONS).decode()


def _encode_safetensors(bundle: Bundle) -> Encoded:
    tensors = {name: _cpu_contiguous(t) for name, t in bundle.tensors.items()}
    body = codec.encode_safetensors(tensors, {"meta": meta_text(bundle.meta)})
    return Encoded(body, FORMAT_MEDIA_TYPES["safetensors"])


def no_bfloat16_npy(name: str) -> NotAcceptable:
    """406 for npy of a bfloat16 tensor, naming the formats that carry bfloat16."""
    others = [m for f, m in FORMAT_MEDIA_TYPES.items() if f != "npy"]
    return NotAcceptable(
        f"{codec.no_bfloat16_npy(name)}: ask for "
        f"dtype float32, float16 or float64 with npy, or another format for bfloat16 "
        f"({', '.join(others)})",
        others,
        field="dtype",
    )


def _encode_npy(bundle: Bundle) -> Encoded:
    name, tensor = bundle.primary_name, bundle.primary
    if tensor.dtype == torch.bfloat16:
        raise no_bfloat16_npy(name)
    arr = _storage_array(tensor)
    body = b"".join((codec.npy_header(arr.shape, tensor.dtype), _byte_view(arr)))
    return Encoded(body, FORMAT_MEDIA_TYPES["npy"], _tensor_headers(name, tensor))


def _encode_raw(bundle: Bundle) -> Encoded:
    name, tensor = bundle.primary_name, bundle.primary
    body = _byte_view(_storage_array(tensor))  # zero-copy: Starlette sends it as is
    return Encoded(body, FORMAT_MEDIA_TYPES["raw"], _tensor_headers(name, tensor))


def encode_bundle(
    bundle: Bundle, fmt: str, *, base64: bool = False, index: int | None = None
) -> Encoded:
    """Encode a bundle in one output format.

    Args:
        bundle: the tensors and meta; the first tensor is the primary one.
        fmt: a key of :data:`FORMAT_MEDIA_TYPES` (what
            :func:`service.responses.negotiation.negotiate` returns).
        base64: JSON only: each ``data`` is base64 of the raw little-endian C-order bytes
            (bfloat16: its 2-byte patterns) instead of nested lists.
        index: png only: draw panel ``index`` of a 3-D primary tensor (H, T, S) instead of the
            grid of all of them.

    Returns:
        The body, its media type and extra headers.

    Raises:
        NotAcceptable: ``npy`` of a bfloat16 tensor; an unknown ``fmt``.
        InvalidArgument: ``index`` out of range or given for a tensor that is not 3-D
            (``field="index"``).
    """
    if fmt == "json":
        return _encode_json(bundle, base64=base64)
    if fmt == "safetensors":
        return _encode_safetensors(bundle)
    if fmt == "npy":
        return _encode_npy(bundle)
    if fmt == "raw":
        return _encode_raw(bundle)
    if fmt == "png":
        primary = next(iter(bundle.tensors.values()), None)
        if primary is not None and primary.numel() == 0:  # e.g. a batch of empty rows (T = 0)
            raise NotAcceptable(
                f"png: the primary tensor has shape {list(primary.shape)}, with nothing to draw; "
                "ask for json, safetensors, npy or raw",
                [m for f, m in FORMAT_MEDIA_TYPES.items() if f != "png"],
                field="format",
            )
        return _encode_png(bundle, index=index)
    raise NotAcceptable(
        f"format must be one of {', '.join(FORMAT_MEDIA_TYPES)}; got {fmt!r}",
        list(FORMAT_MEDIA_TYPES.values()),
        field="format",
    )


def _encode_png(bundle: Bundle, *, index: int | None) -> Encoded:
    name, tensor = bundle.primary_name, bundle.primary
    body = heatmap_png(name, tensor, bundle.meta, index)
    return Encoded(body, FORMAT_MEDIA_TYPES["png"], {"X-Tensor-Name": name})


_SUFFIXES = {"safetensors": "safetensors", "npy": "npy", "raw": "bin", "png": "png"}


def http_response(
    encoded: Encoded,
    fmt: str,
    route: str,
    names: Sequence[str],
    headers: Mapping[str, str],
    cache: str,
    **seconds: float,
) -> Response:
    """The response of an encoded body: ``headers`` (ETag, Vary ...), ``Server-Timing`` (the
    ``cache`` state and the phases' ``seconds``), the body's own headers, and a file name
    (``sinusoidal-pe.npy`` for the primary of the tensors ``names``; the route's last segment
    for safetensors, which holds them all)."""
    headers = {**headers, "Server-Timing": server_timing(cache, **seconds), **encoded.headers}
    if fmt != "json":
        stem = route.rstrip("/").rsplit("/", 1)[-1]
        if fmt != "safetensors" and names:
            stem = f"{stem}-{names[0]}"
        headers["Content-Disposition"] = f'inline; filename="{stem}.{_SUFFIXES[fmt]}"'
    return Response(content=encoded.body, media_type=encoded.media_type, headers=headers)
