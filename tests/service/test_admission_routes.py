"""The admission estimate holds what each kind of request really peaks at (docs/sizing.md).

For each case, a real ``python -m service`` (no cache) serves one large request after a small
one of the same kind, and the peak RSS over that baseline (``VmHWM`` after resetting it through
``/proc/PID/clear_refs``) is compared with the bytes the service took from its in-flight budget
for the same request (``ByteBudget.peak`` of an in-process app with the same settings: the
estimate, taken before computing). The estimate must cover the peak, and stay within 4 times it
(an upper bound, not a refusal of everything).

Token batches sent as JSON are the case the single per-element figure missed: the parsed
``input_ids`` (Python lists of ints, and the copies validation and the cache key make) peak at
about 70 bytes per integer besides the output, and the M-RoPE rule's int64 intermediates at
about 65 bytes per output element.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.config import Settings
from tests.helpers import (
    HOST,
    ApiClient,
    clean_env,
    free_port,
    start_service,
    stop_service,
    wait_ready,
)

MiB = 1 << 20
BUDGET = 16 << 30  # admits every request here at once: nothing waits

QWEN2_VL = {
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {"spatial_merge_size": 2},
}


def _ids(tokens: int, width: int = 2048) -> list[list[int]]:
    rng = np.random.default_rng(7)
    return rng.integers(1, 30000, size=(max(1, tokens // width), width)).tolist()  # type: ignore[no-any-return]


def _npy(rows: list[list[int]]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(rows, dtype=np.int64))
    return buf.getvalue()


# name -> (path, query, json body or None, npy body or None) for a size; small size first
def _case(name: str, size: int) -> tuple[str, dict[str, str], Any, bytes | None]:
    if name == "position-ids json ids":
        return "/v1/position-ids", {}, {"input_ids": _ids(size), "pad_token_id": 0}, None
    if name == "position-ids json ids + mask, safetensors":
        ids = _ids(size)
        body = {"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids]}
        return "/v1/position-ids", {"format": "safetensors"}, body, None
    if name == "position-ids npy ids":
        return "/v1/position-ids", {"pad_token_id": "0"}, None, _npy(_ids(size))
    if name == "mrope json ids":
        return "/v1/position-ids/mrope", {}, {"input_ids": _ids(size), "config": QWEN2_VL}, None
    if name == "sinusoidal json float32":
        return "/v1/encodings/sinusoidal", {}, {"seq_len": size // 512, "d_model": 512}, None
    if name == "relative safetensors float64":
        t = int((size // 16) ** 0.5)
        body = {"seq_len": t, "num_heads": 15, "dtype": "float64"}  # type: ignore[dict-item]
        return "/v1/biases/relative", {"format": "safetensors"}, body, None
    raise KeyError(name)


CASES = {
    # name: (small size, large size), sizes in tokens or elements
    "position-ids json ids": (2048, 1 << 20),
    "position-ids json ids + mask, safetensors": (2048, 1 << 20),
    "position-ids npy ids": (2048, 1 << 20),
    "mrope json ids": (2048, 1 << 20),
    "sinusoidal json float32": (4096, 1 << 22),
    "relative safetensors float64": (4096, 1 << 22),
}


def _post(client: ApiClient, name: str, size: int) -> httpx.Response:
    path, query, body, npy = _case(name, size)
    if npy is not None:
        headers = {"Content-Type": "application/x-npy"}
        return client.post(path, params=query, content=npy, headers=headers)  # type: ignore[return-value]
    return client.post(  # type: ignore[return-value]
        path, params=query, content=json.dumps(body), headers={"Content-Type": "application/json"}
    )


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _settings() -> dict[str, str]:
    return {
        "POSENC_DEVICE": "cpu",
        "POSENC_CACHE_BYTES": "0",
        "POSENC_MAX_INFLIGHT_BYTES": str(BUDGET),
        "POSENC_ACCESS_LOG": "false",
    }


@pytest.fixture(scope="module")
def inprocess() -> Iterator[TestClient]:
    settings = Settings(
        device="cpu", models="", api_key=None, cache_bytes=0, max_inflight_bytes=BUDGET
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _estimate(client: TestClient, name: str, size: int) -> int:
    """The bytes the service takes from its budget for the request (its estimate)."""
    budget = client.app.state.posenc.budget  # type: ignore[attr-defined]
    budget.peak = 0
    r = _post(client, name, size)
    assert r.status_code == 200, r.text[:400]
    assert budget.in_flight == 0
    return int(budget.peak)


def _measure(tmp_path: Path, name: str, small: int, large: int) -> tuple[int, int]:
    """(peak RSS over the warmed-up baseline, response bytes) of a fresh live service."""
    port = free_port()
    log = tmp_path / "service.log"
    proc = start_service(port, log, clean_env(**_settings()))
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log)
        with httpx.Client(base_url=url, timeout=300) as client:
            assert _post(client, name, small).status_code == 200
            baseline = _status(proc.pid, "VmRSS")
            try:
                Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
            except OSError as exc:
                pytest.skip(f"cannot reset the peak RSS here: {exc}")
            r = _post(client, name, large)
            assert r.status_code == 200, r.text[:400]
            peak = _status(proc.pid, "VmHWM")
    finally:
        stop_service(proc)
    return peak - baseline, len(r.content)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_estimate_covers_the_measured_peak(
    inprocess: TestClient, tmp_path: Path, name: str
) -> None:
    small, large = CASES[name]
    measured, body = _measure(tmp_path, name, small, large)
    estimate = _estimate(inprocess, name, large)
    assert measured > body  # the measurement saw at least the response it sent
    assert measured <= estimate, (name, measured / MiB, estimate / MiB)
    assert estimate <= 4 * measured, (name, measured / MiB, estimate / MiB)


def test_json_integers_and_the_mrope_route_add_to_the_estimate() -> None:
    from posenc.core import kinds
    from service.admission.budget import (
        BYTES_PER_ELEMENT,
        BYTES_PER_JSON_INT,
        REQUEST_OVERHEAD,
        estimate_bytes,
    )
    from service.responses.plans import json_ints

    table = estimate_bytes(1000, "json", dtype="float32")
    assert table == 1000 * BYTES_PER_ELEMENT[("json", "float32")] + REQUEST_OVERHEAD
    with_ids = estimate_bytes(1000, "json", dtype="", json_ints=500)
    assert with_ids - estimate_bytes(1000, "json", dtype="") == 500 * BYTES_PER_JSON_INT
    per = kinds.REGISTRY["mrope_position_ids"].work_bytes_per_element
    mrope = estimate_bytes(1000, "safetensors", dtype="", work_bytes_per_element=per)
    assert per > BYTES_PER_ELEMENT[("binary", "float64")]
    assert mrope == 1000 * per + REQUEST_OVERHEAD
    # what a JSON body holds as lists of ints; a binary body's params have no such lists
    params = {
        "input_ids": [[1, 2, 3], [4]],
        "attention_mask": [[1, 1, 1], [1]],
        "position_ids": None,
        "positions": [0, 5],
        "seq_len": 7,
    }
    assert json_ints(params) == 4 + 4 + 2
    assert json_ints({"tensors": "abc", "pad_token_id": 0}) == 0
