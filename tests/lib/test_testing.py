"""``posenc.testing`` (docs/testing.md): the assertions a caller's own tests use.

Correct tables and rotations come from outside posenc where they can: the closed form of
tests/references.py (``rope_cos_sin``) and transformers' own ``apply_rotary_pos_emb``; they
pass, as numpy arrays, torch tensors, ``(1, T, R)`` and ``(T, R/2)``. Mistakes are planted the
way a person makes them (a field wrong, positions shifted, pairs taken the other way) and the
failure message must name the largest difference and where, the best match and exactly the
mistakes ``/v1/configs/check`` names (check_table / check_rotation), and no others. Configs come
as a dict, a config.json path, its folder and a GGUF file.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from posenc.attention.masks import attention_mask, mask_rule
from posenc.core.errors import InvalidArgument, PosencError
from posenc.explain.check import check_rotation, check_table
from posenc.facts.model_configs import model_config
from posenc.testing import (
    Reference,
    assert_mask,
    assert_rope_table,
    assert_rotated,
    reference_rotation,
    reference_table,
)
from tests.references import rope_cos_sin, rope_inv_freq

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / "tests" / "fixtures" / "llamacpp" / "gguf"
QWEN = model_config("qwen2.5-7b")  # plain RoPE: base 1e6, head_dim 128, half layout
POSITIONS = [0, 1, 2, 3, 17, 100, 1000, 4095, 4096, 5000]


def _closed_form(positions: Any) -> tuple[np.ndarray, np.ndarray]:
    return rope_cos_sin(positions, rope_inv_freq(128, 1e6), "half")


def _failure(call, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        call(*args, **kwargs)
    return str(info.value)


def _named_in(message: str) -> set[str]:
    line = next(x for x in message.splitlines() if x.startswith("diagnosis"))
    said = line.split(": ", 1)[1]
    if said.startswith("no known mistake"):
        return set()
    return {re.sub(r" \(.*\)$", "", m) for m in said.split(", ")}


# ------------------------------------------------------------------------------------ tables


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
    message = _failure(
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
    message = _failure(assert_rope_table, cos, sin, config=QWEN, positions=POSITIONS)
    answer = check_table({"config": QWEN, "positions": POSITIONS}, cos, sin)
    named = {d["mistake"] for d in answer["diagnosis"] if d["explains"]}
    assert mistake in named
    assert _named_in(message) == named  # the check's mistakes, and no others
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
    message = _failure(assert_rope_table, cos.astype(np.float32), sin.astype(np.float32), **fields)
    assert "float32_angles" in _named_in(message)
    assert "best match: transformers (engine)" in message
    assert_rope_table(cos.astype(np.float32), sin.astype(np.float32), **fields, precision="engine", atol=0)  # fmt: skip


def test_a_correct_table_explains_nothing_and_a_foreign_one_says_so() -> None:
    rng = np.random.default_rng(0)
    cos, sin = rng.uniform(-1, 1, (4, 128)), rng.uniform(-1, 1, (4, 128))
    message = _failure(assert_rope_table, cos, sin, config=QWEN, seq_len=4)
    assert "diagnosis (/v1/configs/check): no known mistake explains it" in message


def test_shapes_that_do_not_fit_fail_with_the_shapes() -> None:
    cos, sin = _closed_form(range(8))
    message = _failure(assert_rope_table, cos[:, :100], sin[:, :100], config=QWEN, seq_len=8)
    assert "(8, 100)" in message and "(8, 128)" in message


def test_bad_fields_are_the_librarys_error_not_a_failure() -> None:
    cos, sin = _closed_form(range(8))
    with pytest.raises(PosencError, match="preset"):
        assert_rope_table(cos, sin, preset="no-such-model", seq_len=8)


# ------------------------------------------------------------------------------------- GGUF


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
    message = _failure(
        assert_rope_table, *_closed_form([p + 1 for p in POSITIONS]), config=path,
        positions=POSITIONS, engine="llama.cpp",
    )  # fmt: skip
    assert "positions_off_by_one" in _named_in(message)


def test_gguf_with_frequency_factors_is_llamacpps_alone() -> None:
    path = GGUF / "llama-3.1-8b.gguf"
    got = reference_table(config=path, positions=POSITIONS, engine="llama.cpp")
    want = reference_table(preset="llama-3.1-8b", positions=POSITIONS, engine="llama.cpp")
    np.testing.assert_array_equal(got[0], want[0])
    with pytest.raises(InvalidArgument, match="rope_freqs"):
        reference_table(config=path, positions=POSITIONS)
    message = _failure(
        assert_rope_table, got[0] * 0.5, got[1], config=path, positions=POSITIONS,
        engine="llama.cpp",
    )  # fmt: skip
    assert "diagnosis: not available" in message


# ------------------------------------------------------------------------------------- masks


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
    message = _failure(assert_mask, attention_mask(rule, 8), **fields)
    assert _named_in(message) == {mistake}
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
    message = _failure(assert_mask, attention_mask(mask_rule("causal"), 8), config=config, layer=0)
    assert "window_ignored" in _named_in(message)
    assert "vllm's mask of this layer: differs too" in message
    with pytest.raises(InvalidArgument, match="GGUF"):
        assert_mask(sliding, config=GGUF / "qwen2.5-7b.gguf")


# --------------------------------------------------------------------------------- rotations


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
    message = _failure(assert_rotated, q, out, config=QWEN)  # rows 0 … T−1: other positions
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
    message = _failure(assert_rotated, q, out, config=QWEN, positions=POSITIONS)
    answer = check_rotation({"config": QWEN, "positions": POSITIONS}, q, out)
    named = {d["mistake"] for d in answer["diagnosis"] if d["explains"]}
    assert mistake in named
    assert _named_in(message) == named
    assert "rotation differs from transformers (exact)" in message
    assert re.search(r"at q\[\d+, \d+, \d+\] \(position \d+, channel \d+\)", message)
    if mistake == "positions_offset":
        assert "positions_offset (offset 7)" in message


# ------------------------------------------------------------------------- the package alone


def test_the_fixture_object_holds_the_functions() -> None:
    ref = Reference()
    assert ref.assert_rope_table is assert_rope_table
    assert ref.reference_rotation is reference_rotation
    assert {"assert_mask", "assert_rotated", "reference_table"} <= set(dir(ref))


def test_importing_posenc_testing_imports_no_web_framework() -> None:
    code = (
        "import sys, posenc.testing\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'starlette', 'pydantic', 'service', 'httpx', 'pytest'))\n"
        "assert not bad, bad\n"
        "import pytest_posenc\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_loading_the_plugin_imports_nothing_of_posenc() -> None:
    """pytest imports every plugin at start-up: the plugin must not import torch or posenc
    (time, and coverage that starts after plugins load)."""
    code = (
        "import sys, pytest_posenc\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('posenc', 'torch', 'numpy'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.slow
def test_the_fixture_in_a_project_without_conftest(tmp_path: Path) -> None:
    """A pytest run with the plugin (``-p pytest_posenc``, what the ``pytest11`` entry point
    loads once installed: scripts/wheel_check runs it that way) gives ``posenc_reference``
    with no conftest: a correct table passes, a shifted one fails naming the mistake."""
    (tmp_path / "test_mine.py").write_text(
        "import numpy as np\n"
        "def _table(shift):\n"
        "    inv = 1.0 / 1e6 ** (np.arange(0, 128, 2) / 128)\n"
        "    a = (np.arange(16) + shift)[:, None] * inv\n"
        "    a = np.concatenate([a, a], 1)\n"
        "    return np.cos(a).astype(np.float32), np.sin(a).astype(np.float32)\n"
        "def test_good(posenc_reference):\n"
        "    posenc_reference.assert_rope_table(*_table(0), preset='qwen2.5-7b', seq_len=16)\n"
        "def test_shifted(posenc_reference):\n"
        "    posenc_reference.assert_rope_table(*_table(1), preset='qwen2.5-7b', seq_len=16)\n"
    )
    # the entry point loads the plugin where posenc is installed (./run.sh, the wheel); a
    # checkout on PYTHONPATH alone names it with -p
    installed = any(ep.name == "posenc" for ep in importlib.metadata.entry_points(group="pytest11"))
    load = [] if installed else ["-p", "pytest_posenc"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *load, "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 1 passed" in run.stdout
    assert "diagnosis (/v1/configs/check): positions_off_by_one" in run.stdout
