"""posenc.vision.learned.row_blocks: the resized table and the resampling matrix by row blocks.

Every resizing rule, at several grids at once (non-square, smaller and larger than the table,
one patch) and several block sizes (one row, odd sizes that cut grid rows and merge blocks):

- ``precision="exact"``: the blocks are the bytes of the whole table, and the whole is the
  separable resize written independently here (``einsum`` of the per-axis weights in float64,
  as the whole-table code computed it before it had row blocks) within 1e-12 · max|T|;
- ``precision="engine"``: the blocks equal the model's own arithmetic on the whole grid
  (:func:`~posenc.vision.learned.tables.engine_table`, itself checked bit for bit against each
  tower's forward in tests/lib/test_vision_learned_tables.py): a gathering rule's blocks gather, and
  ``grid_sample`` and the gathered taps compute the block's patches alone, so for these this
  compares two computations; the others slice the whole, made once;
- the resampling matrix's blocks equal ``kron(Wh, Ww)`` in the tower's order, prefix rows
  one-hot;
- a block computes only its rows: over a large grid, no tensor made while filling a few blocks
  is larger than the block, the table or the axis weights (counted with a dispatch mode over
  every torch operation), while the whole table is 40 to 100 times larger.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from posenc.absolute.learned import seeded_normal
from posenc.vision.learned import vision_learned_spec
from posenc.vision.learned.row_blocks import (
    _rectangles,
    axis_weight_elements,
    pos_embed_blocks,
    resample_blocks,
)
from posenc.vision.learned.tables import axes, engine_table, resized_table

D = 8  # a small width: the rules do not depend on it

# One tower per rule (and per variant of it), with a small table (s = 8 patches a side).
CONFIGS: dict[str, dict[str, Any]] = {
    "vit (bicubic, class row)": {"model_type": "vit", "image_size": 64, "patch_size": 8},
    "deit (two prefix rows)": {"model_type": "deit", "image_size": 64, "patch_size": 8},
    "dinov2 registers (antialiased bicubic)": {
        "model_type": "dinov2_with_registers",
        "image_size": 64,
        "patch_size": 8,
    },
    "hy-v4-vl (scale factor, class row dropped)": {
        "model_type": "hy_v4_vl_vision",
        "max_image_size": 64,
        "patch_size": 8,
    },
    "siglip2 naflex": {"model_type": "siglip2_vision_model", "num_patches": 64},
    "cosmos3 edge (antialiased, merge blocks)": {
        "model_type": "cosmos3_edge_vision",
        "num_patches": 64,
        "spatial_merge_size": 2,
    },
    "idefics3 (navit buckets)": {
        "model_type": "idefics3_vision",
        "image_size": 64,
        "patch_size": 8,
    },
    "minicpm (nearest buckets)": {
        "model_type": "minicpm_ocr_vision",
        "image_size": 64,
        "patch_size": 8,
    },
    "sam3 (tile)": {"model_type": "sam3_vit_model", "pretrain_image_size": 64, "patch_size": 8},
    "ovis2 (fixed)": {"model_type": "ovis2_vision", "image_size": 64, "patch_size": 8},
    "glm4v (grid_sample, merge blocks)": {
        "model_type": "glm4v_vision",
        "image_size": 64,
        "patch_size": 8,
        "spatial_merge_size": 2,
    },
    "paddleocr-vl (gathered bilinear)": {
        "model_type": "paddleocr_vl_vision",
        "image_size": 64,
        "patch_size": 8,
    },
    "kimi k2.5 (embedding bag bicubic)": {"model_type": "kimi_k25_vision", "pos_emb_height": 8},
    "inkling 2 (gathered, merge blocks)": {
        "model_type": "inkling2_vision",
        "posemb_grid_size": 8,
        "spatial_merge_size": 2,
    },
    "radio (cropped)": {"model_type": "radio", "max_img_size": 64, "patch_size": 8},
}

GRIDS = [[1, 3, 5], [1, 12, 10], [1, 1, 1], [1, 9, 20]]
MERGE_GRIDS = [[1, 2, 4], [1, 12, 10], [1, 2, 2], [1, 10, 20]]
BLOCK_ROWS = (1, 7, 13, 64, 1000)


def _spec(label: str) -> Any:
    config = {**CONFIGS[label], "hidden_size": D}
    if "spatial_merge_size" in config:
        grids = MERGE_GRIDS
    elif config["model_type"] == "ovis2_vision":
        grids = [[1, 8, 8], [1, 8, 8]]
    else:
        grids = GRIDS
    return vision_learned_spec(config, grid_thw=grids)


def _einsum_whole(spec: Any, table: torch.Tensor) -> torch.Tensor:
    """``(N, D)`` float64: per grid, the kept prefix rows then ``Wh · T · Wwᵀ`` per channel
    (two einsums), reordered to the tower's order."""
    source = table.double()
    patches = source[spec.prefix :].reshape(spec.side, spec.side, -1)  # (s, s, D)
    parts = []
    for h, w in spec.grids:
        parts.append(source[: spec.kept])
        wh, ww = axes(spec, h, w)
        out = torch.einsum("yi,ijd,xj->yxd", wh, patches, ww).reshape(h * w, -1)
        parts.append(out[spec.order(h, w)])
    return torch.cat(parts)


def _all_blocks(blocks: Any, rows: int) -> torch.Tensor:
    return torch.cat(list(blocks.blocks(rows * blocks.row_elements * blocks.element_size)))


