"""Where a miss computes: on the event loop when small, and its OpenMP threads (one thread for a
small miss, one per stream block).

torch's CPU ops run on an OpenMP team whose size is a per-thread setting of GNU libgomp. A small
table's ops are too short for a second thread to pay for its wake-up (and the spin after it); a
stream already computes one block while the event loop sends the last, so each block thread
keeps to one. torch has no per-thread setter of its own, so the setting goes through libgomp.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import torch

__all__ = [
    "LOOP_BODY_BYTES",
    "ONE_THREAD_ELEMENTS",
    "computes_on_loop",
    "libgomp",
    "one_intra_op_thread",
    "one_thread_if",
]

# A miss of at most this many output elements is computed on one OpenMP thread: its ops are too
# small for a second thread to pay for its wake-up (and the spin after it), which cost a 128x64
# table about as much as its arithmetic.
ONE_THREAD_ELEMENTS = 1 << 16

# A request whose body is over this many bytes is never computed on the event loop: its output
# may be small (rows of no tokens) while the work over its input is not (issue 39).
LOOP_BODY_BYTES = 1 << 16


def computes_on_loop(elements: int, device: torch.device, body_bytes: int = 0) -> bool:
    """Whether a miss of ``elements`` output elements on ``device`` is computed on the event loop
    rather than in a pool thread: a CPU table of at most :data:`ONE_THREAD_ELEMENTS` elements
    takes about as long to compute and encode (0.1–0.3 ms for 128x64) as the hop to a pool
    thread and back, which cost a small distinct request a quarter of its time
    (``bench/layers.py``). Larger misses, any on a GPU, and any whose request body is over
    :data:`LOOP_BODY_BYTES` (``body_bytes``: a small output of a large input, such as millions
    of empty token rows) go to a pool so the loop keeps serving others."""
    return (
        elements <= ONE_THREAD_ELEMENTS and device.type == "cpu" and body_bytes <= LOOP_BODY_BYTES
    )


@lru_cache(maxsize=1)
def libgomp() -> ctypes.CDLL | None:
    """The OpenMP runtime torch loaded (GNU libgomp), found in /proc/self/maps; else None."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if "libgomp" in Path(path).name:
            try:
                return ctypes.CDLL(path)
            except OSError:
                return None
    return None


def one_intra_op_thread() -> None:
    """Initializer of a thread pool's threads: torch ops on this thread run without the intra-op
    pool (the rest of the process keeps its own count)."""
    torch.get_num_threads()  # torch sets this thread's OpenMP count first; then override it
    lib = libgomp()
    if lib is not None:
        lib.omp_set_num_threads(1)


@contextmanager
def one_thread_if(small: bool) -> Iterator[None]:
    """Run the body with this thread's OpenMP team at one thread when ``small`` (the thread's own
    count is restored after)."""
    lib = libgomp() if small else None
    if lib is None:
        yield
        return
    before = torch.get_num_threads()
    lib.omp_set_num_threads(1)
    try:
        yield
    finally:
        lib.omp_set_num_threads(before)
