"""``POSENC_WATCH_SECONDS`` (API 1.3, "optionally by watching the folders"), through a real uvicorn:
a model file rewritten in place as ``cp`` does (truncated, then written) is served as its new
weights without a SIGHUP or a reload request, every answer meanwhile being the old rows or the
new; a deleted file keeps the weights last loaded and is tried once, not at every poll; a
sharded folder whose shard is rewritten in place is noticed too."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import save as save_bytes

from tests.helpers import clean_env, free_port, start_service, stop_service, wait_ready

pytestmark = pytest.mark.timeout(240)

V, P, D = 64, 16, 8
IDS = [3, 60, 7, 0]


def tables(version: int) -> dict[str, torch.Tensor]:
    """GPT-2's wte (V, D) and wpe (P, D), different for each version."""
    g = torch.Generator().manual_seed(100 + version)
    return {
        "wte.weight": torch.randn(V, D, generator=g),
        "wpe.weight": torch.randn(P, D, generator=g),
    }


def expected(version: int) -> np.ndarray:
    t = tables(version)
    return (t["wte.weight"][IDS] + t["wpe.weight"][: len(IDS)]).numpy()


def write_in_place(path: Path, data: bytes) -> None:
    """What ``cp new path`` does: the same inode, truncated, then written."""
    with path.open("r+b" if path.exists() else "wb") as fh:
        fh.truncate(0)
        fh.flush()
        fh.write(data)


def embed(client: httpx.Client, model: str) -> np.ndarray:
    r = client.post("/v1/embed?format=raw", json={"model": model, "input_ids": [IDS]})
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, dtype="<f4").reshape(len(IDS), D)


def wait_for(client: httpx.Client, model: str, version: int, old: int) -> None:
    """Until ``model`` answers ``version``'s rows; every answer before is ``old``'s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = embed(client, model)
        if np.array_equal(got, expected(version)):
            return
        np.testing.assert_array_equal(got, expected(old))
        time.sleep(0.05)
    raise AssertionError(f"{model} still not version {version} after 60 s")


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[httpx.Client, Path, Path, Path]]:
    root = tmp_path_factory.mktemp("watch")
    single = root / "single" / "model.safetensors"
    single.parent.mkdir()
    single.write_bytes(save_bytes(tables(0)))
    sharded = root / "sharded"
    sharded.mkdir()
    t = tables(10)
    (sharded / "a.safetensors").write_bytes(save_bytes({"wte.weight": t["wte.weight"]}))
    (sharded / "b.safetensors").write_bytes(save_bytes({"wpe.weight": t["wpe.weight"]}))
    index = {"weight_map": {"wte.weight": "a.safetensors", "wpe.weight": "b.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    port, log = free_port(), root / "service.log"
    env = clean_env(
        POSENC_MODELS=f"single={single},sharded={sharded}",
        POSENC_WATCH_SECONDS="0.2",
        POSENC_DEVICE="cpu",
    )
    proc = start_service(port, log, env, "--workers", "1")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, single, sharded, log
        assert proc.poll() is None, log.read_text()
    finally:
        stop_service(proc)


def test_a_file_rewritten_in_place_is_served_as_its_new_weights(
    served: tuple[httpx.Client, Path, Path, Path],
) -> None:
    client, single, _, log = served
    np.testing.assert_array_equal(embed(client, "single"), expected(0))
    write_in_place(single, save_bytes(tables(1)))
    wait_for(client, "single", 1, old=0)
    single.unlink()  # a reload fails: the weights last loaded stay
    time.sleep(1.5)
    np.testing.assert_array_equal(embed(client, "single"), expected(1))
    failed = [line for line in log.read_text().splitlines() if "reload of model 'single'" in line]
    assert len(failed) == 1, failed  # tried once, not at every poll of the missing file
    single.write_bytes(save_bytes(tables(2)))
    wait_for(client, "single", 2, old=1)


def test_a_shard_rewritten_in_place_is_noticed(
    served: tuple[httpx.Client, Path, Path, Path],
) -> None:
    client, _, sharded, _ = served
    np.testing.assert_array_equal(embed(client, "sharded"), expected(10))
    t = tables(11)
    write_in_place(sharded / "a.safetensors", save_bytes({"wte.weight": t["wte.weight"]}))
    write_in_place(sharded / "b.safetensors", save_bytes({"wpe.weight": t["wpe.weight"]}))
    wait_for_either = time.monotonic() + 60
    while not np.array_equal(embed(client, "sharded"), expected(11)):
        assert time.monotonic() < wait_for_either, "the rewritten shards were not noticed"
        time.sleep(0.05)
