"""``engine`` on ``/v1/encodings/rope`` and ``/v1/configs/positions``, and ``/v1/configs/compare``.

The expected values are vLLM 0.32.0's own caches recorded in ``tests/fixtures/vllm/tables.json``
(see ``tests/lib/test_rope_vllm.py``), and the library's tables for the same fields.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import numpy as np
import pytest

from posenc import resolve
from posenc.rope_kinds.kind import ROPE
from tests.helpers import ApiClient, json_tensor, make_settings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "tables.json"
CASES = {c["name"]: c for c in json.loads(FIXTURE.read_text())["cases"]}
PHI_LONG = CASES["phi-3.5-mini max_model_len 131072"]


def test_rope_engine_vllm_is_vllms_cache(api: httpx.Client) -> None:
    body = {"config": PHI_LONG["config"], "seq_len": 4, "engine": "vllm", "max_model_len": 131072}
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    meta = out["meta"]
    assert meta["engine"] == "vllm"
    assert meta["max_model_len"] == 131072
    assert meta["vllm_rows"] == PHI_LONG["rows"]
    assert meta["attention_scaling"] == pytest.approx(PHI_LONG["magnitude"], rel=1e-6)
    cos = json_tensor(out, "cos")[:, :48]
    np.testing.assert_allclose(cos, np.array(PHI_LONG["cos"][:4]), atol=2e-6)
    plain = {k: v for k, v in body.items() if k not in ("engine", "max_model_len")}
    default = api.post("/v1/encodings/rope", json=plain)
    assert default.json()["meta"]["engine"] == "transformers"
    # transformers uses the short factors for 4 positions: position 1 already differs
    assert np.abs(json_tensor(default.json(), "cos")[1, :48] - cos[1]).max() > 1e-2


def test_rope_engine_vllm_get_twin_and_formats(api: httpx.Client) -> None:
    body = {"config": PHI_LONG["config"], "seq_len": 6, "engine": "vllm", "max_model_len": 131072}
    post = api.post("/v1/encodings/rope", json=body, headers={"Accept": "application/x-npy"})
    query = {**body, "config": json.dumps(body["config"])}
    get = api.get(f"/v1/encodings/rope?{urlencode(query)}", headers={"Accept": "application/x-npy"})
    assert post.status_code == get.status_code == 200, get.text
    assert post.content == get.content
    fields = resolve.resolve_fields(ROPE, body)
    whole = resolve.compute(ROPE, fields)["cos"]
    raw = api.post("/v1/encodings/rope", json=body, params={"format": "raw"})
    assert raw.content == whole.numpy().tobytes()


def test_rope_engine_vllm_refuses_positions_beyond_its_rows(api: httpx.Client) -> None:
    body = {
        "config": PHI_LONG["config"],
        "positions": [0, 4096],
        "engine": "vllm",
        "max_model_len": 4096,
    }
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 422
    assert "4096 rows" in json.dumps(r.json())


@pytest.fixture(scope="module")
def small_client(gpt2_file: Path) -> Iterator[ApiClient]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file, max_elements=4096))) as client:
        yield client


def assert_streams_its_cos(client: httpx.Client, body: dict) -> None:
    """``body`` as raw over the client's small POSENC_MAX_ELEMENTS is streamed, in the bytes of
    the library's whole cos table for the same fields."""
    r = client.post("/v1/encodings/rope", json=body, params={"format": "raw"})
    assert r.status_code == 200, r.text
    assert "stream" in r.headers["server-timing"]
    fields = resolve.resolve_fields(ROPE, body)
    assert r.content == resolve.compute(ROPE, fields)["cos"].numpy().tobytes()


def test_rope_engine_vllm_streams_the_same_bytes(small_client: httpx.Client) -> None:
    body = {
        "config": CASES["deepseek-v2-lite mscale only"]["config"],
        "seq_len": 300,
        "engine": "vllm",
    }
    assert_streams_its_cos(small_client, body)
    assert small_client.post("/v1/encodings/rope", json=body).status_code == 413


def test_config_positions_engine(api: httpx.Client) -> None:
    case = CASES["deepseek-v3 attention_factor 1.0"]
    tf = api.post("/v1/configs/positions", json={"config": case["config"]}).json()
    vl = api.post("/v1/configs/positions", json={"config": case["config"], "engine": "vllm"})
    assert vl.status_code == 200, vl.text
    vl_body = vl.json()
    assert tf["meta"] == {"engine": "transformers"}
    assert vl_body["meta"] == {"engine": "vllm", "max_model_len": 163840}
    assert vl_body["softmax_scale"] == pytest.approx(case["softmax_scale"], rel=1e-9)
    assert tf["softmax_scale"] == pytest.approx(192**-0.5 * (0.1 * math.log(40) + 1) ** 2)
    layer = vl_body["rope"]["full_attention"]
    assert layer["vllm_rope_type"] == "deepseek_llama_scaling"
    assert layer["vllm_rows"] == 163840


