"""Model files that change under a running service (API 1.3 "Models that change under a running
service"), through a real uvicorn on loopback with safetensors files written here.

A sharded Llama-style folder is served beside a GPT-2 file. While clients ask for rows of its
token table that no request has read before, every shard is truncated in place (what
``cp new old`` does before it writes), rewritten in place, then deleted. No request may crash the
process (a memory-mapped table would die of SIGBUS here, exit 135): each answer holds the old
rows, the new rows, or is a 503 with ``Retry-After``. A reload while the files are missing is
refused and keeps the old weights; a reload once the new files are whole serves them, and so
does SIGHUP. The GPT-2 model is served throughout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import save as save_bytes

from tests.helpers import clean_env, free_port, start_service, stop_service, wait_ready

pytestmark = pytest.mark.timeout(240)

V, D = 16384, 256  # 16 MiB of float32 per version of the token table
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
GPT2_V, GPT2_P, GPT2_D = 50, 16, 8


def token_table(version: int) -> torch.Tensor:
    """(V, D) float32, different for each version."""
    return torch.randn(V, D, generator=torch.Generator().manual_seed(version))


def shard_bytes(version: int) -> dict[str, bytes]:
    """The two shards' bytes: the token table in the first, an unrelated tensor in the second."""
    other = torch.full((4, D), float(version))
    return {
        SHARDS[0]: save_bytes({"model.embed_tokens.weight": token_table(version)}),
        SHARDS[1]: save_bytes({"lm_head.weight": other}),
    }


