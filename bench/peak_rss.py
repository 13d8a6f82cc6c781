"""Peak RSS of one max-size request of each endpoint kind, against the admission estimate.

For each case a fresh ``python -m service`` (CPU, no response cache, an in-flight budget large
enough to admit everything) gets one small request of the same kind (so that every lazy import
and first-call allocation is in the baseline), then the baseline ``VmRSS`` is read, ``VmHWM`` is
reset (``/proc/PID/clear_refs``), and one request as large as ``POSENC_MAX_ELEMENTS`` allows
(``--elements``, default 2^24) is sent; the response is read and dropped as it arrives. The peak
over the baseline, per output element, is set against ``service.admission.budget.estimate_bytes`` for
the same request (also per element, without the 1 MiB ``REQUEST_OVERHEAD``).

    python -m bench.peak_rss                       # every case, a markdown table
    python -m bench.peak_rss --only position-ids   # cases whose name contains it

Linux only (``/proc``). docs/sizing.md has the results and what was done with them.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
MiB = 1 << 20

QWEN2_VL = {
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {"spatial_merge_size": 2},
}


@dataclass
class Case:
    """One request: ``build(n)`` gives (path, query, json body or None, raw body or None,
    content type, output elements) for a limit of ``n`` elements."""

    name: str
    build: Callable[[int], tuple[str, dict[str, str], Any, bytes | None, str | None, int]]
    fmt: str = "json"
    base64: bool = False
    dtype: str = "float32"
    small: int = 4096
    notes: list[str] = field(default_factory=list)


def _tokens(n_tokens: int, width: int = 2048) -> list[list[int]]:
    rows = max(1, n_tokens // width)
    rng = np.random.default_rng(0)
    return rng.integers(1, 30000, size=(rows, width)).tolist()  # type: ignore[no-any-return]


def _npy(ids: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, ids)
    return buf.getvalue()


def _cases() -> list[Case]:
    cases: list[Case] = []
    for fmt, b64, dtype in (
        ("json", False, "float32"),
        ("json", True, "float32"),
        ("json", False, "float64"),
        ("safetensors", False, "float32"),
        ("safetensors", False, "float64"),
        ("safetensors", False, "float16"),
        ("png", False, "float32"),
    ):
        tag = f"{fmt}{'-base64' if b64 else ''} {dtype}"

        def sinusoidal(n: int, dtype: str = dtype) -> Any:
            d = 512
            t = n // d
            body = {"seq_len": t, "d_model": d, "dtype": dtype}
            return "/v1/encodings/sinusoidal", {}, body, None, None, t * d

        def learned(n: int, dtype: str = dtype) -> Any:
            d = 512
            t = n // d
            body = {"seq_len": t, "d_model": d, "dtype": dtype}
            return "/v1/encodings/learned", {}, body, None, None, t * d

        def rope(n: int, dtype: str = dtype) -> Any:
            r = 128
            t = (n - r // 2) // (2 * r)
            body = {"seq_len": t, "head_dim": r, "dtype": dtype}
            return "/v1/encodings/rope", {}, body, None, None, 2 * t * r + r // 2

        def alibi(n: int, dtype: str = dtype) -> Any:
            h = 16
            t = math.isqrt((n - h) // h)
            body = {"num_heads": h, "seq_len": t, "dtype": dtype}
            return "/v1/biases/alibi", {}, body, None, None, h * t * t + h

        def relative(n: int, dtype: str = dtype) -> Any:
            h = 15
            t = math.isqrt(n // (h + 1))
            body = {"seq_len": t, "num_heads": h, "dtype": dtype}
            return "/v1/biases/relative", {}, body, None, None, (h + 1) * t * t

        def embed(n: int, dtype: str = dtype) -> Any:
            d = 512  # the built-in posenc-base
            tokens = n // (d + 2)
            ids = _tokens(tokens, 1024)
            b, t = len(ids), len(ids[0])
            body = {"input_ids": ids, "dtype": dtype}
            return "/v1/embed", {}, body, None, None, b * t * (d + 2)

        for name, build in (
            ("sinusoidal", sinusoidal),
            ("learned", learned),
            ("rope", rope),
            ("alibi", alibi),
            ("relative", relative),
            ("embed", embed),
        ):
            if fmt == "png" and name == "embed":
                continue
            cases.append(Case(f"{name} {tag}", build, fmt, b64, dtype))

    # integer outputs: no dtype field (the estimate takes float64's row)
    def position_ids(n: int) -> Any:
        ids = _tokens(n // 2)
        b, t = len(ids), len(ids[0])
        return "/v1/position-ids", {}, {"input_ids": ids, "pad_token_id": 0}, None, None, 2 * b * t

    def position_ids_npy(n: int) -> Any:
        ids = np.asarray(_tokens(n // 2), dtype=np.int64)
        b, t = ids.shape
        query = {"pad_token_id": "0"}
        return "/v1/position-ids", query, None, _npy(ids), "application/x-npy", 2 * b * t

    def embed_npy(n: int) -> Any:
        d = 512
        ids = np.asarray(_tokens(n // (d + 2), 1024), dtype=np.int64)
        b, t = ids.shape
        return "/v1/embed", {}, None, _npy(ids), "application/x-npy", b * t * (d + 2)

    def mrope(n: int) -> Any:
        ids = _tokens((n - 8) // 3)
        b, t = len(ids), len(ids[0])
        return (
            "/v1/position-ids/mrope",
            {},
            {"input_ids": ids, "config": QWEN2_VL},
            None,
            None,
            (3 * b * t + b),
        )

    for fmt in ("json", "safetensors"):
        cases.append(Case(f"position-ids {fmt} (JSON ids)", position_ids, fmt, dtype=""))
        cases.append(Case(f"position-ids {fmt} (npy ids)", position_ids_npy, fmt, dtype=""))
        cases.append(Case(f"mrope {fmt} (JSON ids)", mrope, fmt, dtype=""))
        cases.append(Case(f"embed {fmt} float32 (npy ids)", embed_npy, fmt))
    return cases


def free_port() -> int:
    """A free TCP port on the loopback address."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def proc_status(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` figure (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _send(url: str, case: Case, n: int) -> tuple[int, int, int, int]:
    """(status, body bytes, elements, JSON integers sent) of the case's request for ``n``."""
    from service.responses.plans import json_ints

    path, query, body, raw, content_type, elements = case.build(n)
    params = dict(query)
    params["format"] = case.fmt
    if case.base64:
        params["encoding"] = "base64"
    if raw is not None:
        for key, value in (body or {}).items():
            params[key] = str(value)
        headers = {"Content-Type": content_type or "application/octet-stream"}
        content: bytes = raw
    else:
        headers = {"Content-Type": "application/json"}
        content = json.dumps(body).encode()
    size = 0
    with (
        httpx.Client(timeout=600) as http,
        http.stream(
            "POST", url + path, params=params, content=content, headers=headers
        ) as response,
    ):
        for chunk in response.iter_bytes():
            size += len(chunk)
        status = response.status_code
        if status != 200:
            response.read()
    return status, size, elements, 0 if raw is not None else json_ints(body)


