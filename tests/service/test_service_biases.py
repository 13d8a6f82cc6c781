"""/v1/biases/{alibi,relative} against the contract's formulas and T5's reference code.

ALiBi slopes and biases are evaluated here from API.md's words (Press et al.; BLOOM, MPT);
T5 buckets come from transformers' ``T5Attention._relative_position_bucket`` itself, and bias
tables from ``torch.manual_seed(seed); nn.Embedding(n_buckets, H)``.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch

from tests.helpers import base64_tensor, json_tensor
from tests.references import alibi_slopes, t5_buckets


def alibi_bias_ref(slopes, t: int, s: int, mode: str) -> np.ndarray:
    i = np.arange(t)[:, None] + (s - t)  # query i at position i + S - T
    j = np.arange(s)[None, :]
    dist = (i - j).astype(np.float64)
    if mode == "symmetric":
        return -slopes[:, None, None] * np.abs(dist)[None]
    bias = -slopes[:, None, None] * dist[None]
    return np.where((j > i)[None], -np.inf, bias)


@pytest.mark.parametrize("heads", [8, 1, 6, 12])
def test_alibi_slopes_and_causal_bias_follow_the_formula(api: httpx.Client, heads: int) -> None:
    r = api.post("/v1/biases/alibi", json={"num_heads": heads, "seq_len": 5, "key_len": 9})
    assert r.status_code == 200, r.text
    body = r.json()
    slopes = alibi_slopes(heads)
    np.testing.assert_allclose(json_tensor(body, "slopes"), slopes, rtol=1e-6, atol=0)
    bias = json_tensor(body, "bias")  # null -> -inf
    assert bias.shape == (heads, 5, 9)
    np.testing.assert_allclose(bias, alibi_bias_ref(slopes, 5, 9, "causal"), rtol=1e-6, atol=1e-6)
    assert list(body["tensors"]) == ["bias", "slopes"]


def test_eight_heads_give_slopes_one_half_to_one_256th(app_client: httpx.Client) -> None:
    body = app_client.post("/v1/biases/alibi", json={"num_heads": 8, "seq_len": 1}).json()
    assert json_tensor(body, "slopes").tolist() == [2.0**-k for k in range(1, 9)]


def test_alibi_symmetric_max_bias_and_float64(api: httpx.Client) -> None:
    r = api.post(
        "/v1/biases/alibi",
        json={
            "num_heads": 5,
            "seq_len": 7,
            "mode": "symmetric",
            "max_bias": 4.0,
            "dtype": "float64",
        },
        params={"encoding": "base64"},
    )
    body = r.json()
    slopes = alibi_slopes(5, 4.0)
    np.testing.assert_allclose(base64_tensor(body, "slopes"), slopes, rtol=1e-15)
    np.testing.assert_allclose(
        base64_tensor(body, "bias"), alibi_bias_ref(slopes, 7, 7, "symmetric"), rtol=1e-15
    )


def test_alibi_masked_entries_are_null_in_json_and_minus_inf_in_binary(
    app_client: httpx.Client,
) -> None:
    body = app_client.post("/v1/biases/alibi", json={"num_heads": 2, "seq_len": 3}).json()
    assert body["tensors"]["bias"]["data"][0][0] == [0.0, None, None]
    raw = app_client.post(
        "/v1/biases/alibi", json={"num_heads": 2, "seq_len": 3}, params={"format": "raw"}
    )
    arr = np.frombuffer(raw.content, dtype="<f4").reshape(2, 3, 3)
    assert np.isneginf(arr[0, 0, 1]) and arr[1, 2, 0] == np.float32(-2 * 2.0**-8)


def test_alibi_presets_are_the_published_head_counts(app_client: httpx.Client) -> None:
    """bigscience/bloom-7b1 config.json n_head 32; mosaicml/mpt-7b n_heads 32, alibi_bias_max 8."""
    for name in ("bloom-7b1", "mpt-7b"):
        r = app_client.post("/v1/biases/alibi", json={"preset": name, "seq_len": 2})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["meta"]["num_heads"] == 32
        np.testing.assert_allclose(json_tensor(body, "slopes"), alibi_slopes(32), rtol=1e-6)
    # the body overrides the preset's num_heads
    body = app_client.post(
        "/v1/biases/alibi", json={"preset": "bloom-7b1", "seq_len": 2, "num_heads": 3}
    ).json()
    np.testing.assert_allclose(json_tensor(body, "slopes"), alibi_slopes(3), rtol=1e-6)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"seq_len": 4}, "num_heads"),
        ({"num_heads": 0, "seq_len": 4}, "num_heads"),
        ({"num_heads": 2, "seq_len": 4, "key_len": 3}, "key_len"),
        ({"num_heads": 2, "seq_len": 4, "mode": "acausal"}, "mode"),
        ({"num_heads": 2, "seq_len": 4, "max_bias": 0}, "max_bias"),
        ({"num_heads": 2, "seq_len": 4, "preset": "t5-base"}, "preset"),
    ],
)
def test_alibi_invalid_requests_are_422(app_client: httpx.Client, body: dict, where: str) -> None:
    r = app_client.post("/v1/biases/alibi", json=body)
    assert r.status_code == 422, r.text
    assert where in r.text


# ---------------------------------------------------------------------------------------------
# Relative (T5)
# ---------------------------------------------------------------------------------------------


def t5_buckets_ref(t: int, s: int, *, bidirectional=True, num_buckets=32, max_distance=128):
    query = torch.arange(t)[:, None] + (s - t)
    key = torch.arange(s)[None, :]
    return t5_buckets(key - query, bidirectional, num_buckets, max_distance).numpy()


@pytest.mark.parametrize(
    ("bidirectional", "num_buckets", "max_distance"),
    [(True, 32, 128), (False, 32, 128), (True, 8, 20)],
)
def test_relative_log_buckets_are_t5s(
    api: httpx.Client, bidirectional: bool, num_buckets: int, max_distance: int
) -> None:
    body = {
        "seq_len": 40,
        "key_len": 300,
        "bidirectional": bidirectional,
        "num_buckets": num_buckets,
        "max_distance": max_distance,
    }
    r = api.post("/v1/biases/relative", json=body)
    assert r.status_code == 200, r.text
    got = json_tensor(r.json(), "buckets")
    assert r.json()["tensors"]["buckets"]["dtype"] == "int64"
    want = t5_buckets_ref(
        40, 300, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    np.testing.assert_array_equal(got, want)
    assert list(r.json()["tensors"]) == ["buckets"]  # no bias without num_heads


def test_relative_clip_buckets(api: httpx.Client) -> None:
    r = api.post(
        "/v1/biases/relative",
        json={"seq_len": 6, "key_len": 9, "bucketing": "clip", "max_distance": 3},
    )
    rel = np.arange(9)[None, :] - (np.arange(6)[:, None] + 3)
    np.testing.assert_array_equal(json_tensor(r.json(), "buckets"), np.clip(rel, -3, 3) + 3)
    assert r.json()["meta"]["bucket_count"] == 7


@pytest.mark.parametrize("seed", [0, 3])
def test_relative_bias_gathers_the_seeded_table(api: httpx.Client, seed: int) -> None:
    r = api.post(
        "/v1/biases/relative",
        json={"seq_len": 5, "key_len": 7, "num_heads": 3, "seed": seed},
        params={"format": "safetensors"},
    )
    assert r.status_code == 200, r.text
    from safetensors.torch import load

    tensors = load(r.content)
    assert set(tensors) == {"bias", "buckets"}
    buckets = t5_buckets_ref(5, 7)
    np.testing.assert_array_equal(tensors["buckets"].numpy(), buckets)
    torch.manual_seed(seed)
    table = torch.nn.Embedding(32, 3).weight.detach().numpy()  # (NB, H)
    want = np.transpose(table[buckets], (2, 0, 1))  # (H, T, S)
    np.testing.assert_array_equal(tensors["bias"].numpy(), want)


def test_relative_t5_base_preset(app_client: httpx.Client) -> None:
    """google-t5/t5-base config.json: num_heads 12, relative_attention_num_buckets 32,
    relative_attention_max_distance 128 (bidirectional in the encoder)."""
    body = app_client.post("/v1/biases/relative", json={"preset": "t5-base", "seq_len": 4}).json()
    assert body["tensors"]["bias"]["shape"] == [12, 4, 4]
    np.testing.assert_array_equal(json_tensor(body, "buckets"), t5_buckets_ref(4, 4))
    assert body["meta"]["num_buckets"] == 32 and body["meta"]["max_distance"] == 128


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"seq_len": 4, "key_len": 2}, "key_len"),
        ({"seq_len": 4, "num_buckets": 3}, "num_buckets"),
        ({"seq_len": 4, "num_buckets": 32, "max_distance": 4}, "max_distance"),
        ({"seq_len": 4, "bucketing": "linear"}, "bucketing"),
        ({"seq_len": 4, "preset": "llama-2-7b"}, "preset"),
    ],
)
def test_relative_invalid_requests_are_422(
    app_client: httpx.Client, body: dict, where: str
) -> None:
    r = app_client.post("/v1/biases/relative", json=body)
    assert r.status_code == 422, r.text
    assert where in r.text
