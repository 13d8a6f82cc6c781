"""The benchmark's harness: servers started on free loopback ports, paired timing, results.

Shared by ``python -m bench`` (bench/__main__.py) and its cold cases (bench/cold.py), which
both import it and never each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "bench" / "out"  # server logs (git-ignored)
HOST = "127.0.0.1"
NOTES_MARKER = "<!-- notes: everything below this line is kept when --out rewrites the file -->"

JSON = "application/json"
RAW = "application/octet-stream"
SAFETENSORS = "application/vnd.safetensors"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def start(name: str, argv: list[str], env: dict[str, str] | None = None) -> Server:
    port = free_port()
    argv = [a.replace("{port}", str(port)) for a in argv]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    log_path = OUT_DIR / f"{name}.log"
    with log_path.open("wb") as fh:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=fh, stderr=subprocess.STDOUT
        )
    log(f"started {name} (pid {proc.pid}): {shlex.join(argv)}")
    return Server(name, proc, port, log_path)


POSENC_APP: str | None = None  # --app: serve this ASGI app with uvicorn instead


def start_posenc(workers: int) -> Server:
    if POSENC_APP is None:
        argv = [sys.executable, "-m", "service", "--host", HOST, "--port", "{port}"]
    else:
        argv = [sys.executable, "-m", "uvicorn", POSENC_APP, "--host", HOST, "--port", "{port}"]
    return start(f"posenc-w{workers}", [*argv, "--workers", str(workers)])


def start_baseline(model: dict[str, int]) -> Server:
    # uvicorn's defaults, as `python -m service` uses them: same loop, HTTP parser, access log.
    argv = [sys.executable, "-m", "uvicorn", "bench.baseline:app", "--host", HOST]
    env = {
        "BENCH_VOCAB_SIZE": str(model["vocab_size"]),
        "BENCH_D_MODEL": str(model["d_model"]),
        "BENCH_MAX_POSITIONS": str(model["max_positions"]),
    }
    return start("baseline", [*argv, "--port", "{port}"], env)


def start_posenc_and_baseline(
    res: Results, servers: list[Server]
) -> tuple[Server, Server, dict[str, Any]]:
    """posenc (one worker) and the baseline at the default model's sizes, both ready, and that
    model's entry of ``/v1/models``; each server is appended to ``servers`` as it starts (the
    caller stops them all, also after a failure), and ``res.device`` says what posenc computes
    on."""
    posenc = start_posenc(1)
    servers.append(posenc)
    wait_ready(posenc, "/readyz")
    res.device = describe_device(httpx.get(posenc.url + "/v1/info", timeout=10).json())
    models = httpx.get(posenc.url + "/v1/models", timeout=10).json()
    default = next(m for m in models["models"] if m["name"] == models["default"])
    baseline = start_baseline(default)
    servers.append(baseline)
    wait_ready(baseline, "/healthz")
    return posenc, baseline, default


def wait_ready(server: Server, path: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            tail = server.log_path.read_text(errors="replace")[-3000:]
            raise SystemExit(f"{server.name} exited with {server.proc.returncode}:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + path, timeout=2.0).status_code == 200:
                log(f"{server.name} ready on port {server.port}")
                return
        time.sleep(0.2)
    raise SystemExit(f"{server.name} not ready on {server.url}{path} after {timeout:.0f} s")


def stop(server: Server) -> int | None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    return server.proc.returncode


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (uvicorn's worker processes and their helpers)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def peak_rss_kib(pid: int) -> dict[int, int]:
    """``VmHWM`` (peak resident set, KiB) of ``pid`` and of each of its descendants."""
    peaks: dict[int, int] = {}
    for p in [pid, *_children(pid)]:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks[p] = int(line.split()[1])
    return peaks


# --------------------------------------------------------------------------- measuring


@dataclass
class Call:
    """One request, prebuilt: where to send it and the bytes of its body."""

    url: str
    body: bytes
    accept: str

    def send(self, client: httpx.Client) -> httpx.Response:
        headers = {"content-type": JSON, "accept": self.accept}
        r = client.post(self.url, content=self.body, headers=headers)
        if r.status_code != 200:
            raise SystemExit(f"POST {self.url} -> {r.status_code}: {r.text[:500]}")
        return r


@dataclass
class Timing:
    median_s: float
    n: int
    samples: list[float] = field(repr=False)


def _timing(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), len(samples), samples)


def paired_ratio(num: Timing, den: Timing) -> float:
    """Median of the ratios of requests sent back to back (``compare`` alternates the two).

    Steadier than the ratio of the medians when other work on the machine comes and goes.
    """
    return statistics.median(a / b for a, b in zip(num.samples, den.samples, strict=False))


def compare(
    client: httpx.Client,
    a: Callable[[int], Call],
    b: Callable[[int], Call],
    *,
    warmup: int,
    reps: int,
    budget_s: float,
    check: Callable[[httpx.Response, httpx.Response], None] | None = None,
    min_reps: int = 3,
) -> tuple[Timing, Timing, httpx.Response]:
    """Median wall time of ``a(i)`` and of ``b(i)``, alternated; at least ``min_reps`` reps each
    (then up to ``reps`` while ``budget_s`` lasts)."""
    for i in range(warmup):
        a(-1 - i).send(client)
        b(-1 - i).send(client)
    ta: list[float] = []
    tb: list[float] = []
    deadline = time.perf_counter() + budget_s
    last_a = last_b = None
    for i in range(reps):
        for call, sink in ((a(i), ta), (b(i), tb)) if i % 2 == 0 else ((b(i), tb), (a(i), ta)):
            t0 = time.perf_counter()
            r = call.send(client)
            sink.append(time.perf_counter() - t0)
            if sink is ta:
                last_a = r
            else:
                last_b = r
        if i >= min_reps - 1 and time.perf_counter() > deadline:
            break
    assert last_a is not None and last_b is not None
    if check is not None:
        check(last_a, last_b)
    return _timing(ta), _timing(tb), last_a


def same_bytes(a: httpx.Response, b: httpx.Response) -> None:
    if a.content != b.content:
        raise SystemExit(
            f"ceiling body differs from posenc's ({len(a.content)} vs {len(b.content)})"
        )


async def _load(
    port: int, request: bytes, clients: int, duration_s: float
) -> tuple[int, int, list[float]]:
    """``clients`` keep-alive connections sending ``request`` in a loop for ``duration_s``.

    A bare asyncio HTTP/1.1 client: it costs far less CPU per request than httpx, so on a small
    machine the load generator takes as little as possible from the server under test.
    """
    ok = errors = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + duration_s

    async def one() -> None:
        nonlocal ok, errors
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                headers = head.decode("latin-1").lower()
                if "transfer-encoding: chunked" in headers:
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                        await reader.readexactly(size + 2)
                        if size == 0:
                            break
                else:
                    length = int(headers.split("content-length:")[1].split("\r\n")[0])
                    await reader.readexactly(length)
                latencies.append(time.perf_counter() - t0)
                if status == 200:
                    ok += 1
                else:
                    errors += 1
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            errors += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(clients)))
    return ok, errors, latencies


def throughput(port: int, path: str, body: bytes, accept: str, clients: int, duration_s: float):
    request = (
        f"POST {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\ncontent-type: {JSON}\r\n"
        f"accept: {accept}\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body
    asyncio.run(_load(port, request, clients, min(1.0, duration_s / 3)))  # warm-up
    ok, errors, lat = asyncio.run(_load(port, request, clients, duration_s))
    return ok / duration_s, errors, statistics.median(lat) if lat else float("nan")


# --------------------------------------------------------------------------- the run


@dataclass
class Row:
    case: str
    posenc_ms: float
    other: str  # what posenc is compared with
    other_ms: float
    ratio: float  # how the target is stated: baseline/posenc for "faster", posenc/other else
    target: str
    met: bool | None
    note: str = ""


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)  # (what, figure)
    loads: list[str] = field(default_factory=list)
    device: str = "unknown"  # where posenc computed its tables (/v1/info)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _body(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _ids(rows: int, tokens: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(tokens)] for _ in range(rows)]


def _server_timing(r: httpx.Response) -> str:
    return r.headers.get("server-timing", "")


def describe_device(info: dict[str, object]) -> str:
    """posenc's device from its /v1/info, with the GPU's name when it is a CUDA device."""
    device = str(info.get("device", "unknown"))
    if device.startswith("cuda"):
        import torch

        index = int(device.partition(":")[2] or 0)
        device += f" ({torch.cuda.get_device_name(index)})"
    return device + " (POSENC_DEVICE; CUDA when available)"
