"""Each layer's window in transformers and in vLLM (issue 32), on hand-worked configs.

The expected windows are written out by hand from the rules in posenc/attention/mask_engines.py's
docstring (read in vLLM's model code) and from transformers' layer types.
"""

from __future__ import annotations

import pytest

from posenc.attention.mask_engines import compare_mask_engines, vllm_layer_masks

CAUSAL = {"mask": "causal", "window": None, "chunk_size": None}


def _sliding(w: int) -> dict[str, object]:
    return {"mask": "sliding", "window": w, "chunk_size": None}


def test_mistral_7b_v01_both_engines_slide_4096_keys_on_every_layer() -> None:
    cfg = {"model_type": "mistral", "num_hidden_layers": 4, "sliding_window": 4096,
           "head_dim": 128}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"] for x in out["layers"]] == [_sliding(4096)] * 4
    assert [x["vllm"] for x in out["layers"]] == [_sliding(4096)] * 4
    assert out["differences"] == [] and out["agree"] is True  # no difference


def test_disable_sliding_window_turns_vllm_causal_and_parts_from_position_w() -> None:
    cfg = {"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 4096,
           "head_dim": 128}  # fmt: skip
    out = compare_mask_engines(cfg, disable_sliding_window=True)
    assert [d["index"] for d in out["differences"]] == [0, 1]
    d = out["differences"][0]
    assert (d["transformers_window"], d["vllm_window"]) == (4096, None)
    assert d["keys_differ_by"] is None and d["first_position"] == 4096


def test_qwen2_use_sliding_window_false_agrees_all_causal() -> None:
    cfg = {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 4096,
           "use_sliding_window": False, "max_window_layers": 2, "head_dim": 64}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"] for x in out["layers"]] == [CAUSAL] * 4
    assert [x["vllm"] for x in out["layers"]] == [CAUSAL] * 4
    assert out["agree"] is True  # no difference


def test_qwen2_mixed_layers_transformers_slides_the_top_ones_vllm_refuses() -> None:
    cfg = {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 1024,
           "use_sliding_window": True, "max_window_layers": 2, "head_dim": 64}  # fmt: skip
    out = compare_mask_engines(cfg)
    # transformers: layers i >= max_window_layers slide
    assert [x["transformers"] for x in out["layers"]] == [CAUSAL, CAUSAL] + [_sliding(1024)] * 2
    assert "max_window_layers" in out["vllm_refuses"]


def test_qwen2_max_window_layers_all_transformers_full_vllm_slides_every_layer() -> None:
    cfg = {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 1024,
           "use_sliding_window": True, "max_window_layers": 4, "head_dim": 64}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"] for x in out["layers"]] == [CAUSAL] * 4
    assert vllm_layer_masks(cfg) == [_sliding(1024)] * 4
    assert out["vllm_refuses"] is None
    assert [d["index"] for d in out["differences"]] == [0, 1, 2, 3]
    d = out["differences"][0]
    assert (d["transformers_window"], d["vllm_window"]) == (None, 1024)
    assert d["keys_differ_by"] is None and d["first_position"] == 1024


def test_qwen2_max_window_layers_zero_both_slide_every_layer() -> None:
    cfg = {"model_type": "qwen2", "num_hidden_layers": 3, "sliding_window": 1024,
           "use_sliding_window": True, "max_window_layers": 0, "head_dim": 64}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["vllm"] for x in out["layers"]] == [_sliding(1024)] * 3
    assert out["agree"] is True and out["vllm_refuses"] is None  # no difference


def test_gemma2_alternates_in_both_engines() -> None:
    cfg = {"model_type": "gemma2", "num_hidden_layers": 4, "sliding_window": 4096,
           "head_dim": 256}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"] for x in out["layers"]] == [_sliding(4096), CAUSAL] * 2
    assert [x["vllm"] for x in out["layers"]] == [_sliding(4096), CAUSAL] * 2
    assert out["agree"] is True  # no difference


def test_gemma3_five_sliding_one_full_agree() -> None:
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window": 512,
           "sliding_window_pattern": 6, "head_dim": 256}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"] for x in out["layers"]] == [_sliding(512)] * 5 + [CAUSAL]
    assert out["agree"] is True  # no difference


def test_gpt_oss_even_layers_slide_128_in_both() -> None:
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 4, "sliding_window": 128,
           "head_dim": 64}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"] for x in out["layers"]] == [_sliding(128), CAUSAL] * 2
    assert [x["vllm"] for x in out["layers"]] == [_sliding(128), CAUSAL] * 2
    assert out["agree"] is True  # no difference


def test_llama4_chunked_8192_agree() -> None:
    cfg = {"model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": 8192,
           "no_rope_layers": [1, 1, 1, 0], "head_dim": 128}  # fmt: skip
    out = compare_mask_engines(cfg)
    tf = [x["transformers"] for x in out["layers"]]
    assert tf[0] == {"mask": "chunked", "window": None, "chunk_size": 8192}
    assert [x["vllm"] for x in out["layers"]] == tf
    assert out["agree"] is True  # no difference


def test_two_windows_differ_by_their_difference() -> None:
    from posenc.attention.mask_engines import _difference

    d = _difference(3, _sliding(4096), _sliding(4095))
    assert (d["keys_differ_by"], d["first_position"]) == (1, 4095)


@pytest.mark.parametrize("n", [1, 3])
def test_one_entry_per_layer(n: int) -> None:
    cfg = {"model_type": "llama", "num_hidden_layers": n, "head_dim": 64}
    assert len(compare_mask_engines(cfg)["layers"]) == n


