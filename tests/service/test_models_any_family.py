"""Checkpoints of any family through ``POSENC_MODELS``: Llama-, Gemma-, Qwen2- and GPT-NeoX-style
safetensors files (written here) with a ``config.json`` beside them, served by ``/v1/embed`` and
listed by ``/v1/models``.

The reference is transformers itself: the model class built from the same ``config.json`` (tiny
sizes, random layers), given the same token table with ``load_state_dict(strict=False)``, run on
the same batch. What it feeds its first decoder layer (a forward pre-hook on ``layers[0]``) must
equal ``embeddings`` in the real slots, to the bit; its own rotary embedding on the same position
ids gives ``cos`` / ``sin`` (to transformers' float32 angle error).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import save_file
from transformers import GemmaConfig, GPTNeoXConfig, LlamaConfig, Phi3Config, Qwen2Config
from transformers.models.gemma.modeling_gemma import GemmaModel
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXModel
from transformers.models.llama.modeling_llama import LlamaModel
from transformers.models.phi3.modeling_phi3 import Phi3Model
from transformers.models.qwen2.modeling_qwen2 import Qwen2Model

from posenc.core.errors import InvalidArgument
from posenc.readers.checkpoints import read_checkpoint
from posenc.readers.models import load_safetensors_model
from tests.helpers import (
    HOST,
    ApiClient,
    clean_env,
    free_port,
    json_tensor,
    make_settings,
    start_service,
    stop_service,
    wait_ready,
)

# Tiny configs in the published files' own spelling (legacy keys included on purpose).
FAMILIES: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-3.1-8B config.json, with tiny sizes: llama3 scaling, theta 500000.
    "tiny-llama": {
        "cls": (LlamaConfig, LlamaModel, "model.embed_tokens.weight", torch.float32),
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
            "vocab_size": 97,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    },
    # google/gemma-7b config.json, tiny: head_dim given (not hidden/heads), bf16, pad 0.
    "tiny-gemma": {
        "cls": (GemmaConfig, GemmaModel, "model.embed_tokens.weight", torch.bfloat16),
        "config": {
            "architectures": ["GemmaForCausalLM"],
            "model_type": "gemma",
            "hidden_size": 48,
            "intermediate_size": 32,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "num_hidden_layers": 1,
            "vocab_size": 89,
            "max_position_embeddings": 8192,
            "rope_theta": 10000.0,
            "pad_token_id": 0,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "torch_dtype": "bfloat16",
        },
    },
    # Qwen/Qwen2.5-7B-Instruct config.json with the YaRN rope_scaling its model card gives.
    "tiny-qwen": {
        "cls": (Qwen2Config, Qwen2Model, "model.embed_tokens.weight", torch.float32),
        "config": {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_size": 32,
            "intermediate_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
            "vocab_size": 101,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rope_scaling": {
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
                "type": "yarn",
            },
        },
    },
    # microsoft/Phi-3-mini-128k-instruct config.json, tiny: longrope without factor (the ratio
    # 131072 / 4096 = 32 gives the attention factor), top-level original length.
    "tiny-phi3": {
        "cls": (Phi3Config, Phi3Model, "model.embed_tokens.weight", torch.float32),
        "config": {
            "architectures": ["Phi3ForCausalLM"],
            "model_type": "phi3",
            "hidden_size": 32,
            "intermediate_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "num_hidden_layers": 1,
            "vocab_size": 79,
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "rope_scaling": {
                "type": "longrope",
                "long_factor": [1.0, 1.5, 9.0, 40.0],
                "short_factor": [1.0, 1.02, 1.2, 1.9],
            },
            "pad_token_id": 0,  # 32000 in the published file; inside the tiny vocabulary here
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    },
    # EleutherAI/pythia-70m config.json, tiny: rotary_pct 0.25, rotary_emb_base.
    "tiny-neox": {
        "cls": (GPTNeoXConfig, GPTNeoXModel, "gpt_neox.embed_in.weight", torch.float32),
        "config": {
            "architectures": ["GPTNeoXForCausalLM"],
            "model_type": "gpt_neox",
            "hidden_size": 64,
            "intermediate_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 1,
            "vocab_size": 83,
            "max_position_embeddings": 2048,
            "rotary_emb_base": 10000,
            "rotary_pct": 0.25,
            "use_parallel_residual": True,
        },
    },
}

INPUT_IDS = [[5, 17, 3, 9, 11, 40], [7, 8, 30]]  # ragged: the second row is padded


def _build(name: str, dtype: torch.dtype | None = None):  # type: ignore[no-untyped-def]
    config_cls, model_cls, _, table_dtype = FAMILIES[name]["cls"]
    config = config_cls(**FAMILIES[name]["config"])
    torch.manual_seed(0)
    model = model_cls(config).eval()
    return model.to(dtype or table_dtype)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family's token table (with a few other tensors) and config.json, in its own folder."""
    paths = {}
    for name, spec in FAMILIES.items():
        _, _, tensor_name, dtype = spec["cls"]
        folder = tmp_path_factory.mktemp(name)
        torch.manual_seed(hash(name) % 1000)
        vocab, hidden = spec["config"]["vocab_size"], spec["config"]["hidden_size"]
        table = torch.randn(vocab, hidden).to(dtype)
        save_file(
            {
                tensor_name: table,
                "lm_head.weight": torch.randn(vocab, hidden).to(dtype),
                tensor_name.replace("embed_tokens", "norm").replace(
                    "embed_in", "final_layer_norm"
                ): (torch.ones(hidden).to(dtype)),
            },
            str(folder / "model.safetensors"),
        )
        (folder / "config.json").write_text(json.dumps(spec["config"]))
        paths[name] = folder / "model.safetensors"
    return paths