def write_folder(folder: Path, version: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "llama",
        "hidden_size": D,
        "num_attention_heads": 4,
        "vocab_size": V,
        "rope_theta": 10000.0,
        "max_position_embeddings": 64,
    }
    (folder / "config.json").write_text(json.dumps(config))
    index = {"weight_map": {"model.embed_tokens.weight": SHARDS[0], "lm_head.weight": SHARDS[1]}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for name, data in shard_bytes(version).items():
        (folder / name).write_bytes(data)


def overwrite_in_place(path: Path, data: bytes, pause: float) -> None:
    """What ``cp new old`` does to ``old``: truncate the same inode, then write it in pieces."""
    with path.open("r+b") as fh:
        fh.truncate(0)
        fh.flush()
        time.sleep(pause)
        step = len(data) // 8 + 1
        for start in range(0, len(data), step):
            fh.write(data[start : start + step])
            fh.flush()
            time.sleep(pause / 8)


def write_gpt2(path: Path) -> tuple[np.ndarray, np.ndarray]:
    gen = torch.Generator().manual_seed(99)
    wte, wpe = (
        torch.randn(GPT2_V, GPT2_D, generator=gen),
        torch.randn(GPT2_P, GPT2_D, generator=gen),
    )
    path.write_bytes(save_bytes({"wte.weight": wte, "wpe.weight": wpe}))
    return wte.numpy(), wpe.numpy()


class Live:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log
        self.client = httpx.Client(base_url=url, timeout=60)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    folder = tmp_path / "llama"
    write_folder(folder, 1)
    gpt2 = tmp_path / "gpt2.safetensors"
    write_gpt2(gpt2)
    port = free_port()
    log = tmp_path / "server.log"
    env = clean_env(
        POSENC_DEVICE="cpu",
        POSENC_MODELS=f"llama={folder},gpt2={gpt2}",
        POSENC_LOG_LEVEL="info",
        POSENC_ALLOW_RELOAD="1",  # no key here: reload opened for the test
    )
    proc = start_service(port, log, env)
    url = f"http://127.0.0.1:{port}"
    wait_ready(proc, url, log)
    live = Live(proc, url, log)
    yield live
    live.client.close()
    stop_service(proc)


def embed_rows(client: httpx.Client, ids: list[int]) -> httpx.Response:
    return client.post(
        "/v1/embed?format=raw", json={"model": "llama", "input_ids": [ids]}, timeout=60
    )


def classify(r: httpx.Response, ids: list[int], versions: dict[int, np.ndarray]) -> str:
    """Which version's rows the answer holds, or "503"; anything else fails the test."""
    if r.status_code == 503:
        assert r.headers.get("Retry-After"), r.headers
        assert "detail" in r.json()
        return "503"
    assert r.status_code == 200, (r.status_code, r.text[:500])
    got = np.frombuffer(r.content, dtype="<f4").reshape(len(ids), D)
    for version, table in versions.items():
        if np.array_equal(got, table[ids]):
            return f"v{version}"
    raise AssertionError(f"rows {ids} match no version of the table")


def test_files_truncated_rewritten_and_deleted_in_place_never_crash_the_service(
    live: Live, tmp_path: Path
) -> None:
    folder = tmp_path / "llama"
    versions = {1: token_table(1).numpy(), 2: token_table(2).numpy()}
    wte, wpe = write_gpt2_reference(tmp_path)
    client = live.client
    assert classify(embed_rows(client, [0, 1]), [0, 1], versions) == "v1"

    outcomes: Counter[str] = Counter()
    failures: list[BaseException] = []
    stop = threading.Event()

    def hammer(start: int) -> None:
        with httpx.Client(base_url=live.url, timeout=60) as c:
            row = start
            while not stop.is_set():
                ids = [row % V, (row * 7919 + 13) % V]  # rows no request has read yet
                row += 97
                try:
                    outcomes[classify(embed_rows(c, ids), ids, versions)] += 1
                    r = c.post(
                        "/v1/embed?format=raw", json={"model": "gpt2", "input_ids": [[3, 4]]}
                    )
                    assert r.status_code == 200, r.text
                    got = np.frombuffer(r.content, dtype="<f4").reshape(2, GPT2_D)
                    np.testing.assert_array_equal(got, wte[[3, 4]] + wpe[[0, 1]])
                except BaseException as exc:  # reported below
                    failures.append(exc)
                    return

    threads = [threading.Thread(target=hammer, args=(V // 2 + k * 1000,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60  # "does not hang": the first answers come in well before
        while sum(outcomes.values()) < 2 and not failures and time.monotonic() < deadline:
            time.sleep(0.05)
        # truncated in place: rows no request has read are no longer in the file
        with (folder / SHARDS[0]).open("r+b") as fh:
            fh.truncate(1000)
        time.sleep(0.5)
        assert live.proc.poll() is None, live.log.read_text()
        late = [V - 1, V - 2]
        assert classify(embed_rows(client, late), late, versions) == "v1"
        # rewritten in place as cp does, every shard; then every shard deleted
        new = shard_bytes(2)
        for name in SHARDS:
            overwrite_in_place(folder / name, new[name], pause=0.2)
        for name in SHARDS:
            (folder / name).unlink()
        time.sleep(0.3)
        # a reload while the shards are missing is refused, and the old weights stay
        refused = client.post("/v1/models/reload")
        assert refused.status_code == 503, refused.text
        assert refused.headers.get("Retry-After")
        body = refused.json()
        assert [e["name"] for e in body["errors"]] == ["llama"]
        assert SHARDS[0] in body["errors"][0]["detail"] or "index" in body["errors"][0]["detail"]
        assert classify(embed_rows(client, [5, 6]), [5, 6], versions) == "v1"
        # whole again: a reload serves the new weights
        for name, data in new.items():
            (folder / name).write_bytes(data)
        before = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        done = client.post("/v1/models/reload")
        assert done.status_code == 200, done.text
        answer = {m["name"]: m for m in done.json()["models"]}
        assert answer["llama"]["dtype"] == "float32"
        assert answer["llama"]["shape"] == [V, D]
        assert answer["llama"]["tokenizer"] is False
        assert answer["llama"]["loaded_at"] > before["llama"]["loaded_at"]
        assert str(folder) in answer["llama"]["source"]
        assert answer["gpt2"]["shape"] == [GPT2_V, GPT2_D]
        listed = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        for key in ("source", "dtype", "shape", "tokenizer", "loaded_at"):
            assert listed["llama"][key] == answer["llama"][key]
        assert classify(embed_rows(client, [7, V - 3]), [7, V - 3], versions) == "v2"
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert live.proc.poll() is None, live.log.read_text()
    assert not failures, failures[:3]
    assert outcomes["v1"] > 0, outcomes
    assert set(outcomes) <= {"v1", "v2", "503"}, outcomes
    assert "Traceback" not in live.log.read_text()


def write_gpt2_reference(tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The GPT-2 tables the fixture wrote (the same seed), read back from the file."""
    from safetensors.numpy import load_file

    tables = load_file(str(tmp_path / "gpt2.safetensors"))
    return tables["wte.weight"], tables["wpe.weight"]


def test_sighup_reloads_the_folders(live: Live, tmp_path: Path) -> None:
    folder = tmp_path / "llama"
    versions = {1: token_table(1).numpy(), 3: token_table(3).numpy()}
    client = live.client
    assert classify(embed_rows(client, [1, 2]), [1, 2], versions) == "v1"
    first = client.get("/v1/models/llama").json()["loaded_at"]
    write_folder(folder, 3)
    live.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while classify(embed_rows(client, [1, 2]), [1, 2], versions) != "v3":
        assert time.monotonic() < deadline, live.log.read_text()
        assert live.proc.poll() is None, live.log.read_text()
        time.sleep(0.2)
    assert client.get("/v1/models/llama").json()["loaded_at"] > first
    assert "reloaded" in live.log.read_text()
