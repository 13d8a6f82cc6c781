"""GGUF metadata: the key/value section (and tensor directory) of a llama.cpp model file.

A GGUF file is ``"GGUF"``, a ``uint32`` version (2 or 3), ``uint64`` tensor and key/value
counts, then the key/value pairs (``gguf_string`` key, ``uint32`` value type, value), then one
record per tensor (name, dimensions, type, offset), then the aligned tensor data. posenc reads
the file, or only its head: everything up to the end of the key/value section is enough for the
RoPE llama.cpp applies (:func:`llamacpp_rope_from_gguf`); tensors whose data is in the bytes
given (``rope_freqs``, ``rope_factors_long``/``short``) are read too.

A body that is not GGUF, or that ends inside the key/value section, raises
:class:`posenc.core.errors.InvalidArgument` saying how many bytes were read and what is missing.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from posenc.core.errors import InvalidArgument
from posenc.engines.llama_cpp import ENGINE as LLAMA_CPP
from posenc.engines.llama_cpp import gguf_entry
from posenc.facts.gguf_architectures import GGUF_ARCHITECTURES, gguf_architecture
from posenc.rope.llamacpp import LlamaCppRope

MAGIC = b"GGUF"

#: GGUF value types -> (name, struct format or None for string/array).
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("uint8", "<B"),
    1: ("int8", "<b"),
    2: ("uint16", "<H"),
    3: ("int16", "<h"),
    4: ("uint32", "<I"),
    5: ("int32", "<i"),
    6: ("float32", "<f"),
    7: ("bool", "<?"),
    10: ("uint64", "<Q"),
    11: ("int64", "<q"),
    12: ("float64", "<d"),
}
_STRING, _ARRAY = 8, 9
#: ggml tensor types whose data posenc reads from a GGUF (the RoPE factor tensors are F32).
_F32 = 0

#: ``general.architecture`` -> ggml rope mode: a view of the records of
#: :mod:`posenc.facts.gguf_architectures`.
ARCH_MODES: Mapping[str, str] = MappingProxyType(
    {name: arch.rope_mode for name, arch in GGUF_ARCHITECTURES.items()}
)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's directory record: ``shape`` as GGUF lists it (fastest dimension first)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int


@dataclass(frozen=True)
class GgufHead:
    """What a GGUF file's head says.

    Attributes:
        version: the format version (2 or 3).
        metadata: every key/value pair, arrays as lists.
        tensors: the tensor directory, when the bytes reach its end (else empty).
        kv_end: bytes up to the end of the key/value section.
        data: the tensor data's start when the directory was read, else None.
        raw: the bytes given (to read tensors whose data they hold).
        loaded: F32 tensors' values read apart from ``raw`` (a model file's factor tensors,
            read where they lie in the file), by name.
    """

    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    kv_end: int = 0
    data: int | None = None
    raw: bytes = field(default=b"", repr=False)
    loaded: dict[str, tuple[float, ...]] = field(default_factory=dict, repr=False)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def get(self, key: str, default: Any = None) -> Any:
        """``{architecture}.{key}``'s value (or ``default``)."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def f32_tensor(self, name: str) -> tuple[float, ...] | None:
        """An F32 tensor's values when its data lies in the bytes given (or was loaded), else
        None."""
        if name in self.loaded:
            return self.loaded[name]
        info = self.tensors.get(name)
        if info is None or self.data is None or info.ggml_type != _F32:
            return None
        count = math.prod(info.shape)
        start = self.data + info.offset
        if start + 4 * count > len(self.raw):
            return None
        values = np.frombuffer(self.raw, dtype="<f4", count=count, offset=start)
        return tuple(float(v) for v in values)


#: Largest value of a signed 64-bit count (llama.cpp's ``int64_t`` element counts).
INT64_MAX = 2**63 - 1
#: llama.cpp's ``GGML_MAX_DIMS``: a tensor record with more dimensions is not a ggml tensor.
MAX_DIMS = 4


