"""What one very large JSON request body costs the service: wall time, status, peak RSS.

A fresh ``python -m service`` (CPU, the built-in model only) gets one small request first (so
lazy imports are in the baseline), then ``VmHWM`` is reset (``/proc/PID/clear_refs``) and one
body of ``--mb`` MB is sent, framed with ``Content-Length`` or chunked; the answer is read. The
figures: the status and the first bytes of its detail, the wall time from the first byte sent
to the last byte received, and the peak RSS of the service over its baseline.

    python -m bench.big_body                  # 200 MB, every case
    python -m bench.big_body --mb 50 --only ids

Cases: token ids (``{"input_ids": [[...]]}`` to ``/v1/position-ids``), one long string in a
field the endpoint does not have (``/v1/encodings/sinusoidal``), and ``text`` rows to
``/v1/embed`` and ``/v1/tokenize`` where the service reads text. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from bench.peak_rss import free_port, proc_status

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
MB = 1_000_000


def _ids_body(size: int) -> bytes:
    """``{"input_ids": [[12345, 12345, ...], ...]}`` of about ``size`` bytes, rows of 2048."""
    row = b"[" + b",".join([b"12345"] * 2048) + b"]"
    rows = max(1, size // (len(row) + 1))
    return b'{"input_ids": [' + b",".join([row] * rows) + b"]}"


def _string_body(size: int) -> bytes:
    """A table request with one unknown field holding a string of about ``size`` bytes."""
    return b'{"seq_len": 8, "d_model": 8, "junk": "' + b"a" * size + b'"}'


def _text_body(size: int) -> bytes:
    """``{"text": [...]}`` rows of 4 kB of English-like text, about ``size`` bytes in all."""
    word = b"position "
    row = b'"' + word * (4000 // len(word)) + b'"'
    rows = max(1, size // (len(row) + 1))
    return b'{"text": [' + b",".join([row] * rows) + b"]}"


CASES: dict[str, tuple[str, Callable[[int], bytes]]] = {
    "ids": ("/v1/position-ids", _ids_body),
    "string": ("/v1/encodings/sinusoidal", _string_body),
    "text": ("/v1/embed", _text_body),
    "tokenize": ("/v1/tokenize", _text_body),
}


def _chunks(body: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    view = memoryview(body)
    for start in range(0, len(body), size):
        yield bytes(view[start : start + size])


def measure(case: str, mb: float, chunked: bool, env: dict[str, str]) -> dict[str, object]:
    path, build = CASES[case]
    body = build(int(mb * MB))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "--host", HOST, "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "POSENC_DEVICE": "cpu", "POSENC_CACHE_BYTES": "0", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
        with httpx.Client(base_url=url, timeout=600) as client:
            client.post("/v1/position-ids", json={"input_ids": [[1, 2, 3]]})
            base = proc_status(proc.pid, "VmRSS")
            Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
            content = _chunks(body) if chunked else body
            headers = {"Content-Type": "application/json"}
            t0 = time.perf_counter()
            try:
                r = client.post(path, content=content, headers=headers)
                status, detail = r.status_code, r.text[:160]
            except httpx.HTTPError as exc:
                status, detail = 0, f"{type(exc).__name__}: {exc}"[:160]
            wall = time.perf_counter() - t0
            peak = proc_status(proc.pid, "VmHWM")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {
        "case": case,
        "path": path,
        "body MB": round(len(body) / MB, 1),
        "framing": "chunked" if chunked else "Content-Length",
        "status": status,
        "wall s": round(wall, 2),
        "baseline RSS MiB": round(base / 2**20),
        "peak over baseline MiB": round((peak - base) / 2**20),
        "detail": detail.replace("\n", " "),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.big_body", description=__doc__)
    parser.add_argument("--mb", type=float, default=200.0, help="body size in MB (default 200)")
    parser.add_argument("--only", default="", help="cases whose name contains this")
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the service (repeatable)"
    )
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    keys = ["case", "path", "body MB", "framing", "status", "wall s", "baseline RSS MiB",
            "peak over baseline MiB", "detail"]  # fmt: skip
    print("| " + " | ".join(keys) + " |")
    print("|" + " --- |" * len(keys))
    for case in CASES:
        if args.only not in case:
            continue
        for chunked in (False, True):
            row = measure(case, args.mb, chunked, env)
            print("| " + " | ".join(str(row[k]) for k in keys) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
