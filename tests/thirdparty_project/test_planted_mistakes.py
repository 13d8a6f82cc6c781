"""The engine with a mistake planted fails, and posenc's message names the mistake.

Each mistake runs in an inner pytest session (pytester), which loads posenc's plugin from its
entry point as any run does, and must fail with the diagnosis in its message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent

INNER = """
import numpy as np
import pytest

import my_engine

Q = np.random.default_rng(1).standard_normal((64, 2, my_engine.HEAD_DIM)).astype(np.float32)


@pytest.mark.parametrize("mistake", ["wrong_base", "positions_off_by_one", "wrong_layout"])
def test_table(posenc_reference, mistake):
    cos, sin = my_engine.rope_tables(64, mistake)
    posenc_reference.assert_rope_table(cos, sin, config=my_engine.CONFIG_PATH, seq_len=64)


@pytest.mark.parametrize("mistake", ["wrong_pairing", "not_rotated"])
def test_rotation(posenc_reference, mistake):
    out = my_engine.rotate(Q, mistake)
    posenc_reference.assert_rotated(Q, out, config=my_engine.CONFIG, seq_len=64, atol=1e-5)


def test_mask(posenc_reference):
    mask = my_engine.sliding_mask(32, 8, "window_off_by_one")
    posenc_reference.assert_mask(mask, kind="sliding", window=8)
"""

MISTAKES = {
    "test_table[wrong_base]": "wrong_base",
    "test_table[positions_off_by_one]": "positions_off_by_one",
    "test_table[wrong_layout]": "wrong_layout",
    "test_rotation[wrong_pairing]": "wrong_pairing",
    "test_rotation[not_rotated]": "not_rotated",
    "test_mask": "window_off_by_one",
}


@pytest.fixture
def result(pytester: pytest.Pytester) -> pytest.RunResult:
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_inner=INNER)
    return pytester.runpytest("-p", "no:cacheprovider", "-rf")


def test_every_planted_mistake_fails_naming_its_diagnosis(result: pytest.RunResult) -> None:
    result.assert_outcomes(failed=len(MISTAKES))
    text = result.stdout.str()
    for test, mistake in MISTAKES.items():
        report = text.split(f"_ {test} _", 1)
        assert len(report) == 2, f"no failure report for {test}"
        body = report[1].split("\n___", 1)[0]
        assert "AssertionError" in body, body
        assert "diagnosis" in body and mistake in body, f"{test}: {mistake} not named\n{body}"
        assert "differs from" in body
