"""Streamed responses: tables over ``POSENC_MAX_ELEMENTS`` sent as their rows are computed.

A table endpoint's :class:`~service.responses.plans.Plan` may carry ``stream``: a function giving
a :class:`StreamBundle`, the bundle's tensors as :class:`posenc.core.blocks.TableBlocks` plus its
``meta``. When the plan is over ``max_elements`` (and within ``max_stream_elements``) and the
negotiated format is ``raw``, ``npy`` or ``safetensors``, :func:`streamed_response` answers with a
:class:`~starlette.responses.StreamingResponse`:

1. sizes are checked from the request's numbers before anything is allocated (413 above
   ``max_stream_elements``; JSON and PNG stay limited by ``max_elements``, and their 413 says
   which formats stream and up to what size);
2. the ETag is the one a whole response would carry (the same canonical key), so
   ``If-None-Match`` gives 304 / 412 without computing;
3. the headers go first, with the exact ``Content-Length`` (the npy header and the safetensors
   header are worked out from the shapes; the safetensors header is byte for byte the one
   ``safetensors.torch.save`` writes for the same tensors and metadata);
4. the body is the rows, a block of at most :data:`STREAM_BLOCK_BYTES` at a time, each block
   computed in a worker thread while the previous one is being sent (the event loop never
   computes). A block is written into a buffer of the response's small pool and handed to the
   transport without a copy (:class:`_BufferPool`).

Memory stays bounded by a few blocks (and their float64 scratch) whatever the table's size.
Streamed bodies are never cached.

Admission: a streamed response holds bytes of the in-flight budget
(:meth:`service.admission.budget.ByteBudget.reserve`, taken by
:func:`service.responses.respond.respond`) for the blocks it holds at once
(:func:`Body.held_bytes`), shrunk to its buffers once the last block is computed and given back
when the last byte has been sent, or the client has gone.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from collections.abc import AsyncIterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from fastapi import Request
from fastapi.responses import Response
from starlette.responses import StreamingResponse

from posenc.core import codec
from posenc.core.blocks import TableBlocks
from service.admission.budget import REQUEST_OVERHEAD
from service.formats import (
    FORMAT_MEDIA_TYPES,
    STREAM_FORMATS,
    Encoded,
    dtype_name,
    meta_text,
    no_bfloat16_npy,
)
from service.observability import timing, tracing
from service.responses.buffers import BODY_BUFFERS, SIZE_CLASS
from service.responses.plans import Plan, Prepared, check_row
from service.responses.replay import REPLAY_SCOPE_KEY
from service.responses.threads import computes_on_loop, one_intra_op_thread, one_thread_if
from service.state import ServiceState

__all__ = [
    "KEEP_BLOCK_BYTES",
    "KEEP_MIN_BYTES",
    "STREAM_BLOCK_BYTES",
    "STREAM_FORMATS",
    "STREAM_HELD_BLOCKS",
    "Body",
    "StreamBundle",
    "kept_body",
    "kept_response",
    "stream_parts",
    "streamed_body",
    "streamed_response",
]

# Output bytes of one block: the transport holds at most a few of these per response.
STREAM_BLOCK_BYTES = 8 * 1024 * 1024
# Output buffers a stream holds at once, at most (the block being computed, the one being sent,
# one the transport still holds): what its reservation of the in-flight budget counts.
STREAM_HELD_BLOCKS = 3


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


# The threads that compute stream blocks (one block at a time per response).
_BLOCK_THREADS = ThreadPoolExecutor(
    max_workers=4, thread_name_prefix="posenc-stream", initializer=one_intra_op_thread
)


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


class _BufferPool:
    """Output buffers of one response, reused once the transport has let go of them.

    A block is handed to the server as a ``memoryview`` of a pool buffer (no copy); the
    transport may keep it queued after ``send`` returns (uvloop does). A buffer is taken again
    only when nothing but the pool refers to its array any more (CPython reference count), so
    a queued block is never overwritten; otherwise a new buffer is made. With the server's flow
    control that is two or three buffers per response.
    """

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self._entries: list[tuple[torch.Tensor, np.ndarray]] = []

    def take(self) -> tuple[torch.Tensor, np.ndarray]:
        for entry in self._entries:
            # references: the tuple in the pool and getrefcount's argument
            if sys.getrefcount(entry[1]) <= 2:
                return entry
        # from the shared pool (back to it after the response); the array handed out is a view
        # of the tensor, which alone refers to the pool's buffer: the count above stays right
        buf = torch.from_numpy(BODY_BUFFERS.take(self.nbytes))
        entry = (buf, buf.numpy())
        self._entries.append(entry)
        return entry


def _part_bytes(part: Part, pool: _BufferPool) -> memoryview | bytes:
    """Compute one part (in a worker thread): a block written into a pool buffer, whose bytes
    are returned without a copy."""
    if isinstance(part, bytes):
        return part
    nbytes = part.nbytes
    buf, arr = pool.take()
    out = buf[:nbytes].view(part.dtype).view(part.stop - part.start, part.row_elements)
    part.table.fill(part.start, part.stop, out)  # (N, row) on the CPU
    if sys.byteorder == "big" and part.element_size > 1:
        return out.numpy().byteswap().reshape(-1).view(np.uint8).data
    return arr.data[:nbytes]


def _timed_part(part: Part, pool: _BufferPool) -> tuple[memoryview | bytes, float]:
    """:func:`_part_bytes` and the seconds it took."""
    t0 = time.perf_counter()
    return _part_bytes(part, pool), time.perf_counter() - t0


def _part_size(part: Part) -> int:
    return len(part) if isinstance(part, bytes) else part.nbytes


async def _body(
    parts: list[Part], held: Any, scope: MutableMapping[str, Any]
) -> AsyncIterator[Any]:
    """Each part in order; the next block is computed in a thread while this one is sent (the
    compute time of each is added to the request's ``compute`` phase). Once the last block is
    computed, ``held`` keeps only the output buffers still being sent."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[Any] | None = None
    pool = _BufferPool(max((p.nbytes for p in parts if isinstance(p, Rows)), default=0))
    try:
        for k, part in enumerate(parts):
            if pending is None:
                pending = loop.run_in_executor(_BLOCK_THREADS, _timed_part, part, pool)
            chunk, seconds = await pending
            timing.add(scope, "compute", seconds)
            pending = None
            if k + 1 < len(parts):
                pending = loop.run_in_executor(_BLOCK_THREADS, _timed_part, parts[k + 1], pool)
            else:  # computed: the float64 scratch is gone, the buffers being sent stay
                held.shrink(STREAM_HELD_BLOCKS * pool.nbytes + REQUEST_OVERHEAD)
            yield chunk
    finally:
        if pending is not None:  # the client went away: drop the block being computed
            pending.cancel()


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


def _body_of(bundle: StreamBundle, fmt: str, block_bytes: int) -> Body:
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
    body = _body_of(bundle, fmt, STREAM_BLOCK_BYTES)
    name, widest = body.primary.name, 0
    for part in body.parts:  # a block holds at least one row
        if isinstance(part, Rows) and part.row_elements > widest:
            name, widest = part.table.name, part.row_elements
    if widest > plan.row_elements:  # wider than the kind said (checked already)
        check_row(name, widest, max_elements)
    if fmt == "npy" and body.primary.dtype == torch.bfloat16:
        raise no_bfloat16_npy(body.primary.name)
    return body


def streamed_response(request: Request, plan: Plan, prepared: Prepared, held: Any) -> Response:
    """A table over ``max_elements`` as a :class:`StreamingResponse`: the headers first, with
    the exact ``Content-Length``, then the row blocks, each computed in a worker thread while
    the one before it is sent. ``held`` (a :class:`~service.admission.budget.Reservation`) is
    shrunk to the output buffers once the last block has been computed."""
    body: Body = prepared.body
    headers, _ = _headers(plan, prepared.fmt, body.primary, prepared.headers, body.length, "")
    timing.add(request.scope, "queue", prepared.queue_s)
    # no compute or encode entries: the headers go before the first row is computed, and a
    # zero there would read as measured (ASGI servers send no HTTP trailers to put them in)
    headers["Server-Timing"] = timing.server_timing("stream")
    return StreamingResponse(
        _body(body.parts, held, request.scope),
        media_type=FORMAT_MEDIA_TYPES[prepared.fmt],
        headers=headers,
    )


# ---------------------------------------------------------------------------------------------
# Stream and keep: a cache miss sent as its blocks are computed, then kept in the body cache
# ---------------------------------------------------------------------------------------------

# A cache miss whose raw, npy or safetensors body has at least this many bytes is sent as its
# row blocks are computed, then kept (kept_response): every one, whatever its size, so that a
# binary miss has one path (tests raise it to compare with the whole path's answer).
KEEP_MIN_BYTES = 0
# Output bytes of one block of a kept miss: the first block goes out after about 1/6 of a
# 2048x768 float32 table's compute, and each later one is computed while the one before is sent.
KEEP_BLOCK_BYTES = 1 << 20


def _body_buffer(length: int) -> np.ndarray:
    """A ``(length,)`` uint8 buffer for a kept body: the reused pool's from one size class up,
    the heap's below (a pool buffer is at least a size class)."""
    if length >= SIZE_CLASS:
        return BODY_BUFFERS.take(length)
    return np.empty(length, dtype=np.uint8)


def _fill_all(parts: list[Part], body: np.ndarray) -> float:
    """Write every part into ``body`` in order; the seconds it took."""
    t0 = time.perf_counter()
    offset = 0
    for part in parts:
        _fill_part(part, body, offset)
        offset += _part_size(part)
    return time.perf_counter() - t0


def _traced_fill(route: str, parts: list[Part], body: np.ndarray) -> float:
    """:func:`_fill_all` inside a ``posenc.compute`` span (the body is written as it is
    computed: there is no encode step)."""
    with tracing.span("posenc.compute", **{"posenc.route": route}):
        return _fill_all(parts, body)


async def _one_block(
    request: Request, state: ServiceState, plan: Plan, prepared: Prepared
) -> Response:
    """A kept miss of at most one block: computed (on the event loop when small,
    :func:`~service.responses.threads.computes_on_loop`, else in a block thread), kept, and
    answered whole, its compute in ``Server-Timing``."""
    primary, parts, length = prepared.body.primary, prepared.body.parts, prepared.body.length
    body = _body_buffer(length)
    if computes_on_loop(plan.elements, state.device):
        with one_thread_if(True):
            compute_s = _traced_fill(plan.kind.path, parts, body)
    else:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # the request's span, in the block thread
        compute_s = await loop.run_in_executor(
            _BLOCK_THREADS, context.run, _traced_fill, plan.kind.path, parts, body
        )
    headers, own = _headers(plan, prepared.fmt, primary, prepared.headers, length, "")
    timing.add(request.scope, "queue", prepared.queue_s)
    timing.add(request.scope, "compute", compute_s)
    headers["Server-Timing"] = timing.server_timing(
        "miss", queue=prepared.queue_s, compute=compute_s
    )
    del headers["Content-Length"]  # the Response sets it
    _keep(request, state, prepared, Encoded(body.data, FORMAT_MEDIA_TYPES[prepared.fmt], own))
    return Response(body.data, media_type=FORMAT_MEDIA_TYPES[prepared.fmt], headers=headers)


def _keep(request: Request, state: ServiceState, prepared: Prepared, encoded: Encoded) -> None:
    """Put a kept body in the cache under the request's key; mark it replayable if it fitted."""
    state.cache.put(prepared.body_key, encoded, len(encoded.body))
    if prepared.body_key in state.cache:  # replayable, as a whole miss would be
        request.scope[REPLAY_SCOPE_KEY] = prepared.body_key


def kept_body(request: Request, state: ServiceState, plan: Plan, prepared: Prepared) -> Body | None:
    """The row blocks of a cache miss that is sent as they are computed, then kept
    (:func:`kept_response`); None where the whole path serves it (better).

    Kept: a table or a token batch with row blocks, asked as raw, npy or safetensors, up to
    ``max_elements``, of at least :data:`KEEP_MIN_BYTES` (any size), whose tensors are not in
    the cache already (encoding those costs less than computing), on a
    little-endian machine, computed on the CPU, and not npy of bfloat16 (the whole path's 406).
    """
    if not (
        plan.stream is not None
        and prepared.fmt in STREAM_FORMATS
        and request.method in ("GET", "POST")
        and plan.elements * 8 >= KEEP_MIN_BYTES  # an upper bound of the bytes: 8 per element
        and plan.elements <= state.settings.max_elements
        and sys.byteorder == "little"
        and state.device.type == "cpu"  # not measured on a GPU: there the whole path stays
        and prepared.bundle is None
    ):
        return None
    bundle: StreamBundle = plan.stream()
    if prepared.fmt == "npy" and bundle.primary.dtype == torch.bfloat16:
        return None
    body = _body_of(bundle, prepared.fmt, KEEP_BLOCK_BYTES)
    return body if body.length >= KEEP_MIN_BYTES else None


def _headers(
    plan: Plan, fmt: str, primary: TableBlocks, base: dict[str, str], length: int, server: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The headers of a streamed body of ``plan`` (those of the whole response, in its order),
    and of them the encoded body's own (``X-Tensor-*``, what the body cache keeps with it)."""
    own: dict[str, str] = {}
    if fmt != "safetensors":
        own = {
            "X-Tensor-Name": primary.name,
            "X-Tensor-Shape": ",".join(str(n) for n in primary.shape),
            "X-Tensor-Dtype": dtype_name(primary.dtype),
        }
    headers = {**base, "Content-Length": str(length), "Server-Timing": server, **own}
    suffix = {"safetensors": "safetensors", "npy": "npy", "raw": "bin"}[fmt]
    stem = plan.kind.path.rstrip("/").rsplit("/", 1)[-1]
    if fmt != "safetensors":
        stem = f"{stem}-{primary.name}"
    headers["Content-Disposition"] = f'inline; filename="{stem}.{suffix}"'
    return headers, own


def _fill_part(part: Part, body: np.ndarray, offset: int) -> memoryview:
    """Write one part into ``body[offset:]`` (in a worker thread); its bytes, without a copy."""
    size = _part_size(part)
    view = body[offset : offset + size]
    if isinstance(part, bytes):
        view[:] = np.frombuffer(part, dtype=np.uint8)
    else:
        start, stop = part.start, part.stop
        if offset % part.element_size == 0:  # always, but for safetensors' odd tensor sizes
            out = torch.from_numpy(view).view(part.dtype).view(stop - start, part.row_elements)
            part.table.fill(start, stop, out)
        else:
            rows = part.table.fill(start, stop)
            view[:] = rows.reshape(-1).view(torch.uint8).numpy()
    return view.data


async def kept_response(
    request: Request, state: ServiceState, plan: Plan, prepared: Prepared, held: Any
) -> Response:
    """Answer a cache miss (see :func:`kept_body`) as its row blocks are computed, and keep it.

    The body is one buffer of its exact size: each block is computed into its place in a
    worker thread while the block before it is being sent, and once the last block has gone
    the whole buffer goes into the body cache under the key and ETag
    :func:`~service.responses.plans.prepare` derived from the request, with the headers a hit
    carries. So the first request for a table costs about its compute or its transfer,
    whichever is longer, instead of their sum, and the next one is a hit (or a replay) of the
    same bytes. ``Server-Timing`` gives the queue time and ``cache;desc="miss"``: the compute
    is not over when the headers go (the access log has its time). A body of one block
    (:data:`KEEP_BLOCK_BYTES`) is computed first, on the event loop when small, and sent in one
    write with its compute time. ``held`` (a :class:`~service.admission.budget.Reservation`)
    keeps only the body's bytes once the last block is computed.
    """
    fmt, body = prepared.fmt, prepared.body
    if body.length <= KEEP_BLOCK_BYTES:  # one block: computed, then sent in one write, and kept
        return await _one_block(request, state, plan, prepared)
    parts, length = body.parts, body.length
    offsets = [0]
    for part in parts:
        offsets.append(offsets[-1] + (len(part) if isinstance(part, bytes) else part.nbytes))
    headers, own = _headers(plan, fmt, body.primary, prepared.headers, length, "")
    timing.add(request.scope, "queue", prepared.queue_s)
    # no compute or encode entries: not over when the headers go (the access log has them)
    headers["Server-Timing"] = timing.server_timing("miss", queue=prepared.queue_s)
    buffer: list[np.ndarray] = []  # the (length,) uint8 buffer, taken by the first block's thread

    def fill(k: int) -> tuple[memoryview, float]:
        t0 = time.perf_counter()
        with tracing.span("posenc.compute", **{"posenc.route": plan.kind.path, "posenc.block": k}):
            if not buffer:  # off the event loop: a new buffer is mapped and populated here
                buffer.append(BODY_BUFFERS.take(length))
            view = _fill_part(parts[k], buffer[0], offsets[k])
        return view, time.perf_counter() - t0

    async def chunks() -> AsyncIterator[memoryview]:
        loop = asyncio.get_running_loop()

        def start(k: int) -> asyncio.Future[tuple[memoryview, float]]:
            context = contextvars.copy_context()  # the request's span, in the block thread
            return loop.run_in_executor(_BLOCK_THREADS, context.run, fill, k)

        following = start(0)
        pending: asyncio.Future[tuple[memoryview, float]] | None = following
        try:
            for k in range(len(parts)):
                chunk, seconds = await following
                timing.add(request.scope, "compute", seconds)
                pending = None
                if k + 1 < len(parts):
                    following = pending = start(k + 1)
                else:  # computed: kept whole; the float64 scratch is gone, the body stays
                    encoded = Encoded(buffer[0].data, FORMAT_MEDIA_TYPES[fmt], own)
                    _keep(request, state, prepared, encoded)
                    BODY_BUFFERS.prefill(length)  # the next miss of this size finds one ready
                    held.shrink(length + REQUEST_OVERHEAD)
                yield chunk
        finally:
            if pending is not None:  # the client went away: drop the block being computed
                pending.cancel()

    return StreamingResponse(chunks(), media_type=FORMAT_MEDIA_TYPES[fmt], headers=headers)
