"""POST /v1/biases/relative with DeBERTa-v2/v3 and Swin configs, against transformers' own code
(``build_relative_position``; ``SwinRelativePositionBias.relative_position_index``)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch

from posenc.facts.model_configs import model_config
from tests.helpers import json_tensor
from tests.references import deberta_build_relative_position

DEBERTA_V3_BASE = model_config("deberta-v3-base")
SWIN_TINY = model_config("swin-tiny")


def test_deberta_v3_config(app_client: httpx.Client) -> None:
    r = app_client.post(
        "/v1/biases/relative", json={"config": DEBERTA_V3_BASE, "seq_len": 300, "key_len": 700}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body["tensors"]) == {"buckets"}
    got = json_tensor(body, "buckets")
    assert got.dtype == np.int64 and got.shape == (300, 700)
    np.testing.assert_array_equal(got, deberta_build_relative_position(300, 700, 256, 512).numpy())
    meta = body["meta"]
    assert meta["bucketing"] == "deberta" and meta["max_position"] == 512
    assert meta["position_buckets"] == 256 and meta["config_model_type"] == "deberta-v2"


def test_deberta_plain_positions_without_buckets(app_client: httpx.Client) -> None:
    config = {**DEBERTA_V3_BASE, "position_buckets": -1}
    body = app_client.post("/v1/biases/relative", json={"config": config, "seq_len": 3}).json()
    np.testing.assert_array_equal(
        json_tensor(body, "buckets"), [[0, -1, -2], [1, 0, -1], [2, 1, 0]]
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"config": {**DEBERTA_V3_BASE, "relative_attention": False}, "seq_len": 4}, "no relative"),
        ({"config": {"model_type": "deberta-v2"}, "seq_len": 4}, "no relative"),
        ({"config": DEBERTA_V3_BASE, "seq_len": 4, "key_len": 3}, "key_len"),
        ({"config": SWIN_TINY, "seq_len": 50}, "49"),
        ({"bucketing": "swin"}, "window_size"),
    ],
)
def test_refusals_are_422(app_client: httpx.Client, body: dict, words: str) -> None:
    r = app_client.post("/v1/biases/relative", json=body)
    assert r.status_code == 422, r.text
    assert words in r.text


def test_swin_config(app_client: httpx.Client) -> None:
    from transformers.models.swin.modeling_swin import SwinRelativePositionBias

    for body in ({"config": SWIN_TINY}, {"config": SWIN_TINY, "seq_len": 49}):
        r = app_client.post("/v1/biases/relative", json=body)
        assert r.status_code == 200, r.text
        want = SwinRelativePositionBias(3, (7, 7)).relative_position_index.view(49, 49)
        np.testing.assert_array_equal(json_tensor(r.json(), "buckets"), want.numpy())
        assert r.json()["meta"]["bucket_count"] == 169


def test_swinv2_config_get_twin(app_client: httpx.Client) -> None:
    from transformers import Swinv2Config
    from transformers.models.swinv2.modeling_swinv2 import Swinv2SelfAttention

    r = app_client.get("/v1/biases/relative", params={"bucketing": "swin", "window_size": 8})
    assert r.status_code == 200, r.text
    want = Swinv2SelfAttention(Swinv2Config(), 96, 3, 8).relative_position_index
    np.testing.assert_array_equal(json_tensor(r.json(), "buckets"), want.numpy())
    assert torch.equal(torch.from_numpy(json_tensor(r.json(), "buckets")), want)


def test_presets_quote_the_published_configs(app_client: httpx.Client) -> None:
    body = app_client.post(
        "/v1/biases/relative", json={"preset": "deberta-v3-base", "seq_len": 40, "key_len": 80}
    ).json()
    np.testing.assert_array_equal(
        json_tensor(body, "buckets"), deberta_build_relative_position(40, 80, 256, 512).numpy()
    )
    swin = app_client.post("/v1/biases/relative", json={"preset": "swin-tiny"}).json()
    assert swin["tensors"]["buckets"]["shape"] == [49, 49]
    assert swin["meta"]["window_size"] == 7
