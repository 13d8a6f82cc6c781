"""Strings in posenc's source that spell a known model type but name another thing, by file.

The one list of them: ``tests/lib/test_model_type_names.py`` allows each and fails on a stale
entry; ``tests/lib/test_one_home.py`` allows them in the comparisons and tables it reads.
"""

from __future__ import annotations

_BUCKETING = "the relative endpoint's bucketing value"
_TOKENIZER = "a GGUF tokenizer.ggml.model or tokenizer.ggml.pre value"
_MROPE_RULE = "an M-RoPE position-ids rule (MRopeRule, Family.mrope_ids_rule's values)"
_VISION_FAMILY = "a vision rotary family (VisionRule.family)"

#: Strings that spell a known model type but name another thing, by file: what they name.
NOT_A_MODEL_TYPE: dict[tuple[str, str], str] = {
    ("posenc/attention/layers.py", "mamba"): "transformers' legacy layer-type name",
    ("posenc/client/methods.py", "clip"): _BUCKETING,
    ("posenc/client/methods.py", "deberta"): _BUCKETING,
    ("posenc/client/methods.py", "swin"): _BUCKETING,
    ("posenc/relative_schemes/relative.py", "clip"): _BUCKETING,
    ("posenc/relative_schemes/relative.py", "deberta"): _BUCKETING,
    ("posenc/relative_schemes/relative.py", "swin"): _BUCKETING,
    ("posenc/readers/hf/schemes.py", "deberta"): _BUCKETING,
    ("posenc/readers/hf/schemes.py", "swin"): _BUCKETING,
    ("posenc/readers/hf/positions.py", "deberta"): "a Scheme value (Family.scheme)",
    ("posenc/explain/vllm_compare.py", "deepseek"): "the prefix of vLLM's DeepSeek rope types",
    ("posenc/rope/yarn.py", "deepseek"): "the prefix of vLLM's DeepSeek rotary classes",
    ("posenc/rope_kinds/rotate.py", "gptj"): "a rotation layout's name (neox or gptj)",
    ("posenc/rope/mrope_ids.py", "qwen2_vl"): _MROPE_RULE,
    ("posenc/rope/mrope_ids.py", "qwen2_5_vl"): _MROPE_RULE,
    ("posenc/rope/mrope_ids.py", "qwen3_vl"): _MROPE_RULE,
    ("posenc/vision/rope.py", "llama4"): _VISION_FAMILY,
    ("posenc/vision/rope.py", "pixtral"): _VISION_FAMILY,
    ("posenc/readers/gguf/tokenizer.py", "phi3"): "a part of general.name llama.cpp looks for",
    **{
        ("posenc/readers/gguf/tokenizer.py", name): _TOKENIZER
        for name in (
            "llama",
            "gpt2",
            "qwen2",
            "mpt",
            "olmo",
            "falcon",
            "starcoder",
            "command-r",
            "codeshell",
            "exaone",
        )
    },
}
