"""Presets: every one is accepted by its library function and agrees with transformers.

The published values are checked against the transformers classes that implement each family:
``LlamaRotaryEmbedding`` / ``MistralRotaryEmbedding`` / ``Qwen2RotaryEmbedding`` /
``GPTNeoXRotaryEmbedding`` built from the preset's config, GPT-J's
``create_sinusoidal_positions``, BLOOM's ``build_alibi_tensor``, MPT's
``build_mpt_alibi_tensor``, T5's ``T5Attention.compute_bias``, and the config classes whose
defaults are the published model (``GPT2Config`` = gpt2, ``BertConfig`` = bert-base-uncased,
``GPTNeoXConfig`` = gpt-neox-20b, ``GPTJConfig`` = gpt-j-6b, ``LlamaConfig`` = Llama-2-7b,
``MistralConfig`` = Mistral-7B-v0.1).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.absolute.learned import learned_table
from posenc.core.errors import InvalidArgument, UnknownName
from posenc.readers.presets import PRESET_FIELDS, PRESETS, Preset, get_preset
from posenc.relative_schemes.alibi import alibi_bias, alibi_slopes
from posenc.relative_schemes.relative import relative_bias, relative_bias_table, relative_buckets
from posenc.rope import RopeScaling, rope_cos_sin, rope_inv_freq
from tests.helpers import CONTRACT_PRESETS

# name -> (transformers model module, config class, rotary class, hidden_size, attention heads)
HF_ROPE = {
    "llama-2-7b": ("llama", "LlamaConfig", "LlamaRotaryEmbedding", 4096, 32),
    "llama-3.1-8b": ("llama", "LlamaConfig", "LlamaRotaryEmbedding", 4096, 32),
    "mistral-7b": ("mistral", "MistralConfig", "MistralRotaryEmbedding", 4096, 32),
    "qwen2.5-7b": ("qwen2", "Qwen2Config", "Qwen2RotaryEmbedding", 3584, 28),
    "gpt-neox-20b": ("gpt_neox", "GPTNeoXConfig", "GPTNeoXRotaryEmbedding", 6144, 64),
}


def by_kind(kind: str) -> list[str]:
    return [name for name, p in PRESETS.items() if p.kind == kind]


def scaling_of(preset: Preset) -> RopeScaling | None:
    scaling = preset.params["scaling"]
    return None if scaling is None else RopeScaling.from_dict(scaling)


def test_required_presets_exist_with_their_kinds():
    for name, kind in CONTRACT_PRESETS.items():
        assert get_preset(name).kind == kind
        assert get_preset(name).name == name


@pytest.mark.parametrize("name", list(PRESETS))
def test_params_are_exactly_the_request_fields_of_the_kind(name):
    preset = PRESETS[name]
    if preset.kind == "relative":  # each family's own fields (T5, DeBERTa, Swin)
        scheme = preset.params.get("bucketing", "log")
        want = {
            "log": {"num_buckets", "max_distance", "bidirectional", "num_heads"},
            "deberta": {"bucketing", "position_buckets", "max_position"},
            "swin": {"bucketing", "window_size"},
        }[scheme]
        assert set(preset.params) == want <= PRESET_FIELDS["relative"]
    else:
        assert set(preset.params) == PRESET_FIELDS[preset.kind]
    assert preset.source and "config" in preset.source
    as_dict = preset.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict  # JSON-ready
    assert set(as_dict) == {"name", "kind", "params", "source"}


def test_params_are_read_only_and_to_dict_is_a_copy():
    preset = get_preset("llama-3.1-8b")
    with pytest.raises(TypeError):
        preset.params["base"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        preset.params["scaling"]["factor"] = 2.0  # type: ignore[index]
    copy = preset.to_dict()
    copy["params"]["scaling"]["factor"] = 2.0
    assert get_preset("llama-3.1-8b").params["scaling"]["factor"] == 8.0


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(UnknownName, match=r"'llama-9'.*llama-2-7b.*t5-base.*bert-base") as info:
        get_preset("llama-9")
    assert info.value.field == "preset"


def test_a_preset_rejects_fields_of_another_kind():
    with pytest.raises(InvalidArgument, match=r"\['head_dim'\] are not alibi request fields"):
        Preset("x", "alibi", {"num_heads": 8, "head_dim": 64}, "nowhere config")


@pytest.mark.parametrize("name", by_kind("rope"))
def test_rope_presets_are_accepted_by_rope_cos_sin(name):
    p = PRESETS[name].params
    assert p["rotary_dim"] <= p["head_dim"]
    tables = rope_cos_sin(
        [0, 1, 4096],
        rotary_dim=p["rotary_dim"],
        base=p["base"],
        layout=p["layout"],
        scaling=scaling_of(PRESETS[name]),
    )
    assert tables.cos.shape == (3, p["rotary_dim"])
    scale = tables.attention_scaling
    # position 0 is the identity (times the attention scaling)
    assert_close(tables.cos[0], torch.full((p["rotary_dim"],), scale), rtol=0, atol=0)
    assert_close(tables.sin[0], torch.zeros(p["rotary_dim"]), rtol=0, atol=0)
    # the first frequency is 1 rad per position for every preset whose scaling keeps the
    # highest frequency (all but linear interpolation, which divides every frequency)
    scaling = p["scaling"]
    if scaling is not None and scaling["type"] in ("linear", "longrope"):
        # linear divides every frequency by the factor; longrope divides each by its own
        # long factor here, since position 4096 makes the sequence longer than 4096
        if scaling["type"] == "linear":
            first = 1.0 / scaling["factor"]
        else:
            assert scaling["original_max_position_embeddings"] <= 4096
            first = 1.0 / scaling["long_factor"][0]
        assert_close(
            tables.cos[1, 0].double(), torch.tensor(math.cos(first) * scale, dtype=torch.float64)
        )
        return
    assert_close(
        tables.cos[1, 0].double(), torch.tensor(math.cos(1.0) * scale, dtype=torch.float64)
    )


@pytest.mark.parametrize("name", list(HF_ROPE))
def test_rope_presets_match_transformers_rotary_embedding(name):
    """Build the family's transformers config from the published numbers and the preset's
    theta / scaling; its rotary embedding must give our inverse frequencies."""
    import importlib

    module, config_cls, rotary_cls, hidden, heads = HF_ROPE[name]
    preset = PRESETS[name]
    p = preset.params
    assert p["head_dim"] == hidden // heads

    rope_parameters = {"rope_type": "default", "rope_theta": p["base"]}
    if p["scaling"] is not None:
        scaling = dict(p["scaling"])
        rope_parameters = {"rope_type": scaling.pop("type"), "rope_theta": p["base"], **scaling}
    if p["rotary_dim"] != p["head_dim"]:
        rope_parameters["partial_rotary_factor"] = p["rotary_dim"] / p["head_dim"]

    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, config_cls)(
        hidden_size=hidden,
        num_attention_heads=heads,
        max_position_embeddings=131072,
        rope_parameters=rope_parameters,
    )
    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    hf = getattr(modeling, rotary_cls)(config)

    inv_freq, attention_scaling = rope_inv_freq(p["rotary_dim"], p["base"], scaling_of(preset))
    assert hf.inv_freq.shape == (p["rotary_dim"] // 2,)
    assert_close(hf.inv_freq.double(), inv_freq, rtol=1e-6, atol=0)
    assert attention_scaling == pytest.approx(hf.attention_scaling)


def test_transformers_defaults_are_the_published_models():
    transformers = pytest.importorskip("transformers")
    neox = transformers.GPTNeoXConfig()
    p = get_preset("gpt-neox-20b").params
    assert neox.hidden_size // neox.num_attention_heads == p["head_dim"] == 96
    assert neox.rope_parameters["partial_rotary_factor"] * p["head_dim"] == p["rotary_dim"] == 24
    assert neox.rope_parameters["rope_theta"] == p["base"]

    gptj = transformers.GPTJConfig()
    p = get_preset("gpt-j-6b").params
    assert (gptj.n_embd // gptj.n_head, gptj.rotary_dim) == (p["head_dim"], p["rotary_dim"])

    for config, name in [
        (transformers.LlamaConfig(), "llama-2-7b"),
        (transformers.MistralConfig(), "mistral-7b"),
    ]:
        p = get_preset(name).params
        assert config.hidden_size // config.num_attention_heads == p["head_dim"]
        assert config.rope_parameters["rope_theta"] == p["base"]

    gpt2 = transformers.GPT2Config()
    assert get_preset("gpt2").params == {
        "d_model": gpt2.n_embd,
        "seq_len": gpt2.n_positions,
        "vocab_size": gpt2.vocab_size,
    }
    bert = transformers.BertConfig()
    assert get_preset("bert-base").params == {
        "d_model": bert.hidden_size,
        "seq_len": bert.max_position_embeddings,
        "vocab_size": bert.vocab_size,
    }
    mpt = transformers.MptConfig()
    assert get_preset("mpt-7b").params["max_bias"] == mpt.attn_config.alibi_bias_max
    t5 = transformers.T5Config()
    p = get_preset("t5-base").params
    assert (t5.relative_attention_num_buckets, t5.relative_attention_max_distance) == (
        p["num_buckets"],
        p["max_distance"],
    )


def test_gpt_j_preset_matches_create_sinusoidal_positions():
    """GPT-J: ``create_sinusoidal_positions`` gives [sin | cos] of R/2 angles, and
    ``apply_rotary_pos_emb`` repeats each twice in place (our interleaved layout)."""
    from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

    p = get_preset("gpt-j-6b").params
    hf = create_sinusoidal_positions(64, p["rotary_dim"])  # (P, R)
    half = p["rotary_dim"] // 2
    ours = rope_cos_sin(seq_len=64, rotary_dim=p["rotary_dim"], base=p["base"], layout=p["layout"])
    assert_close(ours.sin, hf[:, :half].repeat_interleave(2, -1), rtol=0, atol=2e-6)
    assert_close(ours.cos, hf[:, half:].repeat_interleave(2, -1), rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", by_kind("alibi"))
def test_alibi_presets_are_accepted_and_match_bloom_and_mpt(name):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    p = PRESETS[name].params
    bias = alibi_bias(seq_len=4, **p)
    slopes = alibi_slopes(**p, dtype=torch.float64)
    # n heads, a power of two: m_h = 2^(-8(h+1)/n) (32 heads: 2^(-(h+1)/4))
    n = p["num_heads"]
    assert n & (n - 1) == 0
    expected = torch.tensor([2.0 ** (-8 * (h + 1) / n) for h in range(n)], dtype=torch.float64)
    assert_close(slopes, expected, rtol=0, atol=0)
    assert bias[0, 3, 0].item() == pytest.approx(-3 * 2 ** (-8 / n), rel=1e-7)
    assert bias[-1, 3, 1].item() == pytest.approx(-2 * 2**-8, rel=1e-7)
    assert torch.isneginf(bias[:, 0, 1]).all()

    bloom = build_alibi_tensor(torch.ones(1, 2), p["num_heads"], torch.float32)[:, 0, 1]
    assert_close(bloom.double(), slopes, rtol=1e-5, atol=0)
    mpt = build_mpt_alibi_tensor(p["num_heads"], 2, alibi_bias_max=p["max_bias"])[:, 0, 0]
    assert_close(-mpt.double(), slopes, rtol=1e-6, atol=0)


def test_t5_base_preset_matches_t5_compute_bias():
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    p = get_preset("t5-base").params
    config = T5Config(
        d_model=768,
        d_kv=64,
        num_heads=p["num_heads"],
        relative_attention_num_buckets=p["num_buckets"],
        relative_attention_max_distance=p["max_distance"],
        is_decoder=not p["bidirectional"],
    )
    attention = T5Attention(config, has_relative_attention_bias=True)
    table = relative_bias_table(p["num_buckets"], p["num_heads"], seed=0)
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(table)
    t, s = 6, 200
    expected = attention.compute_bias(t, s, past_seen_tokens=s - t)[0].detach()  # (H, T, S)
    buckets = relative_buckets(
        t,
        s,
        num_buckets=p["num_buckets"],
        max_distance=p["max_distance"],
        bidirectional=p["bidirectional"],
    )
    assert_close(relative_bias(buckets, table), expected, rtol=0, atol=0)
    assert buckets[0, 0].item() == 15  # 194 positions back: beyond max_distance, last bucket
    assert buckets[-1, -1].item() == 0


@pytest.mark.parametrize("name", by_kind("learned"))
def test_learned_presets_are_accepted_by_learned_table(name):
    p = PRESETS[name].params
    table = learned_table(p["seq_len"], p["d_model"], seed=0)
    assert table.shape == (p["seq_len"], p["d_model"])
    state = torch.get_rng_state()
    try:
        torch.manual_seed(0)
        expected = nn.Embedding(p["seq_len"], p["d_model"]).weight.detach()
    finally:
        torch.set_rng_state(state)
    assert torch.equal(table, expected)


def test_spot_values():
    assert get_preset("llama-2-7b").params["head_dim"] == 128
    assert get_preset("llama-3.1-8b").params["scaling"] == {
        "type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    assert get_preset("llama-3.1-8b").params["base"] == 500000.0
    assert get_preset("qwen2.5-7b").params["base"] == 1e6
    neox = get_preset("gpt-neox-20b").params
    assert (neox["head_dim"], neox["rotary_dim"], neox["layout"]) == (96, 24, "half")
    assert get_preset("bloom-7b1").params == {"num_heads": 32, "max_bias": 8.0}
    assert get_preset("t5-base").params["num_heads"] == 12
    assert get_preset("gpt2").params["vocab_size"] == 50257
    assert get_preset("bert-base").params["seq_len"] == 512


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
        ("Llama-3.1-8B", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("microsoft/Phi-3.5-mini-instruct", "phi-3.5-mini"),
        ("Phi-3.5-mini-instruct", "phi-3.5-mini"),
        ("google-bert/bert-base-uncased", "bert-base"),
        ("EleutherAI/gpt-neox-20b", "gpt-neox-20b"),
    ],
)
def test_a_hugging_face_repository_id_names_its_preset(alias, name):
    assert get_preset(alias) is PRESETS[name]


def test_every_preset_answers_to_its_own_repository_id():
    from posenc.facts.model_configs import MODEL_CONFIGS

    for name, (repo, _) in MODEL_CONFIGS.items():
        assert get_preset(repo).name == name
        assert get_preset(repo.upper()).name == name


@pytest.mark.parametrize(
    "asked",
    [
        "Phi-3.5-MoE-instruct",  # another Phi-3.5, with other LongRoPE factors
        "phi-3-mini-128k",  # LongRoPE, unlike phi-3-mini-4k
        "Llama-3.1-70B",
        "mistral-7b-v0.2",  # rope_theta 1e6, unlike v0.1 and v0.3's neighbours
        "qwen2.5-14b",
    ],
)
def test_a_suggestion_never_points_at_another_model(asked):
    """A name that differs from a preset by a number or a word is another model, whose tables
    may differ: no "did you mean" (Phi-3.5-mini was once offered phi-3-mini-4k)."""
    with pytest.raises(UnknownName) as info:
        get_preset(asked)
    assert info.value.suggestion is None
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    ("asked", "meant"), [("lama-3.1-8b", "llama-3.1-8b"), ("llama-3.1-8", "llama-3.1-8b")]
)
def test_a_typo_is_still_suggested(asked, meant):
    with pytest.raises(UnknownName, match=f"did you mean '{meant}'"):
        get_preset(asked)


def test_phi_3_5_mini_is_its_published_longrope_config():
    """microsoft/Phi-3.5-mini-instruct config.json: 96-wide heads (3072 / 32), rope_theta 10000,
    LongRoPE with 48 short and 48 long factors, original_max_position_embeddings 4096 of
    131072, so attention scaling sqrt(1 + ln 32 / ln 4096) (Phi3's longrope rule)."""
    params = get_preset("phi-3.5-mini").params
    assert (params["head_dim"], params["rotary_dim"], params["base"]) == (96, 96, 10000.0)
    scaling = params["scaling"]
    assert scaling["type"] == "longrope"
    assert scaling["original_max_position_embeddings"] == 4096
    assert scaling["factor"] == 32.0
    assert len(scaling["short_factor"]) == len(scaling["long_factor"]) == 48
    assert (scaling["short_factor"][0], scaling["long_factor"][-1]) == (1.0, 64.83999633789062)
    tables = rope_cos_sin(
        [0], rotary_dim=96, scaling=scaling_of(get_preset("phi-3.5-mini")), dtype=torch.float64
    )
    expected = math.sqrt(1 + math.log(32) / math.log(4096))  # 1.190
    assert_close(tables.cos[0], torch.full((96,), expected, dtype=torch.float64))
