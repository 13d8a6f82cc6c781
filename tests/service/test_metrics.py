"""service.observability.metrics: the middleware counts real requests of a small FastAPI app, and the
exposition parses with prometheus_client's own parser (no mocks)."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import APIRouter, FastAPI, HTTPException, Response
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.cache import ByteLRU
from service.observability.metrics import Metrics, MetricsMiddleware


def make_app() -> tuple[FastAPI, Metrics]:
    metrics = Metrics()
    app = FastAPI()
    router = APIRouter(prefix="/v1/things")

    @router.get("/{thing_id}")
    def get_thing(thing_id: int) -> dict:
        if thing_id == 404:
            raise HTTPException(status_code=404, detail="thing_id 404 does not exist")
        return {"id": thing_id}

    @router.post("/slow")
    async def slow() -> dict:
        await asyncio.sleep(0.03)
        return {"ok": True}

    @app.get("/boom")
    def boom() -> dict:
        raise RuntimeError("unhandled")

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    sub = FastAPI()

    @sub.get("/ping")
    def ping() -> dict:
        return {"pong": True}

    app.include_router(router)
    app.mount("/sub", sub)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app, metrics


def scrape(client: TestClient) -> dict[str, dict[tuple, float]]:
    """GET /metrics, parsed: sample name -> {sorted label items: value}."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def requests_of(samples, route: str, method: str, status: str) -> float:
    key = (("method", method), ("route", route), ("status", status))
    return samples.get("posenc_requests_total", {}).get(key, 0.0)


@pytest.fixture
def client_and_metrics():
    app, metrics = make_app()
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, metrics


def test_requests_are_labelled_by_route_template_method_and_status(client_and_metrics):
    client, _ = client_and_metrics
    for thing in (1, 2, 3):
        assert client.get(f"/v1/things/{thing}").json() == {"id": thing}
    assert client.get("/v1/things/404").status_code == 404  # matched route, handler said 404
    assert client.get("/v1/things/abc").status_code == 422
    samples = scrape(client)
    assert requests_of(samples, "/v1/things/{thing_id}", "GET", "200") == 3
    assert requests_of(samples, "/v1/things/{thing_id}", "GET", "404") == 1
    assert requests_of(samples, "/v1/things/{thing_id}", "GET", "422") == 1
    # concrete paths never become labels
    assert not any("/v1/things/1" in dict(k)["route"] for k in samples["posenc_requests_total"])


def test_unmatched_paths_and_wrong_methods(client_and_metrics):
    client, _ = client_and_metrics
    assert client.get("/nowhere").status_code == 404
    assert client.get("/also/nowhere/42").status_code == 404
    assert client.delete("/v1/things/1").status_code == 405
    samples = scrape(client)
    assert requests_of(samples, "unmatched", "GET", "404") == 2
    assert requests_of(samples, "/v1/things/{thing_id}", "DELETE", "405") == 1


def test_made_up_methods_share_one_label(client_and_metrics):
    client, _ = client_and_metrics
    for method in ("FROB", "XYZZY", "PLUGH"):
        assert client.request(method, "/nowhere").status_code in (404, 405)
    samples = scrape(client)
    methods = {dict(k)["method"] for k in samples["posenc_requests_total"]}
    assert {"FROB", "XYZZY", "PLUGH"}.isdisjoint(methods)
    assert requests_of(samples, "unmatched", "OTHER", "404") == 3


def test_unhandled_exceptions_count_as_500(client_and_metrics):
    client, _ = client_and_metrics
    assert client.get("/boom").status_code == 500
    assert requests_of(scrape(client), "/boom", "GET", "500") == 1


def test_mounted_apps_get_their_full_template(client_and_metrics):
    client, _ = client_and_metrics
    assert client.get("/sub/ping").json() == {"pong": True}
    assert requests_of(scrape(client), "/sub/ping", "GET", "200") == 1


def test_latency_histogram_counts_every_request(client_and_metrics):
    client, _ = client_and_metrics
    for _ in range(2):
        assert client.post("/v1/things/slow").status_code == 200
    client.get("/v1/things/7")
    samples = scrape(client)
    slow = (("method", "POST"), ("route", "/v1/things/slow"))
    count = samples["posenc_request_duration_seconds_count"]
    assert count[slow] == 2
    buckets = samples["posenc_request_duration_seconds_bucket"]
    assert buckets[(("le", "+Inf"), *slow)] == 2
    # each slow request sleeps 30 ms, so none fits the 25 ms bucket
    assert buckets[(("le", "0.025"), *slow)] == 0
    assert samples["posenc_request_duration_seconds_sum"][slow] >= 0.06
    assert count[(("method", "GET"), ("route", "/v1/things/{thing_id}"))] == 1
    # the scrape itself is in flight while it renders; everything else has finished
    assert samples["posenc_requests_in_progress"][()] == 1


def test_cache_counters_and_watched_cache_sizes(client_and_metrics):
    client, metrics = client_and_metrics
    cache = ByteLRU(1000)
    metrics.watch_cache("body", cache)
    cache.put("a", b"x" * 300, 300)
    cache.put("b", b"y" * 200, 200)
    for hit in (True, True, False):
        metrics.record_cache("body", hit)
    metrics.record_cache("bundle", False)
    samples = scrape(client)
    assert samples["posenc_cache_hits_total"][(("cache", "body"),)] == 2
    assert samples["posenc_cache_misses_total"][(("cache", "body"),)] == 1
    assert samples["posenc_cache_misses_total"][(("cache", "bundle"),)] == 1
    assert samples["posenc_cache_bytes"][(("cache", "body"),)] == 500
    assert samples["posenc_cache_items"][(("cache", "body"),)] == 2


def test_each_app_has_its_own_registry():
    app_a, metrics_a = make_app()
    app_b, metrics_b = make_app()  # same metric names: would clash in one global registry
    assert metrics_a.registry is not metrics_b.registry
    with TestClient(app_a) as a, TestClient(app_b) as b:
        a.get("/v1/things/1")
        a.get("/v1/things/2")
        b.get("/v1/things/1")
        assert requests_of(scrape(a), "/v1/things/{thing_id}", "GET", "200") == 2
        assert requests_of(scrape(b), "/v1/things/{thing_id}", "GET", "200") == 1


def test_render_gives_the_exposition_and_its_content_type():
    metrics = Metrics()
    metrics.observe_request("/v1/x", "POST", 201, 0.002)
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert families["posenc_requests"].type == "counter"
    assert families["posenc_request_duration_seconds"].type == "histogram"
    (sample,) = [s for s in families["posenc_requests"].samples if s.name.endswith("_total")]
    assert sample.labels == {"route": "/v1/x", "method": "POST", "status": "201"}
    assert sample.value == 1
