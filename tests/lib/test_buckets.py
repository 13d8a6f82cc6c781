"""NaViT's and MiniCPM-V's bucketed position ids (:mod:`posenc.vision.learned.buckets`): a grid
of ``n`` patches on an axis of a table of ``s`` rows per side lands in the buckets of the
fractions ``k / n``, hand-worked at ``s = 2`` and against ``floor(k·s / n)`` away from the
float32 ties the models' own boundaries decide."""

from __future__ import annotations

from posenc.vision.learned import position_ids, vision_learned_spec
from posenc.vision.learned.buckets import axis_buckets, nearest_axis_buckets


def test_navit_buckets_hand_worked() -> None:
    """s = 2 (boundary 0.5): 3 rows at 0, 1/3, 2/3 -> buckets 0, 0, 1; 2 columns at 0, 1/2 ->
    0, 1 (0.5 is not below the boundary: right=True); ids b_row·2 + b_col."""
    assert axis_buckets(2, 3).tolist() == [0, 0, 1]
    assert axis_buckets(2, 2).tolist() == [0, 1]
    config = {"model_type": "idefics3_vision", "image_size": 64, "patch_size": 32}
    spec = vision_learned_spec(config, grid=[3, 2])
    ids = position_ids(spec)
    assert ids is not None and ids.tolist() == [0, 1, 0, 1, 2, 3]


def test_minicpm_nearest_buckets_hand_worked() -> None:
    """s = 2: 3 rows at 0, 1/3, 2/3 -> 0, 0, 1; away from float32 ties, floor(k·s / n)."""
    assert nearest_axis_buckets(2, 3).tolist() == [0, 0, 1]
    for s in (14, 27):
        for n in (5, 13, 100):
            got = nearest_axis_buckets(s, n).tolist()
            for k in range(n):
                x = k * s / n
                if abs(x - round(x)) > 1e-4:
                    assert got[k] == int(x), (s, n, k)


def test_navit_buckets_follow_the_floor_formula_away_from_ties() -> None:
    """bucket(k / n) = floor(k·s / n) wherever k·s / n is not within float32 rounding of an
    integer (the model's float32 boundaries decide the ties)."""
    for s in (7, 27, 32):
        for n in (1, 5, 13, 64, 100):
            got = axis_buckets(s, n).tolist()
            for k in range(n):
                x = k * s / n
                if abs(x - round(x)) > 1e-4:
                    assert got[k] == int(x), (s, n, k)
