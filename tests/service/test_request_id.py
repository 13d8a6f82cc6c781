"""``X-Request-ID`` (API.md 1.1, "Overload"): on every response, the caller's when it is sane,
else a generated one; recorded by the access log (``service.observability.request_id``)."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.observability.logs import RequestIdFilter
from service.observability.request_id import sane_request_id
from tests.helpers import make_settings

SIN = "/v1/encodings/sinusoidal"
GENERATED = re.compile(r"[0-9a-f]{32}")


def test_a_generated_id_when_none_is_sent_and_a_new_one_each_time(api: httpx.Client) -> None:
    ids = [api.get("/healthz").headers["x-request-id"] for _ in range(3)]
    assert all(GENERATED.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == 3


@pytest.mark.parametrize(
    "sent",
    ["abc", "0f8fad5b-d9cb-469f-a165-70867728950e", "trace:1/2+3=4@x_y.z", "x" * 128],
)
def test_a_sane_id_is_echoed(api: httpx.Client, sent: str) -> None:
    r = api.post(SIN, json={"seq_len": 2, "d_model": 4}, headers={"X-Request-ID": sent})
    assert r.status_code == 200 and r.headers["x-request-id"] == sent


@pytest.mark.parametrize(
    "sent",
    ["x" * 129, "has space", "semi;colon", 'quote"d', "<script>", "tab\there", "ü".encode()],
)
def test_an_insane_id_is_replaced(api: httpx.Client, sent: str | bytes) -> None:
    r = api.get("/healthz", headers={"X-Request-ID": sent})  # type: ignore[arg-type]
    assert r.status_code == 200
    got = r.headers["x-request-id"]
    assert GENERATED.fullmatch(got) and got != sent


def test_sanity_bounds() -> None:
    assert sane_request_id(b"a") == "a"
    assert sane_request_id(b"a" * 128) == "a" * 128
    assert sane_request_id(b"a" * 129) is None
    assert sane_request_id(b"") is None
    assert sane_request_id(b"a\r\nSet-Cookie: x=1") is None
    assert sane_request_id(None) is None


def test_only_one_x_request_id_header(api: httpx.Client) -> None:
    r = api.get("/healthz", headers={"X-Request-ID": "one"})
    assert r.headers.get_list("x-request-id") == ["one"]


def test_errors_before_and_after_routing_carry_it(gpt2_file, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """401 (auth, before routing), 404, 405, 413, 422 and an unhandled 500 all carry the id."""
    import posenc.absolute.sinusoidal as sinusoidal  # the sinusoidal kind computes with it

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")

    app = create_app(make_settings(gpt2_file, api_key="k", max_elements=100))
    auth = {"Authorization": "Bearer k"}
    with TestClient(app, raise_server_exceptions=False) as client:
        cases = [
            (client.post(SIN, json={"seq_len": 2, "d_model": 4}), 401),
            (client.get("/v1/nothing-here", headers=auth), 404),
            (client.delete(SIN, headers=auth), 405),
            (client.post(SIN, json={"seq_len": 100, "d_model": 4}, headers=auth), 413),
            (client.post(SIN, json={"seq_len": "x", "d_model": 4}, headers=auth), 422),
            (client.post(SIN, content=b"{not json", headers=auth), 415),  # no Content-Type
        ]
        for i, (r, status) in enumerate(cases):
            assert r.status_code == status, (i, r.status_code, r.text[:200])
            assert GENERATED.fullmatch(r.headers["x-request-id"]), (i, r.headers)
        r = client.get("/v1/info", headers={"X-Request-ID": "mine-401"})
        assert r.status_code == 401 and r.headers["x-request-id"] == "mine-401"

        monkeypatch.setattr(sinusoidal, "sinusoidal_table", broken)
        caplog.handler.addFilter(RequestIdFilter())
        r = client.post(
            SIN,
            json={"seq_len": 3, "d_model": 2, "base": 7.0},
            headers={**auth, "X-Request-ID": "mine-500"},
        )
        assert r.status_code == 500 and "RuntimeError" in r.json()["detail"]
        assert r.headers["x-request-id"] == "mine-500"
        assert r.headers.get_list("content-type") == ["application/json"]
    (logged,) = [rec for rec in caplog.records if rec.name == "service.errors"]
    assert logged.exc_info is not None and logged.request_id == "mine-500"


def test_replayed_cache_hits_carry_the_callers_id(gpt2_file) -> None:  # type: ignore[no-untyped-def]
    body = {"seq_len": 5, "d_model": 6}
    with TestClient(create_app(make_settings(gpt2_file))) as client:
        first = client.post(SIN, json=body, headers={"X-Request-ID": "first"})
        second = client.post(SIN, json=body, headers={"X-Request-ID": "second"})
        third = client.post(SIN, json=body)
        assert 'cache;desc="hit"' in second.headers["server-timing"]
        metrics = client.get("/metrics").text
    assert 'posenc_cache_hits_total{cache="replay"} 2.0' in metrics
    assert first.content == second.content == third.content
    assert (first.headers["x-request-id"], second.headers["x-request-id"]) == ("first", "second")
    assert GENERATED.fullmatch(third.headers["x-request-id"])


def test_cors_exposes_it(gpt2_file) -> None:  # type: ignore[no-untyped-def]
    origin = "http://notebook.example"
    with TestClient(create_app(make_settings(gpt2_file, cors_origins=origin))) as client:
        r = client.get("/healthz", headers={"Origin": origin, "X-Request-ID": "cors-1"})
        assert r.headers["x-request-id"] == "cors-1"
        exposed = [h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")]
        assert "x-request-id" in exposed
        pre = client.options(
            SIN,
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "X-Request-ID": "pre-1",
            },
        )
        assert pre.status_code == 200 and pre.headers["x-request-id"] == "pre-1"


def test_the_access_log_records_the_id_route_status_bytes_and_cache(
    gpt2_file, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    body = {"seq_len": 4, "d_model": 8}
    with (
        TestClient(create_app(make_settings(gpt2_file))) as client,
        caplog.at_level(logging.INFO, logger="service.access"),
    ):
        miss = client.post(SIN, json=body, headers={"X-Request-ID": "log-1"})
        hit = client.post(SIN, json=body, headers={"X-Request-ID": "log-2"})
        missing = client.get("/v1/models/absent", headers={"X-Request-ID": "log-3"})
    records: dict[str, Any] = {
        r.request_id: r  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "service.access"  # type: ignore[attr-defined]
    }
    one, two, three = records["log-1"], records["log-2"], records["log-3"]
    assert (one.method, one.route, one.status, one.cache) == ("POST", SIN, 200, "miss")
    assert (two.status, two.cache, two.route) == (200, "hit", SIN)
    assert one.bytes == two.bytes == len(miss.content) == len(hit.content)
    assert (three.status, three.route, three.bytes) == (
        404,
        "/v1/models/{name}",
        len(missing.content),
    )
    assert one.duration_ms > 0
    assert (
        "log-1" in one.getMessage()
        and '"POST /v1/encodings/sinusoidal HTTP/1.1" 200' in one.getMessage()
    )


def test_access_log_off_writes_nothing(gpt2_file, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_settings(gpt2_file, access_log=False))
    with TestClient(app) as client, caplog.at_level(logging.INFO, logger="service.access"):
        r = client.get("/healthz")
    assert r.headers["x-request-id"]
    assert not [rec for rec in caplog.records if rec.name == "service.access"]
