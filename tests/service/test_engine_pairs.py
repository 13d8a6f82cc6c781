"""``POST /v1/configs/compare`` with ``engines``: any engines, pair by pair.

The pairs' differences are those of the rope endpoint's own tables for each engine and
precision (which tests/lib/test_precision.py and tests/lib/test_llamacpp.py check against
transformers' modules and libggml).
"""

from __future__ import annotations

import httpx
import numpy as np

from posenc.facts.model_configs import model_config
from tests.helpers import json_tensor

POSITIONS = [0, 1, 100, 4096, 100_000]


def _half(api: httpx.Client, **fields: object) -> tuple[np.ndarray, np.ndarray]:
    r = api.post("/v1/encodings/rope", json={"dtype": "float64", **fields})
    assert r.status_code == 200, r.text
    cos, sin = json_tensor(r.json(), "cos"), json_tensor(r.json(), "sin")
    half = cos.shape[-1] // 2
    if r.json()["meta"]["layout"] == "half":
        return cos[:, :half], sin[:, :half]
    return cos[:, 0::2], sin[:, 0::2]


def test_three_engines_give_three_pairs(api: httpx.Client) -> None:
    config = model_config("gpt-oss-20b")
    body = {
        "config": config,
        "positions": POSITIONS,
        "engines": ["exact", {"engine": "transformers", "precision": "engine"}, "llama.cpp"],
    }
    r = api.post("/v1/configs/compare", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["engines"] == ["exact", "transformers (engine)", "llama.cpp"]
    assert [(p["a"], p["b"]) for p in out["pairs"]] == [
        ("exact", "transformers (engine)"),
        ("exact", "llama.cpp"),
        ("transformers (engine)", "llama.cpp"),
    ]
    exact = _half(api, config=config, positions=POSITIONS)
    llama = _half(api, config=config, positions=POSITIONS, engine="llama.cpp")
    want = max(np.abs(exact[0] - llama[0]).max(), np.abs(exact[1] - llama[1]).max())
    pair = out["pairs"][1]
    assert abs(max(pair["cos"]["max_abs_diff"], pair["sin"]["max_abs_diff"]) - want) < 1e-12
    assert any("truncate" in s for s in pair["differences"])
    assert pair["trend"][-1]["max_abs_diff"] == max(t["max_abs_diff"] for t in pair["trend"])


def test_two_engines_keep_the_1_2_shape(api: httpx.Client) -> None:
    body = {
        "config": model_config("llama-3.1-8b"),
        "seq_len": 64,
        "engines": ["transformers", "llama.cpp"],
    }
    out = api.post("/v1/configs/compare", json=body).json()
    assert out["engines"] == ["transformers", "llama.cpp"]
    assert set(out["cos"]) >= {"max_abs_diff", "first_position"}
    assert out["cos"] == out["pairs"][0]["cos"]


def test_bad_engines_are_422(api: httpx.Client) -> None:
    body = {"config": model_config("llama-3.1-8b"), "seq_len": 4, "engines": ["exact", "tgi"]}
    r = api.post("/v1/configs/compare", json=body)
    assert r.status_code == 422 and r.json()["field"] == "engines[1]"


def test_positions_read_by_llamacpp_and_mlx(api: httpx.Client) -> None:
    """/v1/configs/positions with engine llama.cpp or mlx: their arguments per layer type."""
    config = model_config("gemma-3-4b")
    out = api.post("/v1/configs/positions", json={"config": config, "engine": "llama.cpp"}).json()
    assert out["engine"] == "llama.cpp" and out["meta"]["engine"] == "llama.cpp"
    full = out["rope"]["full_attention"]["llamacpp"]
    assert (full["mode"], full["freq_scale"], full["freq_base"]) == ("neox", 0.125, 1000000.0)
    assert out["rope"]["sliding_attention"]["llamacpp"]["freq_base"] == 10000.0
    out = api.post("/v1/configs/positions", json={"config": config, "engine": "mlx"}).json()
    assert out["rope"]["full_attention"]["mlx"] == {
        "dims": 256,
        "traditional": False,
        "base": 1000000.0,
        "scale": 0.125,
        "rope_type": "linear",
        "scaling_config": {"factor": 8.0},
        "max_position_embeddings": None,  # the quoted config gives none
    }
    r = api.post(
        "/v1/configs/positions", json={"config": model_config("llama-3.1-8b"), "engine": "mlx"}
    )
    mlx = r.json()["rope"]["full_attention"]["mlx"]
    assert (mlx["rope_type"], mlx["scale"], mlx["max_position_embeddings"]) == (
        "llama3",
        1.0,
        131072,
    )
    assert mlx["scaling_config"]["factor"] == 8.0
