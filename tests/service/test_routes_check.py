"""``POST /v1/configs/check``: JSON and safetensors bodies, in process and through uvicorn.

The tables are the rope endpoint's own answers (correct, and with one field wrong), so the
expected engine and mistake are known; tests/lib/test_explain_check.py builds every catalogued mistake.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import torch

from posenc.core import codec
from tests.helpers import json_tensor

POSITIONS = [0, 1, 100, 4096, 100_000]


def _rope(api: httpx.Client, **fields: object) -> tuple[np.ndarray, np.ndarray]:
    r = api.post("/v1/encodings/rope", json=fields)
    assert r.status_code == 200, r.text
    return json_tensor(r.json(), "cos"), json_tensor(r.json(), "sin")


def test_check_json_names_the_engine(api: httpx.Client) -> None:
    cos, sin = _rope(api, preset="llama-3.1-8b", positions=POSITIONS, precision="engine")
    body = {
        "preset": "llama-3.1-8b",
        "positions": POSITIONS,
        "cos": cos.tolist(),
        "sin": sin.tolist(),
    }
    r = api.post("/v1/configs/check", json=body)
    assert r.status_code == 200, r.text
    best = r.json()["matches"][0]
    assert best == {
        "engine": "transformers",
        "precision": "engine",
        "max_abs_diff": 0.0,
        "first_position": None,
        "bit_exact": True,
    }
    assert "float32_angles" in {d["mistake"] for d in r.json()["diagnosis"] if d["explains"]}


def test_check_safetensors_names_the_mistake(api: httpx.Client) -> None:
    cos, sin = _rope(api, preset="qwen2.5-7b", positions=POSITIONS, base=10000.0)
    request = {"preset": "qwen2.5-7b", "positions": POSITIONS}
    data = codec.encode_safetensors(
        {"cos": torch.from_numpy(cos), "sin": torch.from_numpy(sin)},
        metadata={"request": json.dumps(request)},
    )
    r = api.post(
        "/v1/configs/check",
        content=data,
        headers={"Content-Type": "application/vnd.safetensors"},
    )
    assert r.status_code == 200, r.text
    named = {d["mistake"] for d in r.json()["diagnosis"] if d["explains"]}
    assert named == {"wrong_base"}
    assert not any(m["bit_exact"] for m in r.json()["matches"])


def test_check_refusals(api: httpx.Client) -> None:
    r = api.post("/v1/configs/check", json={"preset": "llama-2-7b", "seq_len": 2})
    assert r.status_code == 422
    bad = {"preset": "llama-2-7b", "seq_len": 2, "cos": [[1.0]], "sin": [[0.0]]}
    r = api.post("/v1/configs/check", json=bad)
    assert r.status_code == 422 and r.json()["field"] == "cos"
    ragged = {"preset": "llama-2-7b", "seq_len": 2, "cos": [[1.0], [1.0, 2.0]], "sin": [[0.0]]}
    r = api.post("/v1/configs/check", json=ragged)
    assert r.status_code == 422 and r.json()["field"] == "cos"
    r = api.post(
        "/v1/configs/check",
        content=b"nope",
        headers={"Content-Type": "application/vnd.safetensors"},
    )
    assert r.status_code == 400
