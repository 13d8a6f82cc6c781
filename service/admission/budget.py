"""Admission control: a byte budget for the responses in flight, so overload is a 429, not OOM.

A compute request that misses the cache allocates its tensors, the float64 buffers its compute
works in, and its encoded body, and holds the body until the last byte has been sent. Each of
those is proportional to the output's element count, which :class:`~service.responses.plans.Plan`
knows before anything is allocated. So the service estimates a request's peak bytes from its
plan (:func:`estimate_bytes`), and takes them from a :class:`ByteBudget` of
``POSENC_MAX_INFLIGHT_BYTES`` before computing:

- the budget is a FIFO-fair semaphore of bytes: a request whose bytes do not fit waits behind
  the ones that came before it (a large request is never starved by a stream of small ones);
- one that is still waiting after ``POSENC_QUEUE_TIMEOUT`` seconds gets :class:`Overloaded`
  (HTTP 429 with ``Retry-After``);
- a request larger than the whole budget is admitted when nothing else is in flight (it would
  otherwise never be served), so the budget bounds memory at ``max(budget, largest request)``;
- the bytes are released when the response body has been sent, or on any error, cancellation
  or client disconnect (:class:`HeldResponse`, :meth:`ByteBudget.hold`).

A cache hit takes no bytes: its body is already counted by the cache's own budget.

Every response path takes its bytes the same way, ``async with budget.reserve(n) as held:``
(:func:`service.responses.respond.respond`): a whole or kept miss its estimated peak, shrunk to
its body once computed; a streamed one the few blocks it holds at once, shrunk to its output
buffers once the last block is computed. ``held.until_sent(response)`` hands the bytes to the
response (:class:`HeldResponse`), released after the last byte.

The estimate is ``elements x BYTES_PER_ELEMENT[(format, dtype)] + REQUEST_OVERHEAD``, plus
``BYTES_PER_JSON_INT`` for each integer of a token batch sent as JSON, with a larger per-element
figure for a kind whose compute holds intermediates (``Kind.work_bytes_per_element``: M-RoPE
position ids). The
per-element figures are the largest peak RSS of compute + encode measured over every endpoint
(16-18 M elements, a fresh process each, CPU; docs/sizing.md), plus about 15 %. The compute,
not the body, sets them: sinusoidal builds its table in float64 (22-24 bytes per element at
the peak for every output dtype); JSON text is 10-11 bytes per float32 element and 19-20 per
float64 one (at most 15 and 25 for the longest numbers), base64 4/3 of the raw bytes.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import math
import os
import platform
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import Response, StreamingResponse

from posenc.core import kinds

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from service.observability.metrics import Metrics

__all__ = [
    "BYTES_PER_ELEMENT",
    "BYTES_PER_JSON_INT",
    "ByteBudget",
    "HeldResponse",
    "Overloaded",
    "Reservation",
    "estimate_bytes",
    "json_ints",
    "tune_allocator",
]

logger = logging.getLogger("service.admission")

# Bytes a request holds besides its tensors and body (headers, Python objects, the request).
REQUEST_OVERHEAD = 1 << 20

# Peak bytes per output element of compute + encode, by (format, dtype): the largest value
# measured over rope, sinusoidal, learned, alibi and relative (docs/sizing.md), rounded up.
# "json" writes numbers (shortest round-trip text), "json-base64" base64 of the raw bytes;
# "binary" is safetensors, npy and raw.
BYTES_PER_ELEMENT: Mapping[tuple[str, str], int] = {
    # measured peaks (the largest endpoint) in the comments
    ("json", "float16"): 26,  # 22.4 sinusoidal
    ("json", "bfloat16"): 26,  # 22.4 sinusoidal
    ("json", "float32"): 28,  # 24.4 sinusoidal
    ("json", "float64"): 36,  # 28.9 relative; int64 position ids 30.8
    ("json-base64", "float16"): 26,  # 22.4 sinusoidal
    ("json-base64", "bfloat16"): 26,  # 22.4 sinusoidal
    ("json-base64", "float32"): 28,  # 24.4 sinusoidal
    ("json-base64", "float64"): 38,  # 32.7 relative; int64 position ids 32.2
    ("binary", "float16"): 26,  # 22.4 sinusoidal
    ("binary", "bfloat16"): 26,  # 22.4 sinusoidal
    ("binary", "float32"): 28,  # 24.4 sinusoidal
    ("binary", "float64"): 36,  # 26.2 relative; int64 position ids 30.8
    ("png", "float16"): 28,
    ("png", "bfloat16"): 28,
    ("png", "float32"): 28,  # 24.3 sinusoidal
    ("png", "float64"): 28,  # 20.3 sinusoidal
}
_BINARY_FORMATS = frozenset({"safetensors", "npy", "raw"})

# Peak bytes per integer of a token batch sent as JSON (``input_ids``, ``attention_mask``,
# ``position_ids`` rows), besides the output: the body text, the parsed Python lists of ints,
# the validated copy and the cache key's copy, all alive while the request computes. Measured
# 63-71 bytes per integer (position ids of 1-8 Mi tokens, ids below 30000); binary bodies (npy,
# safetensors) cost nothing here, their tensors are a few bytes per element of the output.
BYTES_PER_JSON_INT = 96


def json_ints(params: Mapping[str, Any]) -> int:
    """The integers of the lists a JSON body gave (token rows ``input_ids``,
    ``attention_mask``, ``position_ids``; a table's ``positions``): what the request holds as
    Python lists while it computes (``BYTES_PER_JSON_INT`` each)."""
    total = 0
    for name in kinds.int_list_fields():  # binary bodies leave them out of the params
        rows = params.get(name)
        if isinstance(rows, list):
            total += sum(len(row) if isinstance(row, list) else 1 for row in rows)
    return total


def estimate_bytes(
    elements: int,
    fmt: str,
    *,
    base64: bool = False,
    dtype: str = "float32",
    work_bytes_per_element: int = 0,
    json_ints: int = 0,
) -> int:
    """Upper bound of the bytes a cache-missing request allocates before its body is sent.

    Args:
        elements: elements of all output tensors together (``Plan.elements``).
        fmt: the negotiated format (``json``, ``safetensors``, ``npy``, ``raw``, ``png``).
        base64: JSON with base64 ``data``.
        dtype: the requested dtype of the float tensors (integer outputs such as position ids
            are int64 and cost no more than float64's entry; an unknown name is taken as such).
        work_bytes_per_element: what the kind's compute peaks at per output element beyond
            its outputs (``Kind.work_bytes_per_element``): each element costs at least that.
        json_ints: integers of the request's token rows parsed from a JSON body (0 for a
            binary body or a table request).

    Returns:
        ``elements * max(BYTES_PER_ELEMENT[(kind, dtype)], work_bytes_per_element)
        + json_ints * BYTES_PER_JSON_INT + REQUEST_OVERHEAD``.
    """
    kind = "binary" if fmt in _BINARY_FORMATS else fmt
    if kind == "json" and base64:
        kind = "json-base64"
    per = BYTES_PER_ELEMENT.get((kind, dtype)) or BYTES_PER_ELEMENT.get((kind, "float64"), 40)
    per = max(per, work_bytes_per_element)
    return max(0, elements) * per + max(0, json_ints) * BYTES_PER_JSON_INT + REQUEST_OVERHEAD


# glibc's malloc keeps freed blocks below its mmap threshold in its arenas for reuse, and raises
# that threshold (up to 32 MiB) each time a larger mmapped block is freed: after a burst of
# multi-MiB tensors and bodies the process keeps them, and the RSS is no longer bounded by what
# is in flight. A fixed threshold (which also turns off the raising) sends every block of 1 MiB
# or more to mmap, returned to the system on free. docs/sizing.md has the measurements.
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
# Fixing the mmap threshold leaves the trim threshold at its 128 KiB default: each time a thread's
# arena has more than that free at its top (a computation's few MiB of scratch, once freed), it
# is handed back to the system and faulted in again by the next one; a thread writing a
# 2048x768 table in 1 MiB blocks spent half its time on that (7.1 -> 3.6 ms with 4 MiB here).
# Each arena keeps at most this much free at its top.
TRIM_THRESHOLD = 4 << 20
_M_TRIM_THRESHOLD = -1


def tune_allocator(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes, so that freed large blocks go back to
    the system, and its trim threshold at :data:`TRIM_THRESHOLD` (unless
    ``MALLOC_TRIM_THRESHOLD_`` is set); return whether the mmap threshold was set. A no-op (False) off glibc, or when the operator set
    ``MALLOC_MMAP_THRESHOLD_`` in the environment (theirs wins)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        done = bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
        if done and "MALLOC_TRIM_THRESHOLD_" not in os.environ:
            libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    except (OSError, AttributeError):
        return False
    if done:
        logger.debug("malloc mmap threshold fixed at %d bytes", threshold)
    return done


class Overloaded(Exception):
    """The byte budget had no room for a request within the queue timeout (HTTP 429).

    Attributes:
        requested: the bytes the request asked for.
        in_flight: the bytes held by responses in flight when it gave up.
        limit: the budget (``POSENC_MAX_INFLIGHT_BYTES``).
        queued: requests still waiting ahead of or beside it.
        waited: seconds it waited.
        retry_after: whole seconds after which a retry is likely to be admitted.
    """

    def __init__(
        self,
        *,
        requested: int,
        in_flight: int,
        limit: int,
        queued: int,
        waited: float,
        retry_after: int,
    ) -> None:
        self.requested, self.in_flight, self.limit = requested, in_flight, limit
        self.queued, self.waited, self.retry_after = queued, waited, retry_after
        super().__init__(self.detail)

    @property
    def detail(self) -> str:
        return (
            f"overloaded: this response needs about {self.requested} bytes and {self.in_flight} "
            f"bytes are in flight, over POSENC_MAX_INFLIGHT_BYTES={self.limit}; waited "
            f"{self.waited:.2f} s (POSENC_QUEUE_TIMEOUT) with {self.queued} other request(s) "
            f"queued; retry after {self.retry_after} s"
        )

    def body(self) -> dict[str, Any]:
        """The JSON body of the 429."""
        return {
            "detail": self.detail,
            "limit": self.limit,
            "requested": self.requested,
            "in_flight": self.in_flight,
            "queued": self.queued,
            "retry_after": self.retry_after,
        }


@dataclass
class _Waiter:
    nbytes: int
    future: asyncio.Future[None]


class ByteBudget:
    """A FIFO-fair asyncio semaphore of bytes (one per app; use it from its event loop only).

    Args:
        limit: bytes that may be held at once (``POSENC_MAX_INFLIGHT_BYTES``); one holder may
            exceed it when it is alone.
        timeout: default seconds :meth:`acquire` waits (``POSENC_QUEUE_TIMEOUT``); 0 refuses at
            once what does not fit.
        metrics: where to report bytes in flight, queue length, waits and refusals.
        clock: monotonic seconds (tests pass their own).
    """

    #: What a request refused for want of room raises (a subclass's words may differ).
    refusal: type[Overloaded] = Overloaded

    def __init__(
        self,
        limit: int,
        timeout: float = 2.0,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1 byte, got {limit}")
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        self.limit, self.timeout, self.metrics, self.clock = limit, timeout, metrics, clock
        self.in_flight = 0
        self.holders = 0
        self.peak = 0
        self._waiters: deque[_Waiter] = deque()
        # Seconds a hold lasts, smoothed: what Retry-After is computed from.
        self._hold_s = 0.5

    # -- state -----------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Requests waiting for bytes."""
        return len(self._waiters)

    @property
    def queued_bytes(self) -> int:
        return sum(w.nbytes for w in self._waiters)

    def _fits(self, nbytes: int) -> bool:
        return self.holders == 0 or self.in_flight + nbytes <= self.limit

    def _take(self, nbytes: int) -> None:
        self.in_flight += nbytes
        self.holders += 1
        self.peak = max(self.peak, self.in_flight)
        if self.metrics is not None:
            self.metrics.inflight_bytes.set(self.in_flight)

    def _wake(self) -> None:
        """Grant bytes to the waiters at the head of the queue, in order, while they fit."""
        while self._waiters:
            head = self._waiters[0]
            if head.future.done():  # cancelled: its acquire() is cleaning up
                self._waiters.popleft()
                continue
            if not self._fits(head.nbytes):
                break
            self._waiters.popleft()
            self._take(head.nbytes)
            head.future.set_result(None)
        if self.metrics is not None:
            self.metrics.queue_length.set(len(self._waiters))

    def retry_after(self, nbytes: int) -> int:
        """Whole seconds until ``nbytes`` is likely to fit: the queue ahead, plus this request,
        drained at one budget per smoothed hold time; 1 to 60."""
        backlog = self.in_flight + self.queued_bytes + nbytes
        rounds = backlog / self.limit
        return int(min(60, max(1, math.ceil(rounds * self._hold_s))))

    # -- acquire / release -----------------------------------------------------------------

    async def acquire(self, nbytes: int, timeout: float | None = None) -> float:
        """Take ``nbytes``, waiting in FIFO order up to ``timeout`` seconds (default: the
        budget's); return the seconds waited.

        Raises:
            Overloaded: still no room after ``timeout``.
            ValueError: ``nbytes`` is negative.
        """
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        timeout = self.timeout if timeout is None else timeout
        start = self.clock()
        if not self._waiters and self._fits(nbytes):
            self._take(nbytes)
            self._observe_wait(0.0)
            return 0.0
        if timeout <= 0:
            raise self._refuse(nbytes, 0.0)
        waiter = _Waiter(nbytes, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        if self.metrics is not None:
            self.metrics.queue_length.set(len(self._waiters))
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except BaseException as exc:
            granted = waiter.future.done() and not waiter.future.cancelled()
            if not granted:
                waiter.future.cancel()
                self._remove(waiter)
                self._wake()  # the head may have left: those behind it may fit now
            if isinstance(exc, TimeoutError):
                if granted:  # the bytes came as the timer fired: keep them
                    waited = self.clock() - start
                    self._observe_wait(waited)
                    return waited
                raise self._refuse(nbytes, self.clock() - start) from None
            if granted:  # cancelled (e.g. the server is shutting down): give them back
                self.release(nbytes, held_s=None)
            raise
        waited = self.clock() - start
        self._observe_wait(waited)
        return waited

    def release(self, nbytes: int, *, held_s: float | None = None) -> None:
        """Give back ``nbytes`` taken by one :meth:`acquire` and wake the queue; ``held_s``,
        how long they were held, feeds the ``Retry-After`` estimate."""
        self.in_flight -= nbytes
        self.holders -= 1
        if self.in_flight < 0 or self.holders < 0:
            logger.error(
                "byte budget released more than was taken (in flight %d, holders %d)",
                self.in_flight,
                self.holders,
            )
            self.in_flight, self.holders = max(0, self.in_flight), max(0, self.holders)
        if held_s is not None:
            self._hold_s = 0.8 * self._hold_s + 0.2 * held_s
        if self.metrics is not None:
            self.metrics.inflight_bytes.set(self.in_flight)
        self._wake()

    def shrink(self, held: int, keep: int) -> int:
        """Give back ``held - keep`` of one holder's ``held`` bytes (it keeps ``keep``, e.g.
        its body after the compute's buffers are gone); return what it holds now."""
        keep = max(0, min(held, keep))
        self.in_flight -= held - keep
        if self.metrics is not None:
            self.metrics.inflight_bytes.set(self.in_flight)
        self._wake()
        return keep

    @asynccontextmanager
    async def reserve(
        self, nbytes: int, timeout: float | None = None
    ) -> AsyncIterator[Reservation]:
        """``async with budget.reserve(n) as held:`` take ``n`` bytes (waiting in FIFO order,
        :class:`Overloaded` after ``timeout``), the one way the service takes bytes.

        Inside, ``held.shrink(keep)`` gives back what a compute no longer holds, and
        ``held.until_sent(response)`` hands the rest to the response, which releases it after
        its last byte (:class:`HeldResponse`). Leaving the block with an exception, or without
        handing the bytes over, releases them."""
        waited = await self.acquire(nbytes, timeout)
        held = Reservation(self, nbytes, waited=waited)
        try:
            yield held
        finally:
            if not held.handed:
                held.release()

    @asynccontextmanager
    async def hold(self, nbytes: int, timeout: float | None = None) -> AsyncIterator[None]:
        """``async with budget.hold(n):`` acquire ``n`` bytes, release them on leaving."""
        async with self.reserve(nbytes, timeout):
            yield

    # -- helpers ---------------------------------------------------------------------------

    def _remove(self, waiter: _Waiter) -> None:
        with suppress(ValueError):
            self._waiters.remove(waiter)
        if self.metrics is not None:
            self.metrics.queue_length.set(len(self._waiters))

    def _observe_wait(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.queue_wait.observe(seconds)

    def _refuse(self, nbytes: int, waited: float) -> Overloaded:
        self._observe_wait(waited)
        if self.metrics is not None:
            self.metrics.rejected.labels(reason="overload").inc()
        exc = self.refusal(
            requested=nbytes,
            in_flight=self.in_flight,
            limit=self.limit,
            queued=len(self._waiters),
            waited=waited,
            retry_after=self.retry_after(nbytes),
        )
        logger.info("%s", exc.detail)
        return exc


class Reservation:
    """Bytes taken from a :class:`ByteBudget` by :meth:`ByteBudget.reserve`.

    Attributes:
        budget: where they came from.
        nbytes: the bytes held now.
        waited: seconds the reservation waited for them.
        since: the budget's clock when they were taken.
        handed: whether a response holds them now (:meth:`until_sent`).
    """

    def __init__(
        self, budget: ByteBudget, nbytes: int, *, waited: float = 0.0, since: float | None = None
    ) -> None:
        self.budget, self.nbytes, self.waited = budget, nbytes, waited
        self.since = budget.clock() if since is None else since
        self.handed = False
        self._released = False
        self._loop = asyncio.get_running_loop()

    def shrink(self, keep: int) -> None:
        """Keep only ``keep`` of the bytes (e.g. the body, once the compute's buffers are gone)."""
        if not self._released:
            self.nbytes = self.budget.shrink(self.nbytes, keep)

    def release(self) -> None:
        """Give the bytes back (idempotent; on the budget's event loop)."""
        if not self._released:
            self._released = True
            self.budget.release(self.nbytes, held_s=self.budget.clock() - self.since)

    def release_soon(self) -> None:
        """:meth:`release` from any thread (a finalizer), on the budget's loop."""
        try:
            self._loop.call_soon_threadsafe(self.release)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            self._released = True

    @property
    def released(self) -> bool:
        return self._released

    def until_sent(self, response: Response) -> HeldResponse:
        """``response``, holding these bytes until its last byte has been sent: a whole body
        keeps only its own bytes (and ``REQUEST_OVERHEAD``), its compute's buffers are gone; a
        streaming one shrinks them itself as its last block is computed."""
        if not isinstance(response, StreamingResponse):
            self.shrink(len(response.body) + REQUEST_OVERHEAD)
        self.handed = True
        return HeldResponse(response, self)


class HeldResponse(Response):
    """A finished :class:`Response` (same status, headers, body), or a streaming one, that
    holds budget bytes until its body has been sent.

    The bytes are released once the server's transport has (nearly) drained the body into the
    socket, or when sending fails, is cancelled or the client has gone: whichever way
    ``__call__`` ends (and, failing all of those, when the response is dropped unsent). A whole
    body goes as one message, then an empty last one that uvicorn accepts only after its write
    buffer drained: uvloop's transport (``uvicorn[standard]``) keeps a reference to the body,
    not a copy, and slicing it would make each slice wait for the socket (measured slower). A
    streaming response sends itself.

    Args:
        inner: the response.
        held: the :class:`Reservation` it holds, or the budget its ``nbytes`` were acquired
            from at ``since`` (budget clock).
    """

    def __init__(
        self,
        inner: Response,
        held: Reservation | ByteBudget,
        nbytes: int = 0,
        since: float | None = None,
    ) -> None:
        # No Response.__init__: the body and headers are the inner response's, as they are.
        if isinstance(held, ByteBudget):
            held = Reservation(held, nbytes, since=since)
            held.handed = True
        self.held = held
        self.inner = inner
        self.status_code = inner.status_code
        self.body = getattr(inner, "body", b"")  # a streaming response has none
        self.raw_headers = inner.raw_headers
        self.background = inner.background
        self.media_type = inner.media_type

    @property
    def budget(self) -> ByteBudget:
        return self.held.budget

    @property
    def nbytes(self) -> int:
        return self.held.nbytes

    def release(self) -> None:
        """Give the bytes back (idempotent)."""
        self.held.release()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if isinstance(self.inner, StreamingResponse | HeldResponse):  # sends itself
                self.inner.background = self.background
                await self.inner(scope, receive, send)
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            # The body whole (uvloop's transport keeps a reference, not a copy), then an empty
            # last message: uvicorn takes it only once the transport has drained below its low
            # water mark, so the bytes stay counted while a slow reader holds them in memory.
            await send({"type": "http.response.body", "body": self.body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.release()
        if self.background is not None:
            await self.background()

    def __del__(self) -> None:
        # Never sent (a middleware answered instead, or the app was torn down): release on the
        # budget's loop, the only thread that may touch it.
        held = getattr(self, "held", None)
        if held is not None and not held.released:
            logger.warning(
                "a held response was dropped unsent; releasing its %d bytes", held.nbytes
            )
            held.release_soon()
