"""POST/GET /v1/masks: the library's mask over HTTP, its meta, its PNG and its 422s."""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import torch
from PIL import Image

from posenc.attention.masks import attention_bias, attention_mask, mask_rule
from posenc.facts.model_configs import model_config
from tests.references import GRANITE_4H, QWEN3_NEXT


def _tensor(body: dict, name: str) -> np.ndarray:
    t = body["tensors"][name]
    arr = np.array(t["data"], dtype=object)
    if t["dtype"] != "bool":
        arr = np.where(arr == None, -np.inf, arr).astype(np.float64)  # noqa: E711
    assert list(arr.shape) == t["shape"] and t["dtype"] in ("bool", "float32"), t["dtype"]
    return arr.astype(bool) if t["dtype"] == "bool" else arr


def test_post_get_and_meta(app_client: httpx.Client) -> None:
    padding = [[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]]
    body = {"seq_len": 5, "key_len": 8, "kind": "sliding", "window": 3, "attention_mask": padding}
    r = app_client.post("/v1/masks", json=body)
    assert r.status_code == 200, r.text
    want = attention_mask(mask_rule("sliding", window=3), 5, 8, attention_mask=padding)
    np.testing.assert_array_equal(_tensor(r.json(), "mask"), want.numpy())
    meta = r.json()["meta"]
    assert meta["flash_attn_window_size"] == [2, 0] and meta["vllm_sliding_window"] == 3
    assert meta["sdpa_is_causal"] is None and meta["mask_kind"] == "sliding"
    assert meta["batch_size"] == 2 and meta["key_len"] == 8

    got = app_client.get(
        "/v1/masks",
        params={"seq_len": 4, "kind": "chunked", "chunk_size": 2, "as": "bias"},
    )
    assert got.status_code == 200, got.text
    want_bias = attention_bias(mask_rule("chunked", chunk_size=2), 4)
    np.testing.assert_array_equal(_tensor(got.json(), "bias"), want_bias.double().numpy())
    assert "mask" not in got.json()["tensors"]

    plain = app_client.post("/v1/masks", json={"seq_len": 3}).json()["meta"]
    assert plain["sdpa_is_causal"] is True and plain["flash_attn_window_size"] == [-1, 0]


def test_config_layer_and_packing(app_client: httpx.Client) -> None:
    config = {**model_config("gemma-3-1b"), "sliding_window": 2}
    r = app_client.post(
        "/v1/masks", json={"config": config, "layer": 0, "seq_len": 6, "cu_seqlens": [0, 4, 6]}
    )
    assert r.status_code == 200, r.text
    want = attention_mask(mask_rule("sliding", window=2), 6, cu_seqlens=[0, 4, 6])
    np.testing.assert_array_equal(_tensor(r.json(), "mask"), want.numpy())
    meta = r.json()["meta"]
    assert meta["cu_seqlens"] == [0, 4, 6] and meta["max_seqlen"] == 4
    assert meta["layer"]["layer_type"] == "sliding_attention" and meta["layer"]["window"] == 2


def test_layers_without_attention_are_422_that_say_what_they_are(
    app_client: httpx.Client,
) -> None:
    for config, words in ((GRANITE_4H, "Mamba-2"), (QWEN3_NEXT, "DeltaNet")):
        r = app_client.post("/v1/masks", json={"config": config, "layer": 0, "seq_len": 4})
        assert r.status_code == 422
        detail = json.dumps(r.json())
        assert words in detail and "no attention mask" in detail and "layer" in detail


def test_png_draws_the_mask(app_client: httpx.Client) -> None:
    r = app_client.post("/v1/masks", params={"format": "png"}, json={"seq_len": 12})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    image = Image.open(io.BytesIO(r.content))
    assert image.size[0] > 12 and image.size[1] > 12


def test_client_sends_as_by_its_wire_name(live_server: str) -> None:
    """Through a real uvicorn: the client's ``output`` argument is the body's ``as``."""
    from posenc.client import PosencClient

    with PosencClient(live_server, timeout=60) as client:
        result = client.masks(seq_len=3, output="bias", format="safetensors", as_="torch")
    assert torch.equal(result["bias"], attention_bias(mask_rule("causal"), 3))


def test_configs_positions_labels_every_layer(app_client: httpx.Client) -> None:
    """Each layer's mixer, mask and positions, with the endpoint that serves its mask."""
    r = app_client.post("/v1/configs/positions", json={"config": model_config("llama-4-scout")})
    assert r.status_code == 200, r.text
    layers = r.json()["layers"]
    assert len(layers) == 48
    assert layers[0]["mask"] == "chunked" and layers[0]["chunk_size"] == 8192
    assert layers[3]["mask"] == "causal" and layers[3]["positions"] == "none"
    assert layers[0]["endpoint"] == "/v1/masks" and "NoPE" in layers[3]["what"]
    gemma = app_client.post(
        "/v1/configs/positions", json={"config": model_config("gemma-2-9b")}
    ).json()["layers"]
    assert [x["mask"] for x in gemma[:2]] == ["sliding", "causal"]
    assert gemma[0]["window"] == 4096 and gemma[0]["positions"] == "rope"
    # a layer's mask from its label is the masks endpoint's answer for that layer
    mask = app_client.post(
        "/v1/masks", json={"config": model_config("gemma-2-9b"), "layer": 0, "seq_len": 3}
    ).json()["meta"]
    assert mask["mask_kind"] == gemma[0]["mask"] and mask["window"] == gemma[0]["window"]


