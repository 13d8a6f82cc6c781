"""Models that change under a running service, in process (API 1.3): ``POSENC_DEFAULT_MODEL``,
``POST /v1/models/reload`` (its answer, its bearer key, a failed read keeping the old weights),
and warnings instead of silent guesses (an unknown ``model_type``, a ``vocab_size`` that is not
the table's rows, ``positional`` suggestions that fit the model). The same under a real uvicorn,
with files rewritten in place and SIGHUP: tests/service/test_model_files_change.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save_file

from service.app import create_app
from tests.helpers import GPT2_NAME, make_settings

D = 16


def llama_folder(folder: Path, *, model_type: str, vocab_size: int, seed: int = 0) -> Path:
    """A Llama-named token table of 32 rows (no RoPE key in its config) and a config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    table = torch.randn(32, D, generator=torch.Generator().manual_seed(seed))
    save_file({"model.embed_tokens.weight": table}, str(folder / "model.safetensors"))
    config = {
        "model_type": model_type,
        "hidden_size": D,
        "num_attention_heads": 2,
        "vocab_size": vocab_size,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def table_of(folder: Path) -> np.ndarray:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))["model.embed_tokens.weight"]


def embed(client: TestClient, model: str | None, ids: list[int]) -> np.ndarray:
    body: dict[str, object] = {"input_ids": [ids]}
    if model is not None:
        body["model"] = model
    r = client.post("/v1/embed?format=raw", json=body)
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, dtype="<f4").reshape(len(ids), -1)


def test_posenc_default_model_names_the_default(gpt2_file: Path) -> None:
    from safetensors.numpy import load_file

    settings = make_settings(gpt2_file, default_model=GPT2_NAME)
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/models").json()["default"] == GPT2_NAME
        tables = load_file(str(gpt2_file))
        expected = tables["wte.weight"][[3, 4]] + tables["wpe.weight"][[0, 1]]
        np.testing.assert_array_equal(embed(client, None, [3, 4]), expected)


def test_a_default_model_not_loaded_stops_the_start_up(gpt2_file: Path) -> None:
    settings = make_settings(gpt2_file, default_model="nope")
    with (
        pytest.raises(ValueError, match=r"POSENC_DEFAULT_MODEL names 'nope'.*tiny-gpt2"),
        TestClient(create_app(settings)),
    ):
        pass


def test_an_unknown_model_type_and_a_wrong_vocab_size_are_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = llama_folder(tmp_path / "z", model_type="zorblax", vocab_size=50_000)
    settings = make_settings(tmp_path / "unused", models=f"z={folder}")
    with caplog.at_level(logging.WARNING), TestClient(create_app(settings)) as client:
        info = client.get("/v1/models/z").json()
        # the tensor wins
        assert info["vocab_size"] == 32 and info["shape"] == [32, D]
        warnings = info["warnings"]
        assert any("'zorblax' is not one posenc knows" in w for w in warnings), warnings
        assert any("rope_theta 10000" in w for w in warnings), warnings
        assert any("vocab_size is 50000" in w and "32 rows" in w for w in warnings), warnings
        for warning in warnings:
            assert warning in caplog.text
        # the table is served, rows beyond it refused as before
        np.testing.assert_array_equal(embed(client, "z", [0, 31]), table_of(folder)[[0, 31]])
        r = client.post("/v1/embed", json={"model": "z", "input_ids": [[32]]})
        assert r.status_code == 422 and r.json()["field"] == "input_ids[0][0]"
        # the config reader says the same about the model type
        config = json.loads((folder / "config.json").read_text()) | {"rope_theta": 5e5}
        answer = client.post("/v1/configs/positions", json={"config": config}).json()
        assert any("'zorblax' is not one posenc knows" in w for w in answer["warnings"])
        known = config | {"model_type": "llama"}
        answer = client.post("/v1/configs/positions", json={"config": known}).json()
        assert not any("posenc knows" in w for w in answer["warnings"]), answer["warnings"]


def test_a_known_model_has_no_warnings(tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "l", model_type="llama", vocab_size=32)
    settings = make_settings(tmp_path / "unused", models=f"l={folder}")
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/models/l").json()["warnings"] == []


def test_positional_suggestions_name_only_what_fits(tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "l", model_type="llama", vocab_size=32)
    settings = make_settings(tmp_path / "unused", models=f"l={folder}")
    with TestClient(create_app(settings)) as client:
        r = client.post(
            "/v1/embed", json={"model": "l", "input_ids": [[1]], "positional": "learned"}
        )
        assert r.status_code == 422 and r.json()["field"] == "positional"
        assert "'rope' or 'none'" in r.json()["detail"]
        assert "sinusoidal" not in r.json()["detail"]
        r = client.post(
            "/v1/embed", json={"model": "posenc-base", "input_ids": [[1]], "positional": "rope"}
        )
        assert "'learned' or 'none'" in r.json()["detail"]
        assert "sinusoidal" not in r.json()["detail"]


def test_reload_answers_and_swaps_and_keeps_the_old_weights_on_failure(tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "l", model_type="llama", vocab_size=32, seed=1)
    old = table_of(folder)
    settings = make_settings(tmp_path / "unused", models=f"l={folder}", api_key="sekrit")
    auth = {"Authorization": "Bearer sekrit"}
    with TestClient(create_app(settings), headers=auth) as client:
        assert client.post("/v1/models/reload", headers={"Authorization": ""}).status_code == 401
        np.testing.assert_array_equal(embed(client, "l", [0, 1]), old[[0, 1]])
        # a file cut short: refused, the old weights stay
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
        r = client.post("/v1/models/reload")
        assert r.status_code == 503 and r.headers["Retry-After"]
        body = r.json()
        assert body["errors"][0]["name"] == "l"
        assert "truncated" in body["errors"][0]["detail"]
        assert "keep their old weights" in body["detail"]
        assert {m["name"] for m in body["models"]} == {"posenc-base", "l"}
        np.testing.assert_array_equal(embed(client, "l", [0, 1]), old[[0, 1]])
        # a new version: swapped in
        llama_folder(folder, model_type="llama", vocab_size=32, seed=2)
        new = table_of(folder)
        r = client.post("/v1/models/reload")
        assert r.status_code == 200 and r.json()["errors"] == []
        (info,) = (m for m in r.json()["models"] if m["name"] == "l")
        assert info["dtype"] == "float32" and info["shape"] == [32, D]
        np.testing.assert_array_equal(embed(client, "l", [0, 1]), new[[0, 1]])
