"""``POST /v1/rope/shift``: JSON, safetensors and seeded keys, in process and through uvicorn.

The key at ``from`` is ``/v1/encodings/rope``'s own float64 table applied to a random key, and
the shifted key must equal the same key rotated at ``to`` (within float64 rounding).
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from posenc.core import codec, slices
from posenc.resolve import compute, resolve_fields
from posenc.rope_kinds.shift import ROPE_SHIFT
from tests.helpers import json_tensor
from tests.lib.llamacpp_vectors import CASES, fixture_array, pair_ulps

SOURCE, TARGET = [0, 7, 4000], [100, 5000, 20_000]


def _rotated(api: httpx.Client, k0: np.ndarray, positions: list[int]) -> np.ndarray:
    """``k0`` (T, H, D) rotated at ``positions`` by the rope endpoint's float64 Phi-3.5 table
    (half layout, R = D = 96)."""
    r = api.post(
        "/v1/encodings/rope",
        json={"preset": "phi-3.5-mini", "positions": positions, "dtype": "float64"},
    )
    assert r.status_code == 200, r.text
    cos, sin = json_tensor(r.json(), "cos")[:, None, :], json_tensor(r.json(), "sin")[:, None, :]
    half = np.concatenate((-k0[..., 48:], k0[..., :48]), -1)
    return k0 * cos + half * sin


def test_json_key_moves_across_longrope_s_switch(api: httpx.Client) -> None:
    k0 = np.random.default_rng(0).standard_normal((3, 2, 96))
    body = {
        "preset": "phi-3.5-mini",
        "from_positions": SOURCE,
        "to_positions": TARGET,
        "k": _rotated(api, k0, SOURCE).tolist(),
        "dtype": "float64",
    }
    r = api.post("/v1/rope/shift", json=body)
    assert r.status_code == 200, r.text
    got = json_tensor(r.json(), "k")
    np.testing.assert_allclose(got, _rotated(api, k0, TARGET), atol=1e-10, rtol=0)
    meta = r.json()["meta"]
    assert meta["from_seq_len"] == 4001 and meta["to_seq_len"] == 20_001
    assert meta["attention_scaling_ratio"] == 1.0
    assert meta["drift"] < 1e-10


def test_safetensors_key_keeps_its_dtype(api: httpx.Client) -> None:
    """A bfloat16 key in a safetensors body comes back bfloat16, the fields in __metadata__."""
    k = torch.randn(3, 2, 128).to(torch.bfloat16)
    fields = {"preset": "llama-3.1-8b", "positions": [5, 6, 7], "delta": -4}
    body = codec.encode_safetensors({"k": k}, metadata={"request": json.dumps(fields)})
    r = api.post(
        "/v1/rope/shift",
        content=bytes(body),
        headers={"content-type": "application/vnd.safetensors", "accept": "application/vnd.safetensors"},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    tensors, _meta = codec.decode_safetensors(r.content)
    got = tensors["k"]
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    want = compute(ROPE_SHIFT, resolve_fields(ROPE_SHIFT, {**fields, "k": k}))["k"]
    assert torch.equal(got, want)


def test_safetensors_and_json_keys_are_not_one_cache_entry(api: httpx.Client) -> None:
    fields = {"head_dim": 4, "positions": [1], "delta": 1}
    answers = []
    for value in (1.0, 2.0):
        k = torch.full((1, 1, 4), value)
        body = codec.encode_safetensors({"k": k}, metadata={"request": json.dumps(fields)})
        r = api.post(
            "/v1/rope/shift",
            content=bytes(body),
            headers={"content-type": "application/vnd.safetensors"},
        )
        assert r.status_code == 200, r.text
        answers.append(json_tensor(r.json(), "k"))
    assert not np.array_equal(answers[0], answers[1])


def test_llamacpp_kshift_reports_its_drift(api: httpx.Client) -> None:
    body = {
        "preset": "llama-3.1-8b",
        "positions": [1000, 50_000],
        "delta": 3,
        "steps": 10,
        "seed": 1,
        "num_heads": 4,
        "num_kv_heads": 2,
        "engine": "llama.cpp",
        "precision": "engine",
    }
    r = api.post("/v1/rope/shift", json=body)
    assert r.status_code == 200, r.text
    meta = r.json()["meta"]
    assert meta["steps"] == 10 and meta["llamacpp_kshift"]["mode"] == "normal"
    assert 0 < meta["drift"] < 1e-4
    assert json_tensor(r.json(), "k").shape == (2, 2, 128)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"head_dim": 8, "positions": [1], "delta": -5}, "delta"),
        ({"head_dim": 8, "positions": [1], "delta": 1, "k": [[[0.0] * 4]]}, "k"),
        ({"head_dim": 8, "from_positions": [1]}, "to_positions"),
    ],
)
def test_refusals_are_422_naming_the_field(
    app_client: httpx.Client, body: dict, field: str
) -> None:
    r = app_client.post("/v1/rope/shift", json=body)
    assert r.status_code == 422, r.text
    assert field in r.text


def test_unreadable_safetensors_is_400(app_client: httpx.Client) -> None:
    r = app_client.post(
        "/v1/rope/shift", content=b"\x00" * 20, headers={"content-type": "application/vnd.safetensors"}
    )  # fmt: skip
    assert r.status_code == 400, r.text
    r = app_client.post("/v1/rope/shift", content=b"x", headers={"content-type": "text/plain"})
    assert r.status_code == 415, r.text


@pytest.mark.skipif("gpt-oss-20b kshift x10" not in CASES, reason="no recorded fixture")
def test_json_kshift_over_http_is_libggml_s(api: httpx.Client) -> None:
    """The recorded libggml K-shift (YaRN, 10 steps), asked with the key as float32 JSON."""
    case = CASES["gpt-oss-20b kshift x10"]
    x = fixture_array(case["x"], case["shape"])
    body = {
        "preset": "gpt-oss-20b", "positions": [70_000 + i for i in range(x.shape[0])],
        "delta": case["positions"][0], "steps": 10, "k": x.tolist(), "engine": "llama.cpp",
        "precision": "engine",
    }  # fmt: skip
    r = api.post("/v1/rope/shift", json=body)
    assert r.status_code == 200, r.text
    got = json_tensor(r.json(), "k").astype(np.float32)
    assert pair_ulps(got, fixture_array(case["out"], case["shape"]), case["rope"]) <= 20
    assert r.json()["meta"]["llamacpp_kshift"] == case["rope"]


def test_a_large_ragged_json_key_is_422_naming_where(
    app_client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key read in slices (issue 39; slices of 16 numbers here, so a small key is cut): one
    token short of a channel deep in the list is still the 422 naming k and where."""
    monkeypatch.setattr(slices, "SLICE_ITEMS", 16)
    k = np.random.default_rng(3).standard_normal((40, 2, 8)).tolist()
    body = {"head_dim": 8, "positions": list(range(40)), "delta": 3, "k": k}
    r = app_client.post("/v1/rope/shift", json=body)
    assert r.status_code == 200, r.text
    assert json_tensor(r.json(), "k").shape == (40, 2, 8)  # values: tests/lib/test_shift.py
    k[37][1] = k[37][1][:7]
    r = app_client.post("/v1/rope/shift", json={**body, "k": k})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == (
        "k must be nested lists of numbers of equal lengths: k[37:38]: expected sequence of "
        "length 8 at dim 2 (got 7)"
    )
