"""The model registry: the built-in seeded model and GPT-2 / BERT safetensors files."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from posenc import InvalidArgument, default_model, load_safetensors_model, seeded_normal


def test_default_model_is_the_documented_seeded_one():
    model = default_model()
    assert (model.name, model.vocab_size, model.d_model, model.max_positions) == (
        "posenc-base",
        32000,
        512,
        2048,
    )
    assert (model.positional, model.scale, model.pad_token_id) == ("learned", False, 0)
    assert model.source == "built-in (seeded: torch.manual_seed(0/1); nn.Embedding)"
    assert model.token_table.shape == (32000, 512)
    assert model.position_table is not None
    assert model.position_table.shape == (2048, 512)
    assert model.token_table.dtype == model.position_table.dtype == torch.float32
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        wte = nn.Embedding(32000, 512).weight.detach()
        torch.manual_seed(1)
        wpe = nn.Embedding(2048, 512).weight.detach()
    assert torch.equal(model.token_table, wte)
    assert torch.equal(model.position_table, wpe)
    assert torch.equal(model.position_table, seeded_normal(2048, 512, seed=1))


def _write(path, tensors):
    save_file(tensors, str(path))
    return path


def _tables(v=30, p=10, d=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(7)
    return torch.randn(v, d, generator=g).to(dtype), torch.randn(p, d, generator=g).to(dtype)


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_gpt2_names(tmp_path, prefix):
    wte, wpe = _tables()
    path = _write(
        tmp_path / "gpt2.safetensors",
        {
            f"{prefix}wte.weight": wte,
            f"{prefix}wpe.weight": wpe,
            f"{prefix}ln_f.bias": wte[0].clone(),
        },
    )
    model = load_safetensors_model("gpt2-tiny", path)
    assert (model.name, model.vocab_size, model.d_model, model.max_positions) == (
        "gpt2-tiny",
        30,
        8,
        10,
    )
    assert (model.positional, model.scale, model.pad_token_id) == ("learned", False, None)
    assert torch.equal(model.token_table, wte)
    assert torch.equal(model.position_table, wpe)
    assert f"{prefix}wte.weight" in model.source
    assert str(path) in model.source


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_bert_names(tmp_path, prefix):
    wte, wpe = _tables(v=40, p=12, d=6)
    path = _write(
        tmp_path / "bert.safetensors",
        {
            f"{prefix}embeddings.word_embeddings.weight": wte,
            f"{prefix}embeddings.position_embeddings.weight": wpe,
            f"{prefix}embeddings.token_type_embeddings.weight": wpe[:2].clone(),
        },
    )
    model = load_safetensors_model("bert-tiny", path)
    assert (model.vocab_size, model.d_model, model.max_positions) == (40, 6, 12)
    assert (model.positional, model.scale, model.pad_token_id) == ("learned", False, 0)
    assert torch.equal(model.token_table, wte)
    assert torch.equal(model.position_table, wpe)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_tables_keep_their_stored_dtype(tmp_path, dtype):
    wte, wpe = _tables(dtype=dtype)
    path = _write(tmp_path / "m.safetensors", {"wte.weight": wte, "wpe.weight": wpe})
    model = load_safetensors_model("m", path)
    assert model.token_table.dtype == dtype
    assert model.position_table is not None
    assert model.position_table.dtype == dtype
    assert torch.equal(model.token_table, wte)


def test_unknown_names_list_the_file_and_what_was_found(tmp_path):
    # (model.embed_tokens.weight is recognised since Llama-style checkpoints load: see
    # tests/service/test_models_any_family.py.)
    path = _write(
        tmp_path / "custom.safetensors",
        {"model.tok.weight": torch.zeros(4, 2), "lm_head.weight": torch.zeros(4, 2)},
    )
    with pytest.raises(InvalidArgument) as info:
        load_safetensors_model("custom", path)
    message = str(info.value)
    assert str(path) in message
    assert "found 2 tensor(s): lm_head.weight, model.tok.weight" in message
    assert "wte.weight" in message and "model.embed_tokens.weight" in message  # what it looks for


def test_half_a_layout_is_not_enough(tmp_path):
    path = _write(tmp_path / "half.safetensors", {"wte.weight": torch.zeros(4, 2)})
    with pytest.raises(InvalidArgument, match=r"found 1 tensor\(s\): wte.weight"):
        load_safetensors_model("half", path)


def test_mismatched_widths_state_both(tmp_path):
    path = _write(
        tmp_path / "w.safetensors",
        {"wte.weight": torch.zeros(4, 8), "wpe.weight": torch.zeros(3, 6)},
    )
    with pytest.raises(
        InvalidArgument, match=r"wte\.weight has width 8 but wpe\.weight has width 6"
    ):
        load_safetensors_model("w", path)


def test_unreadable_files_name_the_path(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(InvalidArgument, match=r"missing\.safetensors"):
        load_safetensors_model("x", missing)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a safetensors file at all")
    with pytest.raises(InvalidArgument, match=r"garbage\.safetensors: cannot read"):
        load_safetensors_model("x", garbage)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_models_go_to_the_device_asked_for(tmp_path):
    wte, wpe = _tables()
    path = _write(tmp_path / "m.safetensors", {"wte.weight": wte, "wpe.weight": wpe})
    assert load_safetensors_model("m", path, device="cuda").token_table.device.type == "cuda"
    assert default_model(device="cuda").position_table.device.type == "cuda"
