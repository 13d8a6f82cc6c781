"""The bodies sent as their row blocks are computed: a table's rows in order behind the header of
its format (raw, npy or safetensors), planned from the shapes before anything is computed.

A table endpoint's :class:`~service.responses.plans.Plan` may carry ``stream``: a function giving
a :class:`StreamBundle`, the bundle's tensors as :class:`posenc.core.blocks.TableBlocks` plus its
``meta``. :func:`streamed_body` plans a table over ``max_elements`` in blocks of
:data:`STREAM_BLOCK_BYTES` (:mod:`service.responses.streaming` sends it, computing each block
while the one before is sent), :func:`kept_body` a cache miss in blocks of
:data:`KEEP_BLOCK_BYTES` (sent likewise, then kept in the body cache). Either is a
:class:`Body`: its parts (header bytes, then :class:`Rows`) and exact length. The npy header and
the safetensors header are worked out from the shapes; the safetensors header is byte for byte
the one ``safetensors.torch.save`` writes for the same tensors and metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posenc.core import codec
from posenc.core.blocks import TableBlocks
from service.admission.budget import REQUEST_OVERHEAD
from service.formats import meta_text, no_bfloat16_npy
from service.responses.plans import Plan, check_row

__all__ = [
    "KEEP_BLOCK_BYTES",
    "STREAM_BLOCK_BYTES",
    "STREAM_HELD_BLOCKS",
    "Body",
    "Part",
    "Rows",
    "StreamBundle",
    "body_of",
    "kept_body",
    "part_size",
    "stream_parts",
    "streamed_body",
]

# Output bytes of one block: the transport holds at most a few of these per response.
STREAM_BLOCK_BYTES = 8 * 1024 * 1024
# Output buffers a stream holds at once, at most (the block being computed, the one being sent,
# one the transport still holds): what its reservation of the in-flight budget counts.
STREAM_HELD_BLOCKS = 3
# Output bytes of one block of a kept miss: the first block goes out after about 1/6 of a
# 2048x768 float32 table's compute, and each later one is computed while the one before is sent.
KEEP_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class StreamBundle:
    """A bundle whose tensors are computed in row blocks.

    Attributes:
        tensors: name -> :class:`~posenc.core.blocks.TableBlocks`, in the endpoint's order (the
            first is the primary tensor, the one raw and npy carry).
        meta: the bundle's JSON-able ``meta`` (safetensors' ``__metadata__["meta"]``).
    """

    tensors: dict[str, TableBlocks]
    meta: dict[str, Any]

    @property
    def primary(self) -> TableBlocks:
        return next(iter(self.tensors.values()))


@dataclass(frozen=True)
class Rows:
    """Rows ``[start, stop)`` of a table, and what writing them takes (read from the table once,
    when the body is planned).

    Attributes:
        table: the table's row blocks.
        start, stop: the rows.
        row_elements: elements per row.
        dtype: the table's dtype.
        element_size: bytes per element.
        nbytes: bytes of the rows.
    """

    table: TableBlocks
    start: int
    stop: int
    row_elements: int
    dtype: torch.dtype
    element_size: int
    nbytes: int


# A part of a body: bytes as they are, or rows of a table.
Part = bytes | Rows


def stream_parts(
    bundle: StreamBundle, fmt: str, block_bytes: int = STREAM_BLOCK_BYTES
) -> list[Part]:
    """The body of ``fmt`` as parts: headers as bytes, then each table's row blocks."""
    primary = bundle.primary
    parts: list[Part] = []
    if fmt == "raw":
        tables = [primary]
    elif fmt == "npy":
        tables = [primary]
        parts.append(codec.npy_header(primary.shape, primary.dtype))
    else:
        specs = {name: (t.shape, t.dtype) for name, t in bundle.tensors.items()}
        header, order = codec.safetensors_header(specs, {"meta": meta_text(bundle.meta)})
        tables = [bundle.tensors[name] for name in order]
        parts.append(header)
    for table in tables:
        row, dtype, size = table.row_elements, table.dtype, table.element_size
        for start, stop in table.ranges(block_bytes):
            parts.append(Rows(table, start, stop, row, dtype, size, (stop - start) * row * size))
    return parts


def part_size(part: Part) -> int:
    """Bytes of one part of a body."""
    return len(part) if isinstance(part, bytes) else part.nbytes


@dataclass(frozen=True)
class Body:
    """A body sent as its row blocks are computed (streamed or kept).

    Attributes:
        primary: the bundle's primary tensor (raw and npy carry it; its name, shape and dtype
            go in ``X-Tensor-*``).
        parts: the body in order (headers as bytes, then row blocks).
        length: its bytes (``Content-Length``).
    """

    primary: TableBlocks
    parts: list[Part]
    length: int

    def held_bytes(self) -> int:
        """What a stream holds at most at once: :data:`STREAM_HELD_BLOCKS` output buffers of
        its largest block, the float64 scratch of the block being computed (16 bytes per
        element) and :data:`~service.admission.budget.REQUEST_OVERHEAD`."""
        largest = elements = 0
        for part in self.parts:
            if isinstance(part, Rows):
                largest = max(largest, part.nbytes)
                elements = max(elements, part.nbytes // part.element_size)
        return STREAM_HELD_BLOCKS * largest + 16 * elements + REQUEST_OVERHEAD


def body_of(bundle: StreamBundle, fmt: str, block_bytes: int) -> Body:
    """The body of ``bundle`` in ``fmt`` (raw, npy or safetensors) as parts of at most
    ``block_bytes`` rows each: nothing is computed yet."""
    primary = bundle.primary
    parts = stream_parts(bundle, fmt, block_bytes)
    length = 0
    for part in parts:
        length += len(part) if isinstance(part, bytes) else part.nbytes
    return Body(primary, parts, length)


def streamed_body(plan: Plan, fmt: str, max_elements: int) -> Body:
    """The row blocks of a table over ``max_elements`` (its sizes checked by
    :func:`~service.responses.plans.check_plan`): cheap, nothing is computed yet.

    Raises:
        TooLarge: (413) one row of a tensor over ``max_elements``.
        NotAcceptable: (406) npy of bfloat16.
    """
    if plan.stream is None:
        raise TypeError(f"plan for {plan.kind.path} has no stream")
    bundle: StreamBundle = plan.stream()
    if fmt == "npy" and bundle.primary.dtype == torch.bfloat16:  # before the npy header's error
        raise no_bfloat16_npy(bundle.primary.name)
    body = body_of(bundle, fmt, STREAM_BLOCK_BYTES)
    name, widest = body.primary.name, 0
    for part in body.parts:  # a block holds at least one row
        if isinstance(part, Rows) and part.row_elements > widest:
            name, widest = part.table.name, part.row_elements
    if widest > plan.row_elements:  # wider than the kind said (checked already)
        check_row(name, widest, max_elements)
    return body


def kept_body(plan: Plan, fmt: str) -> Body | None:
    """The row blocks of a cache miss sent as they are computed, then kept (in blocks of
    :data:`KEEP_BLOCK_BYTES`): cheap, nothing is computed yet. None for npy of bfloat16 (the
    whole path's 406) or a plan without row blocks; whether a miss is kept is decided by
    :func:`service.responses.paths.choose`."""
    if plan.stream is None:
        return None
    bundle: StreamBundle = plan.stream()
    if fmt == "npy" and bundle.primary.dtype == torch.bfloat16:
        return None
    return body_of(bundle, fmt, KEEP_BLOCK_BYTES)
