"""The wire formats of posenc's tensors, read and written in one place: npy, safetensors and raw.

The service encodes responses with it (whole, and streamed: the headers are worked out from the
shapes before any row exists), parses binary request bodies with it, and the client and the CLI
decode and write files with it. Everything here is format-level: a caller checks what its own
endpoint accepts (an integer dtype, a (B, T) shape) between reading a header and taking the data.

Formats:

- **npy** (numpy's ``lib.format``): a ``b"\\x93NUMPY"`` preamble, a header dict (``descr``,
  ``fortran_order``, ``shape``) padded to 64 bytes, then the C-order data. Versions 1.0 (a
  2-byte header length), 2.0 and 3.0 (4 bytes; 3.0 in UTF-8). npy has no bfloat16.
- **safetensors**: an 8-byte little-endian header length, a JSON header (``__metadata__`` of
  string values, and per tensor ``dtype``, ``shape``, ``data_offsets``) padded with spaces to a
  multiple of 8, then the data of each tensor in the order of its offsets. The header written here
  is byte for byte the one ``safetensors.torch.save`` writes for the same tensors and metadata.
- **raw**: the primary tensor's bytes, C order, little-endian (bfloat16 as its 16-bit patterns);
  its name, shape and dtype travel beside it (HTTP headers ``X-Tensor-*``).
"""

from __future__ import annotations

import ast
import io
import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import torch

__all__ = [
    "MAX_NPY_HEADER",
    "MAX_SAFETENSORS_HEADER",
    "NPY_MAGIC",
    "SAFETENSORS_DTYPES",
    "SAFETENSORS_NUMPY_DTYPES",
    "CodecError",
    "NpyHeader",
    "SafetensorsHeader",
    "decode_npy",
    "decode_raw",
    "decode_safetensors",
    "element_count",
    "encode_npy",
    "encode_raw",
    "encode_safetensors",
    "no_bfloat16_npy",
    "npy_array",
    "npy_header",
    "numpy_dtype",
    "read_npy_header",
    "read_safetensors_header",
    "safetensors_array",
    "safetensors_header",
]

NPY_MAGIC: Final = b"\x93NUMPY"
MAX_NPY_HEADER: Final = 1 << 16
MAX_SAFETENSORS_HEADER: Final = 1 << 20

# torch dtype -> safetensors' dtype name (what the service writes)
SAFETENSORS_DTYPES: Final[Mapping[torch.dtype, str]] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}

# safetensors' dtype name -> numpy dtype, for the names numpy holds (no BF16)
SAFETENSORS_NUMPY_DTYPES: Final[Mapping[str, np.dtype[Any]]] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("<u1"),
    "I8": np.dtype("<i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
}


class CodecError(ValueError):
    """Bytes that are not a well-formed file of the format; the message says what is wrong."""


#: The most elements (and bytes) a shape may describe: numpy and torch count in int64.
INT64_MAX: Final = 2**63 - 1


def element_count(shape: Sequence[int], itemsize: int, name: str = "array") -> int:
    """The elements of ``shape``, multiplied in Python integers (never wrapping, as
    ``np.prod`` in int64 does) and checked, with their bytes and each dimension, against int64
    before anything is sized from them (``(2^63, 0)`` holds no element, but numpy cannot make
    that shape).

    Raises:
        CodecError: the elements, their bytes or a dimension are over 2^63 - 1.
    """
    count = math.prod(int(n) for n in shape)
    if count * itemsize > INT64_MAX or any(int(n) > INT64_MAX for n in shape):
        dims = ", ".join(str(n) for n in shape)
        raise CodecError(
            f"{name}: shape ({dims}) of {itemsize}-byte elements is over what an array can "
            f"have: 2^63 - 1 bytes, and 2^63 - 1 along each dimension"
        )
    return count


def no_bfloat16_npy(name: str) -> str:
    """The one sentence that says why a bfloat16 tensor cannot be written as npy."""
    return f"npy has no bfloat16 type, and {name!r} is bfloat16"


def numpy_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """The little-endian numpy dtype of a torch dtype (bfloat16 has none: :class:`CodecError`)."""
    if dtype == torch.bfloat16:
        raise CodecError(no_bfloat16_npy("tensor"))
    return np.dtype(torch.empty((), dtype=dtype).numpy().dtype).newbyteorder("<")


