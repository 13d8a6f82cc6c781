"""What a config says about its tower's learned 2-D table (:mod:`posenc.vision.learned.spec`):
the table's rows and the tokens of each grid from the published sizes (ViT-Base/16 at 224:
a 14 × 14 grid and a class row, 197 rows of width 768; DeiT's class and distillation rows), the
order of merge blocks worked by hand, the axis weights of the native grid (the identity) and of
another grid (rows that sum to 1), and a table of the wrong shape refused with both shapes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.vision.learned import vision_learned_spec
from posenc.vision.learned.spec import axes, check_table


def test_vit_base_rows_and_tokens() -> None:
    spec = vision_learned_spec({"model_type": "vit"}, grid=[3, 5])
    assert (spec.width, spec.side, spec.prefix) == (768, 224 // 16, 1)
    assert spec.table_rows == 1 + 14 * 14 == 197
    assert spec.tokens_per_grid == [1 + 15] and spec.tokens == 16 and not spec.native
    native = vision_learned_spec({"model_type": "vit"})
    assert native.grids == ((14, 14),) and native.native


def test_deit_keeps_two_prefix_rows_per_grid() -> None:
    spec = vision_learned_spec({"model_type": "deit"}, grid_thw=[[1, 3, 4], [1, 20, 2]])
    assert spec.prefix == spec.kept == 2
    assert spec.tokens_per_grid == [2 + 12, 2 + 40] and spec.tokens == 56


def test_merge_blocks_order_hand_worked() -> None:
    """A 2 × 4 grid in 2 × 2 blocks: block (0, 0) is patches 0, 1, 4, 5, block (0, 1) is 2, 3,
    6, 7; without merging the order is row-major."""
    spec = vision_learned_spec({"model_type": "vit"}, grid=[2, 4])
    assert spec.order(2, 4).tolist() == list(range(8))
    merged = dataclasses.replace(spec, merge=2)
    assert merged.order(2, 4).tolist() == [0, 1, 4, 5, 2, 3, 6, 7]


def test_axis_weights_native_and_resized() -> None:
    spec = vision_learned_spec({"model_type": "vit"})
    rows, cols = axes(spec, 14, 14)
    eye = torch.eye(14, dtype=torch.float64)
    torch.testing.assert_close(rows, eye, rtol=0, atol=1e-12)
    torch.testing.assert_close(cols, eye, rtol=0, atol=1e-12)
    rows, cols = axes(spec, 3, 5)
    assert rows.shape == (3, 14) and cols.shape == (5, 14)
    torch.testing.assert_close(rows.sum(1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(cols.sum(1), torch.ones(5, dtype=torch.float64))


def test_a_table_of_the_wrong_shape_is_refused_with_both_shapes() -> None:
    spec = vision_learned_spec({"model_type": "vit"})
    check_table(spec, torch.zeros(197, 768))
    with pytest.raises(InvalidArgument) as err:
        check_table(spec, torch.zeros(196, 768))
    assert str(err.value) == (
        "the position table is (196, 768), but the config's tower needs (197, 768) "
        "(1 prefix rows + 14² patches, width 768)"
    )
    assert err.value.field == "model"
