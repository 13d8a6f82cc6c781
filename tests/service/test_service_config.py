"""``config`` in table bodies, ``POST /v1/configs/positions`` and the preset-default fix.

Each test runs in process and through a real uvicorn (the ``api`` fixture). Expected values are
independent: transformers' own rotary embedding built from the same config (no weights), or
closed forms evaluated here in float64.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from posenc.facts.model_configs import model_config
from tests.helpers import json_tensor
from tests.references import llama3_inv_freq, rope_inv_freq

transformers = pytest.importorskip("transformers")


# ---------------------------------------------------------------------------------------------
# Preset defaults: a client that sends the schema's defaults must not override a preset
# ---------------------------------------------------------------------------------------------


def test_schema_declares_no_default_for_fields_a_preset_gives(api: httpx.Client) -> None:
    schema = api.get("/openapi.json").json()["components"]["schemas"]
    for model, fields in {
        "RopeRequest": ("base", "layout"),
        "AlibiRequest": ("max_bias",),
        "RelativeRequest": ("num_buckets", "max_distance", "bidirectional"),
    }.items():
        props = schema[model]["properties"]
        for name in fields:
            assert props[name].get("default") is None, (model, name)
            assert "default" in props[name]["description"], (model, name)


def test_preset_values_survive_when_body_omits_them(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/rope", json={"seq_len": 8, "preset": "llama-3.1-8b"})
    assert r.status_code == 200, r.text
    meta = r.json()["meta"]
    assert meta["base"] == 500000.0 and meta["rope_type"] == "llama3"
    expected = llama3_inv_freq(rope_inv_freq(128, 500000.0), 8.0, 1.0, 4.0, 8192)
    np.testing.assert_allclose(json_tensor(r.json(), "inv_freq"), expected, rtol=1e-6)
    r = api.post("/v1/encodings/rope", json={"seq_len": 4, "preset": "gpt-j-6b"})
    assert r.json()["meta"]["layout"] == "interleaved"


def test_explicit_base_and_layout_override_the_preset(api: httpx.Client) -> None:
    body = {"seq_len": 8, "preset": "llama-3.1-8b", "base": 10000, "layout": "half"}
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["meta"]["base"] == 10000.0


def test_documented_defaults_apply_without_preset(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/rope", json={"seq_len": 3, "head_dim": 8})
    assert r.json()["meta"]["base"] == 10000.0 and r.json()["meta"]["layout"] == "half"
    np.testing.assert_allclose(
        json_tensor(r.json(), "inv_freq"), rope_inv_freq(8, 10000.0), rtol=1e-6
    )
    r = api.post("/v1/biases/alibi", json={"num_heads": 8, "seq_len": 2})
    np.testing.assert_allclose(json_tensor(r.json(), "slopes"), 2.0 ** -np.arange(1, 9), rtol=1e-6)
    r = api.post("/v1/biases/relative", json={"seq_len": 2})
    meta = r.json()["meta"]
    assert (meta["num_buckets"], meta["max_distance"], meta["bidirectional"]) == (32, 128, True)


def test_head_dim_override_on_a_partial_preset_scales_rotary_dim(api: httpx.Client) -> None:
    """v1 bug: gpt-neox-20b (rotary 24 of 96) with head_dim 64 kept rotary_dim 24 → now 16."""
    r = api.post(
        "/v1/encodings/rope", json={"seq_len": 2, "preset": "gpt-neox-20b", "head_dim": 64}
    )
    assert r.status_code == 200, r.text
    assert r.json()["meta"]["rotary_dim"] == 16
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "preset": "gpt-j-6b", "head_dim": 16})
    assert r.status_code == 200, r.text
    assert r.json()["meta"]["rotary_dim"] == 4  # GPT-J rotates 64 of 256


# ---------------------------------------------------------------------------------------------
# config in /v1/encodings/rope
# ---------------------------------------------------------------------------------------------


def _hf_llama_cos(config: dict, positions: list[int]) -> torch.Tensor:
    from transformers import AutoConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rot = LlamaRotaryEmbedding(config=AutoConfig.for_model(**config))  # type: ignore[arg-type]
    cos, _ = rot(torch.zeros(1), torch.tensor([positions]))
    return cos[0]


def test_rope_config_equals_transformers(api: httpx.Client) -> None:
    config = model_config("llama-3.2-1b")
    r = api.post("/v1/encodings/rope", json={"positions": [0, 1, 5, 63], "config": config})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["meta"]["rope_type"] == "llama3" and body["meta"]["attention_scaling"] == 1.0
    assert body["meta"]["head_dim"] == 64 and body["meta"]["base"] == 500000.0
    expected = _hf_llama_cos(model_config("llama-3.2-1b"), [0, 1, 5, 63]).numpy()
    np.testing.assert_allclose(json_tensor(body, "cos"), expected, atol=2e-5, rtol=0)


def test_body_fields_win_over_config(api: httpx.Client) -> None:
    body = {"seq_len": 2, "config": model_config("llama-2-7b"), "base": 20000.0, "head_dim": 64}
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(
        json_tensor(r.json(), "inv_freq"), rope_inv_freq(64, 20000.0), rtol=1e-6
    )


def test_yarn_config_attention_scaling_in_tables(api: httpx.Client) -> None:
    """DeepSeek-V3: YaRN with mscale = mscale_all_dim: attention_scaling 1, interleaved."""
    r = api.post("/v1/encodings/rope", json={"seq_len": 3, "config": model_config("deepseek-v3")})
    assert r.status_code == 200, r.text
    meta = r.json()["meta"]
    assert meta["layout"] == "interleaved" and meta["rotary_dim"] == 64
    assert meta["attention_scaling"] == pytest.approx(1.0)
    cos = json_tensor(r.json(), "cos")
    np.testing.assert_array_equal(cos[:, 0], cos[:, 1])  # interleaved pairs share an angle


def test_layer_type_required_for_per_layer_rope(api: httpx.Client) -> None:
    config = model_config("gemma-3-1b")
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "config": config})
    assert r.status_code == 422
    assert "full_attention" in r.text and "sliding_attention" in r.text and "layer_type" in r.text
    for layer_type, base in (("sliding_attention", 10000.0), ("full_attention", 1e6)):
        body = {"seq_len": 2, "config": config, "layer_type": layer_type}
        r = api.post("/v1/encodings/rope", json=body)
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(
            json_tensor(r.json(), "inv_freq"), rope_inv_freq(256, base), rtol=1e-6
        )
    body = {"seq_len": 2, "config": model_config("llama-2-7b"), "layer_type": "full_attention"}
    assert api.post("/v1/encodings/rope", json=body).status_code == 422


def test_config_refusals_name_the_key(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "config": model_config("bloom-7b1")})
    assert r.status_code == 422 and "alibi" in r.text and "/v1/biases/alibi" in r.text
    both = {"seq_len": 2, "config": model_config("llama-2-7b"), "preset": "llama-2-7b"}
    r = api.post("/v1/encodings/rope", json=both)
    assert r.status_code == 422 and "not both" in r.text
    bad = model_config("llama-3.1-8b")
    bad["rope_scaling"]["rope_type"] = "ntk-by-parts"
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "config": bad})
    assert r.status_code == 422
    assert r.json()["field"] == "config.rope_scaling.rope_type" and "llama3" in r.json()["detail"]


def test_config_in_a_get_is_json_text(api: httpx.Client) -> None:
    config = model_config("qwen2.5-7b")
    get = api.get("/v1/encodings/rope", params={"seq_len": 4, "config": json.dumps(config)})
    post = api.post("/v1/encodings/rope", json={"seq_len": 4, "config": config})
    assert get.status_code == 200, get.text
    assert get.content == post.content


# ---------------------------------------------------------------------------------------------
# config in the biases and learned tables
# ---------------------------------------------------------------------------------------------


def test_alibi_config_mpt_and_bloom(api: httpx.Client) -> None:
    config = model_config("mpt-7b")
    config["attn_config"]["alibi_bias_max"] = 16
    r = api.post("/v1/biases/alibi", json={"seq_len": 2, "config": config})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(
        json_tensor(r.json(), "slopes"), 2.0 ** (-16 * np.arange(1, 33) / 32), rtol=1e-6
    )
    r = api.post("/v1/biases/alibi", json={"seq_len": 2, "config": model_config("bloom-560m")})
    assert r.json()["meta"]["num_heads"] == 16
    r = api.post("/v1/biases/alibi", json={"seq_len": 2, "config": model_config("llama-2-7b")})
    assert r.status_code == 422 and "rope" in r.text and "/v1/encodings/rope" in r.text


def test_relative_config_t5(api: httpx.Client) -> None:
    config = model_config("t5-small")
    config["relative_attention_max_distance"] = 64
    r = api.post("/v1/biases/relative", json={"seq_len": 3, "config": config})
    assert r.status_code == 200, r.text
    meta = r.json()["meta"]
    assert (meta["num_buckets"], meta["max_distance"], meta["num_heads"]) == (32, 64, 8)


def test_learned_config_gpt2(api: httpx.Client) -> None:
    r = api.post("/v1/encodings/learned", json={"config": model_config("gpt2"), "d_model": 8})
    assert r.status_code == 200, r.text
    assert json_tensor(r.json(), "encoding").shape == (1024, 8)
    torch.manual_seed(0)
    expected = torch.nn.Embedding(1024, 8).weight.detach().numpy()
    np.testing.assert_allclose(json_tensor(r.json(), "encoding"), expected, rtol=1e-6, atol=0)


def test_learned_config_stops_at_the_tables_size(api: httpx.Client) -> None:
    """GPT-2 has n_positions 1024 rows: seq_len 1025 is a 422 that gives the size, as for a
    loaded model's table (contract v1); 1024 is served."""
    config = model_config("gpt2")
    r = api.post("/v1/encodings/learned", json={"config": config, "seq_len": 1025, "d_model": 8})
    assert r.status_code == 422, r.text
    assert "1025" in r.text and "1024" in r.text and "seq_len" in r.text
    r = api.post("/v1/encodings/learned", json={"config": config, "seq_len": 1024, "d_model": 8})
    assert r.status_code == 200, r.text
    assert r.json()["meta"]["table_size"] == 1024
    # a seeded table without a config has no size to stop at
    r = api.post("/v1/encodings/learned", json={"seq_len": 1025, "d_model": 8})
    assert r.status_code == 200, r.text