# ------------------------------------------------------------------------------------------ npy


def npy_header(shape: Sequence[int], dtype: torch.dtype | np.dtype[Any]) -> bytes:
    """The ``.npy`` header of a C-order array: format 1.0, or 2.0 for a header over 64 KiB."""
    nd = numpy_dtype(dtype) if isinstance(dtype, torch.dtype) else dtype.newbyteorder("<")
    data = {
        "descr": nd.str,
        "fortran_order": False,
        "shape": tuple(int(n) for n in shape),
    }
    header = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(header, data)
    except ValueError:
        header = io.BytesIO()
        np.lib.format.write_array_header_2_0(header, data)
    return header.getvalue()


def _host_array(array: torch.Tensor | np.ndarray) -> np.ndarray:
    """A C-order little-endian numpy array of a tensor's or an array's values."""
    if isinstance(array, torch.Tensor):
        nd = numpy_dtype(array.dtype)  # bfloat16 has none: CodecError
        array = array.detach().cpu().contiguous().numpy().astype(nd, copy=False)
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)


def encode_npy(array: torch.Tensor | np.ndarray) -> bytes:
    """A whole ``.npy`` file of a tensor or an array (bfloat16: :class:`CodecError`)."""
    arr = _host_array(array)
    return npy_header(arr.shape, arr.dtype) + arr.reshape(-1).view(np.uint8).tobytes()


@dataclass(frozen=True)
class NpyHeader:
    """An npy file's header as read: its dtype, its shape as written (not yet checked), the
    order of its data, and where the data starts."""

    dtype: np.dtype[Any]
    shape: Any
    fortran_order: bool
    data_offset: int


def read_npy_header(body: bytes, name: str = "array") -> NpyHeader:
    """The header of an ``.npy`` file (format 1.0, 2.0 or 3.0), read without touching its data.

    Raises:
        CodecError: not an npy file, a version not read, a header over :data:`MAX_NPY_HEADER`
            bytes or past the end, not a Python literal of the three keys, or a descr that is
            not a plain dtype.
    """
    if body.startswith(NPY_MAGIC) and len(body) < 10:
        raise CodecError(
            f"the npy body is truncated: {len(body)} bytes, under the 10 of its preamble"
        )
    if not body.startswith(NPY_MAGIC):
        raise CodecError(
            f"the body is not an .npy file: it must start with b'\\x93NUMPY', got "
            f"{body[:8]!r} ({len(body)} bytes)"
        )
    major, minor = body[6], body[7]
    if major == 1:
        (header_len,), start = struct.unpack_from("<H", body, 8), 10
    elif major in (2, 3) and len(body) >= 12:
        (header_len,), start = struct.unpack_from("<I", body, 8), 12
    else:
        raise CodecError(f"npy format version {major}.{minor} is not read; send 1.0, 2.0 or 3.0")
    if header_len > MAX_NPY_HEADER:
        raise CodecError(f"the npy header claims {header_len} bytes, over {MAX_NPY_HEADER}")
    if start + header_len > len(body):
        raise CodecError(
            f"the npy body is truncated: the header claims {header_len} bytes but only "
            f"{len(body) - start} follow"
        )
    raw = body[start : start + header_len]
    try:
        header = ast.literal_eval(raw.decode("utf-8" if major == 3 else "latin1"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError) as exc:
        raise CodecError(f"the npy header is not a Python literal: {type(exc).__name__}") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise CodecError(
            "the npy header must be a dict with the keys descr, fortran_order and shape, got "
            f"{sorted(header) if isinstance(header, dict) else type(header).__name__}"
        )
    descr = header["descr"]
    if not isinstance(descr, str):
        raise CodecError(f"{name}: a structured dtype is not read, got descr {descr!r}")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError):
        raise CodecError(f"{name}: the npy descr {descr!r} is not a dtype") from None
    return NpyHeader(dtype, header["shape"], header["fortran_order"] is True, start + header_len)