@dataclass(frozen=True)
class GgufBudget:
    """What one reading of a GGUF head may hold: the reader counts against it as it goes and
    stops with a 422 that names the count that ran out (:class:`GgufLimit`), so that its work
    is bounded by these numbers whatever the bytes claim. The defaults hold every published
    model's head with room to spare: Llama 3 8B's has a few dozen key/value pairs, about
    537,000 array items (128,256 tokens and token types, 280,147 merges) and 291 tensors.

    Attributes:
        max_kv: key/value pairs.
        max_items: array items, over all arrays (a string, a nested array and a number each 1).
        max_depth: arrays nested in arrays (1: an array of scalars or strings).
        max_nested: arrays inside arrays, over the whole head (llama.cpp's own reader refuses
            any; each costs a Python call, where a string or a number costs a loop step).
        max_tensors: tensor records in the directory.
    """

    max_kv: int = 65_536
    max_items: int = 2_097_152
    max_depth: int = 3
    max_nested: int = 65_536
    max_tensors: int = 262_144


DEFAULT_BUDGET = GgufBudget()


class GgufLimit(InvalidArgument):
    """A GGUF head asks for more than its :class:`GgufBudget` (HTTP 422, ``field="body"``)."""


class _Reader:
    """Reads a GGUF head's values from ``data``, counting against ``budget``."""

    def __init__(self, data: bytes, budget: GgufBudget) -> None:
        self.data = memoryview(data)
        self.size = len(data)
        self.at = 0
        self.what = "the header"
        self.budget = budget
        self.items = 0
        self.nested = 0

    def _short(self, n: int) -> InvalidArgument:
        return InvalidArgument(
            f"GGUF truncated: read {self.size} bytes, but {self.what} needs "
            f"{self.at + n - self.size} more (up to byte {self.at + n}); send the file, "
            "or its head up to the end of its key/value section",
            field="body",
        )

    def take(self, n: int) -> bytes:
        if self.at + n > self.size:
            raise self._short(n)
        out = bytes(self.data[self.at : self.at + n])
        self.at += n
        return out

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.at + size > self.size:
            raise self._short(size)
        value = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += size
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        return self.take(n).decode("utf-8", errors="replace")

    def count(self, n: int) -> None:
        """Take ``n`` array items from the budget (before any is read)."""
        self.items += n
        if self.items > self.budget.max_items:
            raise GgufLimit(
                f"GGUF: {self.what} takes the array items read to {self.items}, over the "
                f"limit of {self.budget.max_items} array items in a GGUF head",
                field="body",
            )

    def value(self, kind: int, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind][1])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            if depth >= self.budget.max_depth:
                raise GgufLimit(
                    f"GGUF: {self.what} nests arrays more than {self.budget.max_depth} deep, "
                    "the limit in a GGUF head",
                    field="body",
                )
            item, count = self.unpack("<I"), self.unpack("<Q")
            if item in _SCALARS:
                fmt = _SCALARS[item][1]
                size = struct.calcsize(fmt)
                if self.at + size * count > self.size:  # before the budget: a truncated head
                    raise self._short(size * count)
                self.count(count)
                raw = self.take(size * count)
                return np.frombuffer(raw, dtype=np.dtype(fmt)).tolist()
            if item == _STRING:
                self.count(count)
                return self.strings(count)
            if item != _ARRAY:
                raise InvalidArgument(
                    f"GGUF: unknown array item type {item} at byte {self.at - 12} ({self.what})",
                    field="body",
                )
            self.count(count)
            self.nested += count
            if self.nested > self.budget.max_nested:
                raise GgufLimit(
                    f"GGUF: {self.what} takes the arrays nested in arrays to {self.nested}, "
                    f"over the limit of {self.budget.max_nested} in a GGUF head",
                    field="body",
                )
            return [self.value(item, depth + 1) for _ in range(count)]
        raise InvalidArgument(
            f"GGUF: unknown value type {kind} at byte {self.at - 4} ({self.what})", field="body"
        )

    def strings(self, count: int) -> list[str]:
        """``count`` strings (an array's items): one tight loop, no call per string."""
        data, at, size, out = self.data, self.at, self.size, []
        unpack_from = struct.unpack_from
        for _ in range(count):
            if at + 8 > size:
                self.at = at
                raise self._short(8)
            (n,) = unpack_from("<Q", data, at)
            at += 8
            if at + n > size:
                self.at = at
                raise self._short(n)
            out.append(str(data[at : at + n], "utf-8", "replace"))
            at += n
        self.at = at
        return out


