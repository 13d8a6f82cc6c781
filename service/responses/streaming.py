"""Streamed responses: tables over ``POSENC_MAX_ELEMENTS`` sent as their rows are computed.

A table endpoint's :class:`~service.responses.plans.Plan` may carry ``stream``: a function giving
a :class:`StreamBundle`, the bundle's tensors as :class:`posenc.blocks.TableBlocks` plus its
``meta``. When the plan is over ``max_elements`` (and within ``max_stream_elements``) and the
negotiated format is ``raw``, ``npy`` or ``safetensors``, :func:`respond_streamed` answers with a
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

Admission hook: when ``app.state.posenc_stream_hold`` is set, it is called as
``hold(nbytes)`` for each block and must return an async context manager; the block is computed
and sent inside it, so an in-flight byte budget can count a streamed response by the rows it
holds (see ``service/admission/budget.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from fastapi import Request
from fastapi.responses import Response
from starlette.responses import StreamingResponse

from posenc import codec
from posenc.blocks import TableBlocks
from posenc.errors import TooLarge
from service.admission.budget import REQUEST_OVERHEAD, HeldResponse, estimate_bytes
from service.observability import timing, tracing
from service.query import OutputOptions
from service.responses.buffers import BODY_BUFFERS, SIZE_CLASS
from service.responses.formats import (
    FORMAT_MEDIA_TYPES,
    Encoded,
    dtype_name,
    meta_text,
    negotiate,
    no_bfloat16_npy,
)
from service.responses.plans import Plan, Prepared, json_ints, prepare
from service.responses.replay import REPLAY_SCOPE_KEY
from service.responses.threads import computes_on_loop, one_intra_op_thread, one_thread_if
from service.state import ServiceState

__all__ = [
    "KEEP_BLOCK_BYTES",
    "KEEP_MIN_BYTES",
    "STREAM_BLOCK_BYTES",
    "STREAM_FORMATS",
    "StreamBundle",
    "check_row_width",
    "keeps",
    "respond_kept",
    "respond_streamed",
    "stream_parts",
]

STREAM_FORMATS = ("raw", "npy", "safetensors")
# Output bytes of one block: the transport holds at most a few of these per response.
STREAM_BLOCK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class StreamBundle:
    """A bundle whose tensors are computed in row blocks.

    Attributes:
        tensors: name -> :class:`~posenc.blocks.TableBlocks`, in the endpoint's order (the
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

# A part of a body: bytes as they are, or rows [start, stop) of a table.
Part = bytes | tuple[TableBlocks, int, int]


def stream_parts(
    bundle: StreamBundle, fmt: str, block_bytes: int = STREAM_BLOCK_BYTES
) -> list[Part]:
    """The body of ``fmt`` as parts: headers as bytes, then each table's row blocks."""

    def rows(table: TableBlocks) -> list[Part]:
        return [(table, start, stop) for start, stop in table.ranges(block_bytes)]

    primary = bundle.primary
    if fmt == "raw":
        return rows(primary)
    if fmt == "npy":
        return [codec.npy_header(primary.shape, primary.dtype), *rows(primary)]
    specs = {name: (t.shape, t.dtype) for name, t in bundle.tensors.items()}
    header, order = codec.safetensors_header(specs, {"meta": meta_text(bundle.meta)})
    parts: list[Part] = [header]
    for name in order:
        parts += rows(bundle.tensors[name])
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
    table, start, stop = part
    nbytes = _part_size(part)
    buf, arr = pool.take()
    out = buf[:nbytes].view(table.dtype).view(stop - start, table.row_elements)
    table.fill(start, stop, out)  # (N, row) on the CPU
    if sys.byteorder == "big" and table.element_size > 1:
        return out.numpy().byteswap().reshape(-1).view(np.uint8).data
    return arr.data[:nbytes]


def _timed_part(part: Part, pool: _BufferPool) -> tuple[memoryview | bytes, float]:
    """:func:`_part_bytes` and the seconds it took."""
    t0 = time.perf_counter()
    return _part_bytes(part, pool), time.perf_counter() - t0


def _part_size(part: Part) -> int:
    if isinstance(part, bytes):
        return len(part)
    table, start, stop = part
    return (stop - start) * table.row_elements * table.element_size


