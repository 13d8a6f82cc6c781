"""Odd ``Accept`` headers, in process and through a real uvicorn: never a 5xx.

RFC 9110 (section 12.4.2) leaves a malformed weight to the recipient; a malformed parameter
must not make an acceptable type unacceptable, so ``application/json;q=abc`` is JSON with the
default weight 1, not a 406. Empty headers, stray commas and very long headers are answered
like their meaningful part, and a header without one well-formed media range is disregarded
(as RFC 9110 section 12.5.1 allows): JSON. ``*/*;q=0`` (nothing acceptable) is the documented
406 that lists the media types.
"""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest

SINUSOIDAL = {"seq_len": 3, "d_model": 4}
GET_URL = "/v1/encodings/sinusoidal?seq_len=3&d_model=4"
ALL_TYPES = {
    "application/json",
    "application/vnd.safetensors",
    "application/x-npy",
    "application/octet-stream",
    "image/png",
}


def _expected() -> np.ndarray:
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/4), in float64."""
    p = np.arange(3, dtype=np.float64)[:, None]
    w = 10000.0 ** (-np.arange(0, 4, 2, dtype=np.float64) / 4)
    out = np.empty((3, 4))
    out[:, 0::2], out[:, 1::2] = np.sin(p * w), np.cos(p * w)
    return out


def _json_table(r: httpx.Response) -> np.ndarray:
    assert r.headers["content-type"].startswith("application/json"), r.headers
    return np.asarray(r.json()["tensors"]["encoding"]["data"], dtype=np.float64)


@pytest.mark.parametrize(
    "accept",
    [
        "application/json;q=abc",
        "application/json; q=",
        "application/json;q=2",
        "application/json;q=-1",
        "application/json;q=nan",
        "application/json;Q=1e-3",
        "application/json;q=abc, image/png;q=0.5",
        "",
        ", \t ,",
        ",,,,,",
        "," * 5000 + "application/json" + "," * 5000,
        ";;;;",
        "garbage",
        "json",
        "*/json",
        "*/*;q=abc",
        "application/json;q=0.5;q=0",
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_odd_accept_is_json(api: httpx.Client, accept: str, method: str) -> None:
    if method == "GET":
        r = api.get(GET_URL, headers={"Accept": accept})
    else:
        r = api.post("/v1/encodings/sinusoidal", json=SINUSOIDAL, headers={"Accept": accept})
    assert r.status_code == 200, (accept[:60], r.status_code, r.text[:300])
    np.testing.assert_allclose(_json_table(r), _expected(), rtol=0, atol=1e-7)
    assert "accept" in r.headers["vary"].lower()


def test_a_malformed_weight_does_not_outrank_or_drop_a_type(api: httpx.Client) -> None:
    r = api.post(
        "/v1/encodings/sinusoidal",
        json=SINUSOIDAL,
        headers={"Accept": "application/json;q=0.2, application/x-npy;q=oops"},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-npy"
    np.testing.assert_allclose(np.load(io.BytesIO(r.content)), _expected(), rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    "accept", ["*/*;q=0", "text/html", "application/json;q=0, */*;q=0", "text/*;q=abc"]
)
def test_nothing_acceptable_is_a_406_listing_the_types(api: httpx.Client, accept: str) -> None:
    r = api.get(GET_URL, headers={"Accept": accept})
    assert r.status_code == 406, r.text
    body = r.json()
    assert "Accept" in body["detail"]
    assert all(media in body["detail"] for media in ALL_TYPES), body


@pytest.mark.parametrize("size", [8 * 1024, 60 * 1024])
def test_very_long_accept_headers_never_5xx(api: httpx.Client, size: int) -> None:
    """A long list of ranges (browsers' and proxies' kind) with JSON at its end; and one long
    range of junk. Either the answer is JSON or the server refuses the header (4xx), never a
    5xx."""
    ranges = ("text/html;q=0.9, " * (size // 17)) + "application/json;q=0.95"
    r = api.get(GET_URL, headers={"Accept": ranges})
    assert r.status_code < 500, r.status_code
    if r.status_code == 200:
        np.testing.assert_allclose(_json_table(r), _expected(), rtol=0, atol=1e-7)
    r = api.get(GET_URL, headers={"Accept": "x" * size})  # no well-formed range: disregarded
    assert r.status_code < 500, r.status_code
    if r.status_code == 200:
        np.testing.assert_allclose(_json_table(r), _expected(), rtol=0, atol=1e-7)
