"""GGUF tensor data: ``token_embd.weight`` read from a llama.cpp model file and dequantized.

The dequantization follows ``gguf``'s ``gguf/quants.py`` (the Python package that ships with
llama.cpp) operation for operation, in float32, so each value equals ``quants.dequantize``'s
bit for bit: F32, F16, BF16, Q8_0, Q4_0 and the K-quants Q4_K, Q5_K and Q6_K.

Block layouts (``QK_K = 256``; ``d``/``dmin`` are float16):

=======  =====  =====  ===========================================================
type     block  bytes  layout
=======  =====  =====  ===========================================================
Q4_0     32     18     ``d``, 16 bytes of 4-bit ``q`` (low nibbles first): ``d·(q-8)``
Q8_0     32     34     ``d``, 32 int8 ``q``: ``q·d``
Q4_K     256    144    ``d``, ``dmin``, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
Q5_K     256    176    as Q4_K, plus 32 bytes of fifth bits before the nibbles
Q6_K     256    210    128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, ``d``
=======  =====  =====  ===========================================================

The file is read with plain reads into process memory, never mapped (see
:mod:`posenc.readers.weights_file` for why): the head first, in growing prefixes until its tensor
directory is complete, then the one tensor's bytes. A file that is not GGUF, whose head or tensor
data stop early, or whose token tensor has a type not listed is refused with
:class:`~posenc.core.errors.InvalidArgument` naming the path and what is missing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from posenc.core.errors import InvalidArgument
from posenc.readers.gguf.metadata import GgufHead, TensorInfo, read_gguf_head

__all__ = ["GGML_TYPES", "GgufTable", "dequantize", "read_gguf_file_head", "read_gguf_table"]

QK_K = 256
#: ggml type id -> (name, values per block, bytes per block), as ``GGML_QUANT_SIZES``.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 2 + 16),
    8: ("Q8_0", 32, 2 + 32),
    12: ("Q4_K", QK_K, 2 + 2 + QK_K // 2 + 12),
    13: ("Q5_K", QK_K, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    14: ("Q6_K", QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    30: ("BF16", 1, 2),
}
#: names of ggml types posenc does not dequantize, for the refusal's message.
_OTHER_TYPES = {3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 15: "Q8_K"}
TOKEN_TENSOR = "token_embd.weight"
_FIRST_READ = 1 << 20
_CHUNK_BLOCKS = 1 << 14


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d, qs = np.hsplit(blocks, [2])
    d = _f16(d)
    qs = qs.reshape((n, -1, 1, 16)) >> np.array([0, 4], dtype=np.uint8).reshape((1, 1, 2, 1))
    q = (qs & np.uint8(0x0F)).reshape((n, -1)).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    d, x = np.split(blocks, [2], axis=1)
    return np.ascontiguousarray(x).view(np.int8).astype(np.float32) * _f16(d)  # type: ignore[no-any-return]


def _scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's eight 6-bit scales and mins from their 12 packed bytes."""
    n = scales.shape[0]
    d, m, m_d = np.split(scales.reshape((n, 3, 4)), 3, axis=-2)
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.reshape((n, 8)), mn.reshape((n, 8))


