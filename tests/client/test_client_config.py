"""The client's config= arguments and M-RoPE method give what the same JSON request gives."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from posenc.client import PosencClient

# meta-llama/Llama-3.2-1B config.json (position keys)
LLAMA_32_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
# bigscience/bloom-7b1 config.json (position keys)
BLOOM = {"model_type": "bloom", "n_head": 32, "hidden_size": 4096}
QWEN2_VL = {
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {"spatial_merge_size": 2},
}


def _by_hand(url: str, path: str, body: dict[str, Any]) -> dict[str, np.ndarray]:
    response = httpx.post(url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    out = {}
    for name, spec in response.json()["tensors"].items():
        if spec["dtype"] == "int64":
            out[name] = np.array(spec["data"], dtype=np.int64)
        else:  # JSON writes a masked -inf as null
            values = np.array(spec["data"], dtype=np.float64)
            out[name] = np.where(np.isnan(values), -np.inf, values)
    return out


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("rope", "/v1/encodings/rope", {"positions": [0, 1, 8191, 100000], "config": LLAMA_32_1B}),
        ("alibi", "/v1/biases/alibi", {"seq_len": 3, "config": BLOOM}),
        (
            "learned",
            "/v1/encodings/learned",
            {"seq_len": 3, "config": {"model_type": "gpt2", "n_positions": 16, "n_embd": 8}},
        ),
        (
            "mrope_position_ids",
            "/v1/position-ids/mrope",
            {
                "input_ids": [[9906, 151652, 151655, 151655, 151655, 151655, 151653, 30]],
                "image_grid_thw": [[1, 4, 4]],
                "config": QWEN2_VL,
            },
        ),
    ],
)
def test_config_arguments_equal_the_json_request(
    live_server: str, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    with PosencClient(live_server) as client:
        result = getattr(client, method)(**kwargs)
    expected = _by_hand(live_server, path, kwargs)
    assert list(result.tensors) == list(expected)
    for name, values in expected.items():
        np.testing.assert_allclose(np.asarray(result[name], dtype=values.dtype), values, rtol=1e-6)


def test_rope_config_is_llamas_own_scaling(live_server: str) -> None:
    """The llama3 band rescaling shows: the lowest frequency is divided by the factor, 32."""
    with PosencClient(live_server) as client:
        rope = client.rope(positions=[0, 1], config=LLAMA_32_1B)
    base_freq = 500000.0 ** (-62 / 64)
    np.testing.assert_allclose(rope["inv_freq"][-1], base_freq / 32, rtol=1e-6)
    np.testing.assert_allclose(rope["inv_freq"][0], 1.0, rtol=1e-7)
    assert rope.meta["rope_type"] == "llama3"
