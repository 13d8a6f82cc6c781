"""POST/GET /v1/encodings/query-scale through the in-process client, against the closed form
and transformers' ``get_llama_4_attn_scale`` (Ministral 3)."""

from __future__ import annotations

import math

import httpx
import numpy as np

from posenc.facts.model_configs import model_config
from tests.helpers import json_tensor
from tests.references import SCOUT


def test_scout_config_post(app_client: httpx.Client) -> None:
    positions = [0, 8191, 20000, 2**20]
    r = app_client.post(
        "/v1/encodings/query-scale",
        json={"config": SCOUT, "positions": positions, "dtype": "float64"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    want = [1 + 0.1 * math.log1p((p + 1) // 8192) for p in positions]
    np.testing.assert_allclose(json_tensor(body, "scale"), want, rtol=0, atol=1e-15)
    assert body["meta"]["rule"] == "llama4_temperature_tuning"
    assert body["meta"]["layers"] == list(range(3, 48, 4))


def test_ministral3_default_config_and_get(app_client: httpx.Client) -> None:
    from transformers import Ministral3Config
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    rope = dict(Ministral3Config().rope_parameters)
    config = {"model_type": "ministral3", "rope_parameters": rope}
    body = app_client.post(
        "/v1/encodings/query-scale", json={"config": config, "seq_len": 40000}
    ).json()
    want = get_llama_4_attn_scale(torch_positions(40000), 0.1, 16384)[0, 0, :, 0].numpy()
    np.testing.assert_allclose(json_tensor(body, "scale"), want, rtol=1e-6)
    got = app_client.get(
        "/v1/encodings/query-scale", params={"seq_len": 5, "alpha": 0.5, "period": 2}
    )
    assert got.status_code == 200, got.text
    np.testing.assert_allclose(
        json_tensor(got.json(), "scale"),
        [1, 1, 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(3)],
        rtol=1e-6,
    )


def torch_positions(n: int):
    import torch

    return torch.arange(n)[None]


def test_config_without_a_query_scale_is_422(app_client: httpx.Client) -> None:
    r = app_client.post(
        "/v1/encodings/query-scale",
        json={"config": {"model_type": "llama", "rope_theta": 10000.0}, "seq_len": 4},
    )
    assert r.status_code == 422, r.text
    assert "no position-dependent query scale" in r.text


def test_configs_positions_describes_query_scale_and_relative(app_client: httpx.Client) -> None:
    deberta_v3_base, swin_tiny = model_config("deberta-v3-base"), model_config("swin-tiny")

    scout = app_client.post("/v1/configs/positions", json={"config": SCOUT}).json()
    assert scout["query_scale"] == {
        "rule": "llama4_temperature_tuning",
        "alpha": 0.1,
        "period": 8192,
        "offset": 1,
        "layers": list(range(3, 48, 4)),
        "endpoint": "/v1/encodings/query-scale",
    }
    assert all(scout["layer_types"][i] == "no_rope" for i in scout["query_scale"]["layers"])
    deberta = app_client.post("/v1/configs/positions", json={"config": deberta_v3_base}).json()
    assert deberta["kind"] == "relative" and deberta["query_scale"] is None
    assert deberta["relative"] == {
        "bucketing": "deberta",
        "position_buckets": 256,
        "max_position": 512,
    }
    swin = app_client.post("/v1/configs/positions", json={"config": swin_tiny}).json()
    assert swin["relative"] == {"bucketing": "swin", "window_size": 7}


def test_precision_engine_over_http(app_client: httpx.Client) -> None:
    """``precision: "engine"`` (issue 30): Llama4TextAttention's float32 numbers, bit for bit,
    past 2^24 where the exact step differs; without a config it is a 422 naming precision."""
    import torch

    positions = [0, 8191, 2**25 - 2]
    body = {"config": SCOUT, "positions": positions, "precision": "engine"}
    r = app_client.post("/v1/encodings/query-scale", json=body)
    assert r.status_code == 200, r.text
    p = torch.tensor(positions)
    want = (torch.log1p(torch.floor((p.float() + 1.0) / 8192)) * 0.1 + 1.0).numpy()
    got = np.asarray(json_tensor(r.json(), "scale"), dtype=np.float32)
    assert np.array_equal(got, want) and r.json()["meta"]["precision"] == "engine"
    r = app_client.post(
        "/v1/encodings/query-scale",
        json={"seq_len": 3, "alpha": 0.1, "period": 2, "precision": "engine"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "precision", r.json()
