"""Each layer's attention window as transformers applies it and as vLLM does, and where they differ.

transformers' side is :func:`posenc.attention_layers.attention_layers` (``masking_utils``: a
sliding layer of window ``W`` lets a query see itself and the ``W − 1`` keys before it).

vLLM's side, as read in vLLM's source (stored snapshots of the vLLM repository):

- ``vllm/config/model.py``, ``ModelConfig.get_sliding_window``: the model's window is the text
  config's ``sliding_window`` (the transformers config object vLLM loads, so Qwen2's is None
  unless ``use_sliding_window``); ``ModelConfig.__post_init__`` sets it to None under
  ``disable_sliding_window`` and reads ``attention_chunk_size`` from the text config as is.
- ``vllm/model_executor/layers/attention/attention.py``, ``Attention.__init__``: a layer's
  window is its ``per_layer_sliding_window``, else the model-level one (``cache_config``).
- ``vllm/v1/attention/backends/flash_attn.py``, ``FlashAttentionImpl.__init__``: a window ``W``
  becomes flash-attn's ``window_size = (W − 1, 0)`` (``(−1, −1)`` without one): the query and
  the ``W − 1`` keys before it, ``W`` keys as transformers counts them.
- ``vllm/model_executor/models/gpt_oss.py``, ``OAIAttention.__init__``: the window goes to the
  layers whose index is even (``layer_idx % 2 == 0``), as transformers' gpt-oss layer types do.
- ``vllm/model_executor/models/qwen2.py``: ``Qwen2Attention`` passes no per-layer window, so
  every layer takes the model-level one; ``Qwen2Model.__init__`` refuses (asserts) a config
  whose layers mix sliding and full attention (``max_window_layers`` below
  ``num_hidden_layers``). transformers slides only the layers ``i >= max_window_layers``, so
  with ``max_window_layers >= num_hidden_layers`` it slides none and vLLM slides them all.
- other models' vLLM code gives the per-layer window of the config's ``layer_types`` (Gemma 2's
  ``Gemma2Attention.__init__``: ``sliding_window if layer_types[i] == "sliding_attention"``).

Model types whose vLLM rule differs carry ``vllm_window_rule`` in
:mod:`posenc.hf.families`; every other type gets transformers' layer types with the config's
window. Windows are counted in keys as transformers counts them; a full (causal) layer has no
window (``None``, unbounded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.attention_layers import AttentionLayer, attention_layers
from posenc.hf.families import family

__all__ = ["compare_mask_engines", "vllm_layer_masks", "vllm_refusal"]


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else config


def _model_type(config: Mapping[str, Any]) -> str:
    value = _text(config).get("model_type") or ""
    return str(value).removesuffix("_text")


def _model_window(config: Mapping[str, Any]) -> int | None:
    """The window vLLM's ``get_sliding_window`` reads: Qwen2's only with ``use_sliding_window``."""
    c = _text(config)
    rule = family(_model_type(config)).vllm_window_rule
    if rule == "model_level" and c.get("use_sliding_window") is not True:
        return None  # transformers' Qwen2Config drops the window (vLLM loads that object)
    window = c.get("sliding_window")
    return window if isinstance(window, int) and not isinstance(window, bool) else None


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
    out = []
    for layer in layers:
        entry = _entry(layer)
        if layer.mask in ("sliding", "causal") and rule is not None:
            slides = window is not None and (rule == "model_level" or layer.index % 2 == 0)
            entry = {
                "mask": "sliding" if slides else "causal",
                "window": window if slides else None,
                "chunk_size": None,
            }
        if disable_sliding_window and entry["mask"] == "sliding":
            entry = {"mask": "causal", "window": None, "chunk_size": None}
        out.append(entry)
    return out


def _difference(index: int, tf: dict[str, Any], vl: dict[str, Any]) -> dict[str, Any]:
    """How many keys a query sees more in one engine than in the other."""
    tw, vw = tf["window"], vl["window"]
    keys: int | None
    first: int | None
    if tw is not None and vw is not None:
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
        "engines": ["transformers", "vllm"],
        "window_convention": "a window W: the query and the W - 1 keys before it",
        "layers": [
            {"index": i, "transformers": a, "vllm": b}
            for i, (a, b) in enumerate(zip(tf, vl, strict=True))
        ],
        "differences": diffs,
        "agree": not diffs,
        "vllm_refuses": None if disable_sliding_window else vllm_refusal(config),
    }
