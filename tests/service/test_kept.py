"""Stream and keep (service.responses.streaming.kept_response): every cache miss of a table asked as
raw, npy or safetensors is sent as its row blocks are computed (one block: computed, then sent
whole), then kept in the body cache. Checked here:

- the answer is the whole path's answer (the same bytes and headers, ETag included: the whole
  path is forced by raising ``KEEP_MIN_BYTES``), for tables of several kinds (sinusoidal from
  offsets and from positions, learned (filled in order), RoPE (three tensors, float16), ALiBi
  (three dimensions)), and its values are the library's;
- the next request is a hit, then a replay, of the same bytes;
- ``If-None-Match`` of a table never computed is a 304 / 412 without computing;
- the in-flight budget is given back, also when the client goes away mid-body.

The pool of buffers the bodies are written into is tested in test_buffers.py.
"""

from __future__ import annotations

import io
import re
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from safetensors.numpy import load as st_load_numpy

import service.responses.paths
from posenc import sinusoidal_table
from service.app import create_app
from tests.helpers import make_settings

SIN = "/v1/encodings/sinusoidal"
PER_REQUEST = {"date", "server-timing", "x-request-id"}  # headers that may differ

# (name, route, body): each table's primary tensor is over 1 MiB (several blocks sent as they
# are computed)
CASES = [
    ("sinusoidal", SIN, {"seq_len": 1024, "d_model": 512, "offset": 12_345}),
    ("sinusoidal-positions", SIN, {"positions": [7, 3, 70_000, 1] * 90, "d_model": 1024}),
    ("learned", "/v1/encodings/learned", {"seq_len": 1000, "d_model": 300, "seed": 7}),
    ("rope", "/v1/encodings/rope", {"seq_len": 6000, "head_dim": 64, "rotary_dim": 48}),
    ("rope-f16", "/v1/encodings/rope", {"seq_len": 12_000, "head_dim": 64, "dtype": "float16"}),
    ("alibi", "/v1/biases/alibi", {"num_heads": 8, "seq_len": 200, "key_len": 210}),
]


# one block: small ones computed on the event loop, one of 256,000 elements in a block thread
SMALL_CASES = [
    ("sinusoidal-small", SIN, {"seq_len": 16, "d_model": 8, "offset": 3}),
    ("rope-small", "/v1/encodings/rope", {"seq_len": 8, "head_dim": 16}),
    ("alibi-small", "/v1/biases/alibi", {"num_heads": 2, "seq_len": 5}),
    ("sinusoidal-one-block", SIN, {"seq_len": 500, "d_model": 512, "offset": 5}),
]


def stripped(r: httpx.Response) -> list[tuple[str, str]]:
    return sorted((k, v) for k, v in r.headers.items() if k not in PER_REQUEST)