def test_configs_compare(api: httpx.Client) -> None:
    body = {"config": PHI_LONG["config"], "seq_len": 4096, "max_model_len": 131072}
    r = api.post("/v1/configs/compare", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["engines"] == ["transformers", "vllm"]
    assert out["cos"]["first_position"] == 1
    assert out["cos"]["max_abs_diff"] == pytest.approx(2.3805, abs=1e-3)
    assert out["attention_scaling"]["first_position"] is None
    assert out["softmax_scale"] == {
        "max_abs_diff": 0.0,
        "first_position": None,
        "transformers": pytest.approx(96**-0.5),
        "vllm": pytest.approx(96**-0.5),
    }
    assert len(out["differences"]) == 1 and "LongRoPE" in out["differences"][0]
    same = api.post("/v1/configs/compare", json={**body, "max_model_len": 4096}).json()
    assert same["differences"] == [] and same["cos"]["first_position"] is None
    assert api.post("/v1/configs/compare", json={"config": PHI_LONG["config"]}).status_code == 422
    bad = api.post("/v1/configs/compare", json={**body, "positions": [1]})
    assert bad.status_code == 422


QWEN_1M_Q_INTER = CASES["qwen2.5-7b-instruct-1m dual chunk q_inter"]
HUNYUAN_OCR = CASES["hunyuan-ocr"]


def test_rope_dual_chunk_cache_is_vllms_cache(api: httpx.Client) -> None:
    """Qwen2.5-1M's q_inter cache (rows 0 … 3 hold positions 262,144 …), POST and GET twin."""
    body = {
        "config": QWEN_1M_Q_INTER["config"],
        "seq_len": 4,
        "engine": "vllm",
        "dual_chunk_cache": "q_inter",
    }
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text
    meta = r.json()["meta"]
    assert (meta["vllm_rope"], meta["dual_chunk_cache"], meta["vllm_rows"]) == (
        "dual_chunk",
        "q_inter",
        253952,
    )
    cos = json_tensor(r.json(), "cos")[:, :64]
    np.testing.assert_allclose(cos, np.array(QWEN_1M_Q_INTER["cos"][:4]), atol=1e-6 + 3e-7 * 262147)
    query = {**body, "config": json.dumps(body["config"]), "format": "raw"}
    get = api.get(f"/v1/encodings/rope?{urlencode(query)}")
    post = api.post("/v1/encodings/rope", json=body, params={"format": "raw"})
    assert get.status_code == post.status_code == 200, get.text
    assert get.content == post.content
    plain = api.post("/v1/encodings/rope", json={**body, "engine": "transformers"})
    assert plain.status_code == 422 and "engine vllm" in plain.text


def test_rope_dual_chunk_streams_the_same_bytes(small_client: httpx.Client) -> None:
    body = {
        "config": QWEN_1M_Q_INTER["config"],
        "positions": list(range(253900, 253952)) + list(range(0, 20)),
        "engine": "vllm",
        "dual_chunk_cache": "qc",
    }
    assert_streams_its_cos(small_client, body)


def test_rope_xdrope_four_rows_and_configs_endpoints(api: httpx.Client) -> None:
    grid = [[0, 1, 2], [0, 5, 9], [3, 3, 3], [0, 0, 1]]
    body = {"config": HUNYUAN_OCR["config"], "positions": grid, "engine": "vllm"}
    r = api.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["meta"]["xdrope_section"] == [16, 16, 16, 16]
    fields = resolve.resolve_fields(ROPE, body)
    np.testing.assert_array_equal(  # JSON writes each float32 in its shortest form
        json_tensor(r.json(), "cos").astype(np.float32),
        resolve.compute(ROPE, fields)["cos"].numpy(),
    )
    tf = api.post("/v1/encodings/rope", json={**body, "engine": "transformers"})
    assert tf.status_code == 200, tf.text
    assert np.abs(json_tensor(tf.json(), "cos") - json_tensor(r.json(), "cos")).max() > 0.1
    shown = api.post(
        "/v1/configs/positions", json={"config": HUNYUAN_OCR["config"], "engine": "vllm"}
    ).json()["rope"]["full_attention"]
    assert shown["vllm_rope_type"] == "xdrope"
    assert shown["vllm"]["xdrope_section"] == [16, 16, 16, 16]
    assert shown["rope_theta"] == pytest.approx(10000.0 * 1000.0 ** (128 / 126), rel=1e-14)
    ntk = CASES["llama-2-7b ntk mixed"]["config"]
    refused = api.post("/v1/encodings/rope", json={"config": ntk, "seq_len": 2})
    assert refused.status_code == 422 and 'engine: \\"vllm\\"' in refused.text
    cmp = api.post(
        "/v1/configs/compare", json={"config": QWEN_1M_Q_INTER["config"], "positions": [0, 253952]}
    )
    assert cmp.status_code == 200, cmp.text
    assert cmp.json()["cos"]["first_position"] == 253952