async def _body(
    parts: list[Part], hold: Callable[[int], Any] | None, scope: MutableMapping[str, Any]
) -> AsyncIterator[Any]:
    """Each part in order; the next block is computed in a thread while this one is sent (the
    compute time of each is added to the request's ``compute`` phase)."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[Any] | None = None
    pool = _BufferPool(max((_part_size(p) for p in parts if not isinstance(p, bytes)), default=0))
    try:
        for k, part in enumerate(parts):
            if hold is not None:
                async with hold(_part_size(part)):
                    chunk, seconds = await loop.run_in_executor(
                        _BLOCK_THREADS, _timed_part, part, pool
                    )
                    timing.add(scope, "compute", seconds)
                    yield chunk
                continue
            if pending is None:
                pending = loop.run_in_executor(_BLOCK_THREADS, _timed_part, part, pool)
            chunk, seconds = await pending
            timing.add(scope, "compute", seconds)
            pending = None
            if k + 1 < len(parts):
                pending = loop.run_in_executor(_BLOCK_THREADS, _timed_part, parts[k + 1], pool)
            yield chunk
    finally:
        if pending is not None:  # the client went away: drop the block being computed
            pending.cancel()


def _too_large(plan: Plan, state: ServiceState, fmt: str) -> TooLarge:
    settings = state.settings
    names = " + ".join(plan.names) or "all tensors"
    return TooLarge(
        f"the output would have {plan.elements} elements ({names}), over the limit of "
        f"{settings.max_elements} elements (POSENC_MAX_ELEMENTS) for {fmt}; raw, npy and "
        f"safetensors stream tables up to {settings.max_stream_elements} elements "
        "(POSENC_MAX_STREAM_ELEMENTS): ask for ?format=raw, npy or safetensors, or fewer positions",
        limit=settings.max_elements,
        requested=plan.elements,
        field="format",
    )


def check_row_width(name: str, row_elements: int, limit: int) -> None:
    """TooLarge (413) for a table whose one row (its last dimension) is wider than ``limit``
    elements: a block holds at least one row, computed in float64, so such a row would take
    the memory streaming is meant to bound (``d_model`` 2**30 with ``seq_len`` 1, say)."""
    if row_elements > limit:
        raise TooLarge(
            f"one row of {name} would have {row_elements} elements, over the limit of {limit} "
            "elements (POSENC_MAX_ELEMENTS) for a row of a streamed table; streaming splits "
            "tables by rows (positions), so ask for a smaller d_model, head_dim or key_len",
            limit=limit,
            requested=row_elements,
            field=None,
        )


def respond_streamed(
    request: Request, state: ServiceState, plan: Plan, out: OutputOptions
) -> Response:
    """Answer a plan over ``max_elements`` that has ``stream``: cheap, safe on the event loop
    (the rows are computed later, in threads, as the body is sent).

    Raises:
        TooLarge: (413) JSON or PNG asked; over ``max_stream_elements``; an allocation over
            ``max_elements``.
        NotAcceptable: (406) no acceptable format, or npy of bfloat16.
    """
    settings = state.settings
    fmt = negotiate(request.headers.get("accept"), out.format)
    if fmt not in STREAM_FORMATS:
        raise _too_large(plan, state, fmt)
    if plan.elements > settings.max_stream_elements:
        raise TooLarge(
            f"the output would have {plan.elements} elements "
            f"({' + '.join(plan.names) or 'all tensors'}), over the streaming limit of "
            f"{settings.max_stream_elements} elements (POSENC_MAX_STREAM_ELEMENTS); ask for "
            "fewer positions, heads or a shorter key length",
            limit=settings.max_stream_elements,
            requested=plan.elements,
            field=None,
        )
    prepared = prepare(request, state, plan, out, limit=settings.max_stream_elements)
    if prepared.response is not None:  # 304 / 412 (streamed bodies are never in the cache)
        return prepared.response
    if plan.stream is None:
        raise TypeError(f"plan for {plan.route} has no stream")
    # before the stream is built: building it may make a row's worth of frequencies
    check_row_width(
        plan.names[0] if plan.names else "the table", plan.row_elements, settings.max_elements
    )
    bundle: StreamBundle = plan.stream()
    for blocks in bundle.tensors.values():
        check_row_width(blocks.name, blocks.row_elements, settings.max_elements)
    primary = bundle.primary
    if fmt == "npy" and primary.dtype == torch.bfloat16:
        raise no_bfloat16_npy(primary.name)
    parts = stream_parts(bundle, fmt)
    length = sum(_part_size(p) for p in parts)
    # no compute or encode entries: the headers go before the first row is computed, and a
    # zero there would read as measured (ASGI servers send no HTTP trailers to put them in)
    server = timing.server_timing("stream")
    headers, _ = _headers(plan, fmt, primary, prepared.headers, length, server)
    hold = getattr(request.app.state, "posenc_stream_hold", None)
    return StreamingResponse(
        _body(parts, hold, request.scope), media_type=FORMAT_MEDIA_TYPES[fmt], headers=headers
    )


# ---------------------------------------------------------------------------------------------
# Stream and keep: a cache miss sent as its blocks are computed, then kept in the body cache
# ---------------------------------------------------------------------------------------------

# A cache miss whose raw, npy or safetensors body has at least this many bytes is sent as its
# row blocks are computed, then kept (respond_kept): every one, whatever its size, so that a
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
    request: Request,
    state: ServiceState,
    plan: Plan,
    prepared: Prepared,
    primary: TableBlocks,
    parts: list[Part],
    length: int,
    queue_s: float,
) -> Response:
    """A kept miss of at most one block: computed (on the event loop when small,
    :func:`~service.responses.threads.computes_on_loop`, else in a block thread), kept, and
    answered whole, its compute in ``Server-Timing``."""
    body = _body_buffer(length)
    if computes_on_loop(plan.elements, state.device):
        with one_thread_if(True):
            compute_s = _traced_fill(plan.route, parts, body)
    else:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # the request's span, in the block thread
        compute_s = await loop.run_in_executor(
            _BLOCK_THREADS, context.run, _traced_fill, plan.route, parts, body
        )
    timing.add(request.scope, "compute", compute_s)
    server = timing.server_timing("miss", queue=queue_s, compute=compute_s)
    headers, own = _headers(plan, prepared.fmt, primary, prepared.headers, length, server)
    del headers["Content-Length"]  # the Response sets it
    _keep(request, state, prepared, Encoded(body.data, FORMAT_MEDIA_TYPES[prepared.fmt], own))
    return Response(body.data, media_type=FORMAT_MEDIA_TYPES[prepared.fmt], headers=headers)


def _keep(request: Request, state: ServiceState, prepared: Prepared, encoded: Encoded) -> None:
    """Put a kept body in the cache under the request's key; mark it replayable if it fitted."""
    state.cache.put(prepared.body_key, encoded, len(encoded.body))
    if prepared.body_key in state.cache:  # replayable, as a whole miss would be
        request.scope[REPLAY_SCOPE_KEY] = prepared.body_key


