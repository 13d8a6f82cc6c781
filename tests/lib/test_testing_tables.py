"""RoPE tables in a caller's tests (:mod:`posenc.testing.tables`, docs/testing.md):
``reference_table`` is the closed form of tests/references.py in float64, and ``assert_rope_table``
passes correct tables in every form (numpy, torch, ``(1, T, R)``, ``(T, R/2)``), with configs as
a dict, a config.json path, its folder and a GGUF file; mistakes planted the way a person makes
them are named exactly as ``/v1/configs/check`` names them (check_table), with where the largest
difference is and the best match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from posenc.core.errors import InvalidArgument, PosencError
from posenc.explain.check import check_table
from posenc.facts.model_configs import model_config
from posenc.testing import (
    assert_rope_table,
    reference_table,
)
from tests.helpers import ROOT, failure_message, mistakes_named
from tests.references import rope_cos_sin, rope_inv_freq

GGUF = ROOT / "tests" / "fixtures" / "llamacpp" / "gguf"
QWEN = model_config("qwen2.5-7b")  # plain RoPE: base 1e6, head_dim 128, half layout
POSITIONS = [0, 1, 2, 3, 17, 100, 1000, 4095, 4096, 5000]


def _closed_form(positions: Any) -> tuple[np.ndarray, np.ndarray]:
    return rope_cos_sin(positions, rope_inv_freq(128, 1e6), "half")


def test_reference_table_is_the_closed_form_in_float64() -> None:
    cos, sin = reference_table(config=QWEN, positions=POSITIONS)
    want_cos, want_sin = _closed_form(POSITIONS)
    assert cos.dtype == np.float64 and cos.shape == (len(POSITIONS), 128)
    np.testing.assert_allclose(cos, want_cos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sin, want_sin, rtol=0, atol=1e-12)


@pytest.mark.parametrize("form", ["numpy32", "torch32", "batched", "half_width", "float64"])
def test_correct_tables_pass_in_every_form(form: str) -> None:
    cos: Any
    sin: Any
    cos, sin = _closed_form(POSITIONS)
    if form == "numpy32":
        cos, sin = cos.astype(np.float32), sin.astype(np.float32)
    elif form == "torch32":
        cos, sin = torch.from_numpy(cos).float(), torch.from_numpy(sin).float()
    elif form == "batched":  # transformers' rotary module returns (B, T, R)
        cos, sin = torch.from_numpy(cos)[None], torch.from_numpy(sin)[None]
    elif form == "half_width":
        cos, sin = cos[:, :64], sin[:, :64]
    assert_rope_table(cos, sin, config=QWEN, positions=POSITIONS)


def test_config_as_a_path_and_as_its_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN))
    cos, sin = _closed_form(range(64))
    assert_rope_table(cos, sin, config=tmp_path / "config.json", seq_len=64)
    assert_rope_table(cos, sin, config=str(tmp_path), seq_len=64)
    assert_rope_table(cos, sin, config=QWEN)  # without positions: the rows are 0 … T−1
    message = failure_message(
        assert_rope_table, cos, sin, config=tmp_path / "config.json", seq_len=64, base=10000.0
    )
    assert "RoPE table differs from transformers (exact)" in message


@pytest.mark.parametrize(
    ("mistake", "make"),
    [
        ("wrong_base", lambda: rope_cos_sin(POSITIONS, rope_inv_freq(128, 1e4))),
        ("positions_off_by_one", lambda: _closed_form([p + 1 for p in POSITIONS])),
        ("wrong_layout", lambda: rope_cos_sin(POSITIONS, rope_inv_freq(128, 1e6), "interleaved")),
    ],
)  # fmt: skip
def test_planted_mistakes_are_named_with_where_and_the_best_match(mistake: str, make) -> None:
    cos, sin = (x.astype(np.float32) for x in make())
    message = failure_message(assert_rope_table, cos, sin, config=QWEN, positions=POSITIONS)
    answer = check_table({"config": QWEN, "positions": POSITIONS}, cos, sin)
    named = {d["mistake"] for d in answer["diagnosis"] if d["explains"]}
    assert mistake in named
    assert mistakes_named(message) == named  # the check's mistakes, and no others
    # the largest difference and where: the value, (position, channel), got and want
    want_cos, want_sin = _closed_form(POSITIONS)
    delta = np.maximum(np.abs(cos - want_cos), np.abs(sin - want_sin))
    row, channel = np.unravel_index(np.argmax(delta), delta.shape)
    assert f"by {delta.max():.3g} (atol 1e-06)" in message
    assert f"(position {POSITIONS[row]}, channel {channel})" in message
    best = answer["matches"][0]
    line = next(x for x in message.splitlines() if x.startswith("best match: "))
    assert f"{best['engine']} ({best['precision']}): max |diff|" in line
    assert ("none within 1e-06" in line) == (best["max_abs_diff"] > 1e-6)


def test_float32_angles_is_its_engine_precision() -> None:
    """transformers' own float32 arithmetic is a failure against exact within 1e-6 (at large
    positions), named float32_angles, and passes as precision "engine"."""
    fields: dict[str, Any] = {"config": QWEN, "positions": [0, 1, 70_000, 100_000]}
    cos, sin = reference_table(**fields, precision="engine")
    message = failure_message(
        assert_rope_table, cos.astype(np.float32), sin.astype(np.float32), **fields
    )
    assert "float32_angles" in mistakes_named(message)
    assert "best match: transformers (engine)" in message
    assert_rope_table(cos.astype(np.float32), sin.astype(np.float32), **fields, precision="engine", atol=0)  # fmt: skip


def test_a_correct_table_explains_nothing_and_a_foreign_one_says_so() -> None:
    rng = np.random.default_rng(0)
    cos, sin = rng.uniform(-1, 1, (4, 128)), rng.uniform(-1, 1, (4, 128))
    message = failure_message(assert_rope_table, cos, sin, config=QWEN, seq_len=4)
    assert "diagnosis (/v1/configs/check): no known mistake explains it" in message


def test_shapes_that_do_not_fit_fail_with_the_shapes() -> None:
    cos, sin = _closed_form(range(8))
    message = failure_message(assert_rope_table, cos[:, :100], sin[:, :100], config=QWEN, seq_len=8)
    assert "(8, 100)" in message and "(8, 128)" in message


def test_bad_fields_are_the_librarys_error_not_a_failure() -> None:
    cos, sin = _closed_form(range(8))
    with pytest.raises(PosencError, match="preset"):
        assert_rope_table(cos, sin, preset="no-such-model", seq_len=8)


def test_gguf_config_reads_as_llamacpp_and_as_its_config() -> None:
    """qwen2.5-7b.gguf (written with llama.cpp's converter's keys, tests/lib/test_gguf_metadata.py):
    llama.cpp's rows are the preset's llama.cpp table, the other engines the config's."""
    path = GGUF / "qwen2.5-7b.gguf"
    for engine in ("llama.cpp", "transformers", "vllm"):
        got = reference_table(config=path, positions=POSITIONS, engine=engine)
        want = reference_table(preset="qwen2.5-7b", positions=POSITIONS, engine=engine)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    cos, sin = _closed_form(POSITIONS)
    assert_rope_table(cos, sin, config=path, positions=POSITIONS, engine="llama.cpp")
    message = failure_message(
        assert_rope_table, *_closed_form([p + 1 for p in POSITIONS]), config=path,
        positions=POSITIONS, engine="llama.cpp",
    )  # fmt: skip
    assert "positions_off_by_one" in mistakes_named(message)


def test_gguf_with_frequency_factors_is_llamacpps_alone() -> None:
    path = GGUF / "llama-3.1-8b.gguf"
    got = reference_table(config=path, positions=POSITIONS, engine="llama.cpp")
    want = reference_table(preset="llama-3.1-8b", positions=POSITIONS, engine="llama.cpp")
    np.testing.assert_array_equal(got[0], want[0])
    with pytest.raises(InvalidArgument, match="rope_freqs"):
        reference_table(config=path, positions=POSITIONS)
    message = failure_message(
        assert_rope_table, got[0] * 0.5, got[1], config=path, positions=POSITIONS,
        engine="llama.cpp",
    )  # fmt: skip
    assert "diagnosis: not available" in message