def counter(client: httpx.Client, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def kept(r: httpx.Response) -> bool:
    """A kept miss: its headers went before the compute, so they carry no compute time."""
    timing = r.headers["server-timing"]
    return 'cache;desc="miss"' in timing and "compute;" not in timing


@pytest.fixture
def client(gpt2_file):
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        yield c


FORMATS = ["raw", "npy", "safetensors"]


# every case in every format in the whole suite; each case in one format (turn by turn) in the
# fast lane
@pytest.mark.parametrize(
    ("name", "route", "body", "fmt"),
    [
        pytest.param(*c, fmt, id=f"{c[0]}-{fmt}", marks=() if i % 3 == f else (pytest.mark.slow,))
        for i, c in enumerate(CASES)
        for f, fmt in enumerate(FORMATS)
    ],
)
def test_a_kept_miss_is_the_whole_paths_answer(gpt2_file, monkeypatch, name, route, body, fmt):
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        streamed = c.post(route, json=body, params={"format": fmt})
    assert streamed.status_code == 200, streamed.text
    assert kept(streamed)
    # no zeros that look measured: the headers left before the compute, after the queue
    assert re.fullmatch(
        r'queue;dur=\d+\.\d{3}, cache;desc="miss"', streamed.headers["server-timing"]
    )
    assert int(streamed.headers["content-length"]) == len(streamed.content) >= 1 << 20
    monkeypatch.setattr(service.responses.paths, "KEEP_MIN_BYTES", 1 << 62)  # the whole path
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        whole = c.post(route, json=body, params={"format": fmt})
    assert whole.status_code == 200 and not kept(whole)
    assert 'cache;desc="miss"' in whole.headers["server-timing"]
    assert streamed.content == whole.content
    assert stripped(streamed) == stripped(whole)  # ETag, X-Tensor-*, Content-Disposition …


@pytest.mark.parametrize("fmt", ["raw", "npy", "safetensors"])
@pytest.mark.parametrize(("name", "route", "body"), SMALL_CASES, ids=[c[0] for c in SMALL_CASES])
def test_a_one_block_miss_is_kept_too(gpt2_file, monkeypatch, name, route, body, fmt):
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        first = c.post(route, json=body, params={"format": fmt})
        again = c.post(route, json=body, params={"format": fmt})
        assert first.status_code == again.status_code == 200, first.text
        # computed before its headers left: its compute time is known, and it was kept
        assert re.fullmatch(
            r'queue;dur=\d+\.\d{3}, compute;dur=\d+\.\d{3}, cache;desc="miss"',
            first.headers["server-timing"],
        )
        assert 'cache;desc="hit"' in again.headers["server-timing"]
        assert counter(c, "posenc_inflight_bytes") == 0
    monkeypatch.setattr(service.responses.paths, "KEEP_MIN_BYTES", 1 << 62)  # the whole path
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        whole = c.post(route, json=body, params={"format": fmt})
    assert "encode;" in whole.headers["server-timing"]
    assert first.content == again.content == whole.content
    assert stripped(first) == stripped(again) == stripped(whole)


@pytest.mark.parametrize("fmt", ["raw", "npy", "safetensors"])
def test_the_values_are_the_librarys_and_the_next_requests_hit_then_replay(client, fmt):
    body = {"seq_len": 2048, "d_model": 768, "offset": 99_001}
    expected = sinusoidal_table(seq_len=2048, d_model=768, offset=99_001).numpy()
    first = client.post(SIN, json=body, params={"format": fmt})
    assert first.status_code == 200 and kept(first)
    if fmt == "raw":
        got = np.frombuffer(first.content, dtype="<f4").reshape(2048, 768)
    elif fmt == "npy":
        got = np.load(io.BytesIO(first.content))
    else:
        got = st_load_numpy(first.content)["encoding"]
    np.testing.assert_array_equal(got, expected)
    replays = counter(client, "posenc_cache_hits_total", cache="replay")
    second = client.post(SIN, json=body, params={"format": fmt})
    assert counter(client, "posenc_cache_hits_total", cache="replay") == replays + 1
    # and the route's own hit, for a conditional request that does not match
    third = client.post(SIN, json=body, params={"format": fmt}, headers={"If-None-Match": '"x"'})
    for later in (second, third):
        assert 'cache;desc="hit"' in later.headers["server-timing"]
        assert later.content == first.content
        assert stripped(later) == stripped(first)


def test_if_none_match_of_a_table_never_computed_answers_without_computing(gpt2_file):
    body = {"seq_len": 2048, "d_model": 768, "offset": 5}
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        etag = c.get(SIN, params={**body, "format": "raw"}).headers["etag"]
    with TestClient(create_app(make_settings(gpt2_file))) as c:
        cache = c.app.state.posenc.cache  # type: ignore[attr-defined]
        got = c.get(SIN, params={**body, "format": "raw"}, headers={"If-None-Match": etag})
        assert (got.status_code, got.content, got.headers["etag"]) == (304, b"", etag)
        posted = c.post(SIN, json=body, params={"format": "raw"}, headers={"If-None-Match": etag})
        assert posted.status_code == 412
        assert cache.stats()["items"] == 0  # nothing was computed


def test_the_in_flight_budget_is_given_back(client):
    budget = client.app.state.posenc.budget  # type: ignore[attr-defined]
    r = client.post(
        SIN, json={"seq_len": 4096, "d_model": 512, "offset": 1}, params={"format": "raw"}
    )
    assert r.status_code == 200 and kept(r)
    assert budget.in_flight == 0 and budget.peak >= len(r.content)


def test_a_client_gone_mid_body_leaves_nothing_held_over_uvicorn(live_client):
    body = {"seq_len": 8192, "d_model": 1024, "offset": 424_242}  # 32 MiB, 32 blocks
    with live_client.stream("POST", SIN, json=body, params={"format": "raw"}) as r:
        assert r.status_code == 200 and kept(r)
        next(r.iter_raw(1 << 16))  # one piece, then the connection is closed
    time.sleep(0.5)
    # the server goes on: the table was not kept (its body never finished), so this is a
    # miss again, whole and right, and then a hit
    again = live_client.post(SIN, json=body, params={"format": "raw"})
    assert again.status_code == 200 and kept(again)
    expected = sinusoidal_table(seq_len=8192, d_model=1024, offset=424_242).numpy()
    np.testing.assert_array_equal(np.frombuffer(again.content, "<f4").reshape(8192, 1024), expected)
    hit = live_client.post(SIN, json=body, params={"format": "raw"})
    assert 'cache;desc="hit"' in hit.headers["server-timing"] and hit.content == again.content
