"""timm's vision rotary tables (posenc.vision.timm, ``engine: "timm"`` on vision-rope).

Default lane: posenc against the tables timm's own modules made, recorded by
``scripts/record_timm_tables.py`` into ``tests/fixtures/timm`` (EVA-02, ROPE-ViT axial and mixed,
timm's DINOv3, NaFlexViT's DINOv3 with min/max periods, the modules' defaults). timm computes
its angles in float32, so the tolerance is float32's rounding of the largest angle. Then
hand-worked cases from the formulas, row blocks, the 422s, and the endpoint's kind. Live lane:
where timm imports, the same cases and a few more straight from ``create_rope_embed``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.core.blocks import TableBlocks
from posenc.core.errors import InvalidArgument
from posenc.resolve import context
from posenc.vision.rope import VISION_ROPE
from posenc.vision.timm import (
    timm_position_ids,
    timm_rope_angles,
    timm_rope_cos_sin,
    timm_rope_spec,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "timm"
MANIFEST = json.loads((FIXTURES / "cases.json").read_text())
CASES: dict[str, dict[str, Any]] = MANIFEST["cases"]


def _tables() -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(FIXTURES / "tables.safetensors"))


def _tolerance(config: dict[str, Any], grids: list[list[int]]) -> float:
    """float32 rounding of timm's angles: a few ulp of the largest angle, plus sin/cos's own."""
    spec = timm_rope_spec(config, grids)
    biggest = float(timm_rope_angles(spec).abs().max())
    return 8 * biggest * 2.0**-24 + 1e-6


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_equals_timm(name: str) -> None:
    """Each recorded case: posenc's cos and sin equal timm's ``get_embed`` to float32's angle
    rounding, in the same row order and layout."""
    case = CASES[name]
    tables = _tables()
    spec = timm_rope_spec(case["config"], case["grid_thw"])
    cos, sin = timm_rope_cos_sin(spec)
    atol = _tolerance(case["config"], case["grid_thw"])
    torch.testing.assert_close(cos, tables[f"{name}/cos"], rtol=0, atol=atol)
    torch.testing.assert_close(sin, tables[f"{name}/sin"], rtol=0, atol=atol)


def test_fixture_manifest_names_timm_and_every_family() -> None:
    assert MANIFEST["timm"].split(".")[0] == "1"
    types = {case["config"]["rope_type"] for case in CASES.values()}
    assert types == {"base", "cat", "mixed", "dinov3"}


def test_hand_worked_rope_vit_axial() -> None:
    """ROPE-ViT axial (index grid, θ 100, Dh 8: F = 2, f = (1, 0.1)), xy: x then y, each
    frequency's value twice in place (interleaved)."""
    config = {"rope_type": "cat", "dim": 16, "num_heads": 2, "in_pixels": False}
    config |= {"temperature": 100.0, "grid_indexing": "xy"}
    spec = timm_rope_spec(config, [[1, 2, 3]])
    cos, _ = timm_rope_cos_sin(spec, dtype=torch.float64)
    assert timm_position_ids(spec).tolist() == [[r, c] for r in range(2) for c in range(3)]
    y, x = 1, 2  # the last token
    expect = [math.cos(a) for a in (x, x, 0.1 * x, 0.1 * x, y, y, 0.1 * y, 0.1 * y)]
    torch.testing.assert_close(cos[5], torch.tensor(expect, dtype=torch.float64), rtol=0, atol=0)


def test_hand_worked_dinov3_and_eva_pixel_bands() -> None:
    """DINOv3 (Dh 8, θ 100: periods 1, 100^(1/2) = 10): a 1×2 grid's second patch at
    y = 0, x = 2·(1.5/2) − 1 = 0.5, rotate_half; EVA pixel bands (max_res 224, F = 2):
    π·(1, 112) over linspace(−1, 1)."""
    dino = timm_rope_spec({"rope_type": "dinov3", "dim": 8, "num_heads": 1}, [[1, 1, 2]])
    cos, _ = timm_rope_cos_sin(dino, dtype=torch.float64)
    half = [0.0, 0.0, 2 * math.pi * 0.5 / 1, 2 * math.pi * 0.5 / 10]
    expect = torch.tensor([math.cos(a) for a in half * 2], dtype=torch.float64)
    torch.testing.assert_close(cos[1], expect, rtol=0, atol=1e-15)
    eva = timm_rope_spec({"rope_type": "cat", "dim": 8, "num_heads": 1}, [[1, 1, 3]])
    _, sin = timm_rope_cos_sin(eva, dtype=torch.float64)
    bands = [math.pi, 112 * math.pi]
    pairs = [a for a in (-1.0 * bands[0], -1.0 * bands[1], 1.0 * bands[0], 1.0 * bands[1])]
    expect = torch.tensor([math.sin(a) for a in pairs for _ in (0, 1)], dtype=torch.float64)
    torch.testing.assert_close(sin[2], expect, rtol=0, atol=1e-12)


