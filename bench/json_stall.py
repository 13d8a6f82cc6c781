"""How long the largest JSON bodies hold ``/healthz``: one row per JSON door.

A fresh ``python -m service`` (CPU, the built-in model only, access log off) on loopback gets
each body below, just under ``POSENC_MAX_BODY_BYTES`` (default 16 MiB), one at a time, while a
thread polls ``GET /healthz`` every 10 ms on its own keep-alive connection. A probe that waits
measures how long the event loop was held: a C call that holds the GIL (``json.loads``, pydantic's
validation) blocks the loop thread whichever thread makes it. The figures per body: its status,
its wall time, the server's CPU time for it (``/proc``), and the slowest ``/healthz`` while it ran.
One case is a small body whose JSON answer is large (16 M numbers), written the same way.

    python -m bench.json_stall                # every case, 16 MiB
    python -m bench.json_stall --mb 4 --only ids,text

Linux only (``/proc``). The target of issue 39 is a ``/healthz`` under 100 ms throughout.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.peak_rss import free_port

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
MiB = 1 << 20


def _fill(head: bytes, item: bytes, tail: bytes, size: int, sep: bytes = b",") -> bytes:
    """``head item,item,...,item tail`` of at most ``size`` bytes."""
    count = max(1, (size - len(head) - len(tail)) // (len(item) + len(sep)))
    return head + sep.join([item] * count) + tail


def _deep(size: int, depth: int = 500) -> bytes:
    """A ``config`` of arrays nested ``depth`` deep around a flat list of ints."""
    return _fill(
        b'{"seq_len": 4, "config": {"x": ' + b"[" * depth, b"7", b"]" * depth + b"}}", size
    )


def _keys(size: int) -> bytes:
    """A ``config`` object of as many small keys as fit."""
    body = bytearray(b'{"config": {')
    i = 0
    while len(body) < size - 64:
        body += b'"k%d": %d,' % (i, i)
        i += 1
    return bytes(body[:-1]) + b"}, " + b'"seq_len": 4}'


# (path, body of about SIZE bytes); every JSON door of the service, each with its worst body
CASES: dict[str, tuple[str, Callable[[int], bytes]]] = {
    "rope positions": (
        "/v1/encodings/rope",
        lambda n: _fill(b'{"head_dim": 8, "positions": [', b"1", b"]}", n),
    ),
    "rope long string": (
        "/v1/encodings/rope",
        lambda n: b'{"seq_len": 4, "junk": "' + b"a" * (n - 40) + b'"}',
    ),
    "rope escaped string": (
        "/v1/encodings/rope",
        lambda n: b'{"seq_len": 4, "junk": "' + b"\\u00e9" * ((n - 40) // 6) + b'"}',
    ),
    "rope config keys": ("/v1/encodings/rope", _keys),
    "rope deep 500": ("/v1/encodings/rope", _deep),
    "rope config lists": (
        "/v1/encodings/rope",
        lambda n: _fill(b'{"seq_len": 4, "config": {"x": [', b"[]", b"]}}", n),
    ),
    "position-ids empty rows": (
        "/v1/position-ids",
        lambda n: _fill(b'{"input_ids": [', b"[]", b"]}", n),
    ),
    "position-ids ids": (
        "/v1/position-ids",
        lambda n: _fill(b'{"input_ids": [[', b"12345", b"]]}", n),
    ),
    "embed ids bad last": (
        "/v1/embed",
        lambda n: _fill(b'{"input_ids": [[', b"1", b', "x"]]}', n),
    ),
    "tokenize strings": ("/v1/tokenize", lambda n: _fill(b'{"text": [', b'"a"', b"]}", n)),
    "detokenize ids": (
        "/v1/detokenize",
        lambda n: _fill(b'{"input_ids": [[', b"1", b"]]}", n),
    ),
    "apply q": (
        "/v1/rope/apply",
        lambda n: _fill(b'{"seq_len": 1, "q": [[[', b"0.5", b"]]]}", n),
    ),
    "shift keys": (
        "/v1/rope/shift",
        lambda n: _fill(b'{"positions": [0], "delta": 1, "k": [[[', b"0.5", b"]]]}", n),
    ),
    "check cos": (
        "/v1/configs/check",
        lambda n: _fill(b'{"head_dim": 4, "seq_len": 1, "cos": [[', b"0.5", b"]]}", n),
    ),
    "rope 16 M numbers out": (  # a small body whose JSON answer is large
        "/v1/encodings/rope",
        lambda n: b'{"seq_len": 8192, "head_dim": 1024}',
    ),
    "configs positions keys": ("/v1/configs/positions", _keys),
    "configs compare keys": ("/v1/configs/compare", _keys),
}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Poller(threading.Thread):
    """``GET /healthz`` every ``every`` seconds; ``window()`` gives the slowest since ``mark()``."""

    def __init__(self, url: str, every: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.samples: list[tuple[float, float]] = []  # (sent at, answered at)
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                start = time.perf_counter()
                client.get("/healthz").raise_for_status()
                self.samples.append((start, time.perf_counter()))
                time.sleep(self.every)

    def slowest(self, since: float, until: float) -> tuple[float, int]:
        """The slowest probe that was waiting at some moment between ``since`` and ``until``,
        and how many there were."""
        within = [done - sent for sent, done in self.samples if sent <= until and done >= since]
        return max(within, default=0.0), len(within)


def _post(port: int, path: str, body: bytes) -> tuple[int, str]:
    conn = http.client.HTTPConnection(HOST, port, timeout=300)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read()[:200].decode(errors="replace")
        return response.status, text
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=16.0, help="body size in MiB (default 16)")
    parser.add_argument("--only", default="", help="comma-separated case names (substrings)")
    args = parser.parse_args(argv)
    size = int(args.mb * MiB) - 1024
    wanted = [w for w in args.only.split(",") if w]
    cases = {k: v for k, v in CASES.items() if not wanted or any(w in k for w in wanted)}
    port = free_port()
    env = {**os.environ, "POSENC_DEVICE": "cpu", "POSENC_ACCESS_LOG": "false", "POSENC_MODELS": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "--host", HOST, "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the service did not start")
            time.sleep(0.2)
        _post(port, "/v1/encodings/rope", b'{"seq_len": 4, "head_dim": 8}')  # warm imports
        poller = Poller(url)
        poller.start()
        time.sleep(0.3)
        print(f"{'case':<24} {'MiB':>5} {'status':>6} {'wall s':>7} {'cpu s':>6} "
              f"{'max /healthz ms':>16} {'probes':>6}")  # fmt: skip
        for name, (path, build) in cases.items():
            body = build(size)
            cpu = _cpu_s(proc.pid)
            start = time.perf_counter()
            status, text = _post(port, path, body)
            end = time.perf_counter()
            time.sleep(0.1)  # the probe waiting at the end comes back
            slowest, probes = poller.slowest(start, end)
            spent = _cpu_s(proc.pid) - cpu
            print(f"{name:<24} {len(body) / MiB:5.1f} {status:>6} {end - start:7.2f} "
                  f"{spent:6.2f} {slowest * 1e3:16.0f} {probes:>6}", flush=True)  # fmt: skip
            if status >= 500:
                print("   ", json.dumps(text))
        poller.stop.set()
        poller.join()
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