def _models_env(checkpoints: dict[str, Path]) -> str:
    return ",".join(f"{name}={path}" for name, path in checkpoints.items())


@pytest.fixture(scope="module")
def family_live(checkpoints: dict[str, Path], tmp_path_factory) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    port = free_port()
    log = tmp_path_factory.mktemp("family-live") / "service.log"
    proc = start_service(
        port, log, clean_env(POSENC_DEVICE="cpu", POSENC_MODELS=_models_env(checkpoints))
    )
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log)
        with httpx.Client(base_url=url, timeout=60) as client:
            yield client
    finally:
        stop_service(proc)


@pytest.fixture(scope="module")
def family_inprocess(checkpoints: dict[str, Path], gpt2_file: Path) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    settings = make_settings(gpt2_file, models=_models_env(checkpoints))
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(params=["inprocess", "uvicorn"])
def family_api(request: pytest.FixtureRequest) -> httpx.Client:
    return request.getfixturevalue(
        "family_inprocess" if request.param == "inprocess" else "family_live"
    )


def _reference(name: str, path: Path, input_ids, attention_mask, position_ids):  # type: ignore[no-untyped-def]
    """transformers' first-layer input and rotary cos/sin for the batch, on the same weights."""
    from safetensors.torch import load_file

    tensor_name = FAMILIES[name]["cls"][2]
    weights = load_file(str(path))
    model = _build(name)
    embed_attr = "embed_in" if name == "tiny-neox" else "embed_tokens"
    missing, _ = model.load_state_dict({f"{embed_attr}.weight": weights[tensor_name]}, strict=False)
    assert f"{embed_attr}.weight" not in missing
    captured: dict[str, Any] = {}

    def hook(module, args, kwargs):  # type: ignore[no-untyped-def]
        captured["hidden"] = kwargs.get("hidden_states", args[0] if args else None)
        captured["rope"] = kwargs.get("position_embeddings")

    handle = model.layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    handle.remove()
    # The rotary embedding of a float32 build of the same config (a bf16 build casts its cos/sin).
    f32 = _build(name, torch.float32)
    with torch.no_grad():
        cos, sin = f32.rotary_emb(torch.zeros(1, dtype=torch.float32), position_ids)
    return captured["hidden"], cos, sin


