"""The pool of reusable response buffers (:class:`service.responses.buffers.BufferPool`): a
buffer is reused only once nothing refers to it, buffers come in size classes of
``SIZE_CLASS`` bytes, and the pool keeps at most its idle bound (and prefills one)."""

from __future__ import annotations

import gc
import time

import numpy as np

from service.responses.buffers import SIZE_CLASS, BufferPool


def test_buffer_pool_reuses_a_buffer_only_once_nothing_refers_to_it():
    pool = BufferPool(max_idle_bytes=8 * SIZE_CLASS)
    a = pool.take(3 * SIZE_CLASS + 5)
    a[:] = 7
    view = a[10:20].data  # a view keeps the buffer in use
    del a
    gc.collect()
    assert pool.idle_bytes == 0
    b = pool.take(3 * SIZE_CLASS + 5)
    assert (pool.made, pool.reused) == (2, 0)
    del view, b
    gc.collect()
    assert pool.idle_bytes == 2 * 4 * SIZE_CLASS  # both back, in the 4 MiB class
    c = pool.take(4 * SIZE_CLASS)  # same class
    assert (pool.made, pool.reused, pool.idle_bytes) == (2, 1, 4 * SIZE_CLASS)
    assert c.shape == (4 * SIZE_CLASS,) and c.dtype == np.uint8
    pool.clear()
    assert pool.idle_bytes == 0


def test_buffer_pool_keeps_at_most_its_idle_bound_and_prefills_one():
    pool = BufferPool(max_idle_bytes=2 * SIZE_CLASS)
    buffers = [pool.take(SIZE_CLASS) for _ in range(3)]
    del buffers
    gc.collect()
    assert pool.idle_bytes == 2 * SIZE_CLASS  # the oldest was dropped
    big = pool.take(2 * SIZE_CLASS)  # another size: the idle ones make room for it
    assert pool.made == 4
    del big
    gc.collect()
    assert pool.idle_bytes == 2 * SIZE_CLASS
    again = pool.take(2 * SIZE_CLASS)
    assert (pool.made, pool.reused, pool.idle_bytes) == (4, 1, 0)
    del again
    huge = BufferPool(max_idle_bytes=SIZE_CLASS).take(3 * SIZE_CLASS)
    del huge  # larger than the bound: dropped, nothing idle
    empty = BufferPool(max_idle_bytes=0)
    empty.prefill(SIZE_CLASS)
    x = empty.take(10)
    del x
    gc.collect()
    assert empty.idle_bytes == 0 and empty.made == 1
    fresh = BufferPool(max_idle_bytes=4 * SIZE_CLASS)
    fresh.prefill(3 * SIZE_CLASS)
    deadline = time.monotonic() + 10
    while fresh.idle_bytes == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fresh.idle_bytes == 3 * SIZE_CLASS and fresh.made == 1
    fresh.prefill(3 * SIZE_CLASS)  # one is idle already: no second
    y = fresh.take(3 * SIZE_CLASS - 1)
    assert (fresh.made, fresh.reused, fresh.idle_bytes) == (1, 1, 0)
    del y
