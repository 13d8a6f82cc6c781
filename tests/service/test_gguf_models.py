"""``.gguf`` files in ``POSENC_MODELS``: ``/v1/embed`` rows are the dequantized token table's
rows (gguf's own ``quants.dequantize`` output, recorded beside each fixture), ``cos``/``sin``
are llama.cpp's unscaled rope (normal mode: interleaved pairs, theta from the file) computed
here in float64, ``/v1/models`` gives the ggml type, and text is a 422 that says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from posenc.gguf_tensors import GGML_TYPES
from tests.helpers import (
    ApiClient,
    clean_env,
    json_tensor,
    make_settings,
    one_clear_line,
    run_service,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gguf"
TYPES = [name for name, _, _ in GGML_TYPES.values()]
IDS = [[0, 1, 2, 3], [3, 3, 1, 0]]


@pytest.fixture(scope="module")
def api(gpt2_file: Path) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    models = ",".join(f"g-{t.lower()}={FIXTURES / f'tiny-{t}.gguf'}" for t in TYPES)
    with TestClient(create_app(make_settings(gpt2_file, models=models))) as client:
        yield client


def test_models_list_the_ggml_type(api: httpx.Client) -> None:
    listed = {m["name"]: m for m in api.get("/v1/models").json()["models"]}
    for t in TYPES:
        m = listed[f"g-{t.lower()}"]
        assert m["dtype"] == t and m["gguf"]["tensor_type"] == t
        assert m["shape"] == [4, 256] and m["family"] == "GGUF" and m["model_type"] == "llama"
        assert m["positional"] == "rope" and m["tokenizer"] is False
        assert m["gguf"]["llamacpp_rope"]["freq_base"] == 500000.0


@pytest.mark.parametrize("type_name", TYPES)
def test_embed_rows_are_the_dequantized_rows(api: httpx.Client, type_name: str) -> None:
    r = api.post("/v1/embed", json={"input_ids": IDS, "model": f"g-{type_name.lower()}"})
    assert r.status_code == 200, r.text
    body = r.json()
    table = np.load(FIXTURES / f"tiny-{type_name}.npy")  # gguf's quants.dequantize
    got = json_tensor(body, "embeddings").astype(np.float32)
    assert np.array_equal(got.view(np.uint32), table[np.array(IDS)].view(np.uint32))
    pos = json_tensor(body, "position_ids")
    assert pos.tolist() == [[0, 1, 2, 3]] * 2
    inv = 500000.0 ** (-np.arange(0, 64, 2, dtype=np.float64) / 64)  # (32,)
    angles = np.repeat(pos[..., None] * inv, 2, axis=-1)  # interleaved pairs (B, T, 64)
    assert np.array_equal(
        json_tensor(body, "cos").astype(np.float32), np.cos(angles).astype(np.float32)
    )
    assert np.array_equal(
        json_tensor(body, "sin").astype(np.float32), np.sin(angles).astype(np.float32)
    )


def test_text_is_a_422_that_names_gguf(api: httpx.Client) -> None:
    r = api.post("/v1/embed", json={"text": ["hello"], "model": "g-q8_0"})
    assert r.status_code == 422, r.text
    assert "GGUF" in r.text and "input_ids" in r.text


def test_truncated_gguf_stops_start_up_with_one_clear_line(tmp_path: Path) -> None:

    bad = tmp_path / "cut.gguf"
    bad.write_bytes((FIXTURES / "tiny-F32.gguf").read_bytes()[:900])
    result = run_service(clean_env(POSENC_MODELS=f"cut={bad}", POSENC_DEVICE="cpu"))
    one_clear_line(result, str(bad), "truncated", "token_embd.weight", "3516 missing")
