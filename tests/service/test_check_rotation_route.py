"""``POST /v1/configs/check`` with ``q_in``/``q_out`` (and ``k_in``/``k_out``): JSON and
safetensors bodies; the rotations are ``/v1/rope/apply``'s own answers (right, and with a
mistake planted), so the engine and the mistake are known."""

from __future__ import annotations

import json

import httpx
import numpy as np
import torch

from posenc.core import codec
from tests.helpers import json_tensor

POSITIONS = [0, 1, 100, 4096]


def _apply(api: httpx.Client, **fields: object) -> dict[str, np.ndarray]:
    r = api.post("/v1/rope/apply", json=fields)
    assert r.status_code == 200, r.text
    return {n: json_tensor(r.json(), n).astype(np.float32) for n in ("q", "k")}


def test_json_rotation_names_the_engine(api: httpx.Client) -> None:
    common = {"preset": "llama-3.1-8b", "positions": POSITIONS}
    g = torch.Generator().manual_seed(4)
    q = torch.randn(4, 2, 128, generator=g)
    r = api.post("/v1/rope/apply", json={**common, "q": q.tolist(), "precision": "engine"})
    assert r.status_code == 200, r.text
    q_out = json_tensor(r.json(), "q").astype(np.float32)
    body = {**common, "q_in": q.tolist(), "q_out": q_out.tolist()}
    r = api.post("/v1/configs/check", json=body)
    assert r.status_code == 200, r.text
    best = r.json()["matches"][0]
    assert (best["engine"], best["precision"], best["bit_exact"]) == (
        "transformers",
        "engine",
        True,
    )


def test_safetensors_rotation_names_the_offset(app_client: httpx.Client) -> None:
    common = {"preset": "llama-3.1-8b", "positions": POSITIONS}
    seeded = {"seed": 2, "num_heads": 2, "num_kv_heads": 1}
    planted = _apply(app_client, **common, **seeded, offset=12)
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(4, 2, 128, generator=g), torch.randn(4, 1, 128, generator=g)
    body = codec.encode_safetensors(
        {"q_in": q, "q_out": torch.from_numpy(planted["q"]), "k_in": k,
         "k_out": torch.from_numpy(planted["k"])},
        {"request": json.dumps(common)},
    )  # fmt: skip
    r = app_client.post(
        "/v1/configs/check",
        content=body,
        headers={"content-type": "application/vnd.safetensors"},
    )
    assert r.status_code == 200, r.text
    found = {d["mistake"]: d for d in r.json()["diagnosis"] if d["explains"]}
    assert found["positions_offset"]["offset"] == 12


def test_rotation_refusals(app_client: httpx.Client) -> None:
    q = [[[0.0] * 64]]
    r = app_client.post(
        "/v1/configs/check",
        json={"preset": "llama-3.1-8b", "positions": [0], "q_in": q, "q_out": q},
    )
    assert r.status_code == 422 and "128" in r.text
    r = app_client.post(
        "/v1/configs/check",
        json={"preset": "llama-3.1-8b", "positions": [0], "q_in": [[[0.0] * 128]]},
    )
    assert r.status_code == 422 and "q_out" in r.text
