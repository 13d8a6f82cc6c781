"""Attention masks in a caller's tests (:mod:`posenc.testing.masks`, docs/testing.md):
``assert_mask`` passes a mask as bool, bias, ``(T, S)`` and ``(B, 1, T, S)`` against the closed
form of a sliding window, and names the mistakes planted in it (a window off by one or ignored,
no causality, documents or padding ignored), for a rule or a config's layer."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch

from posenc.attention.masks import attention_mask, mask_rule
from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.testing import (
    assert_mask,
)
from tests.helpers import ROOT, failure_message, mistakes_named
from tests.references import rope_cos_sin, rope_inv_freq

GGUF = ROOT / "tests" / "fixtures" / "llamacpp" / "gguf"
QWEN = model_config("qwen2.5-7b")  # plain RoPE: base 1e6, head_dim 128, half layout
POSITIONS = [0, 1, 2, 3, 17, 100, 1000, 4095, 4096, 5000]


def _closed_form(positions: Any) -> tuple[np.ndarray, np.ndarray]:
    return rope_cos_sin(positions, rope_inv_freq(128, 1e6), "half")


def test_masks_pass_as_bool_bias_and_two_dimensional() -> None:
    m = attention_mask(mask_rule("sliding", window=4), 8)
    assert_mask(m, kind="sliding", window=4)
    assert_mask(m[0].numpy(), kind="sliding", window=4)
    assert_mask(torch.where(m, 0.0, float("-inf")), kind="sliding", window=4)
    assert_mask(m.to(torch.int64), kind="sliding", window=4)
    assert_mask(m[:, None], kind="sliding", window=4)  # transformers' (B, 1, T, S)
    # closed form: a query sees itself and the 3 keys before it
    q, k = np.arange(8)[:, None], np.arange(8)[None, :]
    assert_mask((k <= q) & (k > q - 4), kind="sliding", window=4)


@pytest.mark.parametrize(
    ("given", "fields", "mistake"),
    [
        ({"kind": "sliding", "window": 5}, {"kind": "sliding", "window": 4}, "window_off_by_one"),
        ({"kind": "sliding", "window": 3}, {"kind": "sliding", "window": 4}, "window_off_by_one"),
        ({"kind": "causal"}, {"kind": "sliding", "window": 4}, "window_ignored"),
        ({"kind": "bidirectional"}, {"kind": "causal"}, "not_causal"),
        ({"kind": "causal"}, {"kind": "causal", "cu_seqlens": [0, 3, 8]}, "documents_ignored"),
        ({"kind": "causal"}, {"kind": "causal", "attention_mask": [[0, 0, 1, 1, 1, 1, 1, 1]]}, "padding_ignored"),
    ],
)  # fmt: skip
def test_planted_mask_mistakes_are_named(given: dict, fields: dict, mistake: str) -> None:
    rule = mask_rule(given["kind"], window=given.get("window"))
    message = failure_message(assert_mask, attention_mask(rule, 8), **fields)
    assert mistakes_named(message) == {mistake}
    assert re.search(r"at \d+ of 64 entries", message)
    assert "first at [batch 0, query" in message


def test_a_configs_layer_and_vllms_mask() -> None:
    config = {
        "model_type": "gemma2", "sliding_window": 4, "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"], "hidden_size": 8,
        "num_attention_heads": 2, "head_dim": 4,
    }  # fmt: skip
    sliding = attention_mask(mask_rule("sliding", window=4), 8)
    assert_mask(sliding, config=config, layer=0)
    assert_mask(sliding, config=config, layer_type="sliding_attention")
    message = failure_message(
        assert_mask, attention_mask(mask_rule("causal"), 8), config=config, layer=0
    )
    assert "window_ignored" in mistakes_named(message)
    assert "vllm's mask of this layer: differs too" in message
    with pytest.raises(InvalidArgument, match="GGUF"):
        assert_mask(sliding, config=GGUF / "qwen2.5-7b.gguf")
