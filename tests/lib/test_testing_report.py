"""The words of a failed check (:mod:`posenc.testing.report`), on arrays and check answers
written here: where the largest difference is (tensor, index, position, channel, both values),
how many values are past ``atol`` and the first row's position, NaN as infinitely far; and the
report's lines for a pass, a failure with its best match and diagnosis, and a check that could
not be given."""

from __future__ import annotations

import math

import numpy as np

from posenc.testing.report import CheckReport, largest, report_lines

POSITIONS = np.array([10, 20, 30])


def test_the_largest_difference_and_where() -> None:
    want = np.zeros((3, 4))
    cos, sin = want.copy(), want.copy()
    cos[1, 2] = 0.5  # position 20, channel 2
    sin[2, 0] = -0.25
    sin[0, 3] = 1e-9  # within atol
    b = largest([("cos", cos, want), ("sin", sin, want)], POSITIONS, atol=1e-6)
    assert (b.value, b.tensor, b.index, b.position, b.channel) == (0.5, "cos", (1, 2), 20, 2)
    assert (b.got, b.want) == (0.5, 0.0)
    assert (b.first_position, b.count, b.total) == (20, 2, 24)


def test_nan_is_infinitely_far_and_nothing_past_atol_has_no_first_row() -> None:
    want = np.zeros((3, 2))
    got = want.copy()
    got[2, 1] = math.nan
    b = largest([("q", got, want)], POSITIONS, atol=1e-6)
    assert b.value == math.inf and b.index == (2, 1) and b.first_position == 30
    same = largest([("q", want, want)], POSITIONS, atol=1e-6)
    assert (same.value, same.first_position, same.count) == (0.0, None, 0)


def _report(
    got_value: float, check: dict | None = None, unavailable: str | None = None
) -> CheckReport:
    want = np.zeros((3, 2))
    got = want.copy()
    got[0, 1] = got_value
    return CheckReport(
        "RoPE table", "transformers", "exact", 1e-6,
        largest([("cos", got, want)], POSITIONS, atol=1e-6), check, unavailable,
    )  # fmt: skip


def test_a_pass_is_one_line() -> None:
    r = _report(1e-8)
    assert r.passed and r.explained_by == []
    assert r.text() == "RoPE table matches transformers (exact) within atol 1e-06: max |diff| 1e-08"


def test_a_failure_names_the_best_match_and_the_mistakes() -> None:
    check = {
        "matches": [
            {"engine": "transformers", "precision": "float32_angles", "max_abs_diff": 2e-7,
             "first_position": None, "bit_exact": True},
            {"engine": "vllm", "precision": "engine", "max_abs_diff": 0.5, "first_position": 10},
        ],
        "diagnosis": [
            {"mistake": "positions_offset", "explains": True, "offset": 3},
            {"mistake": "wrong_base", "explains": False},
        ],
        "meta": {"not_compared": {"mlx": "not installed"}},
    }  # fmt: skip
    r = _report(0.5, check)
    assert not r.passed and r.explained_by == ["positions_offset"]
    assert report_lines(r) == [
        "RoPE table differs from transformers (exact) by 0.5 (atol 1e-06) at cos[0, 1] "
        "(position 10, channel 1): got 0.5, want 0; 1 of 6 values past atol, the first at "
        "position 10",
        "best match: transformers (float32_angles): max |diff| 2e-07, bit exact",
        "diagnosis (/v1/configs/check): positions_offset (offset 3)",
        "matches:",
        "  transformers (float32_angles): max |diff| 2e-07, bit exact",
        "  vllm (engine): max |diff| 0.5, first past 1e-6 at position 10",
        "  mlx: not compared (not installed)",
    ]


def test_no_close_match_no_mistake_and_no_check() -> None:
    check = {
        "matches": [{"engine": "vllm", "precision": "engine", "max_abs_diff": 0.5}],
        "diagnosis": [{"mistake": "wrong_base", "explains": False}],
    }
    lines = report_lines(_report(0.5, check))
    assert lines[1] == "best match: none within 1e-06; closest vllm (engine): max |diff| 0.5"
    assert lines[2] == "diagnosis (/v1/configs/check): no known mistake explains it"
    alone = report_lines(_report(0.5, None, "a GGUF with rope_freqs"))
    assert alone[1:] == ["diagnosis: not available (a GGUF with rope_freqs)"]
