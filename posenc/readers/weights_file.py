"""Tensors of safetensors files read into process memory with plain reads, never mapped.

Why not memory-map: a mapped file that is truncated in place (``cp new old`` truncates ``old``,
then writes it) makes every later access to a page past the new end a SIGBUS, which kills the
process with no Python exception to catch. ``safetensors.safe_open`` maps the file, so a
service that kept the tensors it returns died the first time a request touched a row it had
not read before. Here each tensor is copied into memory the process owns (``readinto`` a
``torch.empty`` buffer) when a model is loaded: once loaded, nothing that happens to the file
on disk can reach it. A file that changes while it is being read is noticed (its size or
modification time differ after the read from what they were before it) and read again, and a
file that is shorter than its header says is a clear error, not a fault.

The cost is the copy: the token table is read once at load (about 1 GiB/s from the page cache
on the 2-core machine posenc is measured on) and its pages are the process's own memory rather
than shared page cache (docs/deployment.md, "Models that change on disk", gives the numbers).

Format (safetensors): an 8-byte little-endian header length ``N``, ``N`` bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then the
data, offsets relative to its start.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch
from torch import Tensor

from posenc.core.codec import MAX_SAFETENSORS_HEADER, SAFETENSORS_DTYPES
from posenc.core.errors import InvalidArgument

__all__ = ["SafetensorsIndex", "read_index", "read_tensor"]

_TORCH_DTYPES: dict[str, torch.dtype] = {name: dtype for dtype, name in SAFETENSORS_DTYPES.items()}
_TORCH_DTYPES.update({"U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64})
_READ_ATTEMPTS = 3
_CHUNK = 64 * 1024 * 1024


@dataclass(frozen=True)
class SafetensorsIndex:
    """The header of one safetensors file: its tensor entries and where their data starts."""

    path: str
    entries: dict[str, Any]
    data_start: int

    @property
    def names(self) -> list[str]:
        return sorted(self.entries)


def _read_header(fh: BinaryIO, path: str, size: int) -> SafetensorsIndex:
    head = fh.read(8)
    if len(head) < 8:
        raise InvalidArgument(
            f"{path}: cannot read as a safetensors file: {size} bytes, under the 8 of its header length",
            field="path",
        )
    (header_len,) = struct.unpack("<Q", head)
    if header_len > MAX_SAFETENSORS_HEADER or 8 + header_len > size:
        raise InvalidArgument(
            f"{path}: cannot read as a safetensors file (truncated?): its header claims {header_len} bytes, and "
            f"the file holds {size}",
            field="path",
        )
    raw = fh.read(header_len)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidArgument(
            f"{path}: cannot read as a safetensors file: its header is not JSON: {exc}",
            field="path",
        ) from exc
    if not isinstance(header, dict):
        raise InvalidArgument(
            f"{path}: cannot read as a safetensors file: its header is not a JSON object",
            field="path",
        )
    header.pop("__metadata__", None)
    return SafetensorsIndex(path, header, 8 + header_len)


def read_index(path: str) -> SafetensorsIndex:
    """The tensor names and entries of a safetensors file, read from its header.

    Raises:
        InvalidArgument: the file cannot be opened, or its header is short or not JSON.
    """
    try:
        with open(path, "rb") as fh:
            return _read_header(fh, path, os.fstat(fh.fileno()).st_size)
    except OSError as exc:
        raise InvalidArgument(
            f"{path}: cannot read as a safetensors file: {exc}", field="path"
        ) from exc


def _entry(index: SafetensorsIndex, name: str) -> tuple[torch.dtype, tuple[int, ...], int, int]:
    """``(dtype, shape, begin, end)`` of tensor ``name``, checked against each other."""
    info = index.entries.get(name)
    where = f"{index.path}: {name}"
    if not isinstance(info, dict):
        raise InvalidArgument(f"{where}: no such tensor in the file", field="path")
    dtype = _TORCH_DTYPES.get(str(info.get("dtype")))
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if dtype is None:
        raise InvalidArgument(f"{where}: dtype {info.get('dtype')!r} is not read", field="path")
    if (
        not isinstance(shape, list)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        or not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise InvalidArgument(
            f"{where}: shape {shape!r} / data_offsets {offsets!r} are not a tensor entry",
            field="path",
        )
    count = 1
    for n in shape:
        count *= n
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    if offsets[1] - offsets[0] != nbytes:
        raise InvalidArgument(
            f"{where}: shape {tuple(shape)} of {info['dtype']} needs {nbytes} bytes, but "
            f"data_offsets {offsets} hold {offsets[1] - offsets[0]}",
            field="path",
        )
    return dtype, tuple(shape), offsets[0], offsets[1]


def _read_once(path: str, name: str) -> Tensor:
    with open(path, "rb") as fh:
        before = os.fstat(fh.fileno())
        index = _read_header(fh, path, before.st_size)
        dtype, shape, begin, end = _entry(index, name)
        if index.data_start + end > before.st_size:
            raise InvalidArgument(
                f"{path}: truncated: {name} ends at byte {index.data_start + end}, and the file "
                f"holds {before.st_size}",
                field="path",
            )
        buffer = torch.empty(end - begin, dtype=torch.uint8)  # memory of our own, not a map
        view = buffer.numpy().data  # writable bytes of the buffer
        fh.seek(index.data_start + begin)
        done = 0
        while done < len(view):
            got = fh.readinto(view[done : done + _CHUNK])
            if not got:
                raise InvalidArgument(
                    f"{path}: truncated while reading {name}: {done} of {len(view)} bytes read",
                    field="path",
                )
            done += got
        after = os.fstat(fh.fileno())
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        raise _Changed(path)
    return buffer.view(dtype).reshape(shape)


class _Changed(Exception):
    """The file changed while it was read."""


def read_tensor(path: str, name: str) -> Tensor:
    """Tensor ``name`` of the safetensors file ``path``, in memory the process owns.

    Returns:
        the tensor in its stored dtype and shape, on the CPU.

    Raises:
        InvalidArgument: the file cannot be opened, is not a safetensors file, lacks ``name``,
            is shorter than its header says, or kept changing while it was read
            (three tries).
    """
    for _ in range(_READ_ATTEMPTS):
        try:
            return _read_once(path, name)
        except _Changed:
            continue
        except OSError as exc:
            raise InvalidArgument(f"{path}: cannot read {name}: {exc}", field="path") from exc
    raise InvalidArgument(
        f"{path}: changed while {name} was read, {_READ_ATTEMPTS} times; try again once it is "
        "written",
        field="path",
    )
