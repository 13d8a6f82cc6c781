"""The HTTP conventions of API.md: formats and negotiation, 406, 413 before allocation, ETag with
304/412, GET == POST bytes, Vary and Server-Timing, the cache, bearer auth, CORS, and JSON error
bodies (never a stack trace)."""

from __future__ import annotations

import io
import json
import re

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from tests.helpers import (
    GPT2_NAME,
    ApiClient,
    json_tensor,
    make_settings,
    raw_tensor,
    safetensors_metadata,
)
from tests.references import sinusoidal

SIN = "/v1/encodings/sinusoidal"
SIN_BODY = {"seq_len": 6, "d_model": 8}
MEDIA = {
    "json": "application/json",
    "safetensors": "application/vnd.safetensors",
    "npy": "application/x-npy",
    "raw": "application/octet-stream",
    "png": "image/png",
}


# ---------------------------------------------------------------------------------------------
# Formats
# ---------------------------------------------------------------------------------------------


def test_json_is_the_default_and_for_any_type(api: httpx.Client) -> None:
    for headers in ({}, {"Accept": "*/*"}, {"Accept": "application/*"}):
        r = api.post(SIN, json=SIN_BODY, headers=headers)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/json")
        np.testing.assert_allclose(
            json_tensor(r.json(), "encoding"), sinusoidal(range(6), 8), atol=1e-6
        )


def test_safetensors_holds_every_tensor_and_the_meta(api: httpx.Client) -> None:
    from safetensors.torch import load

    r = api.post(
        "/v1/encodings/rope",
        json={"seq_len": 4, "head_dim": 8},
        headers={"Accept": MEDIA["safetensors"]},
    )
    assert r.headers["content-type"] == MEDIA["safetensors"]
    tensors = load(r.content)
    assert set(tensors) == {"cos", "sin", "inv_freq"}
    assert tuple(tensors["cos"].shape) == (4, 8) and tuple(tensors["inv_freq"].shape) == (4,)
    inv = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(tensors["inv_freq"].numpy(), inv, rtol=1e-6)
    meta = json.loads(safetensors_metadata(r.content)["meta"])
    assert meta == api.post("/v1/encodings/rope", json={"seq_len": 4, "head_dim": 8}).json()["meta"]
    assert meta["attention_scaling"] == 1.0


def test_npy_is_the_primary_tensor(api: httpx.Client) -> None:
    r = api.post(SIN, json={**SIN_BODY, "dtype": "float64"}, params={"format": "npy"})
    assert r.headers["content-type"] == MEDIA["npy"]
    arr = np.load(io.BytesIO(r.content))
    assert arr.dtype == np.float64 and arr.shape == (6, 8)
    np.testing.assert_allclose(arr, sinusoidal(range(6), 8), rtol=1e-12, atol=1e-12)


def test_raw_has_tensor_headers(api: httpx.Client) -> None:
    r = api.post(
        "/v1/biases/alibi",
        json={"num_heads": 4, "seq_len": 3, "key_len": 5},
        headers={"Accept": MEDIA["raw"]},
    )
    assert r.headers["content-type"] == MEDIA["raw"]
    assert r.headers["x-tensor-shape"] == "4,3,5" and r.headers["x-tensor-dtype"] == "float32"
    name, arr = raw_tensor(r)
    assert name == "bias"
    slopes = np.array([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])
    # query 0 sits at position 2: keys 0..2 at distances 2, 1, 0; keys 3, 4 masked
    np.testing.assert_allclose(arr[:, 0, :3], -slopes[:, None] * np.array([2, 1, 0]), rtol=1e-6)
    assert np.isneginf(arr[:, 0, 3:]).all()


def test_int64_tensors_in_binary_formats(api: httpx.Client) -> None:
    r = api.post("/v1/biases/relative", json={"seq_len": 3}, params={"format": "raw"})
    name, arr = raw_tensor(r)
    assert name == "buckets" and arr.dtype == np.dtype("<i8")
    assert arr.tolist() == [[0, 17, 18], [1, 0, 17], [2, 1, 0]]


