"""``POST /v1/configs/compare?format=png``: |difference| against position, log scale, one line
per pair (:mod:`posenc.core.difference_plot`).

The PNG decodes at the documented size; each pair has its own colour, found in the picture; the
highest point of each pair's line sits where the log scale puts the pair's largest difference
from the JSON answer; a hand-made plot puts known values on known rows.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from posenc.core.difference_plot import HEIGHT, PALETTE, WIDTH, difference_png, pair_colours
from tests.helpers import make_settings

LLAMA3 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
ENGINES: list[Any] = [
    "exact",
    {"engine": "transformers", "precision": "engine"},
    {"engine": "llama.cpp", "precision": "engine"},
]


@pytest.fixture(scope="module")
def api(gpt2_file: Path) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file))) as client:
        yield client


def _plot(content: bytes) -> tuple[np.ndarray, dict[str, Any]]:
    image = Image.open(io.BytesIO(content))
    assert isinstance(image, PngImagePlugin.PngImageFile)
    assert image.format == "PNG" and image.size == (WIDTH, HEIGHT)
    return np.asarray(image.convert("RGB")), json.loads(image.text["posenc:plot"])


def _rows_of(pixels: np.ndarray, colour: list[int], box: list[int]) -> np.ndarray:
    left, top, right, bottom = box
    inside = pixels[top : bottom + 1, left + 1 : right]
    hit = np.all(inside == np.array(colour, dtype=np.uint8), axis=-1)
    return np.nonzero(hit.any(axis=1))[0] + top


def _expected_row(value: float, decades: list[int], box: list[int]) -> float:
    lo, hi = decades
    _, top, _, bottom = box
    return bottom - (math.log10(value) - lo) / (hi - lo) * (bottom - top)


def test_png_has_one_colour_per_pair_and_puts_each_maximum_on_the_log_scale(api: Any) -> None:
    body = {"config": LLAMA3, "seq_len": 20000, "engines": ENGINES}
    answer = api.post("/v1/configs/compare", json=body)
    assert answer.status_code == 200, answer.text
    r = api.post("/v1/configs/compare?format=png", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    pixels, plot = _plot(r.content)
    pairs = answer.json()["pairs"]
    assert [p["label"] for p in plot["pairs"]] == [f"{p['a']} vs {p['b']}" for p in pairs]
    colours = [tuple(p["colour"]) for p in plot["pairs"]]
    assert len(set(colours)) == len(pairs) == 3
    for drawn, pair in zip(plot["pairs"], pairs, strict=True):
        biggest = max(pair["cos"]["max_abs_diff"], pair["sin"]["max_abs_diff"])
        assert drawn["max_abs_diff"] == pytest.approx(biggest, rel=0, abs=0)
        assert biggest > 0
        rows = _rows_of(pixels, drawn["colour"], plot["box"])
        assert rows.size, f"{drawn['label']}: its colour is not in the plot"
        # the line is 2 pixels wide: its top is within 2 rows of the maximum's row
        assert abs(rows.min() - _expected_row(biggest, plot["decades"], plot["box"])) <= 2.5


def test_accept_image_png_and_other_formats(api: Any) -> None:
    body = {"config": LLAMA3, "seq_len": 64}
    r = api.post("/v1/configs/compare", json=body, headers={"accept": "image/png"})
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG\r\n\x1a\n")
    _, plot = _plot(r.content)
    assert [p["label"] for p in plot["pairs"]] == ["transformers vs vllm"]
    assert (
        api.post("/v1/configs/compare", json=body)
        .headers["content-type"]
        .startswith("application/json")
    )
    gif = api.post("/v1/configs/compare", json=body, headers={"accept": "image/gif"})
    assert gif.status_code == 406, gif.text
    npy = api.post("/v1/configs/compare?format=npy", json=body)
    assert npy.status_code == 406 and "png" in npy.json()["detail"]


def test_openapi_declares_the_png(api: Any) -> None:
    op = api.get("/openapi.json").json()["paths"]["/v1/configs/compare"]["post"]
    assert set(op["responses"]["200"]["content"]) >= {"application/json", "image/png"}
    assert "406" in op["responses"]
    assert any(p["name"] == "format" and p["in"] == "query" for p in op["parameters"])


def test_hand_made_plot_rows_and_zero_on_the_bottom_edge() -> None:
    pos = np.arange(100)
    flat = np.full(100, 1e-3)
    step = np.where(pos < 50, 1e-6, 1e-4)
    zero = np.zeros(100)
    pixels, plot = _plot(difference_png(pos, [("flat", flat), ("step", step), ("zero", zero)],
                                        title="hand"))  # fmt: skip
    assert plot["decades"] == [-6, -3] and plot["positions"] == [0, 99]
    box = plot["box"]
    for label, value in (("flat", 1e-3), ("step", 1e-4)):
        colour = next(p["colour"] for p in plot["pairs"] if p["label"] == label)
        rows = _rows_of(pixels, colour, box)
        assert abs(rows.min() - _expected_row(value, plot["decades"], box)) <= 1.5
    step_rows = _rows_of(pixels, plot["pairs"][1]["colour"], box)
    assert abs(step_rows.max() - _expected_row(1e-6, plot["decades"], box)) <= 1.5
    zero_rows = _rows_of(pixels, plot["pairs"][2]["colour"], box)
    assert zero_rows.size and abs(zero_rows.max() - box[3]) <= 1


def test_colours_stay_distinct_past_the_palette() -> None:
    assert pair_colours(3) == list(PALETTE[:3])
    many = pair_colours(28)  # 8 engines' pairs
    assert len(set(many)) == 28
