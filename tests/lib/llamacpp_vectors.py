"""The recorded libggml rotations of vectors (tests/fixtures/llamacpp/shift.json, written by
scripts/record_llamacpp_shift.py) and the tolerance they are compared with: shared by the
library's and the service's tests."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_PATH = ROOT / "tests" / "fixtures" / "llamacpp" / "shift.json"
FIXTURE = json.loads(FIXTURE_PATH.read_text()) if FIXTURE_PATH.exists() else {"cases": []}
CASES = {c["name"]: c for c in FIXTURE["cases"]}


def fixture_array(text: str, shape: list[int]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").reshape(shape).copy()


def pair_ulps(got: np.ndarray, want: np.ndarray, rope: dict) -> float:
    """The largest difference of a rotated pair's members, in float32 ulp of that pair's
    magnitude (libggml's); channels past ``n_dims`` must be equal."""
    n = int(rope["n_dims"])
    if rope["mode"] == "normal":
        first, second = slice(0, n, 2), slice(1, n, 2)
    else:
        first, second = slice(0, n // 2), slice(n // 2, n)
    magnitude = np.hypot(want[..., first], want[..., second]).astype(np.float32)
    ulp = np.spacing(magnitude)
    worst = np.maximum(
        np.abs(got[..., first] - want[..., first]), np.abs(got[..., second] - want[..., second])
    )
    assert np.array_equal(got[..., n:], want[..., n:])
    return float((worst / ulp).max())