def test_png_heatmap_grid_and_index(api: httpx.Client) -> None:
    body = {"num_heads": 4, "seq_len": 16}
    grid = api.post("/v1/biases/alibi", json=body, params={"format": "png"})
    assert grid.status_code == 200 and grid.headers["content-type"] == MEDIA["png"]
    image = Image.open(io.BytesIO(grid.content))
    assert image.format == "PNG" and image.width >= 16 and image.height >= 16
    colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 20  # a heatmap, not a blank canvas
    one = api.post("/v1/biases/alibi", json=body, params={"format": "png", "index": 3})
    assert one.status_code == 200 and one.content != grid.content
    other = api.post("/v1/biases/alibi", json=body, params={"format": "png", "index": 0})
    assert other.content != one.content
    bad = api.post("/v1/biases/alibi", json=body, params={"format": "png", "index": 4})
    assert bad.status_code == 422 and "index" in bad.text


def test_base64_json_keeps_shape_and_dtype(api: httpx.Client) -> None:
    import base64

    r = api.post(SIN, json={**SIN_BODY, "dtype": "float16"}, params={"encoding": "base64"})
    t = r.json()["tensors"]["encoding"]
    assert t["shape"] == [6, 8] and t["dtype"] == "float16" and isinstance(t["data"], str)
    arr = np.frombuffer(base64.b64decode(t["data"]), dtype="<f2").reshape(6, 8)
    np.testing.assert_allclose(arr, sinusoidal(range(6), 8), atol=1e-3)


def test_format_parameter_wins_over_accept_and_q_values_count(api: httpx.Client) -> None:
    r = api.post(SIN, json=SIN_BODY, params={"format": "npy"}, headers={"Accept": MEDIA["png"]})
    assert r.headers["content-type"] == MEDIA["npy"]
    r = api.post(
        SIN,
        json=SIN_BODY,
        headers={"Accept": "application/x-npy;q=0.4, application/vnd.safetensors;q=0.9"},
    )
    assert r.headers["content-type"] == MEDIA["safetensors"]


# ---------------------------------------------------------------------------------------------
# 406
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "headers", "mention"),
    [
        ({}, {"Accept": "text/html"}, "text/html"),
        ({}, {"Accept": "application/xml, text/*;q=0.5"}, "application/xml"),
        ({"format": "xml"}, {}, "xml"),
    ],
)
def test_unproducible_formats_are_406_listing_the_types(
    api: httpx.Client, params: dict, headers: dict, mention: str
) -> None:
    r = api.post(SIN, json=SIN_BODY, params=params, headers=headers)
    assert r.status_code == 406
    body = r.json()
    assert set(body["available"]) == set(MEDIA.values())
    assert mention in body["detail"]


def test_bfloat16_as_npy_is_406_saying_so(api: httpx.Client) -> None:
    r = api.post(SIN, json={**SIN_BODY, "dtype": "bfloat16"}, params={"format": "npy"})
    assert r.status_code == 406
    assert "bfloat16" in r.json()["detail"] and "npy" in r.json()["detail"]
    assert MEDIA["safetensors"] in r.json()["available"]


# ---------------------------------------------------------------------------------------------
# 413 before allocation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "elements"),
    [
        (SIN, {"seq_len": 10**7, "d_model": 1024}, 10**7 * 1024),
        (SIN, {"positions": list(range(8193)), "d_model": 8192}, 8193 * 8192),
        ("/v1/encodings/learned", {"seq_len": 10**9, "d_model": 4096}, 10**9 * 4096),
        ("/v1/encodings/rope", {"seq_len": 10**8, "head_dim": 128}, 2 * 10**8 * 128 + 64),
        ("/v1/biases/alibi", {"num_heads": 64, "seq_len": 8192}, 64 * 8192 * 8192 + 64),
        ("/v1/biases/relative", {"seq_len": 8192, "key_len": 8193}, 8192 * 8193),
        ("/v1/biases/relative", {"seq_len": 4096, "num_heads": 12}, 4096 * 4096 * 13),
        ("/v1/embed", {"input_ids": [[1] * 1000] * 132}, 132 * 1000 * 512 + 2 * 132 * 1000),
    ],
)
def test_oversized_outputs_are_413_giving_limit_and_size(
    api: httpx.Client, path: str, body: dict, elements: int
) -> None:
    r = api.post(path, json=body)
    assert r.status_code == 413, r.text[:300]
    got = r.json()
    assert got["limit"] == 67_108_864 and got["requested"] == elements
    assert "67108864" in got["detail"] and str(elements) in got["detail"]


