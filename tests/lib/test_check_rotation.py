"""``posenc.explain.check.check_rotation``: a caller's rotated q and k against every engine, and each
planted mistake diagnosed by name.

Each mistake is planted with :func:`posenc.rope_kinds.rotate.rotate` itself on changed settings (another
layout, another rotary_dim, shifted positions, another base) or on its own output (twice), or by
hand (the last channels rotated, the scaling applied again), so what the caller did is known.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc.explain.check import ROTATION_MISTAKE_NAMES, check_rotation
from posenc.facts.model_configs import model_config
from posenc.rope_kinds.rotate import rotate

POSITIONS = [0, 1, 9, 300, 5000]


def _qk(d: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    q = torch.randn(len(POSITIONS), 3, d, generator=g).to(dtype)
    k = torch.randn(len(POSITIONS), 1, d, generator=g).to(dtype)
    return q, k


def _explained(result: dict[str, Any]) -> set[str]:
    return {d["mistake"] for d in result["diagnosis"] if d["explains"]}


def _qwen_yarn() -> dict[str, Any]:
    cfg = dict(model_config("qwen2.5-7b"))
    cfg["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    return cfg


def test_engine_precision_matches_bit_for_bit() -> None:
    req = {"preset": "llama-3.1-8b", "positions": POSITIONS}
    q, k = _qk(128, torch.float32)
    out = rotate(req, q, k, precision="engine")
    result = check_rotation(req, q, out["q"], k, out["k"])
    best = result["matches"][0]
    assert (best["engine"], best["precision"], best["bit_exact"]) == (
        "transformers",
        "engine",
        True,
    )
    assert "not_rotated" not in _explained(result)


def test_wrong_pairing_gptj_pairs_for_a_halves_model() -> None:
    req = {"config": model_config("mistral-7b"), "positions": POSITIONS}
    q, k = _qk(128)
    planted = rotate({**req, "layout": "interleaved"}, q, k)
    assert "wrong_pairing" in _explained(check_rotation(req, q, planted["q"], k, planted["k"]))


def test_rotated_twice_and_not_rotated() -> None:
    req = {"preset": "llama-3.1-8b", "positions": POSITIONS}
    q, k = _qk(128)
    once = rotate(req, q, k)
    twice = rotate(req, once["q"], once["k"])
    assert _explained(check_rotation(req, q, twice["q"], k, twice["k"])) >= {"rotated_twice"}
    assert "not_rotated" in _explained(check_rotation(req, q, q, k, k))


def test_partial_rotary_ignored_and_rotary_on_last_channels() -> None:
    """Pythia rotates 16 of its 64 channels per head (rotary_pct 0.25)."""
    req = {"config": model_config("pythia-1b"), "positions": POSITIONS}
    q, k = _qk(256)
    full = rotate({**req, "rotary_dim": 256}, q, k)
    result = check_rotation(req, q, full["q"], k, full["k"])
    assert "partial_rotary_ignored" in _explained(result)
    r = rotate(req, q)["meta"]["rotary_dim"]
    assert r < 256

    def last(x: torch.Tensor) -> torch.Tensor:  # the same rotation on the last r channels
        moved = torch.cat([x[..., -r:], x[..., :-r]], -1)
        turned = rotate(req, moved)["q"]
        return torch.cat([turned[..., r:], turned[..., :r]], -1)

    result = check_rotation(req, q, last(q), k, last(k))
    assert "rotary_on_last_channels" in _explained(result)


def test_positions_offset_gives_the_offset() -> None:
    req = {"preset": "llama-3.1-8b", "positions": POSITIONS}
    q, k = _qk(128)
    shifted = rotate({**req, "offset": 37}, q, k)
    result = check_rotation(req, q, shifted["q"], k, shifted["k"])
    entry = next(d for d in result["diagnosis"] if d["mistake"] == "positions_offset")
    assert entry["explains"] and entry["offset"] == 37


def test_attention_scaling_twice() -> None:
    req = {"config": _qwen_yarn(), "positions": POSITIONS}
    q, k = _qk(128)
    out = rotate(req, q, k)
    scale = out["meta"]["attention_scaling"]
    assert scale > 1.0
    planted = {n: out[n] * scale for n in ("q", "k")}
    result = check_rotation(req, q, planted["q"], k, planted["k"])
    assert "attention_scaling_twice" in _explained(result)


def test_table_mistakes_apply_to_rotations() -> None:
    """1.3's table mistakes, applied: the default base 10000 for Qwen2.5's 1e6, and the
    positions counted from 1; each also not explained where it was not made."""
    req = {"config": model_config("qwen2.5-7b"), "positions": POSITIONS}
    q, k = _qk(128)
    wrong = rotate({**req, "base": 10000.0}, q, k)
    result = check_rotation(req, q, wrong["q"], k, wrong["k"])
    assert "wrong_base" in _explained(result) and "positions_off_by_one" not in _explained(result)
    moved = rotate({**req, "offset": 1}, q, k)
    result = check_rotation(req, q, moved["q"], k, moved["k"])
    assert {"positions_off_by_one", "positions_offset"} <= _explained(result)


def test_correct_rotation_explains_no_rotation_mistake() -> None:
    req = {"config": model_config("deepseek-v3"), "positions": POSITIONS}
    q, k = _qk(64)
    out = rotate(req, q, k)
    result = check_rotation(req, q, out["q"], k, out["k"])
    assert not (_explained(result) & set(ROTATION_MISTAKE_NAMES))
    assert result["matches"][0]["max_abs_diff"] <= 1e-6


@pytest.mark.parametrize("field", ["engine", "precision", "dtype"])
def test_the_check_chooses_engines_itself(field: str) -> None:
    q, _k = _qk(128)
    with pytest.raises(Exception, match=field):
        check_rotation({"preset": "llama-3.1-8b", "positions": POSITIONS, field: "x"}, q, q)
