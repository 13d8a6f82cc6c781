"""``/v1/embed`` past ``POSENC_MAX_ELEMENTS`` (API 1.3): streamed in row blocks in raw, npy and
safetensors, as the tables are, with bytes identical to the whole answer of a service whose
limit holds it. Learned, sinusoidal and RoPE models (``cos``/``sin`` too), ragged and padded
rows, explicit positions and text; a bad id is still a 422 before anything is sent, and JSON
past the limit a 413."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save_file

from service.app import create_app
from tests.helpers import ApiClient, make_settings

SMALL = 1000  # elements: every request below is over it
D = 24


@pytest.fixture(scope="module")
def rope_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rope") / "m"
    folder.mkdir()
    table = torch.randn(64, D, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    save_file({"model.embed_tokens.weight": table}, str(folder / "model.safetensors"))
    config = {
        "model_type": "llama",
        "hidden_size": D,
        "num_attention_heads": 2,
        "vocab_size": 64,
        "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
        "max_position_embeddings": 16,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def clients(gpt2_file: Path, rope_folder: Path) -> Iterator[tuple[ApiClient, ApiClient]]:
    """(streaming: a limit of SMALL elements, whole: the default limit)."""
    models = f"tiny-gpt2={gpt2_file},r={rope_folder}"
    small = make_settings(gpt2_file, models=models, max_elements=SMALL)
    whole = make_settings(gpt2_file, models=models)
    with TestClient(create_app(small)) as a, TestClient(create_app(whole)) as b:
        yield a, b


BODIES = {
    "learned-ragged": {"model": "tiny-gpt2", "input_ids": [[1, 2, 3] * 10, [4, 5] * 12, []]},
    "builtin-padded": {
        "input_ids": [[7, 0, 9] * 5, [0, 3] * 6],
        "pad_token_id": 0,
        "padding_side": "left",
        "scale": True,
    },
    "sinusoidal-positions": {
        "model": "tiny-gpt2",
        "input_ids": [[5] * 40, [6] * 40],
        "positional": "sinusoidal",
        "position_ids": [list(range(100, 140)), list(range(1000, 1040))],
    },
    "rope-dynamic": {"model": "r", "input_ids": [[1, 2, 3, 4] * 15, [9] * 60]},
    "rope-float64": {"model": "r", "input_ids": [[1, 2, 3, 4] * 15], "dtype": "float64"},
    "text": {"text": ["a few words of text " * 4, "more"]},
}


@pytest.mark.parametrize("fmt", ["raw", "npy", "safetensors"])
@pytest.mark.parametrize("case", list(BODIES))
def test_streamed_bytes_equal_the_whole_answer(
    clients: tuple[httpx.Client, httpx.Client], case: str, fmt: str
) -> None:
    streaming, whole = clients
    body = BODIES[case]
    got = streaming.post(f"/v1/embed?format={fmt}", json=body)
    want = whole.post(f"/v1/embed?format={fmt}", json=body)
    assert want.status_code == 200, want.text
    assert got.status_code == 200, got.text
    assert "stream" in got.headers["Server-Timing"]  # the streamed path, not the whole one
    assert "stream" not in want.headers["Server-Timing"]
    assert got.content == want.content
    for name in ("X-Tensor-Shape", "X-Tensor-Dtype", "Content-Type"):
        assert got.headers.get(name) == want.headers.get(name)


def test_a_bad_id_is_a_422_and_json_a_413_past_the_limit(
    clients: tuple[httpx.Client, httpx.Client],
) -> None:
    streaming, _ = clients
    body = {"model": "tiny-gpt2", "input_ids": [[1] * 100, [2] * 99 + [10_000]]}
    r = streaming.post("/v1/embed?format=raw", json=body)
    assert r.status_code == 422 and r.json()["field"] == "input_ids[1][99]"
    r = streaming.post("/v1/embed", json={"model": "tiny-gpt2", "input_ids": [[1] * 200]})
    assert r.status_code == 413 and str(SMALL) in r.json()["detail"]
