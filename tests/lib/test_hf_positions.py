"""posenc.readers.hf: reading config.json as transformers 5 reads it, without transformers.

Hand-worked cases for each rule of the module docstring (legacy spellings, per-layer types,
partial rotary, layouts, softmax scales, the other kinds), refusals that name the key, and a
hypothesis property: any JSON object is either read or refused with InvalidArgument (never
another exception). Parity with transformers' own code is in ``test_hf_rope.py``.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import MODEL_CONFIGS, model_config
from posenc.readers.hf.positions import read_positions
from posenc.readers.hf.results import rope_request_fields

LLAMA = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_hidden_layers": 2,
    "max_position_embeddings": 4096,
}


def test_library_reads_configs_without_transformers() -> None:
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from posenc.readers.hf.positions import read_positions\n"
        "from posenc.readers.presets import PRESETS\n"
        "assert read_positions({'model_type': 'llama', 'hidden_size': 64, "
        "'num_attention_heads': 4}).head_dim == 16\n"
        "assert 'fastapi' not in sys.modules and 'pydantic' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plain_llama_defaults() -> None:
    mp = read_positions(LLAMA)
    assert (mp.kind, mp.head_dim, mp.rotary_dim, mp.layout) == ("rope", 64, 64, "half")
    layer = mp.rope["full_attention"]
    assert (layer.rope_type, layer.rope_theta, layer.attention_scaling) == ("default", 1e4, 1.0)
    assert mp.layer_types == ("full_attention", "full_attention")
    assert mp.softmax_scale == 64**-0.5 and mp.per_layer_type is False


def test_rope_parameters_and_legacy_rope_scaling_agree() -> None:
    new = {**LLAMA, "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5}}
    old = {**LLAMA, "rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 4.0}}
    a, b = read_positions(new), read_positions(old)
    assert a.rope == b.rope and a.rope["full_attention"].parameters == {"factor": 4.0}
    assert a.warnings == ()
    assert any("rope_scaling" in w for w in b.warnings)
    assert any(".type: legacy" in w for w in b.warnings)


def test_yarn_factor_and_original_length_from_the_config() -> None:
    """transformers: yarn without factor uses max_position_embeddings / original; a top-level
    original_max_position_embeddings wins (Phi-3's exception)."""
    cfg = {
        **LLAMA,
        "max_position_embeddings": 32768,
        "original_max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "yarn", "original_max_position_embeddings": 8192},
    }
    layer = read_positions(cfg).rope["full_attention"]
    assert layer.parameters["original_max_position_embeddings"] == 4096
    assert layer.parameters["factor"] == 8.0
    assert layer.attention_scaling == pytest.approx(0.1 * math.log(8.0) + 1.0)


def test_dynamic_rescales_above_max_position_embeddings() -> None:
    cfg = {**LLAMA, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    f = rope_request_fields(read_positions(cfg))
    assert f["scaling"] == {
        "type": "dynamic",
        "factor": 2.0,
        "original_max_position_embeddings": 4096,
    }


def test_partial_rotary_spellings() -> None:
    neox = {**LLAMA, "model_type": "gpt_neox", "rotary_pct": 0.5, "rotary_emb_base": 20000}
    mp = read_positions(neox)
    assert mp.rotary_dim == 32 and mp.rope["full_attention"].rope_theta == 20000.0
    assert {w.split(":")[0] for w in mp.warnings} == {"rotary_pct", "rotary_emb_base"}
    assert read_positions({**LLAMA, "model_type": "gpt_neox"}).rotary_dim == 16  # default 0.25
    assert read_positions({**LLAMA, "model_type": "phi"}).rotary_dim == 32  # default 0.5
    nested = {**LLAMA, "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.25}}
    assert read_positions(nested).rotary_dim == 16
    gptj = {"model_type": "gptj", "n_embd": 512, "n_head": 4, "rotary_dim": 32}
    mp = read_positions(gptj)
    assert (mp.head_dim, mp.rotary_dim, mp.layout) == (128, 32, "interleaved")


def test_gemma3_legacy_local_base_and_per_layer_scaling() -> None:
    cfg = model_config("gemma-3-4b")
    mp = read_positions(cfg)
    assert mp.per_layer_type
    assert mp.rope["full_attention"].rope_type == "linear"
    assert mp.rope["sliding_attention"].rope_type == "default"
    assert mp.layer_types[:6] == ("sliding_attention",) * 5 + ("full_attention",)
    with pytest.raises(InvalidArgument) as exc:
        mp.rope_for(None)
    assert exc.value.field == "layer_type" and "sliding_attention" in exc.value.message
    with pytest.raises(InvalidArgument):
        read_positions(LLAMA).rope_for("sliding_attention")


def test_multimodal_text_config_and_mrope() -> None:
    cfg = {
        "model_type": "qwen2_5_vl",
        "vision_config": {"hidden_size": 1280, "num_heads": 16},
        "text_config": {
            "model_type": "qwen2_5_vl_text",
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_hidden_layers": 2,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        },
    }
    mp = read_positions(cfg)
    assert mp.model_type == "qwen2_5_vl" and mp.head_dim == 128
    assert mp.rope["full_attention"].rope_theta == 1e6  # Qwen2.5-VL's default theta
    assert mp.rope["full_attention"].rope_type == "default"
    assert mp.mrope_section == (16, 24, 24) and mp.mrope_interleaved is False
    qwen3 = {**cfg, "model_type": "qwen3_vl"}
    qwen3["text_config"] = {**cfg["text_config"], "model_type": "qwen3_vl_text"}  # type: ignore[dict-item]
    assert read_positions(qwen3).mrope_interleaved is True


def test_other_kinds() -> None:
    assert dict(read_positions(model_config("mpt-7b")).alibi) == {"num_heads": 32, "max_bias": 8.0}
    falcon = {**model_config("falcon-7b"), "alibi": True}
    assert read_positions(falcon).kind == "alibi"
    t5 = read_positions(model_config("t5-base"))
    assert dict(t5.relative) == {
        "num_buckets": 32,
        "max_distance": 128,
        "bidirectional": True,
        "num_heads": 12,
    }
    assert t5.softmax_scale == 1.0
    gpt2 = read_positions(model_config("gpt2"))
    assert gpt2.kind == "learned" and gpt2.learned["seq_len"] == 1024


@pytest.mark.parametrize(
    ("patch", "field", "says"),
    [
        ({"rope_theta": "big"}, "config.rope_theta", "finite number"),
        ({"rope_scaling": {"type": "su"}}, "config.rope_scaling.rope_type", "llama3"),
        ({"rope_scaling": {"type": "ntk"}}, "config.rope_scaling.factor", "vLLM"),
        ({"rope_scaling": {"type": "linear"}}, "config.rope_scaling.factor", "required"),
        ({"rope_scaling": [1, 2]}, "config.rope_scaling", "object"),
        ({"partial_rotary_factor": 2}, "config.rope_parameters.partial_rotary_factor", "(0, 1]"),
        ({"head_dim": 7}, "config.head_dim", "even"),
        ({"num_attention_heads": 0}, "config.num_attention_heads", ">= 1"),
        ({"layer_types": "full"}, "config.layer_types", "list of strings"),
    ],
)
def test_refusals_name_the_key(patch: dict, field: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        read_positions({**LLAMA, **patch})
    assert exc.value.field == field
    assert says in exc.value.message


def test_unknown_model_type_is_refused() -> None:
    with pytest.raises(InvalidArgument) as exc:
        read_positions({"model_type": "mystery", "hidden_size": 8})
    assert exc.value.field == "config.model_type"


@pytest.mark.parametrize("name", list(MODEL_CONFIGS))
def test_every_quoted_config_reads(name: str) -> None:
    mp = read_positions(model_config(name))
    assert mp.to_dict()["kind"] == mp.kind


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 2**20)
    | st.floats(allow_nan=True)
    | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = [
    "model_type",
    "hidden_size",
    "num_attention_heads",
    "head_dim",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "rotary_pct",
    "max_position_embeddings",
    "original_max_position_embeddings",
    "layer_types",
    "num_hidden_layers",
    "text_config",
    "attn_config",
    "alibi",
    "sliding_window",
    "rope_local_base_freq",
    "no_rope_layers",
    "qk_rope_head_dim",
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(list(MODEL_CONFIGS)),
    st.dictionaries(st.sampled_from(_KEYS), _json, max_size=4),
)
def test_any_json_is_read_or_refused_with_invalid_argument(name: str, patch: dict) -> None:
    config = {**model_config(name), **patch}
    try:
        mp = read_positions(config)
    except InvalidArgument as exc:
        assert exc.field and exc.field.startswith(("config", "layer_type"))
        return
    mp.to_dict()


def test_an_odd_head_dimension_is_blamed_on_the_keys_that_give_it():
    """hidden_size 64 / num_attention_heads 3 was blamed on partial_rotary_factor, which the
    config never set: the cause is 64 // 3 = 21, an odd head dimension."""
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 3}
    with pytest.raises(InvalidArgument, match=r"hidden_size 64 / num_attention_heads 3") as info:
        read_positions(config)
    assert info.value.field == "config.num_attention_heads"
    assert "partial_rotary_factor" not in str(info.value)
    with pytest.raises(InvalidArgument, match=r"config.head_dim is 21") as info:
        read_positions({**config, "head_dim": 21})
    assert info.value.field == "config.head_dim"
    # a factor the config does give, on an even head dimension, is still the one blamed
    with pytest.raises(InvalidArgument) as info:
        read_positions({**config, "head_dim": 20, "partial_rotary_factor": 0.05})
    assert info.value.field.endswith("partial_rotary_factor")
    # an odd int(20 x 0.15) = 3 is what transformers builds from: arange(0, 3, 2) / 3, a table
    # 4 wide (GLM-4-MoE's 21 in tests/lib/test_hf_rope.py)
    layer = read_positions({**config, "head_dim": 20, "partial_rotary_factor": 0.15}).rope
    assert (layer["full_attention"].rotary_dim, layer["full_attention"].exponent_dim) == (4, 3)


def test_language_model_under_vlm_thinker_or_decoder_config() -> None:
    """ColPali's vlm_config, Qwen2.5-Omni's thinker_config and an encoder-decoder's
    decoder_config hold the language model; their keys are read, named by their path."""
    gemma = {"model_type": "gemma", "hidden_size": 2048, "num_attention_heads": 8,
             "head_dim": 256, "rope_theta": 10000.0}  # fmt: skip
    mp = read_positions({"model_type": "colpali", "vlm_config": {"model_type": "paligemma",
                                                                 "text_config": gemma}})  # fmt: skip
    assert (mp.kind, mp.model_type, mp.head_dim) == ("rope", "colpali", 256)
    qwen = {"model_type": "qwen2_5_omni_text", "hidden_size": 3584, "num_attention_heads": 28,
            "rope_theta": 1000000.0}  # fmt: skip
    mp = read_positions({"model_type": "qwen2_5_omni",
                         "thinker_config": {"text_config": qwen}})  # fmt: skip
    assert mp.head_dim == 128 and mp.rope["full_attention"].rope_theta == 1000000.0
    with pytest.raises(InvalidArgument) as bad:
        read_positions({"model_type": "dia", "decoder_config": {"model_type": "dia_decoder",
                        "hidden_size": 2048, "num_attention_heads": 16, "rope_theta": 0.5}})  # fmt: skip
    assert bad.value.field == "config.decoder_config.rope_parameters.rope_theta"


def test_text_config_keeps_its_own_geometry_and_rope() -> None:
    """MusicFlamingo: the top-level head_dim and rope_parameters are its audio-timestamp
    rotary's; the text_config's own geometry and rope win."""
    mp = read_positions({
        "model_type": "musicflamingo", "head_dim": 1280,
        "rope_parameters": {"rope_theta": 1200.0, "partial_rotary_factor": 0.2},
        "text_config": {"model_type": "qwen2", "hidden_size": 4096, "num_attention_heads": 32,
                        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}},
    })  # fmt: skip
    layer = mp.rope["full_attention"]
    assert (layer.head_dim, layer.rotary_dim, layer.rope_theta) == (128, 128, 10000.0)


def test_per_layer_head_dim_and_kv_channels() -> None:
    """EmbeddingGemma 2's per_layer_config widens its full-attention layers; JetMoE's heads
    are kv_channels wide."""
    mp = read_positions({
        "model_type": "embedding_gemma2_text", "hidden_size": 768, "num_attention_heads": 3,
        "head_dim": 256, "layer_types": ["sliding_attention", "full_attention"],
        "per_layer_config": {"01": {"head_dim": 512}},
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                            "full_attention": {"rope_type": "default", "rope_theta": 1e6}},
    })  # fmt: skip
    assert mp.rope["full_attention"].rotary_dim == 512
    assert mp.rope["sliding_attention"].rotary_dim == 256
    jet = {"model_type": "jetmoe", "hidden_size": 2048, "num_attention_heads": 32,
           "kv_channels": 128, "rope_theta": 10000.0}  # fmt: skip
    assert read_positions(jet).head_dim == 128


def test_always_interleaved_ignores_rope_interleave() -> None:
    """DeepSeek-V3.2 always applies apply_rotary_pos_emb_interleave; DeepSeek-V3 reads the key."""
    base = {"hidden_size": 1024, "num_attention_heads": 8, "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128, "rope_interleave": False}  # fmt: skip
    mp = read_positions({"model_type": "deepseek_v32", **base})
    assert mp.layout == "interleaved" and any("rope_interleave" in w for w in mp.warnings)
    assert read_positions({"model_type": "deepseek_v3", **base}).layout == "half"


def test_mrope_section_defaults_to_the_rotary_modules() -> None:
    """A Qwen2.5-VL / Qwen3-VL config without mrope_section: their rotary modules use
    [16, 24, 24] / [24, 20, 20] (``rope_parameters.get("mrope_section", ...)``), Qwen3-VL's
    interleaved."""
    qwen = {"hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1000000.0}
    mp = read_positions({"model_type": "qwen2_5_vl", **qwen})
    assert mp.mrope_section == (16, 24, 24) and not mp.mrope_interleaved
    assert any("mrope_section" in w for w in mp.warnings)
    mp = read_positions({"model_type": "qwen3_vl", "text_config": {"model_type": "qwen3_vl_text",
                                                                   "head_dim": 128, **qwen}})  # fmt: skip
    assert mp.mrope_section == (24, 20, 20) and mp.mrope_interleaved
    assert read_positions({"model_type": "qwen2", **qwen}).mrope_section is None


def test_learned_rows_of_bart_and_roberta() -> None:
    """BART's table has max_position_embeddings + 2 rows, position p at row p + 2; RoBERTa's
    has max_position_embeddings rows, reached from pad_token_id + 1."""
    bart = read_positions({"model_type": "bart", "d_model": 1024, "encoder_attention_heads": 16,
                           "max_position_embeddings": 1024})  # fmt: skip
    assert bart.learned is not None
    assert (bart.learned["table_size"], bart.learned["first_position"]) == (1026, 2)
    assert bart.learned["usable_positions"] == 1024
    roberta = read_positions({"model_type": "roberta", "hidden_size": 768,
                              "num_attention_heads": 12, "max_position_embeddings": 514,
                              "pad_token_id": 1})  # fmt: skip
    assert roberta.learned is not None
    assert (roberta.learned["table_size"], roberta.learned["usable_positions"]) == (514, 512)