def test_learned_config_electra_width_and_roberta_rows(api: httpx.Client) -> None:
    """ELECTRA's position_embeddings are embedding_size wide; RoBERTa counts positions from
    padding_idx + 1, so 510 of a 512-row table are reachable (modeling_roberta)."""
    electra = {"model_type": "electra", "hidden_size": 256, "embedding_size": 128,
               "num_attention_heads": 4, "max_position_embeddings": 512}  # fmt: skip
    r = api.post("/v1/encodings/learned", json={"config": electra, "seq_len": 4})
    assert r.status_code == 200, r.text
    assert json_tensor(r.json(), "encoding").shape == (4, 128)
    roberta = {"model_type": "roberta", "hidden_size": 768, "num_attention_heads": 12,
               "max_position_embeddings": 512, "pad_token_id": 1}  # fmt: skip
    r = api.post("/v1/encodings/learned", json={"config": roberta, "seq_len": 4, "d_model": 8})
    meta = r.json()["meta"]
    assert (meta["table_size"], meta["first_position"], meta["usable_positions"]) == (512, 2, 510)
    assert "510 of the 512 rows" in meta["positions_note"]


# ---------------------------------------------------------------------------------------------
# /v1/configs/positions
# ---------------------------------------------------------------------------------------------


def test_configs_positions_llama4(api: httpx.Client) -> None:
    r = api.post("/v1/configs/positions", json={"config": model_config("llama-4-scout")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_type"] == "llama4" and body["kind"] == "rope"
    assert body["layout"] == "interleaved" and body["head_dim"] == 128
    assert len(body["layer_types"]) == 48
    assert body["layer_types"][3::4] == ["no_rope"] * 12
    assert body["attention_temperature"] == {"floor_scale": 8192.0, "attn_scale": 0.1}
    rope = body["rope"]["chunked_attention"]
    assert rope["rope_type"] == "llama3" and rope["factor"] == 16.0
    assert body["softmax_scale"] == pytest.approx(128**-0.5)
    assert any("rope_scaling" in w for w in body["warnings"])


def test_a_config_json_pasted_as_the_body_is_one_clear_error(api: httpx.Client) -> None:
    """``curl -d @config.json`` gave a "Field required" and one "Extra inputs" per key (24
    errors): it is one error that says to wrap it, on every endpoint that takes ``config``."""
    config = model_config("llama-3.1-8b")
    for path in ("/v1/configs/positions", "/v1/encodings/rope"):
        r = api.post(path, json={**config, "architectures": ["LlamaForCausalLM"]})
        assert r.status_code == 422
        (item,) = r.json()["detail"]
        assert item["type"] == "config_not_wrapped" and item["loc"] == ["body"]
        assert 'this looks like a config.json: send it as {"config": ...}' in item["msg"]
    # a body that only misspells a field is not taken for a config
    r = api.post("/v1/configs/positions", json={"confg": config})
    assert [e["type"] for e in r.json()["detail"]] == ["missing", "extra_forbidden"]


def test_configs_positions_gemma3_and_phi3(api: httpx.Client) -> None:
    body = api.post("/v1/configs/positions", json={"config": model_config("gemma-3-4b")}).json()
    assert body["rope"]["full_attention"]["rope_type"] == "linear"
    assert body["rope"]["full_attention"]["factor"] == 8.0
    assert body["rope"]["sliding_attention"]["rope_theta"] == 10000.0
    assert body["softmax_scale"] == pytest.approx(1 / 16) and body["sliding_window"] == 1024
    body = api.post("/v1/configs/positions", json={"config": model_config("phi-2")}).json()
    assert body["rotary_dim"] == 32 and body["head_dim"] == 80


def test_configs_positions_refusals(api: httpx.Client) -> None:
    r = api.post("/v1/configs/positions", json={"config": {"model_type": "mystery"}})
    assert r.status_code == 422 and r.json()["field"] == "config.model_type"
    bad = model_config("llama-2-7b")
    bad["rope_theta"] = "big"
    r = api.post("/v1/configs/positions", json={"config": bad})
    assert r.status_code == 422 and "rope_theta" in r.text


# ---------------------------------------------------------------------------------------------
# M-RoPE: (3, T) positions
# ---------------------------------------------------------------------------------------------


def test_mrope_positions_with_config_equal_transformers(api: httpx.Client) -> None:
    from transformers import AutoConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding

    rows = [[0, 1, 2, 3, 3, 3], [0, 1, 2, 3, 4, 5], [0, 1, 2, 5, 6, 7]]
    config = model_config("qwen2.5-vl-7b")
    r = api.post("/v1/encodings/rope", json={"positions": rows, "config": config})
    assert r.status_code == 200, r.text
    assert r.json()["meta"]["mrope_section"] == [16, 24, 24]
    tc = AutoConfig.for_model(**model_config("qwen2.5-vl-7b")).get_text_config()
    cos, sin = Qwen2_5_VLRotaryEmbedding(config=tc)(torch.zeros(1), torch.tensor(rows)[:, None])  # type: ignore[arg-type]
    np.testing.assert_allclose(json_tensor(r.json(), "cos"), cos[0].numpy(), atol=2e-5, rtol=0)
    np.testing.assert_allclose(json_tensor(r.json(), "sin"), sin[0].numpy(), atol=2e-5, rtol=0)


def test_mrope_section_in_the_body(api: httpx.Client) -> None:
    """Interleaved sections [1, 1, 1] over rotary_dim 6: frequency j follows row j."""
    rows = [[0, 7], [0, 11], [0, 13]]
    body = {"positions": rows, "head_dim": 6, "mrope_section": [1, 1, 1], "mrope_interleaved": True}
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text
    inv = rope_inv_freq(6, 10000.0)
    angles = np.array([rows[j][1] * inv[j] for j in range(3)])
    np.testing.assert_allclose(
        json_tensor(r.json(), "cos")[1], np.cos(np.concatenate([angles, angles])), atol=1e-6
    )
    body["mrope_section"] = [1, 1, 2]
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 422 and "rotary_dim/2 = 3" in r.text
    del body["mrope_section"]
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 422 and "mrope_section" in r.text


def test_client_config_positions_and_rope_from_config(live_server: str) -> None:
    from posenc.client import PosencClient

    with PosencClient(live_server, timeout=60) as client:
        info = client.config_positions(model_config("glm-4-9b"))
        assert (info["rotary_dim"], info["layout"]) == (64, "interleaved")
        result = client.rope(seq_len=3, extra={"config": model_config("glm-4-9b")})
    assert result.cos.shape == (3, 64) and result.meta["config_model_type"] == "glm4"
    np.testing.assert_allclose(result.inv_freq, rope_inv_freq(64, 10000.0), rtol=1e-6)


def test_cli_config_local_equals_service(live_server: str, tmp_path) -> None:
    """``posenc table rope --config config.json`` computes locally what the service gives."""
    from posenc import cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(model_config("gemma-3-4b")))
    local, remote = tmp_path / "local.npy", tmp_path / "remote.npy"
    argv = ["table", "rope", "--config", str(path), "--layer-type", "full_attention",
            "--positions", "0,7,4096"]  # fmt: skip
    assert cli.main([*argv, "-o", str(local)]) == 0
    assert cli.main([*argv, "--url", live_server, "-o", str(remote)]) == 0
    assert local.read_bytes() == remote.read_bytes()
    cos = np.load(local)  # Gemma 3 4b full attention: linear factor 8, theta 1e6
    inv = rope_inv_freq(256, 1e6) / 8.0
    np.testing.assert_allclose(cos[1], np.cos(7 * np.concatenate([inv, inv])), atol=1e-6)
    path.write_text(json.dumps(model_config("mpt-7b")))
    out = tmp_path / "alibi.npy"
    assert (
        cli.main(["table", "alibi", "--config", str(path), "--seq-len", "3", "-o", str(out)]) == 0
    )
    assert np.load(out).shape == (32, 3, 3)
    # the preset fix in the CLI too: gpt-neox-20b with head_dim 64 rotates 16
    out = tmp_path / "neox.npy"
    argv = ["table", "rope", "--preset", "gpt-neox-20b", "--head-dim", "64", "--seq-len", "2"]
    assert cli.main([*argv, "-o", str(out)]) == 0
    assert np.load(out).shape == (2, 16)


def test_mrope_section_in_a_get(api: httpx.Client) -> None:
    params = {"positions": "0,5", "head_dim": 6, "mrope_section": "1,1,1"}
    get = api.get("/v1/encodings/rope", params=params)  # type: ignore[arg-type]
    post = api.post(
        "/v1/encodings/rope", json={"positions": [0, 5], "head_dim": 6, "mrope_section": [1, 1, 1]}
    )
    assert get.status_code == 200, get.text
    assert get.content == post.content


# ---------------------------------------------------------------------------------------------
# Issue 24: what the model applies (nanochat's -theta, GLM-4-MoE's odd width, DeepSeek-V4's
# trailing channels), against the model's own rotary module and apply function
# ---------------------------------------------------------------------------------------------


def test_nanochat_config_gives_the_table_its_attention_applies(api: httpx.Client) -> None:
    """nanochat's ``rotate_half`` is ``cat(x2, −x1)``: the rope tables of its config carry
    ``−sin θ``, so Llama's ``x·cos + rotate_half(x)·sin`` with them is what NanoChat's own
    ``apply_rotary_pos_emb`` makes of a random query."""
    from transformers import AutoConfig
    from transformers.models.nanochat import modeling_nanochat as m

    cfg = AutoConfig.for_model("nanochat")
    r = api.post("/v1/encodings/rope", json={"seq_len": 16, "config": cfg.to_dict()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["meta"]["rotation"] == "negative"
    cos = torch.from_numpy(json_tensor(body, "cos"))
    sin = torch.from_numpy(json_tensor(body, "sin"))
    q = torch.randn(1, 2, 16, cos.shape[-1], generator=torch.Generator().manual_seed(0))
    cos_hf, sin_hf = m.NanoChatRotaryEmbedding(config=cfg)(q, torch.arange(16)[None])  # type: ignore[arg-type]
    want, _ = m.apply_rotary_pos_emb(q, q, cos_hf, sin_hf)
    x1, x2 = q.double().chunk(2, dim=-1)
    got = q.double() * cos + torch.cat((-x2, x1), dim=-1) * sin  # Llama's rotate_half
    np.testing.assert_allclose(got.float().numpy(), want.numpy(), atol=1e-4, rtol=0)
    positions = api.post("/v1/configs/positions", json={"config": cfg.to_dict()}).json()
    assert positions["rotation"] == "negative" and positions["rotated_channels"] == "leading"
    # the body can still ask for the positive rotation
    r = api.post(
        "/v1/encodings/rope",
        json={"seq_len": 16, "config": cfg.to_dict(), "rotation": "positive"},
    )
    np.testing.assert_array_equal(json_tensor(r.json(), "sin"), -sin.numpy())


def test_glm4_moe_odd_width_from_its_config(api: httpx.Client) -> None:
    """GLM-4-MoE's int(42 · 0.5) = 21: 11 frequencies base^(−2i/21) in a 22-wide table, as its
    rotary module builds; an odd rotary_dim in a body stays a 422, as the contract says."""
    from transformers import AutoConfig
    from transformers.models.glm4_moe import modeling_glm4_moe as m

    cfg = AutoConfig.for_model("glm4_moe")
    r = api.post("/v1/encodings/rope", json={"seq_len": 12, "config": cfg.to_dict()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["meta"]["rotary_dim"] == 22 and body["meta"]["exponent_dim"] == 21
    rot = m.Glm4MoeRotaryEmbedding(config=cfg)  # type: ignore[arg-type]
    cos_hf, sin_hf = rot(torch.zeros(1), torch.arange(12)[None])
    np.testing.assert_allclose(json_tensor(body, "inv_freq"), rot.inv_freq.numpy(), rtol=2e-6)
    np.testing.assert_allclose(json_tensor(body, "cos"), cos_hf[0].numpy(), atol=2e-5, rtol=0)
    np.testing.assert_allclose(json_tensor(body, "sin"), sin_hf[0].numpy(), atol=2e-5, rtol=0)
    positions = api.post("/v1/configs/positions", json={"config": cfg.to_dict()}).json()
    assert positions["rotary_dim"] == 22
    assert positions["rope"]["full_attention"]["exponent_dim"] == 21
    # a body's rotary_dim is even, and a body's width drops the config's odd denominator
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "head_dim": 42, "rotary_dim": 21})
    assert r.status_code == 422 and "rotary_dim" in r.text
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "config": cfg.to_dict(),
                                             "rotary_dim": 16})  # fmt: skip
    assert r.status_code == 200 and r.json()["meta"]["exponent_dim"] == 16
    np.testing.assert_allclose(json_tensor(r.json(), "inv_freq"), rope_inv_freq(16, 10000.0),
                               rtol=1e-6)  # fmt: skip
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "head_dim": 8, "exponent_dim": 5})
    assert r.status_code == 422 and r.json()["field"] == "exponent_dim"
    # posenc's vLLM tables build their exponents over rotary_dim: refused, not silently wrong
    r = api.post("/v1/encodings/rope", json={"seq_len": 2, "config": cfg.to_dict(),
                                             "engine": "vllm"})  # fmt: skip
    assert r.status_code == 422 and r.json()["field"] == "exponent_dim"


def test_deepseek_v4_reports_its_trailing_channels(api: httpx.Client) -> None:
    from transformers import AutoConfig

    cfg = AutoConfig.for_model("deepseek_v4").to_dict()
    body = api.post("/v1/configs/positions", json={"config": cfg}).json()
    assert body["rotated_channels"] == "trailing" and body["rotation"] == "positive"
    assert body["head_dim"] == 512 and body["rotary_dim"] == 64
