"""A thread-safe LRU cache bounded by bytes, for computed bundles and encoded bodies.

Route handlers that do torch work run in FastAPI's threadpool, so every operation takes one
lock. Sizes are what the caller says an item costs (``nbytes``), e.g. ``len(body)`` or
``Bundle.nbytes``; the cache never inspects values.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

__all__ = ["ByteLRU"]


class ByteLRU:
    """Least-recently-used cache whose items together cost at most ``max_bytes``.

    ``get`` marks an item most recently used; ``put`` inserts (or replaces) an item and then
    evicts least recently used items until the total fits. An item costing more than
    ``max_bytes`` is not stored (and evicts nothing). ``max_bytes=0`` disables the cache.

    Attributes:
        max_bytes: the budget.
        hits: ``get`` calls that found their key.
        misses: ``get`` calls that did not.
        evictions: items dropped to make room.
        current_bytes: total cost of the items held.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.current_bytes = 0
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        """The value under ``key`` (now most recently used), or ``None``."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        """Store ``value`` under ``key`` at a cost of ``nbytes``; evict LRU items to fit.

        Replacing a key updates its value and cost. A value costing more than ``max_bytes``
        is not stored (an older value under the same key is dropped, so it cannot go stale).
        """
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.current_bytes -= old[1]
            if nbytes > self.max_bytes:
                return
            self._items[key] = (value, nbytes)
            self.current_bytes += nbytes
            while self.current_bytes > self.max_bytes:
                _, (_, evicted) = self._items.popitem(last=False)
                self.current_bytes -= evicted
                self.evictions += 1

    def __contains__(self, key: Hashable) -> bool:
        """Whether ``key`` is held (does not count as a hit or a miss, nor refresh it)."""
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def keys(self) -> list[Hashable]:
        """Keys from least to most recently used."""
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        """Drop every item (the counters stay)."""
        with self._lock:
            self._items.clear()
            self.current_bytes = 0

    def stats(self) -> dict[str, int]:
        """A consistent snapshot: items, bytes, max_bytes, hits, misses, evictions."""
        with self._lock:
            return {
                "items": len(self._items),
                "bytes": self.current_bytes,
                "max_bytes": self.max_bytes,
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
            }