def test_413_comes_before_any_computation(gpt2_file, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is checked on the parameters: the library is never called, exactly-at-limit is
    served, one more element is refused; a huge internal table (clip buckets) is refused too."""
    import posenc.absolute.sinusoidal as sinusoidal  # the sinusoidal kind computes with it
    import posenc.relative_schemes.relative as relative  # the relative kind computes with it

    calls: list[int] = []
    real = sinusoidal.sinusoidal_table

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs["d_model"])
        return real(*args, **kwargs)

    monkeypatch.setattr(sinusoidal, "sinusoidal_table", spy)
    monkeypatch.setattr(relative, "relative_bias_table", lambda *a, **k: pytest.fail("allocated"))
    with TestClient(create_app(make_settings(gpt2_file, max_elements=1000))) as client:
        assert client.post(SIN, json={"seq_len": 125, "d_model": 8}).status_code == 200
        r = client.post(SIN, json={"seq_len": 126, "d_model": 8})
        assert r.status_code == 413 and r.json()["requested"] == 1008
        assert calls == [8]
        r = client.post(
            "/v1/biases/relative",
            json={"seq_len": 2, "bucketing": "clip", "max_distance": 10**12, "num_heads": 8},
        )
        assert r.status_code == 413 and r.json()["requested"] == (2 * 10**12 + 1) * 8
        assert r.json()["field"] == "num_heads"
        r = client.post("/v1/position-ids", json={"input_ids": [[1] * 300, [2]]})
        assert r.status_code == 413 and r.json()["requested"] == 2 * 2 * 300
        r = client.post("/v1/embed", json={"input_ids": [[1, 2]]})  # default model: D = 512
        assert r.status_code == 413 and r.json()["requested"] == 2 * 512 + 2 * 2
        r = client.post("/v1/embed", json={"input_ids": [[1] * 20], "model": GPT2_NAME})
        assert r.status_code == 200, r.text
        info = client.get("/v1/info").json()
        assert info["limits"]["max_elements"] == 1000


# ---------------------------------------------------------------------------------------------
# ETag, 304, 412, identical bytes, GET == POST
# ---------------------------------------------------------------------------------------------


def test_etag_304_on_get_and_412_on_post(api: httpx.Client) -> None:
    url = SIN + "?seq_len=6&d_model=8"
    first = api.get(url)
    etag = first.headers["etag"]
    assert re.fullmatch(r'"[0-9a-f]{32}"', etag)
    for value in (etag, f"W/{etag}", f'"nope", {etag}', "*"):
        r = api.get(url, headers={"If-None-Match": value})
        assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == etag
    assert api.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    r = api.post(SIN, json=SIN_BODY, headers={"If-None-Match": etag})
    assert r.status_code == 412 and "If-None-Match" in r.json()["detail"]
    assert api.post(SIN, json=SIN_BODY, headers={"If-None-Match": '"x"'}).status_code == 200


def test_etag_depends_on_params_format_and_encoding(api: httpx.Client) -> None:
    tags = {
        api.post(SIN, json=SIN_BODY).headers["etag"],
        api.post(SIN, json={**SIN_BODY, "seq_len": 7}).headers["etag"],
        api.post(SIN, json=SIN_BODY, params={"format": "npy"}).headers["etag"],
        api.post(SIN, json=SIN_BODY, params={"encoding": "base64"}).headers["etag"],
        api.post(SIN, json={**SIN_BODY, "dtype": "float64"}).headers["etag"],
    }
    assert len(tags) == 5
    # a default given explicitly is the same request
    same = api.post(SIN, json={**SIN_BODY, "base": 10000, "layout": "interleaved"})
    assert same.headers["etag"] == api.post(SIN, json=SIN_BODY).headers["etag"]


GET_POST_CASES = [
    ("/v1/encodings/sinusoidal", {"positions": [0, 3, 70000], "d_model": 6, "offset": 2}),
    ("/v1/encodings/learned", {"seq_len": 5, "d_model": 3, "seed": 11}),
    ("/v1/encodings/learned", {"seq_len": 5, "model": GPT2_NAME}),
    (
        "/v1/encodings/rope",
        {
            "positions": [1, 5, 9000],
            "head_dim": 16,
            "rotary_dim": 8,
            "layout": "interleaved",
            "scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
        },
    ),
    ("/v1/encodings/rope", {"seq_len": 3, "preset": "qwen2.5-7b"}),
    ("/v1/biases/alibi", {"num_heads": 3, "seq_len": 4, "key_len": 6, "mode": "symmetric"}),
    ("/v1/biases/relative", {"seq_len": 4, "num_heads": 2, "bidirectional": False, "seed": 1}),
]


def _query(body: dict) -> dict[str, str]:
    out = {}
    for key, value in body.items():
        if key == "positions":
            out[key] = ",".join(map(str, value))
        elif key == "scaling":
            out[key] = json.dumps(value)
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


@pytest.mark.parametrize(("path", "body"), GET_POST_CASES)
@pytest.mark.parametrize("fmt", ["json", "safetensors"])
def test_get_gives_the_bytes_of_the_post(
    api: httpx.Client, path: str, body: dict, fmt: str
) -> None:
    post = api.post(path, json=body, params={"format": fmt})
    get = api.get(path, params={**_query(body), "format": fmt})
    assert post.status_code == 200, post.text
    assert get.status_code == 200, get.text
    assert get.content == post.content
    assert get.headers["etag"] == post.headers["etag"]
    # formula tables are fresh for a day; a model's table is revalidated (its file may change)
    want = "no-cache" if "model" in body else "max-age=86400"
    assert want in get.headers["cache-control"] and "public" in get.headers["cache-control"]


def test_in_process_and_uvicorn_give_identical_bytes(
    app_client: httpx.Client, live_client: httpx.Client
) -> None:
    for path, body in GET_POST_CASES:
        a = app_client.post(path, json=body, params={"format": "safetensors"})
        b = live_client.post(path, json=body, params={"format": "safetensors"})
        assert a.content == b.content, path
        a = app_client.post(path, json=body)
        assert a.content == live_client.post(path, json=body).content, path


@pytest.mark.parametrize(
    ("query", "where"),
    [
        ("seq_len=4&d_model=8&colour=red", "colour"),
        ("positions=1,x&d_model=8", "positions"),
        ("positions=&d_model=8", "positions"),
        ("seq_len=4&seq_len=5&d_model=8", "seq_len"),
        ("seq_len=four&d_model=8", "seq_len"),
    ],
)
def test_get_query_errors_are_422(api: httpx.Client, query: str, where: str) -> None:
    r = api.get(SIN + "?" + query)
    assert r.status_code == 422, r.text
    assert any(e["loc"][:2] == ["query", where] for e in r.json()["detail"]), r.json()


def test_get_scaling_must_be_json(api: httpx.Client) -> None:
    r = api.get("/v1/encodings/rope", params={"seq_len": 2, "head_dim": 4, "scaling": "{linear"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "scaling"]
    r = api.get("/v1/encodings/rope", params={"seq_len": 2, "head_dim": 4, "scaling": "null"})
    assert r.status_code == 200 and r.json()["meta"]["scaling"] is None


# ---------------------------------------------------------------------------------------------
# Headers, cache, bodies
# ---------------------------------------------------------------------------------------------


def test_vary_and_server_timing(api: httpx.Client) -> None:
    r = api.post(SIN, json={"seq_len": 3, "d_model": 4, "base": 77.0})
    assert r.headers["vary"] == "Accept"
    timing = r.headers["server-timing"]
    assert re.search(r"compute;dur=[0-9.]+", timing) and re.search(r"encode;dur=[0-9.]+", timing)
    for path in ("/healthz", "/v1/models"):
        assert "Accept" in api.get(path).headers["vary"]
    r = api.post(SIN, json={"seq_len": 3, "d_model": 1})
    assert r.status_code == 422 and r.headers["vary"] == "Accept"


def _counter(client: ApiClient, name: str, **labels: str) -> float:
    text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def test_repeated_requests_hit_the_cache(gpt2_file) -> None:
    with TestClient(create_app(make_settings(gpt2_file))) as client:
        body = {"num_heads": 2, "seq_len": 33}
        first = client.post("/v1/biases/alibi", json=body)
        assert 'cache;desc="miss"' in first.headers["server-timing"]
        second = client.post("/v1/biases/alibi", json=body)
        assert 'cache;desc="hit"' in second.headers["server-timing"]
        assert second.content == first.content
        assert _counter(client, "posenc_cache_hits_total", cache="body") == 1
        assert _counter(client, "posenc_cache_misses_total", cache="body") == 1
        # another format of the same table reuses the computed tensors
        client.post("/v1/biases/alibi", json=body, params={"format": "npy"})
        assert _counter(client, "posenc_cache_hits_total", cache="tensors") == 1
        assert _counter(client, "posenc_cache_bytes", cache="responses") > 0


def test_no_cache_budget_still_serves_identical_bytes(gpt2_file) -> None:
    with TestClient(create_app(make_settings(gpt2_file, cache_bytes=0))) as client:
        a = client.post(SIN, json=SIN_BODY, params={"format": "safetensors"})
        b = client.post(SIN, json=SIN_BODY, params={"format": "safetensors"})
        assert a.content == b.content and 'cache;desc="miss"' in b.headers["server-timing"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/encodings/sinusoidal",
        "/v1/encodings/learned",
        "/v1/encodings/rope",
        "/v1/biases/alibi",
        "/v1/biases/relative",
        "/v1/position-ids",
        "/v1/embed",
    ],
)
def test_unknown_body_fields_are_422(api: httpx.Client, path: str) -> None:
    r = api.post(path, json={"no_such_field": 1})
    assert r.status_code == 422
    errors = r.json()["detail"]
    assert any(
        e["loc"] == ["body", "no_such_field"] and e["type"] == "extra_forbidden" for e in errors
    )


def test_malformed_json_is_422(api: httpx.Client) -> None:
    r = api.post(SIN, content=b'{"seq_len": 4,', headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"seq_len": NaN, "d_model": 8}',
        b'{"seq_len": 2, "d_model": 8, "base": Infinity}',
        b'{"positions": [-Infinity], "d_model": 8}',
        b"[NaN]",
    ],
)
def test_nan_and_infinity_in_bodies_are_422(api: httpx.Client, raw: bytes) -> None:
    """Python's json reads NaN and Infinity; echoing them back must not break the 422 body."""
    r = api.post(SIN, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][0] == "body"


def test_unexpected_errors_are_json_500_without_a_traceback(
    gpt2_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    import posenc.absolute.sinusoidal as sinusoidal  # the sinusoidal kind computes with it

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("secret internals")

    monkeypatch.setattr(sinusoidal, "sinusoidal_table", broken)
    app = create_app(make_settings(gpt2_file))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post(SIN, json={"seq_len": 2, "d_model": 2, "base": 3.0})
        assert r.status_code == 500
        assert r.headers["content-type"].startswith("application/json")
        assert "RuntimeError" in r.json()["detail"]
        assert "Traceback" not in r.text and "secret internals" not in r.text


def test_unknown_paths_and_methods_are_json(api: httpx.Client) -> None:
    r = api.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["detail"]
    r = api.delete(SIN)
    assert r.status_code == 405 and r.json()["detail"]
    r = api.get("/v1/position-ids")
    assert r.status_code == 405


# ---------------------------------------------------------------------------------------------
# Auth and CORS
# ---------------------------------------------------------------------------------------------


def test_api_key_guards_v1_only(gpt2_file) -> None:
    with TestClient(create_app(make_settings(gpt2_file, api_key="s3cret"))) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
            r = client.post(SIN, json=SIN_BODY, headers=headers)
            assert r.status_code == 401
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert "Authorization" in r.json()["detail"]
            assert client.get("/v1/models", headers=headers).status_code == 401
        # bad bodies are still 401 first: nothing about the request is revealed
        assert client.post(SIN, content=b"{nope").status_code == 401
        ok = client.post(SIN, json=SIN_BODY, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        np.testing.assert_allclose(
            json_tensor(ok.json(), "encoding"), sinusoidal(range(6), 8), atol=1e-6
        )
        for path in ("/healthz", "/readyz", "/docs", "/openapi.json", "/metrics"):
            assert client.get(path).status_code == 200, path
        assert _counter(client, "posenc_requests_total", route=SIN, status="401") == 4
        spec = client.get("/openapi.json").json()
        assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
        assert spec["paths"][SIN]["post"]["security"] == [{"bearerAuth": []}]
        assert "security" not in spec["paths"]["/healthz"]["get"]


def test_cors_when_origins_are_set(gpt2_file) -> None:
    origin = "http://notebook.example"
    with TestClient(
        create_app(make_settings(gpt2_file, cors_origins=f"{origin}, http://b"))
    ) as client:
        pre = client.options(
            SIN,
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,authorization",
            },
        )
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == origin
        r = client.post(SIN, json=SIN_BODY, headers={"Origin": origin})
        assert r.headers["access-control-allow-origin"] == origin
        assert "ETag" in r.headers["access-control-expose-headers"]
    with TestClient(create_app(make_settings(gpt2_file))) as client:
        r = client.post(SIN, json=SIN_BODY, headers={"Origin": origin})
        assert "access-control-allow-origin" not in r.headers