def test_a_huge_packed_row_is_413_before_anything_is_made(app_client: httpx.Client) -> None:
    """A last boundary of 2**40 is checked as a number; the mask is refused for its size."""
    r = app_client.post("/v1/masks", json={"seq_len": 2**40, "cu_seqlens": [0, 5, 2**40]})
    assert r.status_code == 413, r.text
    bad = app_client.post("/v1/masks", json={"seq_len": 2**40, "cu_seqlens": [0, 5, 2**39]})
    assert bad.status_code == 422 and "cu_seqlens[2]" in bad.text


def test_combined_mask_and_alibi(app_client: httpx.Client) -> None:
    """as: combined: (B, H, T, S), the bias where the mask allows, with its meta."""
    padding = [[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    body = {"seq_len": 5, "attention_mask": padding, "as": "combined",
            "position_bias": "alibi", "num_heads": 2, "alibi_form": "key_index"}  # fmt: skip
    r = app_client.post("/v1/masks", json=body)
    assert r.status_code == 200, r.text
    got = _tensor(r.json(), "combined")
    assert got.shape == (2, 2, 5, 5)
    mask = attention_mask(mask_rule("causal"), 5, attention_mask=padding).numpy()
    real = np.array([[0, 0, 1, 2, 3], [0, 1, 2, 3, 4]], dtype=np.float64)
    slopes = np.array([2.0**-4, 2.0**-8])
    want = np.where(mask[:, None], slopes[None, :, None, None] * real[:, None, None, :], -np.inf)
    np.testing.assert_array_equal(got, want)
    meta = r.json()["meta"]["position_bias"]
    assert meta == {"kind": "alibi", "num_heads": 2, "max_bias": 8.0, "alibi_form": "key_index"}
    bad = app_client.post("/v1/masks", json={"seq_len": 4, "as": "combined"})
    assert bad.status_code == 422 and "position_bias" in bad.text


def test_combined_huge_bias_table_is_413(app_client: httpx.Client) -> None:
    body = {"seq_len": 2, "as": "combined", "position_bias": "relative", "num_heads": 4,
            "num_buckets": 2**30}  # fmt: skip
    r = app_client.post("/v1/masks", json=body)
    assert r.status_code == 413, r.text


def test_combined_from_a_config(app_client: httpx.Client) -> None:
    """as: combined with BLOOM-560m's config alone: alibi, its 16 heads and BLOOM's key_index
    form (slopes 2^-0.5 … 2^-8 times each key's index, −inf above the diagonal); T5-small's
    config gives its encoder (bidirectional, 8 heads, 32 buckets, 128 distance); a conflict
    with the model is a 422 that names the field."""
    body = {"seq_len": 4, "as": "combined", "config": model_config("bloom-560m")}
    r = app_client.post("/v1/masks", json=body)
    assert r.status_code == 200, r.text
    got = _tensor(r.json(), "combined")
    slopes = 2.0 ** (-0.5 * np.arange(1, 17))
    k, q = np.arange(4)[None, :], np.arange(4)[:, None]
    want = np.where(k <= q, slopes[:, None, None] * k, -np.inf)[None]
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=0)
    assert r.json()["meta"]["position_bias"] == {
        "kind": "alibi", "num_heads": 16, "max_bias": 8.0, "alibi_form": "key_index",
    }  # fmt: skip
    t5 = app_client.post(
        "/v1/masks", json={"seq_len": 3, "as": "combined", "config": model_config("t5-small")}
    )
    assert t5.status_code == 200, t5.text
    meta = t5.json()["meta"]
    assert meta["mask_kind"] == "bidirectional"
    assert meta["position_bias"] == {
        "kind": "relative", "num_heads": 8, "num_buckets": 32, "max_distance": 128, "seed": 0,
        "bidirectional": True,
    }  # fmt: skip
    assert np.isfinite(_tensor(t5.json(), "combined")).all()
    bad = app_client.post(
        "/v1/masks", json={**body, "config": model_config("t5-small"), "position_bias": "alibi"}
    )
    assert bad.status_code == 422 and bad.json()["field"] == "position_bias", bad.text
    falcon = {**model_config("falcon-7b"), "alibi": True}
    refused = app_client.post("/v1/masks", json={**body, "config": falcon})
    assert refused.status_code == 422 and "1/sqrt(head_dim)" in refused.json()["detail"]
