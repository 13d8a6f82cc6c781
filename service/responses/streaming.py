"""Streamed and kept responses: bodies sent as their row blocks are computed.

A table endpoint's :class:`~service.responses.plans.Plan` may carry ``stream``: a function giving
a :class:`~service.responses.bodies.StreamBundle`, the bundle's tensors as
:class:`posenc.core.blocks.TableBlocks` plus its ``meta``. When the plan is over ``max_elements``
(and within ``max_stream_elements``) and the negotiated format is ``raw``, ``npy`` or
``safetensors``, :func:`service.responses.paths.choose` gives it a
:class:`~service.responses.paths.Streamed` value, and :func:`streamed_response` answers with a
:class:`~starlette.responses.StreamingResponse`:

1. sizes are checked from the request's numbers before anything is allocated (413 above
   ``max_stream_elements``; JSON and PNG stay limited by ``max_elements``, and their 413 says
   which formats stream and up to what size);
2. the ETag is the one a whole response would carry (the same canonical key), so
   ``If-None-Match`` gives 304 / 412 without computing;
3. the headers go first, with the exact ``Content-Length`` (the npy header and the safetensors
   header are worked out from the shapes; the safetensors header is byte for byte the one
   ``safetensors.torch.save`` writes for the same tensors and metadata);
4. the body is the rows, a block of at most
   :data:`~service.responses.bodies.STREAM_BLOCK_BYTES` at a time, each block
   computed in a worker thread while the previous one is being sent (the event loop never
   computes). A block is written into a buffer of the response's small pool and handed to the
   transport without a copy (:class:`_BufferPool`).

Memory stays bounded by a few blocks (and their float64 scratch) whatever the table's size.
Streamed bodies are never cached.

Admission: a streamed response holds bytes of the in-flight budget
(:meth:`service.admission.budget.ByteBudget.reserve`, taken by
:func:`service.responses.respond.respond`) for the blocks it holds at once
(:meth:`~service.responses.bodies.Body.held_bytes`), shrunk to its buffers once the last block
is computed and given back when the last byte has been sent, or the client has gone.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from collections.abc import AsyncIterator, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from fastapi import Request
from fastapi.responses import Response
from starlette.responses import StreamingResponse

from posenc.core.blocks import TableBlocks
from service.admission.budget import REQUEST_OVERHEAD
from service.formats import (
    FORMAT_MEDIA_TYPES,
    Encoded,
    dtype_name,
)
from service.full_collections import BODY_BYTES
from service.observability import timing, tracing
from service.responses.bodies import (
    KEEP_BLOCK_BYTES,
    STREAM_HELD_BLOCKS,
    Part,
    Rows,
    part_size,
)
from service.responses.buffers import BODY_BUFFERS, SIZE_CLASS
from service.responses.paths import BodyKey, Kept, Streamed
from service.responses.plans import Plan
from service.responses.replay import REPLAY_SCOPE_KEY
from service.responses.threads import computes_on_loop, one_intra_op_thread, one_thread_if
from service.state import ServiceState

__all__ = ["kept_response", "streamed_response"]

# The threads that compute stream blocks (one block at a time per response).
_BLOCK_THREADS = ThreadPoolExecutor(
    max_workers=4, thread_name_prefix="posenc-stream", initializer=one_intra_op_thread
)


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


def streamed_response(
    request: Request, plan: Plan, streamed: Streamed, queue_s: float, held: Any
) -> Response:
    """A table over ``max_elements`` as a :class:`StreamingResponse`: the headers first, with
    the exact ``Content-Length``, then the row blocks, each computed in a worker thread while
    the one before it is sent. ``queue_s``: the seconds it waited for the budgets. ``held`` (a
    :class:`~service.admission.budget.Reservation`) is shrunk to the output buffers once the
    last block has been computed."""
    body = streamed.body
    headers, _ = _headers(plan, streamed.fmt, body.primary, streamed.headers, body.length, "")
    timing.add(request.scope, "queue", queue_s)
    # no compute or encode entries: the headers go before the first row is computed, and a
    # zero there would read as measured (ASGI servers send no HTTP trailers to put them in)
    headers["Server-Timing"] = timing.server_timing("stream")
    return StreamingResponse(
        _body(body.parts, held, request.scope),
        media_type=FORMAT_MEDIA_TYPES[streamed.fmt],
        headers=headers,
    )


# ---------------------------------------------------------------------------------------------
# Stream and keep: a cache miss sent as its blocks are computed, then kept in the body cache
# ---------------------------------------------------------------------------------------------


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
        offset += part_size(part)
    return time.perf_counter() - t0


def _traced_fill(route: str, parts: list[Part], body: np.ndarray) -> float:
    """:func:`_fill_all` inside a ``posenc.compute`` span (the body is written as it is
    computed: there is no encode step)."""
    with tracing.span("posenc.compute", **{"posenc.route": route}):
        return _fill_all(parts, body)


async def _one_block(
    request: Request, state: ServiceState, plan: Plan, kept: Kept, queue_s: float
) -> Response:
    """A kept miss of at most one block: computed (on the event loop when small,
    :func:`~service.responses.threads.computes_on_loop`, else in a block thread), kept, and
    answered whole, its compute in ``Server-Timing``."""
    primary, parts, length = kept.body.primary, kept.body.parts, kept.body.length
    body = _body_buffer(length)
    if computes_on_loop(plan.elements, state.device, request.scope.get(BODY_BYTES, 0)):
        with one_thread_if(True):
            compute_s = _traced_fill(plan.kind.path, parts, body)
    else:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # the request's span, in the block thread
        compute_s = await loop.run_in_executor(
            _BLOCK_THREADS, context.run, _traced_fill, plan.kind.path, parts, body
        )
    media_type = FORMAT_MEDIA_TYPES[kept.fmt]
    headers, own = _headers(plan, kept.fmt, primary, kept.headers, length, "")
    timing.add(request.scope, "queue", queue_s)
    timing.add(request.scope, "compute", compute_s)
    headers["Server-Timing"] = timing.server_timing("miss", queue=queue_s, compute=compute_s)
    del headers["Content-Length"]  # the Response sets it
    _keep(request, state, kept.body_key, Encoded(body.data, media_type, own))
    return Response(body.data, media_type=media_type, headers=headers)


def _keep(request: Request, state: ServiceState, body_key: BodyKey, encoded: Encoded) -> None:
    """Put a kept body in the cache under the request's key; mark it replayable if it fitted."""
    state.cache.put(body_key, encoded, len(encoded.body))
    if body_key in state.cache:  # replayable, as a whole miss would be
        request.scope[REPLAY_SCOPE_KEY] = body_key