def test_mixed_rows_run_over_blocks_heads_tokens() -> None:
    """Mixed: depth 2 × 3 heads × 6 tokens rows; a head's rows are its own frequencies."""
    config = {"rope_type": "mixed", "dim": 24, "num_heads": 3, "depth": 2, "seed": 3}
    spec = timm_rope_spec(config, [[1, 2, 3]])
    assert spec.tokens == 36 and spec.layout == "interleaved"
    cos, _ = timm_rope_cos_sin(spec)
    assert torch.equal(cos[0], torch.ones(8))  # token (0, 0) of block 0 head 0: angle 0
    assert not torch.equal(cos[1], cos[7])  # token 1 of head 0 and of head 1
    ids = timm_position_ids(spec)
    assert torch.equal(ids[:6], ids[6:12]) and ids[5].tolist() == [1, 2]


def test_row_blocks_equal_the_whole_table() -> None:
    config = {"rope_type": "cat", "dim": 64, "num_heads": 2, "in_pixels": False}
    params: dict[str, Any] = {"config": config, "grid_thw": [[1, 5, 7], [1, 3, 2]]}
    params |= {"engine": "timm", "dtype": "float16", "merge_sizes": None}
    ctx = context(params)  # CPU, float16
    assert VISION_ROPE.blocks is not None and VISION_ROPE.meta is not None
    whole = VISION_ROPE.compute(params, ctx)
    blocks = VISION_ROPE.blocks(params, ctx)
    for name in ("cos", "sin", "position_ids"):
        table: TableBlocks = blocks[name]
        assert torch.equal(table.whole(max_block_bytes=7 * 64 * 2), whole[name]), name
    meta = VISION_ROPE.meta(params)
    assert meta["engine"] == "timm" and meta["reference"].endswith("RotaryEmbeddingCat")


@pytest.mark.parametrize(
    ("config", "grid", "field"),
    [
        ({"rope_type": "rope"}, [[1, 2, 2]], "config.rope_type"),
        ({"rope_type": "cat", "depth": 3}, [[1, 2, 2]], "config.depth"),
        ({"rope_type": "mixed"}, [[1, 2, 2]], "config.depth"),
        (
            {"rope_type": "mixed", "depth": 2, "rotate_half": True},
            [[1, 2, 2]],
            "config.rotate_half",
        ),
        ({"rope_type": "cat", "grid_indexing": "yx"}, [[1, 2, 2]], "config.grid_indexing"),
        ({"rope_type": "dinov3", "min_period": 1.0}, [[1, 2, 2]], "config.min_period"),
        ({"rope_type": "cat", "dim": 6, "num_heads": 2}, [[1, 2, 2]], "config.num_heads"),
        ({"rope_type": "cat"}, [[2, 2, 2]], "grid_thw"),
        ({"rope_type": "cat"}, None, "grid_thw"),
    ],
)
def test_bad_timm_configs_are_422_naming_the_key(config: dict, grid: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        timm_rope_spec(config, grid)
    assert err.value.field == field


# ---------------------------------------------------------------------------------------------
# Live: timm's own modules, where timm imports
# ---------------------------------------------------------------------------------------------


def _timm_available() -> bool:
    return importlib.util.find_spec("timm") is not None


@pytest.mark.skipif(not _timm_available(), reason="timm is not installed in this environment")
@pytest.mark.parametrize("name", sorted(CASES))
def test_live_recorded_cases_equal_timm_now(name: str) -> None:
    """The recorded tables are what this timm makes (the recorder's own code path)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from record_timm_tables import timm_tables
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    case = CASES[name]
    sin, cos = timm_tables(case["config"], case["grid_thw"])
    ours_cos, ours_sin = timm_rope_cos_sin(timm_rope_spec(case["config"], case["grid_thw"]))
    atol = _tolerance(case["config"], case["grid_thw"])
    torch.testing.assert_close(ours_cos, cos, rtol=0, atol=atol)
    torch.testing.assert_close(ours_sin, sin, rtol=0, atol=atol)


LIVE_EXTRA = [
    ({"rope_type": "cat", "dim": 1024, "num_heads": 16, "in_pixels": False}, [[1, 9, 5]]),
    (
        {"rope_type": "base", "dim": 192, "num_heads": 3, "grid_offset": 1.0, "in_pixels": False},
        [[1, 4, 4]],
    ),
    ({"rope_type": "dinov3", "dim": 768, "num_heads": 12, "normalize_coords": "max"}, [[1, 6, 9]]),
    ({"rope_type": "mixed", "dim": 384, "num_heads": 6, "depth": 4, "seed": 11}, [[1, 3, 5]]),
]


@pytest.mark.skipif(not _timm_available(), reason="timm is not installed in this environment")
@pytest.mark.parametrize(("config", "grids"), LIVE_EXTRA)
def test_live_more_configs_equal_timm(config: dict, grids: list[list[int]]) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from record_timm_tables import timm_tables
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    sin, cos = timm_tables(config, grids)
    ours_cos, ours_sin = timm_rope_cos_sin(timm_rope_spec(config, grids))
    atol = _tolerance(config, grids)
    torch.testing.assert_close(ours_cos, cos, rtol=0, atol=atol)
    torch.testing.assert_close(ours_sin, sin, rtol=0, atol=atol)