def _k_scales(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: ``d·sc`` and ``dmin·m`` per 32-value group, and the rest of the block."""
    n = blocks.shape[0]
    d, rest = np.hsplit(blocks, [2])
    dmin, rest = np.hsplit(rest, [2])
    scales, rest = np.hsplit(rest, [12])
    sc, m = _scale_min(scales)
    dd = (_f16(d) * sc.astype(np.float32)).reshape((n, -1, 1))
    dm = (_f16(dmin) * m.astype(np.float32)).reshape((n, -1, 1))
    return dd, dm, rest


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d, dm, qs = _k_scales(blocks)
    qs = qs.reshape((n, -1, 1, 32)) >> np.array([0, 4], dtype=np.uint8).reshape((1, 1, 2, 1))
    q = (qs & np.uint8(0x0F)).reshape((n, -1, 32)).astype(np.float32)
    return (d * q - dm).reshape((n, QK_K))  # type: ignore[no-any-return]


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d, dm, rest = _k_scales(blocks)
    qh, qs = np.hsplit(rest, [QK_K // 8])
    ql = qs.reshape((n, -1, 1, 32)) >> np.array([0, 4], dtype=np.uint8).reshape((1, 1, 2, 1))
    qh = qh.reshape((n, -1, 1, 32)) >> np.arange(8, dtype=np.uint8).reshape((1, 1, 8, 1))
    ql = (ql & np.uint8(0x0F)).reshape((n, -1, 32))
    qh = (qh & np.uint8(0x01)).reshape((n, -1, 32))
    q = (ql | (qh << np.uint8(4))).astype(np.float32)
    return (d * q - dm).reshape((n, QK_K))  # type: ignore[no-any-return]


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    ql, rest = np.hsplit(blocks, [QK_K // 2])
    qh, rest = np.hsplit(rest, [QK_K // 4])
    scales, d = np.hsplit(rest, [QK_K // 16])
    sc = np.ascontiguousarray(scales).view(np.int8).astype(np.float32)
    dd = (_f16(d) * sc).reshape((n, QK_K // 16, 1))
    ql = ql.reshape((n, -1, 1, 64)) >> np.array([0, 4], dtype=np.uint8).reshape((1, 1, 2, 1))
    ql = (ql & np.uint8(0x0F)).reshape((n, -1, 32))
    qh = qh.reshape((n, -1, 1, 32)) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape((1, 1, 4, 1))
    qh = (qh & np.uint8(0x03)).reshape((n, -1, 32))
    q = (ql | (qh << np.uint8(4))).astype(np.int8) - np.int8(32)
    return (dd * q.reshape((n, QK_K // 16, -1)).astype(np.float32)).reshape((n, QK_K))


_BLOCKS = {2: _q4_0, 8: _q8_0, 12: _q4_k, 13: _q5_k, 14: _q6_k}


def ggml_type_name(ggml_type: int) -> str:
    """``Q8_0`` for 8, ... (``type 99`` for an id not known here)."""
    if ggml_type in GGML_TYPES:
        return GGML_TYPES[ggml_type][0]
    return _OTHER_TYPES.get(ggml_type, f"type {ggml_type}")


def tensor_nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    """Bytes of a tensor of ``shape`` (GGUF order, fastest dimension first) and type."""
    _, block, size = GGML_TYPES[ggml_type]
    return math.prod(shape) // block * size


def dequantize(data: np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor's raw bytes as float32, as ``gguf.quants.dequantize`` gives them.

    Args:
        data: the tensor's bytes, ``uint8``, exactly :func:`tensor_nbytes` of them.
        ggml_type: its ggml type id (one of :data:`GGML_TYPES`).
        shape: its shape as GGUF lists it, fastest dimension first: ``(D, V)`` for a token
            table.

    Returns:
        float32 of shape ``shape`` reversed (``(V, D)`` for a token table).
    """
    out_shape = tuple(reversed(shape))
    raw = np.ascontiguousarray(data, dtype=np.uint8)
    if ggml_type == 0:
        values = raw.view(np.float32)
    elif ggml_type == 1:
        values = raw.view(np.float16).astype(np.float32)
    elif ggml_type == 30:
        values = (raw.view(np.int16).astype(np.int32) << 16).view(np.float32)
    else:
        _, block, size = GGML_TYPES[ggml_type]
        blocks = raw.reshape((-1, size))
        values = np.empty((blocks.shape[0], block), dtype=np.float32)
        # a chunk of blocks at a time: the intermediates stay small (each value is computed
        # on its own block, so the chunking changes no bit)
        with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN scales stay as stored
            for at in range(0, blocks.shape[0], _CHUNK_BLOCKS):
                values[at : at + _CHUNK_BLOCKS] = _BLOCKS[ggml_type](
                    blocks[at : at + _CHUNK_BLOCKS]
                )
    return values.reshape(out_shape)


@dataclass(frozen=True)
class GgufTable:
    """A GGUF model file's head and its dequantized token table.

    Attributes:
        head: :func:`posenc.readers.gguf.metadata.read_gguf_head`'s reading of the file.
        info: the token tensor's directory record.
        type_name: its ggml type (``Q8_0`` ...).
        table: ``(V, D)`` float32, dequantized.
    """

    head: GgufHead
    info: TensorInfo
    type_name: str
    table: np.ndarray


def _refuse(path: str, what: str) -> InvalidArgument:
    return InvalidArgument(f"GGUF model file {path}: {what}", field="path")


def read_gguf_file_head(path: str) -> tuple[GgufHead, int]:
    """The head of the GGUF file at ``path`` (through its tensor directory) and the file size,
    read in growing prefixes."""
    size = os.path.getsize(path)
    want = _FIRST_READ
    with open(path, "rb") as f:
        while True:
            f.seek(0)
            prefix = f.read(min(want, size))
            try:
                head = read_gguf_head(prefix)
            except InvalidArgument as exc:
                if len(prefix) < size and exc.message.startswith("GGUF truncated"):
                    want *= 2
                    continue
                raise _refuse(path, exc.message) from None
            if head.data is not None or len(prefix) >= size:
                return head, size
            want *= 2


def read_gguf_table(path: str | os.PathLike[str]) -> GgufTable:
    """Read and dequantize ``token_embd.weight`` from the GGUF file at ``path``.

    Raises:
        InvalidArgument: not GGUF, a head or tensor directory that stops early, no
            ``token_embd.weight``, a type not dequantized here, a shape that is not 2-D whole
            blocks, or tensor data past the end of the file (with how many bytes are missing).
    """
    where = os.fspath(path)
    head, size = read_gguf_file_head(where)
    if head.data is None:
        raise _refuse(where, f"the file ({size} bytes) ends inside its tensor directory")
    info = head.tensors.get(TOKEN_TENSOR)
    if info is None:
        names = ", ".join(list(head.tensors)[:20]) or "(none)"
        raise _refuse(where, f"no {TOKEN_TENSOR} tensor; its tensors: {names}")
    name = ggml_type_name(info.ggml_type)
    if info.ggml_type not in GGML_TYPES:
        known = ", ".join(n for n, _, _ in GGML_TYPES.values())
        raise _refuse(where, f"{TOKEN_TENSOR} is {name}; posenc dequantizes {known}")
    block = GGML_TYPES[info.ggml_type][1]
    if len(info.shape) != 2 or info.shape[0] % block or 0 in info.shape:
        raise _refuse(
            where, f"{TOKEN_TENSOR} has shape {list(info.shape)}; want 2-D (D, V) with D a "
            f"multiple of {name}'s block of {block}"
        )  # fmt: skip
    start, nbytes = head.data + info.offset, tensor_nbytes(info.shape, info.ggml_type)
    if start + nbytes > size:
        raise _refuse(
            where, f"truncated: {TOKEN_TENSOR} ({name}, {nbytes} bytes) needs bytes {start} to "
            f"{start + nbytes}, but the file has {size} ({start + nbytes - size} missing)"
        )  # fmt: skip
    buf = np.empty(nbytes, dtype=np.uint8)
    with open(where, "rb") as f:
        f.seek(start)
        got = f.readinto(buf.data)
    if got != nbytes:
        raise _refuse(where, f"truncated while reading {TOKEN_TENSOR}: {got} of {nbytes} bytes")
    return GgufTable(head, info, name, dequantize(buf, info.ggml_type, info.shape))


#: The F32 tensors llama.cpp divides rope frequencies by (Llama 3's, LongRoPE's long and short).
FACTOR_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def read_factor_tensors(path: str | os.PathLike[str], head: GgufHead) -> GgufHead:
    """``head`` with its RoPE factor tensors (:data:`FACTOR_TENSORS`) read from the file where
    they lie (:attr:`~posenc.readers.gguf.metadata.GgufHead.loaded`), so that :func:`posenc.readers.gguf.metadata.read_rope`
    applies them; tensors that are not F32 1-D, or lie past the file's end, are left out."""
    where = os.fspath(path)
    if head.data is None:
        return head
    loaded = dict(head.loaded)
    size = os.path.getsize(where)
    with open(where, "rb") as f:
        for name in FACTOR_TENSORS:
            info = head.tensors.get(name)
            if info is None or info.ggml_type != 0 or len(info.shape) != 1:
                continue
            start, count = head.data + info.offset, int(info.shape[0])
            if start + 4 * count > size:
                continue
            f.seek(start)
            values = np.frombuffer(f.read(4 * count), dtype="<f4")
            loaded[name] = tuple(float(v) for v in values)
    return GgufHead(head.version, head.metadata, head.tensors, head.kv_end, head.data, head.raw,
                    loaded)  # fmt: skip
