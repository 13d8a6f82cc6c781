"""Rotated queries and keys in a caller's tests (:mod:`posenc.testing.rotations`,
docs/testing.md): transformers' own ``apply_rotary_pos_emb`` (Llama's) on the closed-form table
passes and equals ``reference_rotation``; planted mistakes (pairs taken the other way, positions
offset, no rotation) are named as ``/v1/configs/check`` names them (check_rotation)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from posenc.explain.check import check_rotation
from posenc.facts.model_configs import model_config
from posenc.testing import (
    assert_rotated,
    reference_rotation,
)
from tests.helpers import ROOT, failure_message, mistakes_named
from tests.references import rope_cos_sin, rope_inv_freq

GGUF = ROOT / "tests" / "fixtures" / "llamacpp" / "gguf"
QWEN = model_config("qwen2.5-7b")  # plain RoPE: base 1e6, head_dim 128, half layout
POSITIONS = [0, 1, 2, 3, 17, 100, 1000, 4095, 4096, 5000]


def _closed_form(positions: Any) -> tuple[np.ndarray, np.ndarray]:
    return rope_cos_sin(positions, rope_inv_freq(128, 1e6), "half")


def _hf_rotation(q: torch.Tensor, positions: list[int]) -> torch.Tensor:
    """transformers' own apply_rotary_pos_emb (Llama's) on the closed-form table, float32."""
    cos, sin = (torch.from_numpy(x).float() for x in _closed_form(positions))
    x = q.permute(1, 0, 2)[None]  # (1, H, T, D)
    out, _ = apply_rotary_pos_emb(x, x, cos[None], sin[None])
    return out[0].permute(1, 0, 2)


def test_transformers_own_rotation_passes_and_is_the_reference() -> None:
    q = torch.randn(len(POSITIONS), 4, 128, generator=torch.Generator().manual_seed(0))
    out = _hf_rotation(q, POSITIONS)
    assert_rotated(q, out, config=QWEN, positions=POSITIONS)
    message = failure_message(assert_rotated, q, out, config=QWEN)  # rows 0 … T−1: other positions
    assert "rotation differs from transformers (exact)" in message
    assert_rotated(q.numpy(), out.numpy(), config=QWEN, positions=POSITIONS, k_in=q, k_out=out)
    ref = reference_rotation(q, config=QWEN, positions=POSITIONS)
    assert ref.dtype == np.float32 and ref.shape == tuple(q.shape)
    np.testing.assert_allclose(ref, out.numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("mistake", ["wrong_pairing", "positions_offset", "not_rotated"])
def test_planted_rotation_mistakes_are_named(mistake: str) -> None:
    q = torch.randn(len(POSITIONS), 2, 128, generator=torch.Generator().manual_seed(1))
    if mistake == "wrong_pairing":  # adjacent pairs where the model rotates halves
        out = reference_rotation(q, config=QWEN, positions=POSITIONS, layout="interleaved")
    elif mistake == "positions_offset":
        out = _hf_rotation(q, [p + 7 for p in POSITIONS]).numpy()
    else:
        out = q.numpy()
    message = failure_message(assert_rotated, q, out, config=QWEN, positions=POSITIONS)
    answer = check_rotation({"config": QWEN, "positions": POSITIONS}, q, out)
    named = {d["mistake"] for d in answer["diagnosis"] if d["explains"]}
    assert mistake in named
    assert mistakes_named(message) == named
    assert "rotation differs from transformers (exact)" in message
    assert re.search(r"at q\[\d+, \d+, \d+\] \(position \d+, channel \d+\)", message)
    if mistake == "positions_offset":
        assert "positions_offset (offset 7)" in message