def keeps(request: Request, state: ServiceState, plan: Plan, fmt: str) -> bool:
    """Whether a cache miss of ``plan`` as ``fmt`` goes through :func:`respond_kept`: a table
    (not a token batch: ``cache_tensors``) with row blocks, asked as raw, npy or safetensors, up to ``max_elements``, of any size
    (:data:`KEEP_MIN_BYTES`), whose tensors are not in the cache already (encoding those costs
    less than computing), on a little-endian machine, computed on the CPU."""
    return (
        plan.stream is not None
        and fmt in STREAM_FORMATS
        and request.method in ("GET", "POST")
        and plan.elements * 8 >= KEEP_MIN_BYTES  # an upper bound of the bytes: 8 per element
        and plan.elements <= state.settings.max_elements
        and sys.byteorder == "little"
        and state.device.type == "cpu"  # not measured on a GPU: there the whole path stays
    )


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
    stem = plan.route.rstrip("/").rsplit("/", 1)[-1]
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
        table, start, stop = part
        if offset % table.element_size == 0:  # always, but for safetensors' odd tensor sizes
            out = torch.from_numpy(view).view(table.dtype).view(stop - start, table.row_elements)
            table.fill(start, stop, out)
        else:
            rows = table.fill(start, stop)
            view[:] = rows.reshape(-1).view(torch.uint8).numpy()
    return view.data


