"""GGUF bodies (``application/octet-stream``) on ``/v1/configs/positions`` and
``/v1/encodings/rope``, in process and through uvicorn.

The files are tests/fixtures/llamacpp/gguf (written by ``gguf``'s ``GGUFWriter``); the expected
tables are the same endpoint's answer for the preset with ``engine: "llama.cpp"``, whose values
tests/lib/test_llamacpp.py checks against libggml.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from posenc.readers.gguf.metadata import read_gguf_head
from tests.helpers import json_tensor

GGUF_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "gguf"
OCTET = {"Content-Type": "application/octet-stream"}


def _file(name: str) -> bytes:
    return (GGUF_DIR / name).read_bytes()


def test_positions_from_a_gguf(api: httpx.Client) -> None:
    r = api.post("/v1/configs/positions", content=_file("phi-3.5-mini.gguf"), headers=OCTET)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model_type"] == "phi3" and out["engine"] == "llama.cpp"
    rope = out["rope"]["default"]["llamacpp"]
    assert rope["mode"] == "neox" and rope["n_dims"] == 96
    short = api.post(
        "/v1/configs/positions?max_model_len=4096",
        content=_file("phi-3.5-mini.gguf"),
        headers=OCTET,
    ).json()["rope"]["default"]["llamacpp"]
    assert short["freq_factors"] != rope["freq_factors"]


@pytest.mark.parametrize("precision", ["exact", "engine"])
@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-v3", "gpt-oss-20b", "qwen2.5-7b"])
def test_rope_table_from_a_gguf_equals_the_presets(
    api: httpx.Client, name: str, precision: str
) -> None:
    positions = [0, 1, 4095, 4096, 131072]
    r = api.post(
        f"/v1/encodings/rope?positions={','.join(map(str, positions))}&precision={precision}",
        content=_file(f"{name}.gguf"),
        headers=OCTET,
    )
    assert r.status_code == 200, r.text
    want = api.post(
        "/v1/encodings/rope",
        json={
            "preset": name,
            "positions": positions,
            "engine": "llama.cpp",
            "precision": precision,
        },
    )
    assert want.status_code == 200, want.text
    np.testing.assert_array_equal(json_tensor(r.json(), "cos"), json_tensor(want.json(), "cos"))
    np.testing.assert_array_equal(json_tensor(r.json(), "sin"), json_tensor(want.json(), "sin"))
    assert r.json()["meta"]["engine"] == "llama.cpp"
    assert r.json()["meta"]["precision"] == precision


def test_rope_table_from_a_gguf_as_npy(api: httpx.Client) -> None:
    r = api.post(
        "/v1/encodings/rope?seq_len=16&format=npy&index=0",
        content=_file("qwen2.5-7b.gguf"),
        headers=OCTET,
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-npy")


@pytest.mark.parametrize("cut", [2, 30, -1])
def test_truncated_or_foreign_bodies_are_422(api: httpx.Client, cut: int) -> None:
    data = _file("llama-3.1-8b.gguf")
    kv_end = read_gguf_head(data).kv_end
    body = data[: kv_end - 1] if cut == -1 else data[:cut]
    for path in ("/v1/configs/positions", "/v1/encodings/rope?seq_len=4"):
        r = api.post(path, content=body, headers=OCTET)
        assert r.status_code == 422, r.text
        assert f"read {len(body)} bytes" in r.json()["detail"]
    r = api.post("/v1/configs/positions", content=b"\x89PNG\r\n", headers=OCTET)
    assert r.status_code == 422 and "not a GGUF file" in r.json()["detail"]


def test_gguf_body_with_another_engine_is_422(api: httpx.Client) -> None:
    r = api.post(
        "/v1/encodings/rope?seq_len=4&engine=vllm",
        content=_file("qwen2.5-7b.gguf"),
        headers=OCTET,
    )
    assert r.status_code == 422 and r.json()["field"] == "engine"