def npy_array(
    body: bytes, header: NpyHeader, shape: tuple[int, ...], name: str = "array"
) -> np.ndarray:
    """The data of an npy file whose header was read and whose ``shape`` the caller checked: a
    read-only view of ``body`` in C order (a Fortran-order file is transposed, no copy).

    Raises:
        CodecError: the data is shorter or longer than the shape claims.
    """
    count = element_count(shape, header.dtype.itemsize, name)
    data = len(body) - header.data_offset
    expected = count * header.dtype.itemsize
    if data != expected:
        dims = ", ".join(str(n) for n in shape)
        raise CodecError(
            f"{name}: the npy header claims shape ({dims}) of {header.dtype.name} = {expected} "
            f"bytes of data, but the body holds {data}"
            + (" (truncated)" if data < expected else " (extra bytes after the array)")
        )
    array = np.frombuffer(body, dtype=header.dtype, count=count, offset=header.data_offset)
    if header.fortran_order:
        return array.reshape(tuple(reversed(shape))).T
    return array.reshape(shape)


def decode_npy(body: bytes, name: str = "array") -> np.ndarray:
    """A whole ``.npy`` file as a numpy array (a copy, C order)."""
    header = read_npy_header(body, name)
    shape = header.shape
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise CodecError(f"{name}: the shape must be a tuple of ints >= 0, got {shape!r}")
    return np.ascontiguousarray(npy_array(body, header, shape, name))


# ---------------------------------------------------------------------------------- safetensors


def _safetensors_order(dtypes: Mapping[str, torch.dtype]) -> list[str]:
    """The order in which ``safetensors.torch.save`` lays out tensors of these dtypes (by dtype,
    then name): read back from the header it writes for one-element stand-ins, so it follows
    the library whatever its version."""
    from safetensors.torch import save  # the service's and the client's extra, not the library's

    data = save({name: torch.zeros(1, dtype=dtype) for name, dtype in dtypes.items()})
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    return sorted(dtypes, key=lambda name: header[name]["data_offsets"][0])


def safetensors_header(
    tensors: Mapping[str, tuple[Sequence[int], torch.dtype]], metadata: Mapping[str, str]
) -> tuple[bytes, list[str]]:
    """The safetensors header of tensors given as ``{name: (shape, dtype)}``, with ``metadata``,
    and the order of their data after it: the bytes ``safetensors.torch.save`` writes."""
    order = _safetensors_order({name: dtype for name, (_, dtype) in tensors.items()})
    entries: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for name in order:
        shape, dtype = tensors[name]
        nbytes = math.prod(int(n) for n in shape) * dtype.itemsize
        entries[name] = {
            "dtype": SAFETENSORS_DTYPES[dtype],
            "shape": [int(n) for n in shape],
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    text = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, order


def encode_safetensors(
    tensors: Mapping[str, torch.Tensor | np.ndarray], metadata: Mapping[str, str] | None = None
) -> bytes:
    """A whole safetensors file of tensors or arrays (views of one storage are copied apart,
    which the format needs)."""
    from safetensors.torch import save

    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in tensors.items():
        if isinstance(tensor, np.ndarray):
            tensor = torch.from_numpy(_host_array(tensor))
        t = tensor.detach().cpu().contiguous()
        if t.numel():
            ptr = t.untyped_storage().data_ptr()
            if ptr in seen or t.untyped_storage().nbytes() != t.numel() * t.element_size():
                t = t.clone()
                ptr = t.untyped_storage().data_ptr()
            seen.add(ptr)
        out[name] = t
    return save(out, metadata=dict(metadata) if metadata is not None else None)


@dataclass(frozen=True)
class SafetensorsHeader:
    """A safetensors file's header as read: its tensor entries (unchecked JSON values), its
    metadata, and where the data starts and how long it is."""

    entries: dict[str, Any]
    metadata: dict[str, Any]
    data_start: int
    data_len: int


def read_safetensors_header(body: bytes) -> SafetensorsHeader:
    """The header of a safetensors file, read without touching its data.

    Raises:
        CodecError: under 8 bytes, a header over :data:`MAX_SAFETENSORS_HEADER` bytes or past the
            end, or not a JSON object.
    """
    if len(body) < 8:
        raise CodecError(f"the body is not a safetensors file: {len(body)} bytes, under 8")
    (header_len,) = struct.unpack_from("<Q", body, 0)
    if header_len > MAX_SAFETENSORS_HEADER:
        raise CodecError(
            f"the safetensors header claims {header_len} bytes, over {MAX_SAFETENSORS_HEADER}"
        )
    if 8 + header_len > len(body):
        raise CodecError(
            f"the safetensors body is truncated: the header claims {header_len} bytes but only "
            f"{len(body) - 8} follow"
        )
    try:
        header = json.loads(body[8 : 8 + header_len])
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"the safetensors header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise CodecError(
            f"the safetensors header must be a JSON object, got {type(header).__name__}"
        )
    metadata = header.pop("__metadata__", None)
    return SafetensorsHeader(
        header,
        metadata if isinstance(metadata, dict) else {},
        8 + header_len,
        len(body) - 8 - header_len,
    )


