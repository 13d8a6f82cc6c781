"""RoPE of checkpoints loaded through ``POSENC_MODELS``, read by the library's config reader.

A ``config.json`` beside the weights is read by :func:`posenc.readers.hf.positions.read_positions`, so every
convention it knows (DeepSeek's ``qk_rope_head_dim`` and interleaved pairs, Llama 3 scaling in
either spelling, Gemma 3's per-layer-type parameters and legacy ``rope_local_base_freq``, Llama
4's interleaving) holds for ``/v1/embed``'s ``cos`` / ``sin`` and ``/v1/models``' ``rope`` too.

The reference is transformers' own rotary embedding module, built from the same config dict
with no weights (as in ``tests/lib/test_hf_rope.py``), on the same position ids, put in
the layout the model's attention applies it. For a model with RoPE parameters per layer type,
``/v1/embed`` gives the tables of the model's first layer (``config.layer_types[0]`` in
transformers, the key its decoder layer 0 reads ``position_embeddings`` by).
"""

from __future__ import annotations

import copy
import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import save_file

from posenc.facts.model_configs import model_config
from posenc.readers.checkpoints import read_checkpoint
from tests.helpers import ApiClient, json_tensor, make_settings

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig  # noqa: E402


def _tiny_llama3_v5() -> dict[str, Any]:
    """Llama 3.1's scaling in transformers 5's spelling (``rope_parameters``), leaving out
    ``original_max_position_embeddings``: transformers then takes ``max_position_embeddings``."""
    return {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 32,
        "vocab_size": 50,
        "max_position_embeddings": 2048,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
    }


# name -> (config, token-table tensor name, modeling module, rotary class)
CASES: dict[str, tuple[dict[str, Any], str, str, str]] = {
    # published deepseek-ai/DeepSeek-V3 config.json: yarn with mscale, qk_rope_head_dim 64
    "deepseek-v3": (
        model_config("deepseek-v3"),
        "model.embed_tokens.weight",
        "deepseek_v3",
        "DeepseekV3RotaryEmbedding",
    ),
    # published meta-llama/Llama-3.1-8B config.json (legacy rope_scaling + rope_theta)
    "llama-3.1-8b": (
        model_config("llama-3.1-8b"),
        "model.embed_tokens.weight",
        "llama",
        "LlamaRotaryEmbedding",
    ),
    "tiny-llama3-v5": (
        _tiny_llama3_v5(),
        "model.embed_tokens.weight",
        "llama",
        "LlamaRotaryEmbedding",
    ),
    # published google/gemma-3-1b-pt (rope_local_base_freq) and gemma-3-4b-pt (multimodal,
    # linear scaling on the full-attention layers only)
    "gemma-3-1b": (
        model_config("gemma-3-1b"),
        "model.embed_tokens.weight",
        "gemma3",
        "Gemma3RotaryEmbedding",
    ),
    "gemma-3-4b": (
        model_config("gemma-3-4b"),
        "model.language_model.embed_tokens.weight",
        "gemma3",
        "Gemma3RotaryEmbedding",
    ),
    # published meta-llama/Llama-4-Scout config: interleaved pairs, layer 0 rotates
    "llama-4-scout": (
        model_config("llama-4-scout"),
        "model.language_model.embed_tokens.weight",
        "llama4",
        "Llama4TextRotaryEmbedding",
    ),
}

VOCAB = 12
INPUT_IDS = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10]]
POSITIONS = [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 0, 0, 0]]  # right padding: slots get 0


def _hidden(config: dict[str, Any]) -> int:
    text = config.get("text_config") or {}
    return int(text.get("hidden_size", config.get("hidden_size")))


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A token table (VOCAB, hidden_size) with each case's config.json beside it."""
    out = {}
    for name, (config, tensor_name, _, _) in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        table = torch.randn(VOCAB, _hidden(config), generator=torch.Generator().manual_seed(3))
        save_file({tensor_name: table}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps(config))
        out[name] = folder
    return out


@pytest.fixture(scope="module")
def api(folders: dict[str, Path], gpt2_file: Path) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    models = ",".join(f"{name}={folder}" for name, folder in folders.items())
    with TestClient(create_app(make_settings(gpt2_file, models=models))) as client:
        yield client


def _reference(
    name: str, position_ids: torch.Tensor
) -> tuple[str | None, Any, torch.Tensor, torch.Tensor]:
    """transformers' (layer type of layer 0, attention scaling, cos, sin) ``(B, T, R)``, in the
    layout the model's attention applies them."""
    config, _, module, cls = CASES[name]
    tc = AutoConfig.for_model(**copy.deepcopy(config)).get_text_config()
    rot = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), cls)(
        config=tc
    )
    x = torch.zeros(1, dtype=torch.float32)
    layer_type = None
    if module == "gemma3":
        layer_type = tc.layer_types[0]  # Gemma3TextModel: layer i reads layer_types[i]
        cos, sin = rot(x, position_ids, layer_type)
        scaling = getattr(rot, f"{layer_type}_attention_scaling")
    elif module == "llama4":
        freqs_cis = rot(x, position_ids)  # (B, T, R/2) complex, applied to adjacent pairs
        cos, sin = freqs_cis.real.repeat_interleave(2, -1), freqs_cis.imag.repeat_interleave(2, -1)
        scaling = rot.attention_scaling
    else:
        cos, sin = rot(x, position_ids)  # (B, T, R) as cat(θ, θ)
        scaling = rot.attention_scaling
        if module == "deepseek_v3":  # apply_rotary_pos_emb_interleave: pairs, half the table
            half = cos.shape[-1] // 2
            cos = cos[..., :half].repeat_interleave(2, -1)
            sin = sin[..., :half].repeat_interleave(2, -1)
    return layer_type, float(scaling), cos, sin


