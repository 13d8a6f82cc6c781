"""Helpers the tests share: a free port, a clean environment, starting and stopping a real
``python -m service``, settings like the live server's, and decoding responses independently of
``service.responses.formats``. Import them (``from tests.helpers import ...``); fixtures are in conftest.py.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


HOST = "127.0.0.1"


# The presets the HTTP API promises by name, with their kinds.
CONTRACT_PRESETS = {
    "llama-2-7b": "rope",
    "llama-3.1-8b": "rope",
    "mistral-7b": "rope",
    "qwen2.5-7b": "rope",
    "gpt-neox-20b": "rope",
    "bloom-7b1": "alibi",
    "mpt-7b": "alibi",
    "t5-base": "relative",
    "gpt2": "learned",
    "bert-base": "learned",
}

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


@functools.lru_cache(maxsize=1)
def transformers_model_classes() -> dict[type, list[type]]:
    """Every base model class of the installed transformers, by its config class (the vision
    sweeps' index; built once, since it imports every modeling module)."""
    import importlib
    import inspect
    import pkgutil
    import re

    import transformers.models as tm
    from transformers import PreTrainedModel

    found: dict[type, list[type]] = {}
    for info in pkgutil.iter_modules(tm.__path__):
        try:
            mod = importlib.import_module(f"transformers.models.{info.name}.modeling_{info.name}")
        except Exception:  # optional dependencies (natten, timm...)
            continue
        for name, obj in vars(mod).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, PreTrainedModel)
                and obj.__module__ == mod.__name__
                and "PreTrained" not in name
                and not re.search(r"For[A-Z]", name)
                and getattr(obj, "config_class", None) is not None
            ):
                found.setdefault(obj.config_class, []).append(obj)
    return found
