"""Reload is an operator's door (issue 39): ``POST /v1/models/reload`` takes ``POSENC_ADMIN_KEY``
or ``POSENC_API_KEY``, is a 403 without either unless ``POSENC_ALLOW_RELOAD``, and a failed
reload's 503 says what failed without the server's paths. A shard index whose ``weight_map``
names a file outside its folder (``..``, absolute) is refused at load, with the reason logged,
while a shard that is a link elsewhere (a Hugging Face cache snapshot's links to
``../../blobs/``) is followed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save_file

from posenc.core.errors import InvalidArgument
from posenc.readers.checkpoints import read_checkpoint
from service.app import create_app
from tests.helpers import make_settings

TENSOR = "model.embed_tokens.weight"
D = 16


def llama_folder(folder: Path, *, model_type: str, vocab_size: int, seed: int = 0) -> Path:
    """A Llama-named token table of 32 rows and a config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    table = torch.randn(32, D, generator=torch.Generator().manual_seed(seed))
    save_file({TENSOR: table}, str(folder / "model.safetensors"))
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

    return load_file(str(folder / "model.safetensors"))[TENSOR]


def embed(client: TestClient, model: str, ids: list[int]) -> np.ndarray:
    r = client.post("/v1/embed?format=raw", json={"model": model, "input_ids": [ids]})
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, dtype="<f4").reshape(len(ids), -1)


def _app(tmp_path: Path, folder: Path, **overrides: object):  # type: ignore[no-untyped-def]
    values: dict[str, object] = {"allow_reload": False, **overrides}
    return create_app(make_settings(tmp_path / "unused", models=f"l={folder}", **values))


@pytest.mark.parametrize(
    ("keys", "token", "status"),
    [
        ({}, None, 403),  # no key anywhere: shut
        ({"allow_reload": True}, None, 200),  # opened on purpose
        ({"admin_key": "adm"}, None, 401),
        ({"admin_key": "adm"}, "wrong", 401),
        ({"admin_key": "adm"}, "adm", 200),
        ({"api_key": "api"}, "api", 200),
        ({"api_key": "api"}, None, 401),
        ({"api_key": "api", "admin_key": "adm"}, "adm", 200),  # the admin key passes the auth
        ({"api_key": "api", "admin_key": "adm"}, "api", 200),
        ({"api_key": "api", "admin_key": "adm"}, "wrong", 401),
        ({"admin_key": "adm", "allow_reload": True}, None, 401),  # a key set: the key decides
    ],
)
def test_reload_needs_an_operator(
    tmp_path: Path, keys: dict[str, object], token: str | None, status: int
) -> None:
    folder = llama_folder(tmp_path / "l", model_type="llama", vocab_size=32)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with TestClient(_app(tmp_path, folder, **keys)) as client:
        r = client.post("/v1/models/reload", headers=headers)
        assert r.status_code == status, r.text
        if status == 403:
            assert "POSENC_ADMIN_KEY" in r.json()["detail"]
            assert "POSENC_ALLOW_RELOAD=1" in r.json()["detail"]
        if status == 401:
            assert r.headers["WWW-Authenticate"].startswith('Bearer realm="posenc"')
        if status == 200:
            assert [m["name"] for m in r.json()["models"]] == ["posenc-base", "l"]
        # the admin key opens reload only: /v1/ still needs the API key
        if "api_key" in keys and token == "adm":
            assert client.get("/v1/models", headers=headers).status_code == 401


def test_a_failed_reload_names_no_server_path(tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "secret-place" / "l", model_type="llama", vocab_size=32)
    with TestClient(_app(tmp_path, folder, admin_key="adm")) as client:
        (folder / "model.safetensors").write_bytes(b"\x00" * 10)
        r = client.post("/v1/models/reload", headers={"Authorization": "Bearer adm"})
        assert r.status_code == 503, r.text
        text = r.text
        assert str(tmp_path) not in text and "secret-place" not in text
        (error,) = r.json()["errors"]
        assert error["name"] == "l" and error["path"] == "l"
        assert "model.safetensors" in error["detail"]  # what failed, by its name in the folder


def _sharded(folder: Path, shard: str) -> Path:
    """A folder holding config.json and an index whose weight_map names ``shard``."""
    folder.mkdir(parents=True, exist_ok=True)
    index = {"metadata": {}, "weight_map": {TENSOR: shard}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


@pytest.mark.parametrize(
    "shard", ["../outside/model.safetensors", "../../outside/model.safetensors", "a/../../x"]
)
def test_a_weight_map_that_climbs_out_is_refused_at_load(
    tmp_path: Path, shard: str, caplog: pytest.LogCaptureFixture
) -> None:
    outside = llama_folder(tmp_path / "outside", model_type="llama", vocab_size=32)
    folder = _sharded(tmp_path / "m" / "n", shard)
    shutil.copy(outside / "config.json", folder / "config.json")
    with caplog.at_level(logging.ERROR), pytest.raises(InvalidArgument) as info:
        read_checkpoint(folder)
    assert "climbs out of the model's folder" in info.value.message
    assert any("refused to load" in r.getMessage() for r in caplog.records)


def test_an_absolute_weight_map_entry_is_refused(tmp_path: Path) -> None:
    outside = llama_folder(tmp_path / "outside", model_type="llama", vocab_size=32)
    folder = _sharded(tmp_path / "m", str(outside / "model.safetensors"))
    shutil.copy(outside / "config.json", folder / "config.json")
    with pytest.raises(InvalidArgument, match="is the absolute path"):
        read_checkpoint(folder)
    # and the service does not start on it
    app = create_app(make_settings(tmp_path / "unused", models=f"m={folder}"))
    with pytest.raises(InvalidArgument, match="is the absolute path"), TestClient(app):
        pass


def test_a_shard_that_links_out_of_the_folder_is_followed(tmp_path: Path) -> None:
    """A Hugging Face cache: snapshots/<rev>/model-00001.safetensors -> ../../blobs/<hash>."""
    source = llama_folder(tmp_path / "src", model_type="llama", vocab_size=32, seed=3)
    blobs = tmp_path / "hub" / "blobs"
    blobs.mkdir(parents=True)
    shutil.copy(source / "model.safetensors", blobs / "abc123")
    snapshot = _sharded(tmp_path / "hub" / "snapshots" / "rev", "model-00001.safetensors")
    os.symlink("../../blobs/abc123", snapshot / "model-00001.safetensors")
    shutil.copy(source / "config.json", snapshot / "config.json")
    settings = make_settings(tmp_path / "unused", models=f"hf={snapshot}")
    with TestClient(create_app(settings)) as client:
        np.testing.assert_array_equal(embed(client, "hf", [0, 5]), table_of(source)[[0, 5]])
