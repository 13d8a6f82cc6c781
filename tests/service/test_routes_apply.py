"""``POST /v1/rope/apply`` over HTTP: JSON, safetensors and seeded bodies, the formats, the
refusals; the answers equal transformers' own apply function (tests/lib/test_rotate.py
builds the reference from the model's modeling file)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from posenc.core import codec
from posenc.facts.model_configs import model_config
from posenc.rope_kinds.rotate import rotate, seeded_vectors
from tests.fixtures.apply.configs import QWEN2_VL
from tests.helpers import json_tensor
from tests.references import transformers_rotation

POSITIONS = [0, 1, 5, 4096]
JSON_TYPE = "application/json"


def _safetensors(tensors: dict[str, torch.Tensor], request: dict[str, object]) -> bytes:
    return codec.encode_safetensors(tensors, {"request": json.dumps(request)})


@pytest.mark.parametrize(
    ("config", "positions"),
    [
        (model_config("llama-3.1-8b"), POSITIONS),
        (model_config("deepseek-v3"), [0, 3, 7000]),
        (model_config("pythia-1b"), [0, 2, 9]),
        (QWEN2_VL, [[0, 1, 2], [0, 3, 3], [0, 3, 4]]),
    ],
    ids=["llama-3.1", "deepseek-v3", "pythia", "qwen2-vl"],
)
def test_safetensors_engine_is_transformers_apply(
    app_client: httpx.Client, config: dict[str, object], positions: list[object]
) -> None:
    """A safetensors q and k rotated by transformers' own apply (bit for bit), sent back as
    safetensors in the inputs' dtype."""
    t = len(positions[0]) if isinstance(positions[0], list) else len(positions)
    seeded = app_client.post(
        "/v1/rope/apply",
        json={"config": config, "positions": positions, "seed": 1, "num_heads": 1},
    )
    assert seeded.status_code == 200, seeded.text
    d = seeded.json()["meta"]["head_dim"]
    q, k = seeded_vectors(t, 4, 2, d, seed=3)
    body = _safetensors(
        {"q": q, "k": k}, {"config": config, "positions": positions, "precision": "engine"}
    )
    r = app_client.post(
        "/v1/rope/apply",
        content=body,
        headers={
            "content-type": "application/vnd.safetensors",
            "accept": "application/vnd.safetensors",
        },
    )
    assert r.status_code == 200, r.text
    tensors, meta = codec.decode_safetensors(r.content)
    want_q, want_k = transformers_rotation(config, positions, q, k, None)
    assert np.array_equal(tensors["q"], want_q.numpy())
    assert np.array_equal(tensors["k"], want_k.numpy())
    assert json.loads(meta["meta"])["precision"] == "engine"


def test_json_seeded_follows_the_contract(api: httpx.Client) -> None:
    """seed: q then k from one generator; exact answers within 1e-6 of float64 and keep the
    channels past rotary_dim bit for bit (GPT-NeoX-20B rotates a quarter of each head)."""
    body = {"preset": "gpt-neox-20b", "seq_len": 3, "offset": 2, "seed": 9, "num_heads": 2}
    r = api.post("/v1/rope/apply", json=body)
    assert r.status_code == 200, r.text
    meta = r.json()["meta"]
    assert meta["layout"] == "neox" and meta["engine"] == "transformers"
    assert meta["precision"] == "exact"
    r_dim, d = meta["rotary_dim"], meta["head_dim"]
    assert r_dim < d
    g = torch.Generator().manual_seed(9)
    q = torch.randn(3, 2, d, generator=g)
    k = torch.randn(3, 2, d, generator=g)
    # JSON numbers are float32's shortest decimals: read back as float32
    got_q = json_tensor(r.json(), "q").astype(np.float32)
    got_k = json_tensor(r.json(), "k").astype(np.float32)
    assert np.array_equal(got_q[..., r_dim:], q[..., r_dim:].numpy())
    assert np.array_equal(got_k[..., r_dim:], k[..., r_dim:].numpy())
    inv = 10000.0 ** (-np.arange(0, r_dim, 2, dtype=np.float64) / r_dim)
    a = np.array([2, 3, 4], dtype=np.float64)[:, None, None] * inv
    x = q[..., :r_dim].double().numpy()
    x1, x2 = x[..., : r_dim // 2], x[..., r_dim // 2 :]
    want = np.concatenate([x1 * np.cos(a) - x2 * np.sin(a), x2 * np.cos(a) + x1 * np.sin(a)], -1)
    assert np.abs(got_q[..., :r_dim] - want).max() <= 1e-6


def test_json_vectors_and_formats(app_client: httpx.Client) -> None:
    """JSON q in float64 comes back float64; npy gives the primary tensor q."""
    q = np.random.default_rng(0).standard_normal((2, 1, 128))
    body = {"preset": "llama-3.1-8b", "positions": [0, 7], "q": q.tolist(), "dtype": "float64"}
    r = app_client.post("/v1/rope/apply", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["tensors"]["q"]["dtype"] == "float64"
    r2 = app_client.post("/v1/rope/apply?format=npy", json=body)
    assert r2.status_code == 200
    assert np.array_equal(codec.decode_npy(r2.content), json_tensor(r.json(), "q"))
    assert np.array_equal(json_tensor(r.json(), "q")[0], q[0])  # position 0: unchanged


def test_refusals(app_client: httpx.Client) -> None:
    bad_d = {"preset": "llama-3.1-8b", "positions": [0], "q": [[[0.0] * 64]]}
    r = app_client.post("/v1/rope/apply", json=bad_d)
    assert r.status_code == 422 and "64" in r.text and "128" in r.text
    llamacpp = {"preset": "llama-3.1-8b", "seq_len": 2, "seed": 0, "num_heads": 1,
                "engine": "llama.cpp", "precision": "engine"}  # fmt: skip
    r = app_client.post("/v1/rope/apply", json=llamacpp)  # its apply hook: ggml_rope_ext
    want = rotate({**llamacpp, "engine": None, "precision": None}, None, engine="llama.cpp",
                  precision="engine")["q"].numpy()  # fmt: skip
    assert r.status_code == 200 and np.array_equal(
        json_tensor(r.json(), "q").astype(np.float32), want
    )
    r = app_client.post("/v1/rope/apply", json={"preset": "llama-3.1-8b", "seq_len": 2, "qq": 1})
    assert r.status_code == 422 and "qq" in r.text
    two = [[[1.0] * 128]] * 2
    r = app_client.post(
        "/v1/rope/apply", json={"preset": "llama-3.1-8b", "seq_len": 2, "q": two, "k": two + two}
    )
    assert r.status_code == 422 and "(4, 1, 128)" in r.text  # k of 4 rows for 2 positions
    deep = b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = app_client.post("/v1/rope/apply", content=deep, headers={"content-type": JSON_TYPE})
    assert r.status_code == 400, r.text
    r = app_client.post(
        "/v1/rope/apply",
        json={"preset": "llama-3.1-8b", "seq_len": 2, "q": two, "dtype": "bfloat16"},
    )
    assert r.status_code == 200 and r.json()["tensors"]["q"]["dtype"] == "bfloat16"
    huge = {"preset": "llama-3.1-8b", "seq_len": 100_000, "seed": 0, "num_heads": 10_000}
    r = app_client.post("/v1/rope/apply", json=huge)
    assert r.status_code == 413, r.text
