"""posenc's diffusion tables against diffusers' own modules, recorded for published configs.

The fixture (tests/fixtures/diffusers/tables.json) is written by
scripts/record_diffusers_tables.py in a venv with diffusers 0.42: for each case, rows of the
table diffusers' own positional module returns for a published transformer/config.json (its
``FluxPosEmbed``, ``WanRotaryPosEmbed``, ``HunyuanVideoRotaryPosEmbed``, ``QwenEmbedRope``,
``CogVideoXPipeline._prepare_rotary_positional_embeddings``, ``LTXVideoRotaryPosEmbed``,
``PatchEmbed``'s forward, ``CogVideoXPatchEmbed._get_positional_embeddings``), float32, and for
the sin-cos tables diffusers' functions on float64 coordinates. Only the recorded rows are
computed here, through the kinds' row blocks (the streaming path), so a 118,800-row HunyuanVideo
case costs a few rows.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from posenc.core.kinds import Kind
from posenc.diffusion import DIFFUSION_ROPE, SINCOS_2D, diffusion_rope_grid
from posenc.resolve import context, resolve_fields

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "diffusers" / "tables.json"


@cache
def _cases() -> list[dict[str, Any]]:
    return list(json.loads(FIXTURE.read_text())["cases"])


def _decode(text: str, dtype: str, width: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=f"<{dtype}").reshape(-1, width)


def _kind(case: dict[str, Any]) -> Kind:
    return DIFFUSION_ROPE if case["endpoint"] == "diffusion_rope" else SINCOS_2D


def _rows(
    case: dict[str, Any], name: str, rows: list[int], *, precision: str, dtype: str
) -> np.ndarray:
    """posenc's rows of one table, each filled alone by the kind's row blocks."""
    kind = _kind(case)
    params = resolve_fields(kind, {**case["request"], "precision": precision, "dtype": dtype})
    blocks = kind.blocks(params, context(params))[name]  # type: ignore[misc]
    return np.stack([blocks.fill(r, r + 1)[0].numpy() for r in rows])


def _offset(case: dict[str, Any]) -> int:
    """Where diffusers' recorded rows start in posenc's joint sequence: after the text that
    CogVideoX puts first (its pipeline's table covers the video tokens only)."""
    if case["endpoint"] == "diffusion_rope" and "CogVideoX" in case["request"]["model"]:
        return int(case["request"].get("text_len", 0))
    return 0


CASE_NAMES = [c["name"] for c in _cases()]


def _case(name: str) -> dict[str, Any]:
    return next(c for c in _cases() if c["name"] == name)


def _recorded(case: dict[str, Any], name: str, dtype: str = "f4") -> tuple[list[int], np.ndarray]:
    table = case["tables"][name]
    key = "float32" if dtype == "f4" else "float64"
    return table["rows"], _decode(table[key], dtype, table["shape"][-1])


@pytest.mark.parametrize("name", CASE_NAMES)
def test_diffusers_arithmetic_matches_the_module_within_1e_6(name: str) -> None:
    """precision=diffusers reproduces the module's float32 output (bit for bit but for
    Qwen-Image, whose torch.polar differs from torch.cos by an ulp)."""
    case = _case(name)
    for table in case["tables"]:
        rows, want = _recorded(case, table)
        got = _rows(
            case, table, [r + _offset(case) for r in rows], precision="diffusers", dtype="float32"
        )
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-6, (name, table, np.abs(got - want).max())
        if "Qwen" not in case["request"]["model"]:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "name", [n for n in CASE_NAMES if _case(n)["endpoint"] == "diffusion_rope"]
)
def test_exact_tables_are_diffusers_where_it_computes_in_float64(name: str) -> None:
    """FLUX and Wan form their angles in float64 and cast once, as posenc does: the float32
    tables are equal bit for bit. The others form positions or angles in float32: posenc's
    float64 table differs from theirs by no more than that float32 rounding, 2^-21 of the
    largest angle (measured here from posenc's own float64 angles)."""
    case = _case(name)
    params = resolve_fields(DIFFUSION_ROPE, {**case["request"], "dtype": "float64"})
    reading, grid = diffusion_rope_grid(params)
    for table in ("cos", "sin"):
        rows, want = _recorded(case, table)
        ours = [r + _offset(case) for r in rows]
        got = _rows(case, table, ours, precision="exact", dtype="float32")
        if reading.rule.precision == "float64":
            np.testing.assert_array_equal(got, want)
            continue
        ids = torch.from_numpy(_rows(case, "ids", ours, precision="exact", dtype="float64"))
        largest = float(reading.rule.angles(grid, ids).abs().max())
        bound = max(1e-6, largest * 2.0**-21)
        assert np.abs(got - want).max() <= bound, (name, np.abs(got - want).max(), bound)


@pytest.mark.parametrize("name", [n for n in CASE_NAMES if _case(n)["endpoint"] == "sincos_2d"])
def test_sincos_tables_equal_diffusers_functions_in_float64(name: str) -> None:
    """On float64 coordinates diffusers' get_2d/3d sincos functions and posenc agree to the
    last bit of float64 that the CPU's sine and cosine give: the same float64 operations, whose
    ``sin`` and ``cos`` round 1 ulp apart between AVX2 and AVX-512 kernels (the fixture holds
    one machine's values); against diffusers' float32 coordinates the float32 table stays
    within 2e-6."""
    case = _case(name)
    rows, want64 = _recorded(case, "pos_embed", "f8")
    got64 = _rows(case, "pos_embed", rows, precision="exact", dtype="float64")
    np.testing.assert_array_max_ulp(got64, want64, maxulp=1)
    _, want32 = _recorded(case, "pos_embed")
    got32 = _rows(case, "pos_embed", rows, precision="exact", dtype="float32")
    assert np.abs(got32 - want32).max() <= 2e-6


def test_flux_ids_are_the_pipelines() -> None:
    """FLUX's ids (text zeros, then (0, h, w)) equal the pipeline's, rows and all."""
    case = _case("flux small")
    rows, want = _recorded(case, "ids")
    got = _rows(case, "ids", rows, precision="exact", dtype="float32")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["hunyuan-video 720p", "cogvideox-5b base"])
def test_unrotated_text_rows_are_the_identity(name: str) -> None:
    """HunyuanVideo (text last) and CogVideoX (text first) leave their text tokens as they are:
    cos 1, sin 0, ids 0 on those rows."""
    case = _case(name)
    params = resolve_fields(DIFFUSION_ROPE, case["request"])
    reading, grid = diffusion_rope_grid(params)
    first = grid.video_tokens if reading.rule.text == "last" else 0
    text = [first, first + grid.text_len - 1]
    np.testing.assert_array_equal(_rows(case, "cos", text, precision="exact", dtype="float32"), 1.0)
    np.testing.assert_array_equal(_rows(case, "sin", text, precision="exact", dtype="float32"), 0.0)
    np.testing.assert_array_equal(_rows(case, "ids", text, precision="exact", dtype="float32"), 0.0)


def test_the_fixture_covers_every_rule_and_names_its_diffusers() -> None:
    cases = _cases()
    models = set()
    for case in cases:
        params = resolve_fields(_kind(case), case["request"])
        models.add(_kind(case).make_meta(params)["model"])
        assert case["diffusers"].startswith("0.")
    assert models == {
        "flux", "wan", "hunyuan-video", "qwen-image", "cogvideox", "ltx-video", "sd3", "pixart", "dit"
    }  # fmt: skip
