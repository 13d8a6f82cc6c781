"""service.cache.ByteLRU: byte budget, eviction order, counters, thread safety."""

from __future__ import annotations

import threading

import pytest

from service.cache import ByteLRU


def test_get_and_put_count_hits_and_misses():
    cache = ByteLRU(100)
    assert cache.get("a") is None
    cache.put("a", b"x" * 10, 10)
    assert cache.get("a") == b"x" * 10
    assert cache.get("b") is None
    assert (cache.hits, cache.misses) == (1, 2)
    assert len(cache) == 1 and cache.current_bytes == 10


def test_evicts_least_recently_used_first():
    cache = ByteLRU(30)
    for key in "abc":
        cache.put(key, key, 10)
    assert cache.keys() == ["a", "b", "c"]
    cache.get("a")  # a is now the most recent; b the least
    cache.put("d", "d", 10)
    assert cache.keys() == ["c", "a", "d"]
    assert "b" not in cache and cache.get("b") is None
    cache.put("e", "e", 20)  # needs two slots: c, then a go
    assert cache.keys() == ["d", "e"]
    assert cache.current_bytes == 30 and cache.evictions == 3


def test_the_budget_is_bytes_not_items():
    cache = ByteLRU(100)
    cache.put("big", "B", 90)
    cache.put("s1", "1", 5)
    cache.put("s2", "2", 5)
    assert len(cache) == 3 and cache.current_bytes == 100
    cache.put("s3", "3", 1)
    assert cache.keys() == ["s1", "s2", "s3"] and cache.current_bytes == 11


def test_items_larger_than_the_budget_are_not_stored():
    cache = ByteLRU(50)
    cache.put("a", "a", 20)
    cache.put("huge", "h", 51)
    assert "huge" not in cache
    assert cache.keys() == ["a"] and cache.evictions == 0  # nothing evicted for it
    cache.put("exact", "e", 50)  # exactly the budget fits, after evicting a
    assert cache.keys() == ["exact"]


def test_replacing_a_key_updates_value_size_and_recency():
    cache = ByteLRU(30)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    cache.put("a", 3, 15)
    assert cache.keys() == ["b", "a"] and cache.current_bytes == 25
    assert cache.get("a") == 3
    cache.put("a", 4, 31)  # too big now: the old value must not survive
    assert "a" not in cache and cache.current_bytes == 10


def test_zero_budget_stores_nothing_and_bad_sizes_are_refused():
    cache = ByteLRU(0)
    cache.put("a", "a", 1)
    assert len(cache) == 0
    cache.put("empty", "", 0)  # a zero-cost item fits a zero budget
    assert cache.get("empty") == ""
    with pytest.raises(ValueError, match="nbytes"):
        cache.put("x", "x", -1)
    with pytest.raises(ValueError, match="max_bytes"):
        ByteLRU(-1)


def test_clear_and_stats():
    cache = ByteLRU(100)
    cache.put("a", "a", 40)
    cache.get("a")
    cache.get("z")
    assert cache.stats() == {
        "items": 1,
        "bytes": 40,
        "max_bytes": 100,
        "hits": 1,
        "misses": 1,
        "evictions": 0,
    }
    cache.clear()
    assert len(cache) == 0 and cache.current_bytes == 0 and cache.hits == 1


def test_concurrent_use_keeps_the_books_straight():
    cache = ByteLRU(1000)
    threads_n, ops = 8, 2000

    def work(tid: int) -> None:
        for i in range(ops):
            key = (tid * 7 + i) % 50
            if cache.get(key) is None:
                cache.put(key, key, 1 + key % 37)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.hits + cache.misses == threads_n * ops
    held = cache.keys()
    assert cache.current_bytes == sum(1 + k % 37 for k in held)
    assert cache.current_bytes <= 1000