@pytest.mark.parametrize("name", list(CASES))
def test_embed_cos_sin_equal_the_models_rotary_embedding(api: httpx.Client, name: str) -> None:
    r = api.post("/v1/embed", json={"input_ids": INPUT_IDS, "model": name})
    assert r.status_code == 200, r.text
    body = r.json()
    pos = torch.from_numpy(json_tensor(body, "position_ids"))
    assert pos.tolist() == POSITIONS
    layer_type, scaling, cos, sin = _reference(name, pos)
    ours_cos = torch.from_numpy(json_tensor(body, "cos")).float()
    ours_sin = torch.from_numpy(json_tensor(body, "sin")).float()
    assert ours_cos.shape == cos.shape, (ours_cos.shape, cos.shape)
    torch.testing.assert_close(ours_cos, cos.float(), atol=2e-6, rtol=0)
    torch.testing.assert_close(ours_sin, sin.float(), atol=2e-6, rtol=0)
    rope = body["meta"]["rope"]
    assert rope["attention_scaling"] == pytest.approx(scaling, abs=1e-6)
    assert rope["rotary_dim"] == cos.shape[-1]
    assert rope["layer_type"] == layer_type


@pytest.mark.parametrize("name", list(CASES))
def test_models_rope_info_follows_the_config_reader(api: httpx.Client, name: str) -> None:
    """``/v1/models`` gives the same RoPE as the model's rotary module (theta, dims, type)."""
    listed = {m["name"]: m for m in api.get("/v1/models").json()["models"]}
    rope = listed[name]["rope"]
    config, _, _, _ = CASES[name]
    tc = AutoConfig.for_model(**copy.deepcopy(config)).get_text_config()
    params = tc.rope_parameters
    if rope["layer_type"] is not None:
        params = params[rope["layer_type"]]
    assert rope["base"] == params["rope_theta"]
    assert rope["rope_type"] == params["rope_type"]
    if rope["scaling"] is not None:
        assert rope["scaling"]["factor"] == params["factor"]
    _, scaling, cos, _ = _reference(name, torch.arange(4)[None])
    assert rope["rotary_dim"] == cos.shape[-1]
    assert rope["attention_scaling"] == pytest.approx(scaling, abs=1e-6)


def test_deepseek_rotates_qk_rope_head_dim_in_pairs(folders: dict[str, Path]) -> None:
    """DeepSeek-V3: 64 rotated channels (qk_rope_head_dim), not hidden_size / heads = 56."""
    rope = read_checkpoint(folders["deepseek-v3"]).rope
    assert rope is not None
    assert (rope.head_dim, rope.rotary_dim, rope.layout, rope.rope_type) == (
        64,
        64,
        "interleaved",
        "yarn",
    )


def test_gemma3_uses_its_first_layers_type(folders: dict[str, Path]) -> None:
    """Gemma 3's layer 0 is a sliding-window layer: theta 10000 (rope_local_base_freq), no
    scaling; the full-attention layers' 1e6 and linear factor 8 are not what it applies."""
    for name in ("gemma-3-1b", "gemma-3-4b"):
        rope = read_checkpoint(folders[name]).rope
        assert rope is not None
        assert (rope.layer_type, rope.base, rope.rope_type, rope.scaling) == (
            "sliding_attention",
            10000.0,
            "default",
            None,
        )
        assert rope.head_dim == rope.rotary_dim == 256


def _chatglm_cos_sin(positions: torch.Tensor, rotary: int, base: float) -> torch.Tensor:
    """THUDM modeling_chatglm.py (ChatGLM2/3, remote code): ``RotaryEmbedding(kv_channels // 2)``
    with ``theta = 1 / base^(arange(0, n, 2) / n)``, ``base = 10000 · rope_ratio``, applied to
    adjacent pairs of the first ``n`` channels: cos per channel, each angle twice, in float64."""
    theta = 1.0 / base ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary)
    angles = positions.to(torch.float64)[..., None] * theta  # (B, T, n/2)
    return torch.cos(angles).repeat_interleave(2, -1)  # (B, T, n)


@pytest.mark.parametrize("rope_ratio", [None, 50])
def test_chatglm_rotates_half_the_head_in_pairs(tmp_path: Path, rope_ratio: int | None) -> None:
    """THUDM/chatglm3-6b's config.json (chatglm3-6b-32k adds ``rope_ratio: 50``), tiny table."""
    config: dict[str, Any] = {
        "model_type": "chatglm",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "kv_channels": 128,
        "num_layers": 28,
        "seq_length": 8192,
        "multi_query_attention": True,
        "multi_query_group_num": 2,
        "padded_vocab_size": 65024,
    }
    if rope_ratio is not None:
        config["rope_ratio"] = rope_ratio
    save_file(
        {"transformer.embedding.word_embeddings.weight": torch.randn(VOCAB, 64)},
        str(tmp_path / "model.safetensors"),
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    rope = read_checkpoint(tmp_path).rope
    base = 10000.0 * (rope_ratio or 1)
    assert rope is not None
    assert (rope.rotary_dim, rope.layout, rope.base) == (64, "interleaved", base)
    from posenc.rope import rope_cos_sin

    positions = torch.tensor([[0, 1, 2, 4095, 8191]])
    tables = rope_cos_sin(
        positions[0],
        rotary_dim=rope.rotary_dim,
        base=rope.base,
        layout=rope.layout,
        dtype=torch.float64,
    )
    torch.testing.assert_close(tables.cos, _chatglm_cos_sin(positions, 64, base)[0])