def safetensors_array(
    body: bytes, header: SafetensorsHeader, name: str, dtype: np.dtype[Any], shape: tuple[int, ...]
) -> np.ndarray:
    """The data of tensor ``name``, whose dtype and shape the caller read and checked: a
    read-only view of ``body``.

    Raises:
        CodecError: ``data_offsets`` that are not ``[begin, end]`` within the data, or that hold
            another number of bytes than the shape needs.
    """
    offsets = header.entries[name].get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= header.data_len
    ):
        raise CodecError(
            f"{name}: data_offsets must be [begin, end] within the {header.data_len} data bytes, "
            f"got {offsets!r}"
        )
    count = element_count(shape, dtype.itemsize, name)
    expected = count * dtype.itemsize
    if offsets[1] - offsets[0] != expected:
        dims = ", ".join(str(n) for n in shape)
        raise CodecError(
            f"{name}: shape ({dims}) of {header.entries[name].get('dtype')} needs {expected} "
            f"bytes, but data_offsets {offsets} hold {offsets[1] - offsets[0]}"
        )
    array = np.frombuffer(body, dtype=dtype, count=count, offset=header.data_start + offsets[0])
    return array.reshape(shape)


def decode_safetensors(body: bytes) -> tuple[dict[str, np.ndarray | torch.Tensor], dict[str, Any]]:
    """Every tensor of a safetensors file (numpy arrays; bfloat16 as torch tensors) in the order
    of their data, and the file's metadata."""
    header = read_safetensors_header(body)
    out: dict[str, np.ndarray | torch.Tensor] = {}
    for name, info in sorted(
        header.entries.items(), key=lambda kv: (kv[1].get("data_offsets") or [0])[0]
    ):
        shape = tuple(int(n) for n in info.get("shape", ()))
        if info.get("dtype") == "BF16":
            raw = safetensors_array(body, header, name, np.dtype("<u2"), shape)
            out[name] = torch.from_numpy(raw.copy()).view(torch.bfloat16)
            continue
        dtype = SAFETENSORS_NUMPY_DTYPES.get(info.get("dtype", ""))
        if dtype is None:
            raise CodecError(f"{name}: safetensors dtype {info.get('dtype')!r} is not read")
        out[name] = safetensors_array(body, header, name, dtype, shape).copy()
    return out, header.metadata


# ------------------------------------------------------------------------------------------ raw


_RAW_DTYPES: Final[Mapping[str, torch.dtype]] = {
    str(d).removeprefix("torch."): d for d in SAFETENSORS_DTYPES
}


def encode_raw(tensor: torch.Tensor) -> bytes:
    """A tensor's bytes, C order, little-endian (bfloat16 as its 16-bit patterns)."""
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return _host_array(t.view(torch.int16)).tobytes()
    return _host_array(t).tobytes()


def decode_raw(body: bytes, shape: Sequence[int], dtype: str) -> np.ndarray | torch.Tensor:
    """A raw body (C order, little-endian) of this shape and dtype name (``float32``...): a numpy
    array, or a torch tensor for bfloat16, which numpy lacks."""
    if dtype not in _RAW_DTYPES:
        raise CodecError(f"raw dtype {dtype!r} is not one of {', '.join(_RAW_DTYPES)}")
    shape = tuple(int(n) for n in shape)
    torch_dtype = _RAW_DTYPES[dtype]
    if torch_dtype == torch.bfloat16:
        return torch.frombuffer(bytearray(body), dtype=torch.bfloat16).reshape(shape)
    nd = numpy_dtype(torch_dtype)
    if len(body) != element_count(shape, nd.itemsize) * nd.itemsize:
        raise CodecError(f"the raw body holds {len(body)} bytes, not a {shape} {dtype} tensor")
    return np.frombuffer(body, dtype=nd).reshape(shape).copy()
