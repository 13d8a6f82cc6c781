"""Shared fixtures of the service tests.

- ``gpt2_file``: a small GPT-2-style safetensors checkpoint (``wte.weight``, ``wpe.weight`` and
  a few other tensors a real file holds), written once per session.
- ``live_server``: ``python -m service --port P`` in a subprocess on a free loopback port, with
  that file in ``POSENC_MODELS``; waits for ``/readyz``, yields the base URL, terminates it.
- ``app_client``: the same configuration in process, through ``TestClient`` (lifespan run).
- ``api``: parametrised over both, so a contract test runs in process and over real HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from tests.helpers import (
    GPT2_NAME,
    GPT2_SHAPE,
    HOST,
    clean_env,
    free_port,
    make_settings,
    start_service,
    stop_service,
    wait_ready,
)


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
# Decoding responses (independently of service.responses.formats)
# ---------------------------------------------------------------------------------------------
