"""Every quoted config says where it was checked against the published file, or says it was not."""

from __future__ import annotations

import pytest

from posenc.facts.model_configs import _UNVERIFIED, MODEL_CONFIGS, NOTES, VERIFIED_FROM
from posenc.readers.presets import PRESETS


def test_every_entry_is_either_verified_or_marked_unverified() -> None:
    unverified = {n for n, note in NOTES.items() if _UNVERIFIED in note}
    assert set(VERIFIED_FROM) | unverified == set(MODEL_CONFIGS)
    assert not set(VERIFIED_FROM) & unverified


@pytest.mark.parametrize("name", [n for n in MODEL_CONFIGS if _UNVERIFIED in NOTES.get(n, "")])
def test_an_unverified_entry_says_so_in_its_preset_source(name: str) -> None:
    assert _UNVERIFIED in PRESETS[name].source


def test_llama_2_quotes_no_rope_theta_and_gets_the_default_base() -> None:
    # meta-llama/Llama-2-7b-hf config.json (transformers 4.31.0.dev0) has no rope_theta key;
    # LlamaConfig's default 10000 applies.
    assert "rope_theta" not in MODEL_CONFIGS["llama-2-7b"][1]
    assert PRESETS["llama-2-7b"].params["base"] == 10000.0


@pytest.mark.parametrize("name", ["qwen2.5-7b", "qwen2.5-0.5b"])
def test_qwen2_5_quotes_no_rope_scaling_key(name: str) -> None:
    # the published Qwen2.5 base configs carry no rope_scaling key at all
    assert "rope_scaling" not in MODEL_CONFIGS[name][1]
    assert PRESETS[name].params["scaling"] is None


def test_gemma3_4b_quotes_the_sparse_text_config_and_reads_gemma3_defaults() -> None:
    # google/gemma-3-4b-pt's text_config gives no head counts or head_dim; Gemma3TextConfig's
    # defaults (8 heads, 4 KV heads, head_dim 256) apply, in transformers and in posenc alike.
    from transformers import Gemma3TextConfig

    from posenc.readers.hf.positions import read_positions

    text = MODEL_CONFIGS["gemma-3-4b"][1]["text_config"]
    assert not {"num_attention_heads", "num_key_value_heads", "head_dim"} & set(text)
    defaults = Gemma3TextConfig()
    mp = read_positions(MODEL_CONFIGS["gemma-3-4b"][1])
    assert mp.head_dim == defaults.head_dim == 256
    assert PRESETS["gemma-3-4b"].params["head_dim"] == defaults.head_dim


def test_olmo2_quotes_the_published_float_theta_and_no_rope_scaling() -> None:
    # allenai/OLMo-2-1124-7B config.json: "rope_theta": 500000.0 and no rope_scaling key
    config = MODEL_CONFIGS["olmo-2-7b"][1]
    assert config["rope_theta"] == 500000.0 and isinstance(config["rope_theta"], float)
    assert "rope_scaling" not in config
    assert PRESETS["olmo-2-7b"].params["base"] == 500000.0
