"""``python -m bench.ray_serve``: requests per second through Ray Serve with two replicas
(deploy/ray/serve.yaml on a local cluster bound to 127.0.0.1, deploy/ray/cluster.py) against
one ``python -m service`` process, on loopback.

Both sides run with ``POSENC_CACHE_BYTES=0`` (every request computed) and ``POSENC_DEVICE=cpu``;
each case is ``clients`` keep-alive connections sending the same request for ``--duration``
seconds after a warm-up (bench/__main__.py's load generator). Cases: a small table (128x64
JSON: the per-request cost of the path) and a larger one (RoPE 2048x128 raw: compute). The
load average is printed with the figures: the machine is shared, and the figures move with it.
Needs the ``ray`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.__main__ import HOST, throughput
from deploy.ray.cluster import LocalCluster, free_port

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("sinusoidal 128x64 JSON", "/v1/encodings/sinusoidal", {"seq_len": 128, "d_model": 64}, "application/json"),
    ("rope 2048x128 raw", "/v1/encodings/rope?format=raw", {"seq_len": 2048, "head_dim": 128}, "application/octet-stream"),
]  # fmt: skip


def measure(port: int, clients: int, duration: float) -> list[tuple[str, float, int, float]]:
    """``[(case, req/s, errors, median latency ms)]`` against the server on ``port``."""
    rows = []
    for name, path, body, accept in CASES:
        rps, errors, median = throughput(
            port, path, json.dumps(body).encode(), accept, clients, duration
        )
        rows.append((name, rps, errors, median * 1000))
    return rows


def plain_service(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "--host", HOST, "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{HOST}:{port}/readyz", timeout=2).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the plain service did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.update(POSENC_CACHE_BYTES="0", POSENC_DEVICE="cpu", POSENC_ACCESS_LOG="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    loads = {"start": os.getloadavg()}
    proc, port = plain_service(env)
    try:
        plain = measure(port, args.clients, args.duration)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    loads["after one process"] = os.getloadavg()
    cluster = LocalCluster(env={**env, "POSENC_DEVICE": "cpu"})
    cluster.start()
    try:
        cluster.wait_ready()
        ray = measure(cluster.http_port, args.clients, args.duration)
    finally:
        left = cluster.stop()
    loads["end"] = os.getloadavg()
    print(
        f"| case ({args.clients} clients, {args.duration:g} s) | one process | Ray Serve, 2 replicas | ratio |"
    )
    print("| --- | ---: | ---: | ---: |")
    for (name, a, ea, la), (_, b, eb, lb) in zip(plain, ray, strict=True):
        print(
            f"| {name} | {a:.0f} req/s, median {la:.1f} ms, {ea} errors "
            f"| {b:.0f} req/s, median {lb:.1f} ms, {eb} errors | {b / a:.2f}x |"
        )
    print(
        f"\nmachine: {os.cpu_count()} CPUs; load average (1, 5, 15 min): "
        + "; ".join(f"{k}: {' '.join(f'{x:.2f}' for x in v)}" for k, v in loads.items())
    )
    if left:
        print(f"Ray processes left: {left}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