class _KeptResponse(StreamingResponse):
    """A :class:`StreamingResponse` that gives its in-flight budget bytes back once it has
    been sent, has failed or was dropped unsent (as :class:`~service.admission.budget.HeldResponse`)."""

    def __init__(self, content: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release, self._loop = release, asyncio.get_running_loop()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()

    def __del__(self) -> None:
        # the loop is closed (RuntimeError): nobody is waiting any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._release)  # idempotent


async def respond_kept(
    request: Request, state: ServiceState, plan: Plan, prepared: Prepared
) -> Response | None:
    """Answer a cache miss (see :func:`keeps`) as its row blocks are computed, and keep it.

    The body is one buffer of its exact size: each block is computed into its place in a
    worker thread while the block before it is being sent, and once the last block has gone
    the whole buffer goes into the body cache under the key and ETag :func:`prepare` derived
    from the request, with the headers a hit carries. So the first request for a table costs
    about its compute or its transfer, whichever is longer, instead of their sum, and the next
    one is a hit (or a replay) of the same bytes. ``Server-Timing`` gives the queue time and
    ``cache;desc="miss"``: the compute is not over when the headers go (the access log has its
    time). A body of one block (:data:`KEEP_BLOCK_BYTES`) is computed first, on the event loop
    when small, and sent in one write with its compute time. Returns None where the whole path
    serves the request better (its tensors cached already, npy of bfloat16: its 406).
    """
    fmt = prepared.fmt
    if ("tensors", prepared.table_text) in state.cache or plan.stream is None:
        return None
    bundle: StreamBundle = plan.stream()
    primary = bundle.primary
    if fmt == "npy" and primary.dtype == torch.bfloat16:
        return None
    parts = stream_parts(bundle, fmt, KEEP_BLOCK_BYTES)
    sizes = [_part_size(p) for p in parts]
    length = sum(sizes)
    if length < KEEP_MIN_BYTES:
        return None
    budget = state.budget
    nbytes = estimate_bytes(
        plan.elements,
        fmt,
        dtype=plan.params.get("dtype", ""),
        work_bytes_per_element=plan.work_bytes_per_element,
        json_ints=json_ints(plan.params),  # a token batch's JSON lists, as the whole path
    )
    queued = time.perf_counter()
    await budget.acquire(nbytes)
    since = time.monotonic()
    queue_s = time.perf_counter() - queued
    timing.add(request.scope, "queue", queue_s)
    if length <= KEEP_BLOCK_BYTES:  # one block: computed, then sent in one write, and kept
        try:
            one = await _one_block(request, state, plan, prepared, primary, parts, length, queue_s)
            return HeldResponse(
                one, budget, budget.shrink(nbytes, length + REQUEST_OVERHEAD), since
            )
        except BaseException:
            budget.release(nbytes, held_s=time.monotonic() - since)
            raise
    # no compute or encode entries: not over when the headers go (the access log has them)
    server = timing.server_timing("miss", queue=queue_s)
    headers, own = _headers(plan, fmt, primary, prepared.headers, length, server)
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            budget.release(nbytes, held_s=time.monotonic() - since)

    offsets = [0, *np.cumsum(sizes).tolist()]
    body: list[np.ndarray] = []  # the (length,) uint8 buffer, taken by the first block's thread

    def fill(k: int) -> tuple[memoryview, float]:
        t0 = time.perf_counter()
        with tracing.span("posenc.compute", **{"posenc.route": plan.route, "posenc.block": k}):
            if not body:  # off the event loop: a new buffer is mapped and populated here
                body.append(BODY_BUFFERS.take(length))
            view = _fill_part(parts[k], body[0], offsets[k])
        return view, time.perf_counter() - t0

    def keep() -> None:
        _keep(request, state, prepared, Encoded(body[0].data, FORMAT_MEDIA_TYPES[fmt], own))
        BODY_BUFFERS.prefill(length)  # the next miss of this size finds a buffer ready

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
                yield chunk
            keep()
        finally:
            if pending is not None:  # the client went away: drop the block being computed
                pending.cancel()

    return _KeptResponse(chunks(), release, media_type=FORMAT_MEDIA_TYPES[fmt], headers=headers)