@pytest.mark.parametrize("label", sorted(CONFIGS))
def test_exact_blocks_are_the_whole_and_the_separable_resize(label: str) -> None:
    spec = _spec(label)
    table = seeded_normal(spec.table_rows, spec.width, seed=5)
    whole = resized_table(spec, table, "exact")  # float64
    want = _einsum_whole(spec, table)
    assert float((whole - want).abs().max()) <= 1e-12 * float(table.abs().max()), label
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        cast = whole.to(dtype)
        for rows in BLOCK_ROWS:
            got = _all_blocks(pos_embed_blocks(spec, table, "exact", dtype), rows)
            assert torch.equal(got, cast), (label, dtype, rows)


@pytest.mark.parametrize("label", sorted(CONFIGS))
def test_engine_blocks_are_the_models_whole_arithmetic(label: str) -> None:
    spec = _spec(label)
    table = seeded_normal(spec.table_rows, spec.width, seed=6)
    reference = engine_table(spec, table)
    calls: list[int] = []

    def whole() -> torch.Tensor:
        calls.append(1)
        return engine_table(spec, table)

    for rows in BLOCK_ROWS:
        calls.clear()
        blocks = pos_embed_blocks(spec, table, "engine", torch.float32, engine_whole=whole)
        assert torch.equal(_all_blocks(blocks, rows), reference), (label, rows)
        rule = spec.tower.rule
        by_rows = rule.position_ids is not None or rule.name == "fixed" or rule.engine_at
        assert len(calls) == (0 if by_rows else 1), label  # by rows: never the whole
    assert torch.equal(resized_table(spec, table, "engine"), reference)


@pytest.mark.parametrize("label", sorted(CONFIGS))
def test_resample_blocks_are_kron_of_the_axis_weights(label: str) -> None:
    spec = _spec(label)
    p, k = spec.prefix, spec.kept
    parts = []
    for h, w in spec.grids:
        prefix = torch.zeros(k, spec.table_rows, dtype=torch.float64)
        prefix[:, :k] = torch.eye(k, dtype=torch.float64)
        wh, ww = axes(spec, h, w)
        patches = torch.zeros(h * w, spec.table_rows, dtype=torch.float64)
        patches[:, p:] = torch.kron(wh, ww)[spec.order(h, w)]
        parts += [prefix, patches]
    want = torch.cat(parts)
    for rows in (1, 7, 64):
        assert torch.equal(_all_blocks(resample_blocks(spec), rows), want), (label, rows)
    table = seeded_normal(spec.table_rows, spec.width, seed=2).double()
    exact = resized_table(spec, table.float(), "exact")
    assert float((want @ table - exact).abs().max()) <= 1e-12 * float(table.abs().max())


def test_rectangles_hand_worked() -> None:
    """Patch tokens as rectangles of (merge-block) rows and columns, first token of each."""
    # row-major 4 wide: tokens 2..10 = the rest of row 0, row 1, the start of row 2
    assert _rectangles(1, 4, 2, 11) == [(0, 1, 2, 4, 2), (1, 2, 0, 4, 4), (2, 3, 0, 3, 8)]
    assert _rectangles(1, 4, 4, 12) == [(1, 3, 0, 4, 4)]  # two whole rows
    assert _rectangles(1, 4, 5, 7) == [(1, 2, 1, 3, 5)]  # columns 1 and 2 of row 1
    # 2 x 2 merge blocks of a grid 4 wide: 8 tokens a block row, 4 a block
    assert _rectangles(2, 4, 3, 13) == [(0, 2, 0, 2, 0)]  # cut blocks: their whole rows
    assert _rectangles(2, 4, 5, 20) == [(0, 1, 1, 2, 4), (1, 2, 0, 2, 8), (2, 3, 0, 1, 16)]


class _Largest(TorchDispatchMode):
    """The most elements of any tensor a torch operation returns while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize(
    ("label", "grid", "width"),
    [
        ("vit (bicubic, class row)", [1, 1500, 2000], D),  # wide: rows first
        ("vit (bicubic, class row)", [1, 400_000, 3], 128),  # narrow: the columns once
        ("siglip2 naflex", [1, 2000, 1500], D),
        ("glm4v (grid_sample, merge blocks)", [1, 1000, 3000], D),
        ("idefics3 (navit buckets)", [1, 1500, 2000], D),
    ],
)
def test_a_block_holds_only_its_rows(label: str, grid: list[int], width: int) -> None:
    config = {**CONFIGS[label], "hidden_size": width}
    spec = vision_learned_spec(config, grid_thw=[grid])
    table = seeded_normal(spec.table_rows, spec.width, seed=1)
    blocks = pos_embed_blocks(spec, table, "exact", torch.float32)
    block_bytes = 1 << 20
    ranges = blocks.ranges(block_bytes)
    # a block's rows, and the cut merge blocks at its two ends
    block_elements = (max(b - a for a, b in ranges) + 2 * spec.merge**2) * width
    bound = max(block_elements, spec.table_rows * width, axis_weight_elements(spec))
    whole = spec.tokens * width
    assert whole >= 40 * bound  # the old whole-table path made a tensor this large
    picked = [ranges[0], ranges[len(ranges) // 2], ranges[-1]]
    with _Largest() as mode:
        for start, stop in picked:
            blocks.fill(start, stop)
    assert mode.largest <= bound, (label, mode.largest, bound, whole)
    # the rows are the resampling matrix's rows times the table
    start, _ = picked[1]
    rows = resample_blocks(spec).fill(start, start + 5) @ table.double()
    assert float((blocks.fill(start, start + 5).double() - rows).abs().max()) <= 1e-6
