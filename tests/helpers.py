"""Helpers the tests share: a free port, a clean environment, starting and stopping a real
``python -m service``, settings like the live server's, and decoding responses independently of
``service.formats``. Import them (``from tests.helpers import ...``); fixtures are in conftest.py.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parent.parent


#: A client the tests drive: httpx's (a live server) or Starlette's TestClient (in process; it
#: is httpx2's Client, with the same calls).
ApiClient = httpx.Client | TestClient

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


#: Under pytest-xdist each worker takes its ports from its own block below Linux's ephemeral
#: range (32768-60999), so that two workers never hand out the same port and no outgoing
#: connection (whose source port the kernel draws from that range) takes one between
#: :func:`free_port` and the server's bind; each process starts at a random place in its block,
#: so that two runs at once on one machine seldom try the same port.
PORT_BASE, PORT_BLOCK = 20000, 1000
_next_port = [random.SystemRandom().randrange(PORT_BLOCK)]


def free_port() -> int:
    """A loopback port nothing listens on: the kernel's pick (port 0) in a serial run, the next
    free one of this worker's block (:data:`PORT_BASE`) under pytest-xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    if not worker.startswith("gw"):
        with socket.socket() as s:
            s.bind((HOST, 0))
            return int(s.getsockname()[1])
    start = PORT_BASE + int(worker[2:]) % 12 * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        port = start + _next_port[0] % PORT_BLOCK
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue  # taken (another run on this machine): the next one
            return port
    raise RuntimeError(f"no free port in {start}..{start + PORT_BLOCK - 1}")


def fast_sample(values: list[Any], every: int) -> list[Any]:
    """``values`` as one argument's parametrization: every ``every``-th of them (the first, the
    ``every + 1``-th, …: a fixed sample) in the fast lane, the others marked ``slow``. The whole
    suite runs them all; the ids are the ones plain ``values`` would get."""
    return [
        v if i % every == 0 else pytest.param(v, marks=pytest.mark.slow)
        for i, v in enumerate(values)
    ]


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


def run_service(
    env: dict[str, str], *args: str, port: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", "--port", str(port or free_port()), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def one_clear_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The single 'cannot start' line; checks the exit status, the needles, no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "cannot start" in line]
    assert len(lines) == 1, output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# A model folder as a user has it: model.safetensors, config.json and a trained tokenizer
# (tests/service/test_text.py, test_service_main.py)
FOLDER_D_MODEL, FOLDER_POSITIONS = 16, 64


def _text_tokenizer() -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    corpus = [
        "Hello world, positions count from zero.",
        "héllo wörld — 日本語 🎉 rotary embeddings and learned tables",
        "The quick brown fox jumps over the lazy dog.",
    ] * 20
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 1), ("</s>", 2)],
    )  # fmt: skip
    return tok


def make_folder(root: Path, name: str, vocab: int | None = None, seed: int = 7) -> Path:
    """A model folder: model.safetensors (GPT-2 names), config.json, tokenizer.json (and a
    tokenizer_config.json so that AutoTokenizer reads tokenizer.json as it is)."""
    import torch
    from safetensors.torch import save_file

    folder = root / name
    folder.mkdir()
    tok = _text_tokenizer()
    tok.save(str(folder / "tokenizer.json"))  # type: ignore[attr-defined]
    rows = vocab or tok.get_vocab_size()  # type: ignore[attr-defined]
    g = torch.Generator().manual_seed(seed)
    save_file(
        {
            "wte.weight": torch.randn(rows, FOLDER_D_MODEL, generator=g),
            "wpe.weight": torch.randn(FOLDER_POSITIONS, FOLDER_D_MODEL, generator=g),
        },
        str(folder / "model.safetensors"),
    )
    config = {
        "model_type": "gpt2",
        "n_positions": FOLDER_POSITIONS,
        "n_embd": FOLDER_D_MODEL,
        "pad_token_id": 0,
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "pad_token": "<pad>",
                "bos_token": "<s>",
                "eos_token": "</s>",
            }
        )
    )
    return folder


def make_settings(gpt2_file: Path, **overrides: object):  # type: ignore[no-untyped-def]
    from service.config import Settings

    values: dict[str, object] = {
        "device": "cpu",
        "models": f"{GPT2_NAME}={gpt2_file}",
        "api_key": None,
        "cors_origins": "",
        "allow_reload": True,  # the test apps have no key: reload is open (POSENC_ALLOW_RELOAD)
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


# torch.nn.init's random initialisers (and transformers' table of them): no-ops while a
# reference module is built whose weights the test then sets or never reads
RANDOM_INITS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "orthogonal_",
    "sparse_",
)


@contextlib.contextmanager
def without_random_init() -> Iterator[None]:
    """Build modules without drawing their random weights: each random initialiser of
    ``torch.nn.init`` (which ``nn.Linear``, ``nn.Embedding``... call) and of transformers'
    ``_init_weights`` returns its tensor untouched, so parameters keep ``torch.empty``'s
    contents. For references that zero or set every parameter they read, or read none but
    their buffers (a rotary module's ``inv_freq`` is computed, not drawn). Deterministic
    initialisers (``zeros_``, ``ones_``, ``constant_``, ``copy_``) still run.

    Building a vision tower drew about a second of random numbers per tower, most of the
    rotary and learned-table sweeps' time."""
    import torch.nn.init as torch_init
    from transformers import initialization

    def untouched(tensor: Any, *_args: Any, **_kwargs: Any) -> Any:
        return tensor

    saved = {name: getattr(torch_init, name) for name in RANDOM_INITS}
    table = initialization.TORCH_INIT_FUNCTIONS
    saved_table = {name: table[name] for name in RANDOM_INITS if name in table}
    try:
        for name in RANDOM_INITS:
            setattr(torch_init, name, untouched)
        table.update(dict.fromkeys(saved_table, untouched))
        yield
    finally:
        for name, func in saved.items():
            setattr(torch_init, name, func)
        table.update(saved_table)


def forget_fastapi_endpoints() -> None:
    """Empty FastAPI's module-level caches of what each endpoint callable is (coroutine,
    generator...; ``fastapi.dependencies.models``, LRU caches of 4,096 entries each).

    The service's endpoints are closures over their app, so those caches kept every app a test
    process had built alive, and with it its models, schemas and routes: about 70 MB an app,
    and the suite's workers grew to 9 GiB. A deployed process builds one app; the suite calls
    this after each test (tests/conftest.py)."""
    import fastapi.dependencies.models as fastapi_models

    for name in dir(fastapi_models):
        clear = getattr(getattr(fastapi_models, name), "cache_clear", None)
        if name.endswith("_cached") and callable(clear):
            clear()


def failure_message(call: Any, *args: Any, **kwargs: Any) -> str:
    """The message of the ``AssertionError`` that ``call(*args, **kwargs)`` must raise (the
    assertions of :mod:`posenc.testing`)."""
    with pytest.raises(AssertionError) as info:
        call(*args, **kwargs)
    return str(info.value)


def mistakes_named(message: str) -> set[str]:
    """The mistakes a :mod:`posenc.testing` failure names on its ``diagnosis`` line, without the
    parenthesised details (``positions_offset (offset 7)`` is ``positions_offset``)."""
    line = next(x for x in message.splitlines() if x.startswith("diagnosis"))
    said = line.split(": ", 1)[1]
    if said.startswith("no known mistake"):
        return set()
    return {re.sub(r" \(.*\)$", "", m) for m in said.split(", ")}