def _alignment(metadata: Mapping[str, Any]) -> int:
    """``general.alignment`` (default 32): a positive power of two, as llama.cpp requires."""
    align = metadata.get("general.alignment", 32)
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise InvalidArgument(
            f"GGUF: general.alignment must be a positive power of two, got {align!r}",
            field="body",
        )
    return align


def _tensor_record(r: _Reader) -> TensorInfo:
    """One tensor record: its dimensions checked (at most :data:`MAX_DIMS`, each and their
    product within int64, as llama.cpp checks them) before anything is sized from them."""
    name = r.string()
    n_dims = r.unpack("<I")
    if n_dims > MAX_DIMS:
        raise GgufLimit(
            f"GGUF: {r.what} ({name!r}) has {n_dims} dimensions; ggml tensors have at most "
            f"{MAX_DIMS}",
            field="body",
        )
    dims = tuple(r.unpack("<Q") for _ in range(n_dims))
    if math.prod(dims) > INT64_MAX:
        raise GgufLimit(
            f"GGUF: {r.what} ({name!r}) has shape {dims}, of more than 2^63 - 1 elements",
            field="body",
        )
    return TensorInfo(name, dims, r.unpack("<I"), r.unpack("<Q"))


def read_gguf_head(data: bytes, budget: GgufBudget = DEFAULT_BUDGET) -> GgufHead:
    """Parse a GGUF file's head: header, key/value pairs and, when the bytes reach that far,
    the tensor directory. The work is bounded by ``budget`` (:class:`GgufBudget`), whatever
    the counts in the bytes say.

    Raises:
        InvalidArgument: not GGUF (the first bytes and their count), an unknown version, or
            bytes that end inside the header or the key/value section (how many were read,
            which part and how many bytes more it needs), an unknown value type, an alignment
            that is not a positive power of two. ``field="body"``.
        GgufLimit: more key/value pairs, array items, nesting or tensor records than
            ``budget`` allows, or a tensor of more than 4 dimensions or 2^63 - 1 elements.
    """
    if len(data) < 4 or data[:4] != MAGIC:
        raise InvalidArgument(
            f"not a GGUF file: read {len(data)} bytes, starting {bytes(data[:8])!r}; a GGUF "
            "file starts with b'GGUF'",
            field="body",
        )
    r = _Reader(data, budget)
    r.take(4)
    version = r.unpack("<I")
    if version not in (2, 3):
        raise InvalidArgument(
            f"GGUF version {version} is not read here (2 and 3 are); read {len(data)} bytes",
            field="body",
        )
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    if n_kv > budget.max_kv:
        raise GgufLimit(
            f"GGUF: the header claims {n_kv} key/value pairs, over the limit of "
            f"{budget.max_kv} in a GGUF head",
            field="body",
        )
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        r.what = f"key/value pair {i + 1} of {n_kv}"
        key = r.string()
        r.what = f"key/value pair {i + 1} of {n_kv} ({key[:64]!r})"
        metadata[key] = r.value(r.unpack("<I"))
    kv_end = r.at
    align = _alignment(metadata)
    if n_tensors > budget.max_tensors:
        raise GgufLimit(
            f"GGUF: the header claims {n_tensors} tensors, over the limit of "
            f"{budget.max_tensors} in a GGUF head",
            field="body",
        )
    tensors: dict[str, TensorInfo] = {}
    data_start = None
    try:
        for i in range(n_tensors):
            r.what = f"tensor record {i + 1} of {n_tensors}"
            info = _tensor_record(r)
            tensors[info.name] = info
        data_start = -(-r.at // align) * align
    except GgufLimit:
        raise
    except InvalidArgument:  # a head that stops after the key/value section is enough
        tensors = {}
    return GgufHead(version, metadata, tensors, kv_end, data_start, bytes(data))


def _get_mscale(scale: np.float32, mscale: np.float32) -> np.float32:
    if scale <= 1:
        return np.float32(1.0)
    return np.float32(0.1) * mscale * np.float32(math.log(float(scale))) + np.float32(1.0)


def llamacpp_rope_from_gguf(head: GgufHead, *, n_ctx: int | None = None) -> LlamaCppRope:
    """:func:`read_rope` with a value of the wrong type in a key refused as a 422."""
    try:
        return read_rope(head, n_ctx=n_ctx)
    except InvalidArgument:
        raise
    except (TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
        raise InvalidArgument(
            f"GGUF: a rope key of {head.architecture!r} has a value llama.cpp cannot use ({exc})",
            field="body",
        ) from None


def read_rope(head: GgufHead, *, n_ctx: int | None = None) -> LlamaCppRope:
    """The arguments llama.cpp passes ``ggml_rope_ext`` for a GGUF model (``llama_model``'s
    hparams and ``llama_context``'s parameters), as :class:`LlamaCppRope`.

    Args:
        head: :func:`read_gguf_head`'s reading.
        n_ctx: the context size llama.cpp runs with (default the training context): LongRoPE
            picks its long factors above ``original_context_length``.

    Raises:
        InvalidArgument: no ``general.architecture``, or an architecture without RoPE.
    """
    arch = head.architecture
    if not arch:
        raise InvalidArgument("GGUF: no general.architecture key", field="body")
    known = gguf_architecture(arch)
    if known is None:
        raise InvalidArgument(
            f"GGUF architecture {arch!r}: posenc does not know llama.cpp's rope type for it; "
            f"known: {', '.join(sorted(ARCH_MODES))}",
            field="body",
        )
    notes: list[str] = []
    heads = head.get("attention.head_count")
    if isinstance(heads, list):
        heads = max(heads)
    key_length = head.get("attention.key_length")
    if key_length is None and heads:
        key_length = int(head.get("embedding_length")) // int(heads)
    n_dims = int(head.get("rope.dimension_count", key_length or 0))
    if n_dims <= 0 or n_dims % 2:
        raise InvalidArgument(
            f"GGUF: rope.dimension_count must be a positive even number, got {n_dims}",
            field="body",
        )
    n_ctx_train = int(head.get("context_length", 0) or 0)
    n_ctx_orig = int(head.get("rope.scaling.original_context_length", n_ctx_train))
    kind = str(head.get("rope.scaling.type", "linear"))
    factor = head.get("rope.scaling.factor") or head.get("rope.scale_linear") or 0.0
    freq_scale = np.float32(1.0) if not factor else np.float32(1.0) / np.float32(factor)
    if kind == "none":
        freq_scale = np.float32(1.0)
    ext = np.float32(head.get("rope.scaling.yarn_ext_factor", -1.0))
    if ext < 0:
        ext = np.float32(1.0 if kind == "yarn" else 0.0)
    attn = np.float32(head.get("rope.scaling.yarn_attn_factor", 1.0))
    if ext != 0:
        back = np.float32(1.0) / freq_scale
        log_mul = np.float32(head.get("rope.scaling.yarn_log_multiplier", 0.0))
        if known.yarn_mscale_all_dim and log_mul != 0:
            log_mul = log_mul / np.float32(0.1)  # the converter wrote 0.1 * mscale_all_dim
        if log_mul != 0:
            mscale = log_mul if known.yarn_mscale_all_dim and log_mul != 1 else np.float32(1.0)
            attn = _get_mscale(back, mscale) / _get_mscale(back, log_mul)
        else:
            attn = _get_mscale(back, np.float32(1.0))
        attn = attn * (
            np.float32(1.0)
            / (np.float32(1.0) + np.float32(0.1) * np.float32(math.log(float(back))))
        )
    attn = attn * np.float32(head.get("rope.scaling.attn_factor", 1.0))
    factors = head.f32_tensor("rope_freqs.weight")
    longrope = kind == "longrope" or "rope_factors_long.weight" in head.tensors
    if factors is None and longrope:  # llama_model::get_rope_factors: by the context size
        ctx = int(n_ctx or n_ctx_train)
        which = "long" if ctx > n_ctx_orig else "short"
        factors = head.f32_tensor(f"rope_factors_{which}.weight")
        notes.append(f"LongRoPE: the {which} factors for n_ctx {ctx}")
        if factors is None:
            notes.append(
                f"LongRoPE: rope_factors_{which} is not in the bytes given; its factors are "
                "taken as 1"
            )
    elif factors is None and "rope_freqs.weight" in head.tensors:
        notes.append("rope_freqs is listed but its data is not in the bytes given")
    if head.data is None:
        notes.append(
            "the bytes stop before the tensor directory: factor tensors (rope_freqs, "
            "rope_factors_long/short), if the model has them, are not applied"
        )
    sections = head.get("rope.dimension_sections")
    mode = known.rope_mode
    return LlamaCppRope(
        n_dims=n_dims,
        mode=mode,
        freq_base=float(np.float32(head.get("rope.freq_base", 10000.0))),
        freq_scale=float(freq_scale),
        ext_factor=float(ext),
        attn_factor=float(attn),
        beta_fast=float(np.float32(head.get("rope.scaling.yarn_beta_fast", 32.0))),
        beta_slow=float(np.float32(head.get("rope.scaling.yarn_beta_slow", 1.0))),
        n_ctx_orig=n_ctx_orig,
        sections=tuple(int(s) for s in sections[:4]) if sections else None,  # type: ignore[arg-type]
        freq_factors=tuple(float(np.float32(f)) for f in factors) if factors else None,
        notes=tuple(notes),
    )


def gguf_summary(head: GgufHead, rope: LlamaCppRope) -> dict[str, Any]:
    """``/v1/configs/positions``' answer for a GGUF: how llama.cpp reads its positions."""
    heads = head.get("attention.head_count")
    if isinstance(heads, list):
        heads = max(heads)
    head_dim = head.get("attention.key_length")
    if head_dim is None and heads:
        head_dim = int(head.get("embedding_length")) // int(heads)
    return {
        "model_type": head.architecture,
        "kind": "rope",
        "max_position_embeddings": head.get("context_length"),
        "head_dim": head_dim,
        "rope": {
            "default": {
                "rotary_dim": rope.n_dims,
                "rope_theta": rope.freq_base,
                "layout": rope.layout,
                "llamacpp": rope.to_dict(),
                **gguf_entry(rope),
            }
        },
        "gguf": {
            "version": head.version,
            "kv_bytes": head.kv_end,
            "tensors": len(head.tensors),
            "file_type": head.metadata.get("general.file_type"),
        },
        "engine": LLAMA_CPP.name,
        "warnings": list(rope.notes),
        "meta": {"engine": LLAMA_CPP.name},
    }


def as_mapping(head: GgufHead) -> Mapping[str, Any]:
    """The metadata without its large arrays (the vocabulary), JSON-ready."""
    return {k: v for k, v in head.metadata.items() if not (isinstance(v, list) and len(v) > 64)}


__all__ = [
    "ARCH_MODES",
    "DEFAULT_BUDGET",
    "GgufBudget",
    "GgufHead",
    "GgufLimit",
    "TensorInfo",
    "as_mapping",
    "gguf_summary",
    "llamacpp_rope_from_gguf",
    "read_gguf_head",
    "read_rope",
]
