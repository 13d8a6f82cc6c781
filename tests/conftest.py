"""Shared fixtures of the service tests.

- ``gpt2_file``: a small GPT-2-style safetensors checkpoint (``wte.weight``, ``wpe.weight`` and
  a few other tensors a real file holds), written once per session.
- ``live_server``: ``python -m service --port P`` in a subprocess on a free loopback port, with
  that file in ``POSENC_MODELS``; waits for ``/readyz``, yields the base URL, terminates it.
- ``app_client``: the same configuration in process, through ``TestClient`` (lifespan run).
- ``api``: parametrised over both, so a contract test runs in process and over real HTTP.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
GPT2_NAME = "tiny-gpt2"
GPT2_SHAPE = {"vocab": 97, "positions": 40, "d_model": 24}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any inherited POSENC_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def gpt2_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2-style checkpoint: float32 ``wte`` (V, D) and ``wpe`` (P, D) plus block tensors."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(1234)
    v, p, d = GPT2_SHAPE["vocab"], GPT2_SHAPE["positions"], GPT2_SHAPE["d_model"]
    tensors = {
        "wte.weight": torch.randn(v, d, generator=g) * 0.02,
        "wpe.weight": torch.randn(p, d, generator=g) * 0.01,
        "h.0.ln_1.weight": torch.ones(d),
        "h.0.attn.c_attn.weight": torch.randn(d, 3 * d, generator=g),
        "ln_f.bias": torch.zeros(d),
    }
    path = tmp_path_factory.mktemp("models") / "gpt2.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def start_service(
    port: int, log_path: Path, env: dict[str, str], *args: str
) -> subprocess.Popen[bytes]:
    """``python -m service`` on ``HOST:port`` with ``args`` (e.g. ``--workers 2``) added."""
    with log_path.open("wb") as log:  # a file, not a pipe: a full pipe would block the server
        return subprocess.Popen(
            [sys.executable, "-m", "service", "--host", HOST, "--port", str(port), *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def wait_ready(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"service exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}"
            )
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"service not ready after {timeout} s:\n{log_path.read_text()}")


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def live_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where ``live_server`` writes its stdout and stderr."""
    return tmp_path_factory.mktemp("live") / "service.log"


@pytest.fixture(scope="session")
def live_server(live_log: Path, gpt2_file: Path) -> Iterator[str]:
    """Base URL of a real ``python -m service`` on a free loopback port."""
    port = free_port()
    log_path = live_log
    env = clean_env(POSENC_DEVICE="cpu", POSENC_MODELS=f"{GPT2_NAME}={gpt2_file}")
    proc = start_service(port, log_path, env)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log_path)
        yield url
    finally:
        stop_service(proc)


def make_settings(gpt2_file: Path, **overrides: object):  # type: ignore[no-untyped-def]
    from service.config import Settings

    values: dict[str, object] = {
        "device": "cpu",
        "models": f"{GPT2_NAME}={gpt2_file}",
        "api_key": None,
        "cors_origins": "",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def app_client(gpt2_file: Path) -> Iterator[httpx.Client]:
    """In-process client of an app with the same configuration as ``live_server``."""
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file))) as client:
        yield client


@pytest.fixture(scope="session")
def live_client(live_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server, timeout=60) as client:
        yield client


@pytest.fixture(params=["inprocess", "uvicorn"])
def api(request: pytest.FixtureRequest) -> httpx.Client:
    """The service in process (TestClient) and through a real uvicorn on loopback."""
    name = "app_client" if request.param == "inprocess" else "live_client"
    return request.getfixturevalue(name)


# ---------------------------------------------------------------------------------------------
# Decoding responses (independently of service.formats)
# ---------------------------------------------------------------------------------------------

NUMPY_DTYPES = {"float32": "<f4", "float16": "<f2", "float64": "<f8", "int64": "<i8"}


def _bfloat16_bytes_to_float32(raw: bytes):  # type: ignore[no-untyped-def]
    import numpy as np

    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32)


def json_tensor(body: dict, name: str):  # type: ignore[no-untyped-def]
    """A tensor of a JSON bundle as float64 (or int64) numpy, nulls as -inf; checks its shape."""
    import numpy as np

    t = body["tensors"][name]
    if t["dtype"] == "int64":
        arr = np.array(t["data"], dtype=np.int64)
    else:
        arr = np.array(t["data"], dtype=object)
        arr = np.where(arr == None, -np.inf, arr).astype(np.float64)  # noqa: E711
    assert list(arr.shape) == t["shape"], (name, arr.shape, t["shape"])
    return arr


def base64_tensor(body: dict, name: str):  # type: ignore[no-untyped-def]
    import base64

    import numpy as np

    t = body["tensors"][name]
    raw = base64.b64decode(t["data"])
    if t["dtype"] == "bfloat16":
        arr = _bfloat16_bytes_to_float32(raw)
    else:
        arr = np.frombuffer(raw, dtype=NUMPY_DTYPES[t["dtype"]])
    return arr.reshape(t["shape"])


def raw_tensor(response: httpx.Response):  # type: ignore[no-untyped-def]
    """(name, array) of an application/octet-stream response, from its X-Tensor-* headers."""
    import numpy as np

    shape = [int(s) for s in response.headers["x-tensor-shape"].split(",") if s]
    dtype = response.headers["x-tensor-dtype"]
    if dtype == "bfloat16":
        arr = _bfloat16_bytes_to_float32(response.content)
    else:
        arr = np.frombuffer(response.content, dtype=NUMPY_DTYPES[dtype])
    return response.headers["x-tensor-name"], arr.reshape(shape)


def safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, read from its header by hand."""
    import json
    import struct

    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]).get("__metadata__", {})