@pytest.mark.parametrize("max_window_layers", [0, 2, 4, 6])
def test_qwen2_transformers_side_is_transformers_own_layer_types(max_window_layers: int) -> None:
    from transformers import Qwen2Config

    fields = {"num_hidden_layers": 4, "sliding_window": 1024, "use_sliding_window": True,
              "max_window_layers": max_window_layers}  # fmt: skip
    own = Qwen2Config(**fields).layer_types  # type: ignore[arg-type]
    out = compare_mask_engines({"model_type": "qwen2", "head_dim": 64, **fields})
    assert [x["transformers"]["mask"] for x in out["layers"]] == [
        "sliding" if t == "sliding_attention" else "causal" for t in own
    ]


@pytest.mark.parametrize("name", ["Gemma2Config", "GptOssConfig"])
def test_alternating_transformers_side_is_transformers_own_layer_types(name: str) -> None:
    import transformers

    cls = getattr(transformers, name)
    own = cls(num_hidden_layers=6, sliding_window=128).layer_types
    cfg = {"model_type": cls.model_type, "num_hidden_layers": 6, "sliding_window": 128,
           "head_dim": 64}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"]["mask"] for x in out["layers"]] == [
        "sliding" if t == "sliding_attention" else "causal" for t in own
    ]
    assert out["agree"] is True  # vLLM slides the same layers: no difference


def test_cohere2_vllm_slides_one_key_more() -> None:
    """vLLM's ``CohereAttention.__init__`` (commandr.py) passes ``sliding_window + 1`` to the
    sliding layers of ``layer_types``; transformers' Cohere 2 slides W keys."""
    cfg = {"model_type": "cohere2", "num_hidden_layers": 4, "sliding_window": 4096,
           "sliding_window_pattern": 4, "head_dim": 128}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert [x["transformers"] for x in out["layers"]] == [_sliding(4096)] * 3 + [CAUSAL]
    assert [x["vllm"] for x in out["layers"]] == [_sliding(4097)] * 3 + [CAUSAL]
    assert [d["index"] for d in out["differences"]] == [0, 1, 2]
    d = out["differences"][0]
    assert (d["keys_differ_by"], d["first_position"]) == (1, 4096)
    assert out["agree"] is False


def test_cohere2_transformers_side_is_transformers_own_layer_types() -> None:
    from transformers import Cohere2Config

    own = Cohere2Config(num_hidden_layers=8, sliding_window=64).layer_types
    cfg = {"model_type": "cohere2", "num_hidden_layers": 8, "sliding_window": 64,
           "head_dim": 64}  # fmt: skip
    vllm = vllm_layer_masks(cfg)
    assert [x["window"] for x in vllm] == [65 if t == "sliding_attention" else None for t in own]


def test_embedding_gemma_encoder_windows_agree() -> None:
    """EmbeddingGemma: transformers' config class stores W // 2 + 1, vLLM's encoder-only
    flash-attn window is (W' − 1, W' − 1) = (W // 2, W // 2): |q − k| <= W // 2 in both."""
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window": 512,
           "sliding_window_pattern": 6, "use_bidirectional_attention": True,
           "head_dim": 256}  # fmt: skip
    out = compare_mask_engines(cfg)
    bidi = {"mask": "sliding_bidirectional", "window": 256, "chunk_size": None}
    full = {"mask": "bidirectional", "window": None, "chunk_size": None}
    assert [x["vllm"] for x in out["layers"]] == [bidi] * 5 + [full]
    assert out["agree"] is True  # no difference


def test_encoder_only_window_is_one_key_narrower_each_way_in_vllm() -> None:
    """is_causal: false on a Llama with sliding layers: transformers' |q − k| <= W, vLLM's
    encoder-only (W − 1, W − 1); a query with keys on both sides sees 2 keys more."""
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "sliding_window": 8,
           "layer_types": ["sliding_attention", "full_attention"], "is_causal": False,
           "head_dim": 64}  # fmt: skip
    out = compare_mask_engines(cfg)
    assert out["layers"][0]["transformers"]["window"] == 8
    assert out["layers"][0]["vllm"] == {"mask": "sliding_bidirectional", "window": 7,
                                        "chunk_size": None}  # fmt: skip
    (d,) = out["differences"]
    assert (d["index"], d["keys_differ_by"], d["first_position"]) == (0, 2, 0)


def test_sliding_window_zero_is_no_window_in_vllm() -> None:
    """ModelConfig.__post_init__: a window of 0 means none (Qwen2 with use_sliding_window)."""
    cfg = {"model_type": "qwen2", "num_hidden_layers": 2, "sliding_window": 0,
           "use_sliding_window": True, "max_window_layers": 2, "head_dim": 64}  # fmt: skip
    assert vllm_layer_masks(cfg) == [CAUSAL] * 2


@pytest.mark.parametrize(("longest", "cap"), [(32768, 4096), (4096, None), (None, 4096)])
def test_disable_sliding_window_caps_vllm_max_model_len(
    longest: int | None, cap: int | None
) -> None:
    """_get_and_verify_max_len: under disable_sliding_window, max_model_len is capped to a
    window below the model's maximum, so no query reaches the position where masks part."""
    cfg = {"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 4096,
           "head_dim": 128}  # fmt: skip
    if longest is not None:
        cfg["max_position_embeddings"] = longest
    assert compare_mask_engines(cfg, disable_sliding_window=True)["vllm_max_model_len"] == cap
    assert compare_mask_engines(cfg)["vllm_max_model_len"] is None
