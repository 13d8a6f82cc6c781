"""``check_table`` (:mod:`posenc.explain.check`): each catalogued mistake, built here, is named.

Every mistake's table is made in this test the way a person would make it (the rope kind with
one field wrong, float32 arithmetic written out, a layout swapped), in float32 as a model
holds it, and ``check_table`` must name that mistake as explaining it (within 1e-6). The
correct tables match their engine bit for bit and explain no mistake.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.explain.check import MISTAKE_NAMES, check_table
from posenc.facts.model_configs import model_config
from posenc.readers.presets import PRESETS
from posenc.resolve import compute, resolve_fields
from posenc.rope_kinds.kind import ROPE

POSITIONS = [0, 1, 2, 3, 17, 100, 1000, 4095, 4096, 5000, 65_536, 100_000]


def _table(fields: dict, dtype: str = "float32") -> tuple[torch.Tensor, torch.Tensor]:
    out = dict(compute(ROPE, resolve_fields(ROPE, {"dtype": dtype, **fields})))
    return out["cos"], out["sin"]


def _named(result: dict) -> set[str]:
    return {d["mistake"] for d in result["diagnosis"] if d["explains"]}


def _preset(name: str, **changes: object) -> dict:
    return {**PRESETS[name].params, **changes}


def test_the_vocabulary() -> None:
    assert set(MISTAKE_NAMES) == {
        "float32_angles", "wrong_layout", "missing_attention_factor", "yarn_mscale_dropped",
        "dynamic_base_not_rescaled", "positions_off_by_one", "longrope_wrong_switch",
        "sections_misassigned", "theta_by_repeated_multiplication", "wrong_base",
        "wrong_rotary_dim",
    }  # fmt: skip


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "phi-3.5-mini", "gpt-oss-20b", "phi-2"])
def test_correct_tables_match_and_explain_nothing(preset: str) -> None:
    cos, sin = _table({"preset": preset, "positions": POSITIONS})
    result = check_table({"preset": preset, "positions": POSITIONS}, cos, sin)
    best = result["matches"][0]
    assert (best["engine"], best["precision"], best["bit_exact"]) == ("transformers", "exact", True)
    assert best["first_position"] is None
    assert _named(result) == set()


def test_transformers_own_float32_is_its_engine_precision_and_float32_angles() -> None:
    """Angles multiplied out in float32 (as transformers' module does)."""
    fields = {"preset": "llama-3.1-8b", "positions": POSITIONS}
    cos, sin = _table({**fields, "precision": "engine"})
    result = check_table(fields, cos, sin)
    best = result["matches"][0]
    assert (best["engine"], best["precision"], best["bit_exact"]) == (
        "transformers",
        "engine",
        True,
    )
    exact = next(
        m for m in result["matches"] if m["precision"] == "exact" and m["engine"] == "transformers"
    )
    assert exact["first_position"] is not None and exact["max_abs_diff"] > 1e-4
    assert "float32_angles" in _named(result)


def test_wrong_layout() -> None:
    fields = {"preset": "qwen2.5-7b", "positions": POSITIONS}
    cos, sin = _table({**fields, "layout": "interleaved"})
    assert "wrong_layout" in _named(check_table(fields, cos, sin))


def test_missing_attention_factor() -> None:
    """Phi-3.5's LongRoPE table without its sqrt(1 + ln 32 / ln 4096) factor."""
    fields = {"preset": "phi-3.5-mini", "positions": POSITIONS}
    cos, sin = _table(fields, "float64")
    scale = math.sqrt(1 + math.log(32) / math.log(4096))
    result = check_table(fields, (cos / scale).float(), (sin / scale).float())
    assert "missing_attention_factor" in _named(result)


def test_yarn_mscale_dropped() -> None:
    """gpt-oss's YaRN table without 0.1·ln(32) + 1."""
    fields = {"preset": "gpt-oss-20b", "positions": POSITIONS}
    cos, sin = _table(fields, "float64")
    scale = 0.1 * math.log(32) + 1
    result = check_table(fields, (cos / scale).float(), (sin / scale).float())
    assert "yarn_mscale_dropped" in _named(result)


def test_dynamic_base_not_rescaled() -> None:
    scaling = {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4096}
    fields = {"head_dim": 64, "base": 10000.0, "scaling": scaling, "positions": POSITIONS}
    cos, sin = _table({**fields, "scaling": None})
    assert "dynamic_base_not_rescaled" in _named(check_table(fields, cos, sin))


def test_positions_off_by_one() -> None:
    fields = {"preset": "mistral-7b", "positions": POSITIONS}
    cos, sin = _table({**fields, "positions": [p + 1 for p in POSITIONS]})
    assert "positions_off_by_one" in _named(check_table(fields, cos, sin))


def test_longrope_wrong_switch() -> None:
    """Phi-3.5 within 4,096 positions, built with the long factors (the switch tested against
    max_position_embeddings, or the cache's length)."""
    short = list(range(0, 4096, 97))
    fields = {"preset": "phi-3.5-mini", "positions": short}
    cos, sin = _table({**fields, "positions": [*short, 8000]})
    result = check_table(fields, cos[:-1], sin[:-1])
    assert "longrope_wrong_switch" in _named(result)


def test_sections_misassigned() -> None:
    """Qwen2.5-VL's three rows with Qwen3-VL's interleaved sections."""
    config = model_config("qwen2.5-vl-7b")
    g = torch.Generator().manual_seed(1)
    rows = torch.randint(0, 5000, (3, 40), generator=g).tolist()
    fields = {"config": config, "positions": rows}
    cos, sin = _table({**fields, "mrope_interleaved": True})
    assert "sections_misassigned" in _named(check_table(fields, cos, sin))


def test_theta_by_repeated_multiplication() -> None:
    """Llama 2's angles as llama.cpp advances them: theta *= 10000^(-2/128) in float32."""
    step = np.float32(10000.0 ** (-2 / 128))
    theta = np.asarray(POSITIONS, dtype=np.float32)
    half = np.empty((len(POSITIONS), 64), dtype=np.float32)
    for i in range(64):
        half[:, i] = theta
        theta = theta * step
    angles = np.concatenate([half, half], axis=1).astype(np.float64)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    result = check_table({"preset": "llama-2-7b", "positions": POSITIONS}, cos, sin)
    assert "theta_by_repeated_multiplication" in _named(result)


def test_wrong_base() -> None:
    fields = {"preset": "qwen2.5-7b", "positions": POSITIONS}
    cos, sin = _table({**fields, "base": 10000.0})
    assert "wrong_base" in _named(check_table(fields, cos, sin))


def test_wrong_rotary_dim() -> None:
    """Phi-2 rotates 32 of its 80 dims; exponents over 80 give base^(-2i/80)."""
    fields = {"preset": "phi-2", "positions": POSITIONS}
    i = torch.arange(16, dtype=torch.float64)
    inv = 10000.0 ** (-2 * i / 80)
    angles = torch.tensor(POSITIONS, dtype=torch.float64)[:, None] * inv
    cos = torch.cat([angles.cos(), angles.cos()], -1).float()
    sin = torch.cat([angles.sin(), angles.sin()], -1).float()
    assert "wrong_rotary_dim" in _named(check_table(fields, cos, sin))


def test_half_width_tables_and_llamacpp_match() -> None:
    """A (T, R/2) table is read as the frequencies' values; llama.cpp's own is matched."""
    fields = {"preset": "llama-3.1-8b", "positions": POSITIONS}
    cos, sin = _table({**fields, "engine": "llama.cpp", "precision": "engine"})
    result = check_table(fields, cos[:, 0::2], sin[:, 0::2])
    best = result["matches"][0]
    assert (best["engine"], best["precision"], best["bit_exact"]) == ("llama.cpp", "engine", True)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        check_table({"preset": "llama-2-7b", "seq_len": 4}, np.zeros((4, 7)), np.zeros((4, 7)))
    assert err.value.field == "cos" and "(4, 128) or (4, 64)" in str(err.value)
    with pytest.raises(InvalidArgument):
        check_table(
            {"preset": "llama-2-7b", "seq_len": 4, "engine": "vllm"},
            np.zeros((4, 64)),
            np.zeros((4, 64)),
        )