def measure(case: Case, elements: int, log_dir: Path) -> dict[str, Any]:
    """Start a service, warm the case up, reset the peak, send the max-size request."""
    from posenc.core import kinds
    from service.admission.budget import REQUEST_OVERHEAD, estimate_bytes

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.update(
        POSENC_DEVICE="cpu",
        POSENC_MAX_ELEMENTS=str(elements),
        POSENC_CACHE_BYTES="0",
        POSENC_MAX_INFLIGHT_BYTES=str(64 << 30),
        POSENC_ACCESS_LOG="false",
        # the largest JSON token batches are over the default 16 MiB body limit: measured whole
        POSENC_MAX_BODY_BYTES=str(1 << 31),
    )
    log = log_dir / (case.name.replace(" ", "_").replace("/", "_") + ".log")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "--host", HOST, "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        status, *_ = _send(url, case, case.small)
        if status != 200:
            raise RuntimeError(f"{case.name}: warm-up status {status}: {log.read_text()[-2000:]}")
        time.sleep(0.3)
        baseline = proc_status(proc.pid, "VmRSS")
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        status, size, n, ints = _send(url, case, elements)
        peak = proc_status(proc.pid, "VmHWM")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    route = case.build(case.small)[0]
    work = next((k.work_bytes_per_element for k in kinds.REGISTRY.values() if k.path == route), 0)
    estimate = estimate_bytes(
        n,
        case.fmt,
        base64=case.base64,
        dtype=case.dtype,
        work_bytes_per_element=work,
        json_ints=ints,
    )
    return {
        "case": case.name,
        "status": status,
        "elements": n,
        "body_bytes": size,
        "baseline": baseline,
        "peak_over": peak - baseline,
        "measured_per_element": (peak - baseline) / n,
        "estimate_per_element": (estimate - REQUEST_OVERHEAD) / n,
        "ratio": (peak - baseline) / max(1, estimate),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 24, help="POSENC_MAX_ELEMENTS")
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    # a SIGTERM unwinds (stopping the service being measured) instead of leaving it running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = []
    print(
        "| case | elements | body MB | peak over baseline MiB | measured B/elem | estimate B/elem | measured / estimate |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for case in _cases():
            if args.only and args.only not in case.name:
                continue
            row = measure(case, args.elements, Path(tmp))
            rows.append(row)
            print(
                f"| {row['case']} | {row['elements']:,} | {row['body_bytes'] / 1e6:.0f} | "
                f"{row['peak_over'] / MiB:.0f} | {row['measured_per_element']:.1f} | "
                f"{row['estimate_per_element']:.0f} | {row['ratio']:.2f}"
                + ("" if row["status"] == 200 else f" (status {row['status']})")
                + " |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
