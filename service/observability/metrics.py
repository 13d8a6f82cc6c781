"""Prometheus metrics of the service: its own registry, and a pure ASGI middleware.

Every app gets its own :class:`Metrics` (and so its own ``CollectorRegistry``): tests build
many apps in one process, and the global registry would refuse the second set of names.

Exposed (``GET /metrics``):

- ``posenc_requests_total{route,method,status}``: requests by route template (``/v1/x/{id}``,
  never the concrete path, so label sets stay few; ``unmatched`` when no route matched);
- ``posenc_request_duration_seconds{route,method}``: a latency histogram, from the first byte
  in to the last byte out;
- ``posenc_requests_in_progress``: requests being served now;
- ``posenc_cache_hits_total{cache}`` / ``posenc_cache_misses_total{cache}``;
- ``posenc_cache_bytes{cache}`` / ``posenc_cache_items{cache}`` for caches registered with
  :meth:`Metrics.watch_cache`, read at scrape time.
- ``posenc_inflight_bytes``: bytes held by responses being computed and sent (the budget
  ``POSENC_MAX_INFLIGHT_BYTES`` of :mod:`service.admission.budget`); ``posenc_queue_length``: requests
  waiting for room in it; ``posenc_queue_wait_seconds``: how long admitted and refused requests
  waited; ``posenc_rejected_total{reason}``: requests refused (``overload``: 429).

With ``--workers N > 1`` every worker is its own process with its own counters, and a scrape
lands on one of them: Prometheus would see each switch of worker as a counter reset.
``python -m service`` then sets ``PROMETHEUS_MULTIPROC_DIR`` (an emptied folder) before the
workers start, and :class:`Metrics` switches to prometheus-client's multiprocess mode: every
worker writes its values to files there, and :meth:`Metrics.render` sums all workers' files
(``MultiProcessCollector``). Gauges are summed over live workers (``livesum``); the cache size
gauges are then set by each worker as it serves requests instead of read at scrape time.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from service.cache import ByteLRU

__all__ = ["UNMATCHED", "Metrics", "MetricsMiddleware"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
UNMATCHED = "unmatched"  # route label of requests that matched no route (404s)
# Methods counted under their own name; any other is counted as OTHER (bounded label sets).
_HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"})

# Seconds: from sub-millisecond cache hits to multi-second large tables.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class _CacheCollector(Collector):
    """Size gauges of the watched caches, read when Prometheus scrapes."""

    def __init__(self) -> None:
        self.caches: dict[str, ByteLRU] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        size = GaugeMetricFamily(
            "posenc_cache_bytes", "Bytes held by each cache (its own accounting).", labels=["cache"]
        )
        items = GaugeMetricFamily(
            "posenc_cache_items", "Items held by each cache.", labels=["cache"]
        )
        for name, cache in self.caches.items():
            stats = cache.stats()
            size.add_metric([name], stats["bytes"])
            items.add_metric([name], stats["items"])
        yield size
        yield items


class Metrics:
    """The service's metrics, in a registry of their own.

    Attributes:
        registry: the ``CollectorRegistry`` that :meth:`render` exposes.
        requests: Counter ``posenc_requests_total{route,method,status}``.
        latency: Histogram ``posenc_request_duration_seconds{route,method}``.
        in_progress: Gauge ``posenc_requests_in_progress``.
        cache_hits: Counter ``posenc_cache_hits_total{cache}``.
        cache_misses: Counter ``posenc_cache_misses_total{cache}``.
        inflight_bytes: Gauge ``posenc_inflight_bytes``.
        queue_length: Gauge ``posenc_queue_length``.
        queue_wait: Histogram ``posenc_queue_wait_seconds``.
        rejected: Counter ``posenc_rejected_total{reason}``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # prometheus-client decides at import whether values live in files; follow it
        self.multiprocess_dir = os.environ.get(MULTIPROC_ENV) or None
        self.requests = Counter(
            "posenc_requests",
            "HTTP requests by route template, method and status code.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "posenc_request_duration_seconds",
            "Time from the request's arrival to the end of its response, by route template.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_progress = Gauge(
            "posenc_requests_in_progress",
            "HTTP requests being served.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.cache_hits = Counter(
            "posenc_cache_hits",
            "Cache lookups that found their key.",
            ["cache"],
            registry=self.registry,
        )
        self.cache_misses = Counter(
            "posenc_cache_misses", "Cache lookups that did not.", ["cache"], registry=self.registry
        )
        self.inflight_bytes = Gauge(
            "posenc_inflight_bytes",
            "Bytes held by responses being computed and sent (POSENC_MAX_INFLIGHT_BYTES budget).",
            registry=self.registry,
            multiprocess_mode="livesum",  # summed over live workers (--workers N)
        )
        self.queue_length = Gauge(
            "posenc_queue_length",
            "Requests waiting for room in the in-flight byte budget.",
            registry=self.registry,
            multiprocess_mode="livesum",  # summed over live workers (--workers N)
        )
        self.queue_wait = Histogram(
            "posenc_queue_wait_seconds",
            "Seconds a cache-missing request waited for the in-flight byte budget.",
            buckets=(0.0, *LATENCY_BUCKETS),
            registry=self.registry,
        )
        self.rejected = Counter(
            "posenc_rejected",
            "Requests refused before any work, by reason (overload: 429 from the byte budget).",
            ["reason"],
            registry=self.registry,
        )
        self.rejected.labels(reason="overload")  # exposed at 0 before the first refusal
        self._caches = _CacheCollector()
        self._cache_gauges: tuple[Gauge, Gauge] | None = None
        if self.multiprocess_dir is None:
            self.registry.register(self._caches)
        else:
            self._cache_gauges = (
                Gauge(
                    "posenc_cache_bytes",
                    "Bytes held by each cache (its own accounting), summed over live workers.",
                    ["cache"],
                    registry=self.registry,
                    multiprocess_mode="livesum",
                ),
                Gauge(
                    "posenc_cache_items",
                    "Items held by each cache, summed over live workers.",
                    ["cache"],
                    registry=self.registry,
                    multiprocess_mode="livesum",
                ),
            )
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one finished request and record its latency.

        A method outside the standard ones is counted as ``OTHER``, so clients cannot grow the
        label sets without bound. The labelled children are looked up once per label set
        (``labels()`` costs more than the increment it leads to).
        """
        if method not in _HTTP_METHODS:
            method = "OTHER"
        key = (route, method, status)
        children = self._request_children.get(key)
        if children is None:
            children = (
                self.requests.labels(route=route, method=method, status=str(status)),
                self.latency.labels(route=route, method=method),
            )
            self._request_children[key] = children
        count, latency = children
        count.inc()
        latency.observe(seconds)
        if self._cache_gauges is not None:
            self._refresh_cache_gauges()

    def _refresh_cache_gauges(self) -> None:
        """Multiprocess mode: this worker's cache sizes into the gauge files."""
        if self._cache_gauges is None:
            return
        size, items = self._cache_gauges
        for name, cache in self._caches.caches.items():
            stats = cache.stats()
            size.labels(cache=name).set(stats["bytes"])
            items.labels(cache=name).set(stats["items"])

    def record_cache(self, cache: str, hit: bool) -> None:
        """Count one lookup in the cache named ``cache`` as a hit or a miss."""
        (self.cache_hits if hit else self.cache_misses).labels(cache=cache).inc()

    def watch_cache(self, name: str, cache: ByteLRU) -> None:
        """Expose the size of ``cache`` as ``posenc_cache_bytes/items{cache=name}``."""
        self._caches.caches[name] = cache

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition of the registry, and its content type.

        In multiprocess mode: of every worker's values, summed (``MultiProcessCollector``).
        """
        if self.multiprocess_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        self._refresh_cache_gauges()
        _forget_dead_workers(self.multiprocess_dir)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.multiprocess_dir)
        return generate_latest(registry), CONTENT_TYPE_LATEST


def _forget_dead_workers(folder: str) -> None:
    """Drop the live-gauge files of worker processes that are gone (uvicorn replaces a worker
    that died without telling prometheus-client), so ``livesum`` gauges count live ones only."""
    from prometheus_client.multiprocess import mark_process_dead

    pids = set()
    for path in glob.glob(os.path.join(folder, "gauge_live*_*.db")):
        suffix = os.path.basename(path)[: -len(".db")].rsplit("_", 1)[-1]
        if suffix.isdigit():
            pids.add(int(suffix))
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            mark_process_dead(pid, folder)
        except PermissionError:  # alive, another user's
            pass


def _route_label(scope: Scope, root_path: str) -> str:
    """The matched route's template, with the prefix of any Mount it sits in; or unmatched."""
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str) or not path:
        return UNMATCHED
    # A Mount extends root_path with its own prefix before its inner router matches.
    mount_prefix = scope.get("root_path", "")[len(root_path) :]
    return mount_prefix + path


class MetricsMiddleware:
    """Pure ASGI middleware that counts and times HTTP requests into a :class:`Metrics`.

    Not ``BaseHTTPMiddleware``: that one runs each request through extra tasks and memory
    streams and is measurably slow. The route label is read after the app ran, from
    ``scope["route"]``, which Starlette's router (and FastAPI's ``APIRoute``) set on the shared
    scope once a route matched; requests that matched none are ``unmatched``. An exception
    that escapes the app counts as status 500 (then propagates to the server-error handler).
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        root_path = scope.get("root_path", "")
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_progress.inc()
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send_with_status)
        finally:
            elapsed = time.perf_counter() - start
            self.metrics.in_progress.dec()
            self.metrics.observe_request(
                _route_label(scope, root_path), scope.get("method", "GET"), status, elapsed
            )