@pytest.mark.parametrize("name", list(FAMILIES))
def test_embed_equals_transformers_first_layer_input(
    family_api: httpx.Client, checkpoints: dict[str, Path], name: str
) -> None:
    r = family_api.post(
        "/v1/embed", json={"input_ids": INPUT_IDS, "model": name, "padding_side": "left"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body["tensors"]) == ["embeddings", "position_ids", "attention_mask", "cos", "sin"]
    emb = torch.from_numpy(json_tensor(body, "embeddings"))
    pos = torch.from_numpy(json_tensor(body, "position_ids"))
    mask = torch.from_numpy(json_tensor(body, "attention_mask"))
    assert mask.tolist() == [[1] * 6, [0, 0, 0, 1, 1, 1]]
    assert pos.tolist() == [[0, 1, 2, 3, 4, 5], [0, 0, 0, 0, 1, 2]]
    ids = torch.tensor([INPUT_IDS[0], [0, 0, 0, *INPUT_IDS[1]]])
    hidden, cos, sin = _reference(name, checkpoints[name], ids, mask, pos)
    real = mask.bool()
    # float32 output of the table dtype's values: exact.
    assert torch.equal(emb[real].to(torch.float32), hidden[real].to(torch.float32))
    assert bool((emb[~real] == 0).all())
    torch.testing.assert_close(
        torch.from_numpy(json_tensor(body, "cos")).float(), cos, atol=2e-6, rtol=0
    )
    torch.testing.assert_close(
        torch.from_numpy(json_tensor(body, "sin")).float(), sin, atol=2e-6, rtol=0
    )
    rope = read_checkpoint(checkpoints[name]).rope
    assert rope is not None
    assert body["meta"]["rope"]["rotary_dim"] == rope.rotary_dim == cos.shape[-1]


@pytest.mark.parametrize("name", ["tiny-phi3", "tiny-llama"])
def test_explicit_positions_past_the_original_length(
    family_inprocess: httpx.Client, checkpoints: dict[str, Path], name: str
) -> None:
    """Positions past 4096 switch Phi-3's longrope to its long factors, as transformers does."""
    positions = [[0, 1, 4095, 4096, 5000, 9000]]
    ids = [[3, 4, 5, 6, 7, 8]]
    r = family_inprocess.post(
        "/v1/embed", json={"input_ids": ids, "model": name, "position_ids": positions}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    pos = torch.tensor(positions)
    hidden, cos, sin = _reference(
        name, checkpoints[name], torch.tensor(ids), torch.ones_like(pos), pos
    )
    assert torch.equal(torch.from_numpy(json_tensor(body, "embeddings")).float(), hidden.float())
    # transformers' float32 angles drift with the position (~ position · 2^-24): within 1e-3 here.
    ours_cos = torch.from_numpy(json_tensor(body, "cos")).float()
    torch.testing.assert_close(ours_cos, cos, atol=1e-3, rtol=0)
    torch.testing.assert_close(
        torch.from_numpy(json_tensor(body, "sin")).float(), sin, atol=1e-3, rtol=0
    )
    if name == "tiny-phi3":
        scaling = math.sqrt(1 + math.log(32) / math.log(4096))
        assert body["meta"]["rope"]["attention_scaling"] == pytest.approx(scaling, rel=1e-12)
        # Long factors: channel 1 at 9000 turns by 9000 / (1.5 · 10000^(2/8)) = 600 (short: 1.02).
        assert float(ours_cos[0, 5, 1]) == pytest.approx(math.cos(600.0) * scaling, abs=1e-6)


def test_gemma_normaliser_is_rounded_to_the_model_dtype(checkpoints: dict[str, Path]) -> None:
    model = load_safetensors_model("g", checkpoints["tiny-gemma"])
    # sqrt(48) = 6.928..., bfloat16 6.9375: Gemma multiplies by the rounded value.
    assert model.embed_scale == 6.9375 and model.scale is True
    assert model.token_table.dtype == torch.bfloat16
    assert model.pad_token_id == 0
    assert abs(model.embed_scale - math.sqrt(48)) > 1e-3
    # The nn.Module built from it multiplies by the same rounded value.
    from posenc.embedding import TokenPositionEmbedding

    ids = torch.tensor([[3, 4, 5]])
    out = TokenPositionEmbedding.from_model(model)(ids)
    assert torch.equal(out, model.token_table[ids] * torch.tensor(6.9375, dtype=torch.bfloat16))


def test_models_lists_the_new_fields(family_api: httpx.Client) -> None:
    listed = {m["name"]: m for m in family_api.get("/v1/models").json()["models"]}
    llama = listed["tiny-llama"]
    assert (llama["positional"], llama["position_scheme"], llama["family"]) == (
        "rope",
        "rope",
        "Llama",
    )
    assert llama["rope"]["rope_type"] == "llama3" and llama["rope"]["base"] == 500000.0
    assert llama["rope"]["scaling"]["factor"] == 8.0 and llama["max_positions"] == 131072
    assert (llama["vocab_size"], llama["d_model"], llama["scale"], llama["embed_scale"]) == (
        97,
        64,
        False,
        None,
    )
    neox = listed["tiny-neox"]
    assert (neox["rope"]["head_dim"], neox["rope"]["rotary_dim"]) == (16, 4)
    assert listed["tiny-gemma"]["embed_scale"] == 6.9375
    assert listed["tiny-qwen"]["rope"]["scaling"]["type"] == "yarn"
    assert listed["posenc-base"]["position_scheme"] == "learned"


def test_positional_none_drops_cos_sin_and_learned_is_refused(family_api: httpx.Client) -> None:
    r = family_api.post(
        "/v1/embed", json={"input_ids": [[1, 2]], "model": "tiny-llama", "positional": "none"}
    )
    assert r.status_code == 200, r.text
    assert list(r.json()["tensors"]) == ["embeddings", "position_ids", "attention_mask"]
    r = family_api.post(
        "/v1/embed", json={"input_ids": [[1, 2]], "model": "tiny-llama", "positional": "learned"}
    )
    assert r.status_code == 422 and "position table" in r.text
    r = family_api.post("/v1/embed", json={"input_ids": [[1, 2]], "positional": "rope"})
    assert r.status_code == 422 and "RoPE model" in r.text
    r = family_api.post("/v1/embed", json={"input_ids": [[1, 97]], "model": "tiny-llama"})
    assert r.status_code == 422 and "input_ids[0][1]" in r.text


# ---------------------------------------------------------------------------------------------
# Names, schemes and errors (library)
# ---------------------------------------------------------------------------------------------


def _write(folder: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


@pytest.mark.parametrize(
    ("tensor_name", "config", "scheme", "family"),
    [
        ("transformer.word_embeddings.weight", {"model_type": "bloom"}, "alibi", "BLOOM/Falcon"),
        (
            "transformer.word_embeddings.weight",
            {"model_type": "falcon", "alibi": True},
            "alibi",
            "BLOOM/Falcon",
        ),
        (
            "transformer.word_embeddings.weight",
            {"model_type": "falcon", "hidden_size": 8, "num_attention_heads": 2},
            "rope",
            "BLOOM/Falcon",
        ),
        ("shared.weight", {"model_type": "t5"}, "relative", "T5"),
        (
            "model.language_model.embed_tokens.weight",
            {
                "model_type": "qwen2_5_vl",
                "text_config": {"hidden_size": 8, "num_attention_heads": 2, "rope_theta": 1e6},
            },
            "rope",
            "Llama",
        ),
        (
            "transformer.wte.weight",
            {
                "model_type": "gptj",
                "n_embd": 8,
                "hidden_size": 8,
                "num_attention_heads": 2,
                "rotary_dim": 2,
            },
            "rope",
            "GPT-2",
        ),
        ("model.embed_tokens.weight", None, "none", "Llama"),
    ],
)
def test_schemes_from_config(tmp_path, tensor_name, config, scheme, family):  # type: ignore[no-untyped-def]
    path = _write(tmp_path / "m", {tensor_name: torch.randn(10, 8)}, config)
    ckpt = read_checkpoint(path)
    assert (ckpt.scheme, ckpt.family, ckpt.token_name) == (scheme, family, tensor_name)
    model = load_safetensors_model("m", path)
    assert model.positional == ("rope" if scheme == "rope" else "none")
    if scheme == "rope" and config.get("model_type") == "qwen2_5_vl":
        assert model.rope is not None and model.rope.base == 1e6 and model.rope.head_dim == 4


def test_opt_learned_positions_skip_the_two_offset_rows(tmp_path):
    table = torch.randn(6, 4)
    path = _write(
        tmp_path / "opt",
        {
            "model.decoder.embed_tokens.weight": torch.randn(10, 4),
            "model.decoder.embed_positions.weight": table,
        },
        {"model_type": "opt", "pad_token_id": 1},
    )
    model = load_safetensors_model("opt", path)
    assert model.positional == "learned" and model.max_positions == 4 and model.pad_token_id == 1
    assert torch.equal(model.position_table, table[2:])  # OPTLearnedPositionalEmbedding: offset 2


def test_sharded_index_is_read(tmp_path):
    folder = tmp_path / "sharded"
    folder.mkdir()
    table = torch.randn(12, 8)
    save_file(
        {"model.embed_tokens.weight": table}, str(folder / "model-00001-of-00002.safetensors")
    )
    save_file(
        {"lm_head.weight": torch.randn(12, 8)}, str(folder / "model-00002-of-00002.safetensors")
    )
    index = {
        "metadata": {},
        "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
        },
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(
        json.dumps({"model_type": "mistral", "hidden_size": 8, "num_attention_heads": 2})
    )
    for path in (folder, folder / "model.safetensors.index.json"):
        model = load_safetensors_model("s", path)
        assert torch.equal(model.token_table, table)
        assert model.positional == "rope" and model.rope is not None and model.rope.head_dim == 4


def test_learned_config_without_table_and_bad_configs_are_invalid(tmp_path):
    path = _write(
        tmp_path / "a", {"transformer.wte.weight": torch.randn(4, 2)}, {"model_type": "gpt2"}
    )
    with pytest.raises(InvalidArgument, match=r"learned positions.*transformer\.wpe\.weight"):
        load_safetensors_model("a", path)
    path = _write(tmp_path / "b", {"model.embed_tokens.weight": torch.randn(4, 2)}, None)
    (tmp_path / "b" / "config.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match=r"config\.json: cannot read as JSON"):
        load_safetensors_model("b", path)
    path = _write(
        tmp_path / "c",
        {"model.embed_tokens.weight": torch.randn(4, 2)},
        {
            "model_type": "llama",
            "hidden_size": 2,
            "num_attention_heads": 1,
            "rope_scaling": {"rope_type": "bogus"},
        },
    )
    with pytest.raises(InvalidArgument, match="bogus"):
        load_safetensors_model("c", path)
    path = _write(
        tmp_path / "d", {"model.embed_tokens.weight": torch.randn(4, 2)}, {"model_type": "llama"}
    )
    with pytest.raises(InvalidArgument, match="head_dim, or hidden_size and num_attention_heads"):
        load_safetensors_model("d", path)


def test_fingerprint_follows_the_config_beside_the_weights(tmp_path):
    """The ETag's model fingerprint changes when config.json does (it decides rope and scale)."""
    from service.models_loading import file_fingerprint as _file_fingerprint

    config = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2}
    path = _write(tmp_path / "fp", {"model.embed_tokens.weight": torch.randn(4, 8)}, config)
    before = {_file_fingerprint("m", str(path)), _file_fingerprint("m", str(tmp_path / "fp"))}
    (tmp_path / "fp" / "config.json").write_text(json.dumps({**config, "rope_theta": 500000.0}))
    after = {_file_fingerprint("m", str(path)), _file_fingerprint("m", str(tmp_path / "fp"))}
    assert len(before) == len(after) == 2 and not before & after