def _headers(
    plan: Plan,
    fmt: str,
    primary: TableBlocks,
    base: Mapping[str, str],
    length: int,
    server: str,
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
    size = part_size(part)
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
    request: Request, state: ServiceState, plan: Plan, kept: Kept, queue_s: float, held: Any
) -> Response:
    """Answer a cache miss (a :class:`~service.responses.paths.Kept`) as its row blocks are
    computed, and keep it.

    The body is one buffer of its exact size: each block is computed into its place in a
    worker thread while the block before it is being sent, and once the last block has gone
    the whole buffer goes into the body cache under the key and ETag
    :func:`~service.responses.paths.choose` derived from the request, with the headers a hit
    carries. So the first request for a table costs about its compute or its transfer,
    whichever is longer, instead of their sum, and the next one is a hit (or a replay) of the
    same bytes. ``Server-Timing`` gives the queue time (``queue_s``) and ``cache;desc="miss"``: the compute
    is not over when the headers go (the access log has its time). A body of one block
    (:data:`KEEP_BLOCK_BYTES`) is computed first, on the event loop when small, and sent in one
    write with its compute time. ``held`` (a :class:`~service.admission.budget.Reservation`)
    keeps only the body's bytes once the last block is computed.
    """
    fmt, body = kept.fmt, kept.body
    if body.length <= KEEP_BLOCK_BYTES:  # one block: computed, then sent in one write, and kept
        return await _one_block(request, state, plan, kept, queue_s)
    parts, length = body.parts, body.length
    offsets = [0]
    for part in parts:
        offsets.append(offsets[-1] + (len(part) if isinstance(part, bytes) else part.nbytes))
    headers, own = _headers(plan, fmt, body.primary, kept.headers, length, "")
    timing.add(request.scope, "queue", queue_s)
    # no compute or encode entries: not over when the headers go (the access log has them)
    headers["Server-Timing"] = timing.server_timing("miss", queue=queue_s)
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
                    _keep(request, state, kept.body_key, encoded)
                    BODY_BUFFERS.prefill(length)  # the next miss of this size finds one ready
                    held.shrink(length + REQUEST_OVERHEAD)
                yield chunk
        finally:
            if pending is not None:  # the client went away: drop the block being computed
                pending.cancel()

    return StreamingResponse(chunks(), media_type=FORMAT_MEDIA_TYPES[fmt], headers=headers)
