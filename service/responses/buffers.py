"""Body buffers that are reused instead of page-faulted afresh: :data:`BODY_BUFFERS`.

A cold table of a few MiB sent as raw is written into a new buffer each request (its body is
kept in the cache afterwards, see :func:`service.responses.streaming.kept_response`). A new buffer of 1 MiB
or more is fresh memory from the kernel (glibc's mmap threshold, :mod:`service.admission.budget`),
and writing it page-faults once per 4 KiB page: about as long as computing a sinusoidal table
of the same size. Here a buffer is an anonymous ``mmap`` of ordinary pages handed out as a NumPy ``uint8`` array over it; when
the last reference to that array goes (the cache evicted the body and its response was sent),
the mapping returns to a free list, bounded in bytes (the oldest idle buffers make room for a
newer one), and the next body of its size class takes it, already faulted in. When a size class has no idle buffer left, :meth:`BufferPool.prefill`
maps and populates one more in a background thread, between requests, so that a run of distinct
tables of one size (more than the cache holds) finds one ready.

Page faults are dear on the virtual machines posenc is measured on: writing 8 MiB of fresh
memory takes about 5 ms, ``MAP_POPULATE`` about 3 ms, writing it again 0.15 ms.

No transparent huge pages are asked for (``MADV_HUGEPAGE``): where the kernel's THP ``defrag``
is ``madvise`` (the common default) a fault on such a mapping compacts memory first, and with
the cache holding earlier bodies that made a fresh 34 MB body cost 34–55 ms to write instead of
6 ms (2 threads, 2026-11-25), a miss whose cost depended on what the machine had done before.
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

__all__ = ["BODY_BUFFERS", "BufferPool"]

# sizes are rounded up to a multiple of this (a 2048x768 float32 table, 6.3 MB, takes 7 MiB)
SIZE_CLASS = 1 << 20


class BufferPool:
    """Anonymous memory mappings for bodies, reused once nothing refers to them any more.

    Args:
        max_idle_bytes: the most bytes kept in the free list; the oldest idle mappings are
            dropped to make room for one given back, and one larger than this is dropped.

    Attributes:
        made: mappings created.
        reused: buffers handed out from the free list.
    """

    def __init__(self, max_idle_bytes: int) -> None:
        if max_idle_bytes < 0:
            raise ValueError(f"max_idle_bytes must be >= 0, got {max_idle_bytes}")
        self.max_idle_bytes = max_idle_bytes
        self.idle_bytes = 0
        self.made = 0
        self.reused = 0
        self._idle: list[mmap.mmap] = []  # oldest given back first
        self._filling: set[int] = set()  # size classes being prefilled
        self._filler: ThreadPoolExecutor | None = None
        # reentrant: a buffer's finalizer may run wherever its last reference is dropped
        self._lock = threading.RLock()

    def take(self, nbytes: int) -> np.ndarray:
        """A ``(nbytes,)`` ``uint8`` array, uninitialised (a reused one holds old bytes)."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        size = _size_class(nbytes)
        area = None
        with self._lock:
            area = self._pop(size)
            if area is not None:
                self.reused += 1
        if area is None:  # its pages fault in as they are written (spread over the blocks)
            area = self._map(size, populate=False)
        arr = np.frombuffer(area, dtype=np.uint8, count=nbytes)
        weakref.finalize(arr, self._give_back, area)
        return arr

    def prefill(self, nbytes: int) -> None:
        """Map and populate one buffer of ``nbytes``' size class in a background thread, unless
        one is idle already, one is being made, or it would not fit ``max_idle_bytes``."""
        size = _size_class(nbytes)
        with self._lock:
            if (
                any(len(a) == size for a in self._idle)
                or size in self._filling
                or self.idle_bytes + size > self.max_idle_bytes
            ):
                return
            self._filling.add(size)
            if self._filler is None:
                self._filler = ThreadPoolExecutor(1, thread_name_prefix="posenc-buffers")
            filler = self._filler
        filler.submit(self._prefill, size)

    def _prefill(self, size: int) -> None:
        try:
            area = self._map(size, populate=True)
        finally:
            with self._lock:
                self._filling.discard(size)
        self._give_back(area)

    def _map(self, size: int, *, populate: bool) -> mmap.mmap:
        """A new anonymous mapping of ``size`` bytes (4 KiB pages); ``populate``: its
        pages made present in one go, cheaper than faulting them in one by one, but all before
        the first byte can be written."""
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        if populate:
            flags |= getattr(mmap, "MAP_POPULATE", 0)
        area = mmap.mmap(-1, size, flags=flags)
        with self._lock:
            self.made += 1
        return area

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """An empty CPU tensor over a pool buffer (a :data:`posenc.embedding.OutputAllocator`),
        or None under one size class (small outputs come from the heap as they are)."""
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if nbytes < SIZE_CLASS:
            return None
        return torch.from_numpy(self.take(nbytes)).view(dtype).view(shape)

    def _pop(self, size: int) -> mmap.mmap | None:
        """The most recently given back idle buffer of ``size`` bytes, out of the list (under
        the lock), or None."""
        for k in range(len(self._idle) - 1, -1, -1):
            if len(self._idle[k]) == size:
                self.idle_bytes -= size
                return self._idle.pop(k)
        return None

    def _give_back(self, area: mmap.mmap) -> None:
        """Keep ``area`` idle, dropping the oldest idle buffers (of any size) to make room: the
        pool follows the sizes asked for now. One larger than ``max_idle_bytes`` is dropped.
        A dropped buffer is unmapped when its last reference goes, right after this (closing
        it here would fail: the array being freed still exports its buffer while its
        finalizers run)."""
        size = len(area)
        with self._lock:
            if size > self.max_idle_bytes:
                return
            while self.idle_bytes + size > self.max_idle_bytes:
                self.idle_bytes -= len(self._idle.pop(0))
            self._idle.append(area)
            self.idle_bytes += size

    def clear(self) -> None:
        """Drop every idle buffer (each is unmapped as its last reference goes)."""
        with self._lock:
            self._idle.clear()
            self.idle_bytes = 0


def _size_class(nbytes: int) -> int:
    return max(SIZE_CLASS, -(-nbytes // SIZE_CLASS) * SIZE_CLASS)


# At most 64 MiB idle: ten bodies of a 2048x768 float32 table, what a stream of distinct cold
# tables frees (through the cache's evictions) and takes again in the meantime.
BODY_BUFFERS = BufferPool(64 << 20)
