"""POST /v1/encodings/relative-sinusoidal against transformers'
``ParakeetEncoderRelPositionalEncoding`` (default ParakeetEncoderConfig, no weights)."""

from __future__ import annotations

import httpx
import numpy as np
import torch

from tests.helpers import json_tensor


def test_parakeet_ctc_config(app_client: httpx.Client) -> None:
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet.modeling_parakeet import (
        ParakeetEncoderRelPositionalEncoding,
    )

    body = app_client.post(
        "/v1/encodings/relative-sinusoidal",
        json={"config": {"model_type": "parakeet_ctc", "encoder_config": {}}, "seq_len": 50},
    ).json()
    want = ParakeetEncoderRelPositionalEncoding(ParakeetEncoderConfig())(torch.zeros(1, 50, 1))
    np.testing.assert_allclose(json_tensor(body, "encoding"), want[0].numpy(), atol=3e-5)
    assert body["meta"]["d_model"] == 1024 and body["meta"]["rows"] == 99


def test_get_twin_and_refusal(app_client: httpx.Client) -> None:
    r = app_client.get("/v1/encodings/relative-sinusoidal", params={"seq_len": 2, "d_model": 2})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(
        json_tensor(r.json(), "encoding"),
        [[np.sin(1), np.cos(1)], [0, 1], [-np.sin(1), np.cos(1)]],
        atol=1e-7,
    )
    bad = app_client.post("/v1/encodings/relative-sinusoidal", json={"seq_len": 2})
    assert bad.status_code == 422 and "d_model" in bad.text
