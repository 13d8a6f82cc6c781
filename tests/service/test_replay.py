"""service.responses.replay: a repeated compute request is answered from the body cache without running
the route, with the same bytes and headers as the route gives, and never when it must not be
(another representation, a conditional request, a refused token, an evicted body)."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from tests.helpers import ApiClient, make_settings

SIN = "/v1/encodings/sinusoidal"
BODY = {"seq_len": 16, "d_model": 8}
PER_REQUEST = {
    "date",
    "server-timing",
    "x-request-id",
}  # headers that may differ between two answers


def counter(client: httpx.Client, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def replays(client: ApiClient) -> float:
    return counter(client, "posenc_cache_hits_total", cache="replay")  # type: ignore[arg-type]


def same_answer(a: httpx.Response, b: httpx.Response) -> None:
    assert (a.status_code, a.content) == (b.status_code, b.content)
    strip = lambda r: sorted((k, v) for k, v in r.headers.items() if k not in PER_REQUEST)  # noqa: E731
    assert strip(a) == strip(b)


@pytest.fixture
def client(gpt2_file):
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        yield c


@pytest.mark.parametrize("fmt", ["json", "safetensors", "raw", "npy", "png"])
def test_a_repeated_request_is_replayed_with_the_routes_bytes_and_headers(client, fmt) -> None:
    first = client.post(SIN, json=BODY, params={"format": fmt})  # computed, body cached
    assert first.status_code == 200 and replays(client) == 0
    replayed = client.post(SIN, json=BODY, params={"format": fmt})
    assert replays(client) == 1
    # a conditional request that does not match takes the route: its body-cache hit
    via_route = client.post(
        SIN, json=BODY, params={"format": fmt}, headers={"If-None-Match": '"x"'}
    )
    assert replays(client) == 1
    same_answer(replayed, via_route)
    assert replayed.headers["server-timing"] == via_route.headers["server-timing"]
    assert 'cache;desc="hit"' in replayed.headers["server-timing"]
    assert replayed.content == first.content


def test_get_requests_are_replayed_and_metrics_name_the_route(client) -> None:
    url = f"{SIN}?seq_len=4&d_model=8"
    answers = [client.get(url) for _ in range(4)]
    assert replays(client) == 3
    for a in answers[1:]:
        same_answer(answers[1], a)
    assert counter(client, "posenc_requests_total", route=SIN, method="GET", status="200") == len(
        answers
    )


def test_anything_that_changes_the_answer_is_another_request(client) -> None:
    client.post(SIN, json=BODY)
    json_body = client.post(SIN, json=BODY)
    assert replays(client) == 1
    # another Accept, query string, body or path is not the replayed answer
    npy = client.post(SIN, json=BODY, headers={"Accept": "application/x-npy"})
    assert npy.headers["content-type"] == "application/x-npy" and npy.content != json_body.content
    b64 = client.post(SIN, json=BODY, params={"encoding": "base64"})
    assert isinstance(b64.json()["tensors"]["encoding"]["data"], str)
    other = client.post(SIN, json={**BODY, "d_model": 10})
    assert other.json()["tensors"]["encoding"]["shape"] == [16, 10]
    rope = client.post("/v1/encodings/rope", json={"seq_len": 16, "head_dim": 8})
    assert set(rope.json()["tensors"]) == {"cos", "sin", "inv_freq"}
    assert replays(client) == 1


def test_the_same_body_as_another_content_type_gets_the_routes_answer(client, gpt2_file) -> None:
    raw = b'{"seq_len": 16, "d_model": 8}'
    for _ in range(3):
        client.post(SIN, content=raw, headers={"Content-Type": "application/json"})
    odd = client.post(SIN, content=raw, headers={"Content-Type": "text/plain"})
    with TestClient(create_app(make_settings(gpt2_file))) as fresh:
        expected = fresh.post(SIN, content=raw, headers={"Content-Type": "text/plain"})
    assert (odd.status_code, odd.content) == (expected.status_code, expected.content)


def test_a_repeated_accept_header_is_part_of_the_request(client) -> None:
    """The route negotiates on the first ``Accept``; a request that repeats the header is not
    the same request as one that sends only its last value."""
    two = [("Accept", "application/json"), ("Accept", "application/octet-stream")]
    for _ in range(2):
        assert client.post(SIN, json=BODY, headers=two).headers["content-type"] == (
            "application/json"
        )
    raw = client.post(SIN, json=BODY, headers={"Accept": "application/octet-stream"})
    assert raw.headers["content-type"] == "application/octet-stream"
    assert len(raw.content) == 16 * 8 * 4


def test_conditional_requests_take_the_route(client) -> None:
    for _ in range(3):
        answer = client.get(f"{SIN}?seq_len=4&d_model=8")
    etag = answer.headers["etag"]
    assert (
        client.get(f"{SIN}?seq_len=4&d_model=8", headers={"If-None-Match": etag}).status_code == 304
    )
    assert client.post(SIN, json=BODY, headers={"If-None-Match": "*"}).status_code == 412


def test_errors_are_never_replayed(client) -> None:
    bad = {"seq_len": 16, "d_model": 7}
    answers = [client.post(SIN, json=bad) for _ in range(3)]
    assert {a.status_code for a in answers} == {422}
    assert replays(client) == 0
    assert counter(client, "posenc_cache_misses_total", cache="replay") == 3


def test_an_evicted_body_falls_back_to_the_route(client) -> None:
    for _ in range(3):
        before = client.post(SIN, json=BODY, params={"format": "raw"})
    client.app.state.posenc.cache.clear()
    after = client.post(SIN, json=BODY, params={"format": "raw"})
    assert after.content == before.content
    assert 'cache;desc="miss"' in after.headers["server-timing"]


def test_without_a_cache_budget_nothing_is_replayed(gpt2_file) -> None:
    with TestClient(create_app(make_settings(gpt2_file, cache_bytes=0))) as c:
        answers = [c.post(SIN, json=BODY) for _ in range(3)]
        assert len({a.content for a in answers}) == 1
        assert replays(c) == 0


def test_a_refused_token_is_refused_even_for_a_replayable_request(gpt2_file) -> None:
    with TestClient(create_app(make_settings(gpt2_file, api_key="s3cret"))) as c:
        good = {"Authorization": "Bearer s3cret"}
        for _ in range(3):
            assert c.post(SIN, json=BODY, headers=good).status_code == 200
        assert replays(c) == 2  # /metrics stays open with a key
        assert c.post(SIN, json=BODY).status_code == 401
        assert c.post(SIN, json=BODY, headers={"Authorization": "Bearer nope"}).status_code == 401


def test_replays_through_a_real_server(live_client: httpx.Client) -> None:
    body = {"num_heads": 3, "seq_len": 40}
    answers = [
        live_client.post("/v1/biases/alibi", json=body, params={"format": "safetensors"})
        for _ in range(4)
    ]
    for a in answers[2:]:
        same_answer(answers[1], a)
    assert answers[0].content == answers[3].content
    assert counter(live_client, "posenc_cache_hits_total", cache="replay") >= 2
