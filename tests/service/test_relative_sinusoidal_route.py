"""POST /v1/encodings/relative-sinusoidal against transformers'
``ParakeetEncoderRelPositionalEncoding`` (default ParakeetEncoderConfig, no weights)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
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


#: nvidia/parakeet-tdt-0.6b-v3 config.json, a whole published file (transformers 5.6.0.dev0),
#: as a public Rust port pins it in its tests (src/config.rs, `V3`).
PARAKEET_TDT_V3 = {
    "architectures": ["ParakeetForTDT"],
    "blank_token_id": 8192,
    "decoder_hidden_size": 640,
    "dtype": "float32",
    "durations": [0, 1, 2, 3, 4],
    "encoder_config": {
        "activation_dropout": 0.1,
        "attention_bias": False,
        "attention_dropout": 0.1,
        "conv_kernel_size": 9,
        "convolution_bias": False,
        "dropout": 0.1,
        "dropout_positions": 0.0,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "initializer_range": 0.02,
        "intermediate_size": 4096,
        "layerdrop": 0.1,
        "max_position_embeddings": 5000,
        "model_type": "parakeet_encoder",
        "num_attention_heads": 8,
        "num_hidden_layers": 24,
        "num_key_value_heads": 8,
        "num_mel_bins": 128,
        "scale_input": False,
        "subsampling_conv_channels": 256,
        "subsampling_conv_kernel_size": 3,
        "subsampling_conv_stride": 2,
        "subsampling_factor": 8,
    },
    "hidden_act": "relu",
    "initializer_range": 0.02,
    "is_encoder_decoder": True,
    "max_symbols_per_step": 10,
    "model_type": "parakeet_tdt",
    "num_decoder_layers": 2,
    "pad_token_id": 2,
    "transformers_version": "5.6.0.dev0",
    "vocab_size": 8193,
}


def _parakeet_configs() -> list[tuple[str, dict, dict]]:
    """(name, config sent, its encoder config) for whole files and an encoder config alone."""
    from transformers import ParakeetCTCConfig, ParakeetEncoderConfig

    small = ParakeetEncoderConfig(
        hidden_size=96, num_attention_heads=3, num_hidden_layers=2, max_position_embeddings=777
    ).to_dict()
    ctc = ParakeetCTCConfig().to_dict()  # the default file: nvidia/parakeet-ctc-1.1b's sizes
    return [
        ("ctc-default-file", ctc, ctc["encoder_config"]),
        ("tdt-0.6b-v3-published", PARAKEET_TDT_V3, PARAKEET_TDT_V3["encoder_config"]),
        ("encoder-alone", small, small),
        ("ctc-wrapping-small", {"model_type": "parakeet_ctc", "encoder_config": small}, small),
    ]


@pytest.mark.parametrize(
    ("sent", "encoder"),
    [c[1:] for c in _parakeet_configs()],
    ids=[c[0] for c in _parakeet_configs()],
)
def test_configs_positions_describes_parakeet(
    app_client: httpx.Client, sent: dict, encoder: dict
) -> None:
    """/v1/configs/positions against transformers' ParakeetEncoder built from the same encoder
    config (no weights): its attention's head_dim and scaling, its layer count, and the table
    /v1/encodings/relative-sinusoidal gives for the same config against its
    ParakeetEncoderRelPositionalEncoding."""
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet.modeling_parakeet import (
        ParakeetEncoderAttention,
        ParakeetEncoderRelPositionalEncoding,
    )

    ref_config = ParakeetEncoderConfig(**{k: v for k, v in encoder.items() if k != "model_type"})
    attention = ParakeetEncoderAttention(ref_config, 0)
    r = app_client.post("/v1/configs/positions", json={"config": sent})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["model_type"] == sent["model_type"] and got["kind"] == "relative"
    assert got["head_dim"] == attention.head_dim
    assert got["softmax_scale"] == pytest.approx(attention.scaling, rel=1e-12)
    assert got["layer_types"] == ["full_attention"] * ref_config.num_hidden_layers
    assert got["max_position_embeddings"] == ref_config.max_position_embeddings
    rel = got["relative"]
    assert rel["scheme"] == "relative_sinusoidal"
    assert rel["endpoint"] == "/v1/encodings/relative-sinusoidal"
    assert rel["d_model"] == ref_config.hidden_size
    assert rel["num_heads"] == ref_config.num_attention_heads
    assert rel["subsampling_factor"] == ref_config.subsampling_factor

    table = app_client.post(rel["endpoint"], json={"config": sent, "seq_len": 40}).json()
    assert table["meta"]["d_model"] == rel["d_model"] and table["meta"]["base"] == rel["base"]
    module = ParakeetEncoderRelPositionalEncoding(ref_config)
    assert module.compute_default_relative_positional_parameters(ref_config)[1].item() == (
        pytest.approx(rel["base"] ** (-2 / rel["d_model"]), rel=1e-6)
    )
    want = module(torch.zeros(1, 40, 1))[0]
    np.testing.assert_allclose(json_tensor(table, "encoding"), want.numpy(), atol=3e-5)


@pytest.mark.parametrize(
    ("route", "extra"),
    [
        ("/v1/biases/relative", {"seq_len": 4}),
        ("/v1/encodings/rope", {"seq_len": 4}),
        ("/v1/biases/alibi", {"seq_len": 4}),
    ],
)
def test_parakeet_config_elsewhere_names_its_endpoint(
    app_client: httpx.Client, route: str, extra: dict
) -> None:
    r = app_client.post(route, json={"config": PARAKEET_TDT_V3, **extra})
    assert r.status_code == 422, r.text
    assert "/v1/encodings/relative-sinusoidal" in r.json()["detail"]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"model_type": "parakeet_encoder", "num_attention_heads": 0}, "num_attention_heads"),
        ({"model_type": "parakeet_ctc", "encoder_config": {"hidden_size": 7}}, "hidden_size"),
        ({"model_type": "parakeet_ctc", "encoder_config": [1]}, "encoder_config"),
    ],
)
def test_unreadable_parakeet_config_is_422_naming_the_key(
    app_client: httpx.Client, config: dict, field: str
) -> None:
    r = app_client.post("/v1/configs/positions", json={"config": config})
    assert r.status_code == 422, r.text
    assert field in r.text
