"""Reliability of the service under faults, abuse and load, through a real uvicorn on loopback.

Each test drives ``python -m service`` in a subprocess: oversized requests are refused with 413
before anything is allocated (the server's memory does not move); 8 concurrent clients for a few
seconds get byte-identical correct answers with no error and no memory growth; clients that
disconnect mid-response, or send and read byte by byte, leave the server healthy; malformed,
hostile and fuzzed bodies get a 4xx JSON ``detail``, never a 5xx; and SIGTERM lets an in-flight
response finish before the process exits 0.

Timing is never a pass/fail criterion here except generous "does not hang" timeouts.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import clean_env, free_port, start_service, stop_service, wait_ready
from tests.references import sinusoidal

HOST = "127.0.0.1"
MAX_ELEMENTS = 4_194_304  # POSENC_MAX_ELEMENTS of the server under test: 4096 x 1024
HANG_S = 30.0  # "does not hang": far above any honest answer on a busy 2-core machine
MiB = 1024 * 1024

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------- the live server


@dataclass
class LiveServer:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _pids(self) -> list[int]:
        """The server process and its descendants (uvicorn workers, if any)."""
        pids, parents = [self.proc.pid], dict[int, list[int]]()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry.name)
                )
        todo = [self.proc.pid]
        while todo:
            kids = parents.get(todo.pop(), [])
            pids += kids
            todo += kids
        return pids

    def memory(self, field: str = "VmRSS") -> int:
        """``field`` of /proc/PID/status in bytes, summed over the server's processes."""
        total = 0
        for pid in self._pids():
            try:
                text = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            match = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
            total += int(match.group(1)) * 1024 if match else 0
        return total

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(log_path: Path, **env: str) -> LiveServer:
    """``python -m service`` on a free loopback port (conftest's helpers), ready to serve."""
    port = free_port()
    # POSENC_MAX_STREAM_ELEMENTS = POSENC_MAX_ELEMENTS: nothing streams, every output over the
    # limit is a 413 (streaming's own memory bound: tests/test_streaming.py)
    environment = clean_env(
        POSENC_MAX_ELEMENTS=str(MAX_ELEMENTS), POSENC_DEVICE="cpu", POSENC_LOG_LEVEL="info",
        POSENC_MAX_STREAM_ELEMENTS=str(MAX_ELEMENTS), **env,
    )  # fmt: skip
    server = LiveServer(start_service(port, log_path, environment), port, log_path)
    wait_ready(server.proc, server.url, log_path)
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("reliability") / "server.log")
    yield live
    stop_service(live.proc)


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=HANG_S) as c:
        yield c


# --------------------------------------------------------------------------- helpers


def assert_healthy(server: LiveServer) -> None:
    """The process runs, /healthz is 200 and a normal request gives the right table."""
    assert server.proc.poll() is None, server.log_text()[-3000:]
    with httpx.Client(base_url=server.url, timeout=HANG_S) as c:
        assert c.get("/healthz").status_code == 200
        r = c.post("/v1/encodings/sinusoidal", json={"seq_len": 16, "d_model": 8})
        assert r.status_code == 200, r.text
        got = np.array(r.json()["tensors"]["encoding"]["data"], dtype=np.float64)
        np.testing.assert_allclose(got, sinusoidal(range(16), 8), rtol=0, atol=1e-6)


def assert_no_tracebacks(server: LiveServer) -> None:
    log = server.log_text()
    assert "Traceback" not in log, log[-5000:]


def assert_4xx_detail(r: httpx.Response, what: object) -> None:
    assert 400 <= r.status_code < 500, f"{what!r} -> {r.status_code}: {r.text[:500]}"
    assert r.headers["content-type"].startswith("application/json"), (what, r.headers)
    body = r.json()
    assert body.get("detail"), (what, body)


def raw_request(path: str, body: bytes, accept: str = "application/octet-stream") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"Accept: {accept}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read up to the end of the response head: (status, headers, body bytes already read)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before the response head: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, rest


def connect(server: LiveServer) -> socket.socket:
    sock = socket.create_connection((HOST, server.port), timeout=HANG_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# --------------------------------------------------------------------------- 413 and memory

OVERSIZED: list[tuple[str, dict[str, Any], int]] = [
    # (path, body, elements asked): far over the limit, and just over it
    ("/v1/encodings/sinusoidal", {"seq_len": 1_000_000, "d_model": 100_000}, 100_000_000_000),
    ("/v1/encodings/sinusoidal", {"seq_len": 65_537, "d_model": 64}, 65_537 * 64),
    (
        "/v1/encodings/sinusoidal",
        {"seq_len": 65_537, "d_model": 64, "dtype": "float64"},
        65_537 * 64,
    ),
    ("/v1/encodings/learned", {"seq_len": 2_000_000, "d_model": 4096}, 2_000_000 * 4096),
    ("/v1/biases/alibi", {"num_heads": 64, "seq_len": 8192}, 64 * 8192 * 8192 + 64),
    ("/v1/biases/relative", {"seq_len": 2048, "key_len": 2049}, 2048 * 2049),
    ("/v1/biases/relative", {"seq_len": 1024, "num_heads": 12}, 1024 * 1024 * 13),
    # rope: cos and sin (T, R) and inv_freq (R/2)
    ("/v1/encodings/rope", {"seq_len": 1_000_000, "head_dim": 128}, 2 * 1_000_000 * 128 + 64),
]


def test_oversized_requests_are_413_before_allocating(
    server: LiveServer, client: httpx.Client
) -> None:
    """Every oversized request is a 413 naming the limit and the size asked; memory stays put."""
    for path, body, _ in OVERSIZED:  # warm-up: first-use imports, thread pool, caches
        client.post(path, json=body)
    rss_before, peak_before = server.memory("VmRSS"), server.memory("VmHWM")
    for _ in range(10):
        for path, body, asked in OVERSIZED:
            r = client.post(path, json=body, headers={"accept": "application/octet-stream"})
            assert r.status_code == 413, (path, body, r.status_code, r.text[:300])
            assert r.headers["content-type"].startswith("application/json")
            digits = re.sub(
                r"[,_\s]",
                "",
                r.json()["detail"]
                if isinstance(r.json()["detail"], str)
                else json.dumps(r.json()["detail"]),
            )
            assert str(MAX_ELEMENTS) in digits, (body, r.json())
            assert str(asked) in digits, (body, asked, r.json())
    rss_after, peak_after = server.memory("VmRSS"), server.memory("VmHWM")
    # Allocating even the smallest of these (65,537 x 64 float64) would move the peak by 32 MiB.
    assert rss_after - rss_before < 16 * MiB, (rss_before, rss_after)
    assert peak_after - peak_before < 24 * MiB, (peak_before, peak_after)
    assert_healthy(server)


# --------------------------------------------------------------------------- load

LOAD_MIX: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/encodings/sinusoidal", {"seq_len": 128, "d_model": 64}, "application/json"),
    ("/v1/encodings/sinusoidal", {"seq_len": 512, "d_model": 256}, "application/octet-stream"),
    ("/v1/encodings/rope", {"seq_len": 256, "head_dim": 64}, "application/vnd.safetensors"),
    ("/v1/biases/alibi", {"num_heads": 8, "seq_len": 64}, "application/json"),
    ("/v1/embed", {"input_ids": [[1, 2, 3, 4], [5, 6]]}, "application/octet-stream"),
    ("/v1/position-ids", {"input_ids": [[5, 6, 7], [8, 9]], "pad_token_id": 0}, "application/json"),
]


def _hammer(
    url: str, seconds: float, expected: list[bytes], failures: list[str], counts: list[int]
):
    with httpx.Client(base_url=url, timeout=HANG_S) as c:
        deadline, i = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            path, body, accept = LOAD_MIX[i % len(LOAD_MIX)]
            try:
                r = c.post(path, json=body, headers={"accept": accept})
                if r.status_code != 200 or r.content != expected[i % len(LOAD_MIX)]:
                    failures.append(f"{path} {body}: {r.status_code} {r.content[:200]!r}")
            except httpx.HTTPError as exc:
                failures.append(f"{path} {body}: {exc!r}")
            i += 1
        counts.append(i)


def _load(
    server: LiveServer, clients: int, seconds: float, expected: list[bytes]
) -> tuple[list[str], int]:
    failures: list[str] = []
    counts: list[int] = []
    threads = [
        threading.Thread(target=_hammer, args=(server.url, seconds, expected, failures, counts))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + HANG_S)
        assert not t.is_alive(), "a load client hangs"
    return failures, sum(counts)


@pytest.mark.slow
def test_eight_clients_under_load_get_identical_answers_without_memory_growth(
    server: LiveServer, client: httpx.Client
) -> None:
    """8 concurrent clients for 5 s: every answer 200 and byte-identical to a lone request's."""
    expected = []
    for path, body, accept in LOAD_MIX:
        r = client.post(path, json=body, headers={"accept": accept})
        assert r.status_code == 200, (path, r.text[:300])
        expected.append(r.content)
    failures, _ = _load(server, 8, 1.5, expected)  # warm-up: threads, arenas, caches
    assert failures == []
    rss_before = server.memory("VmRSS")
    failures, done = _load(server, 8, 5.0, expected)
    rss_after = server.memory("VmRSS")
    assert failures == [], failures[:5]
    assert done >= 8, done
    assert rss_after - rss_before < 48 * MiB, (rss_before, rss_after, done)
    assert_healthy(server)


# --------------------------------------------------------------------------- misbehaving clients

BIG = b'{"seq_len": 4096, "d_model": 1024}'  # 16 MiB raw, 4,194,304 elements: just at the limit
SLOW = b'{"seq_len": 1024, "d_model": 1024}'  # 4 MiB raw


def test_clients_that_disconnect_mid_response_leave_the_server_healthy(server: LiveServer) -> None:
    """Read a little of a 16 MiB answer, then close (politely, or with a reset)."""
    for i in range(6):
        accept = "application/json" if i % 3 == 2 else "application/octet-stream"
        sock = connect(server)
        sock.sendall(raw_request("/v1/encodings/sinusoidal", BIG, accept))
        status, _, _ = read_head(sock)
        assert status == 200
        sock.recv(4096)
        if i % 2:  # RST instead of FIN
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        sock.close()
    # and one that goes away before any answer at all
    sock = connect(server)
    sock.sendall(raw_request("/v1/encodings/sinusoidal", BIG)[:-5])
    sock.close()
    time.sleep(0.5)
    assert_healthy(server)
    assert_no_tracebacks(server)


def test_a_client_sending_byte_by_byte_neither_blocks_others_nor_breaks(
    server: LiveServer, client: httpx.Client
) -> None:
    body = b'{"seq_len": 32, "d_model": 16}'
    request = raw_request("/v1/encodings/sinusoidal", body, "application/json")
    sock = connect(server)
    done = threading.Event()

    def others() -> None:
        while not done.is_set():  # other clients are served meanwhile
            assert client.get("/healthz").status_code == 200
            time.sleep(0.05)

    side = threading.Thread(target=others)
    side.start()
    try:
        for byte in request:
            sock.sendall(bytes([byte]))
            time.sleep(0.004)
        status, headers, rest = read_head(sock)
        while len(rest) < int(headers["content-length"]):
            chunk = sock.recv(65536)
            assert chunk
            rest += chunk
    finally:
        done.set()
        side.join(HANG_S)
        sock.close()
    assert status == 200
    got = np.array(json.loads(rest)["tensors"]["encoding"]["data"])
    np.testing.assert_allclose(got, sinusoidal(range(32), 16), rtol=0, atol=1e-6)
    assert_healthy(server)


def test_a_client_reading_slowly_gets_every_byte_and_others_are_served(
    server: LiveServer, client: httpx.Client
) -> None:
    """A 4 MiB answer through a 16 KiB receive buffer, read in sips with pauses."""
    expected = client.post(
        "/v1/encodings/sinusoidal",
        content=SLOW,
        headers={"content-type": "application/json", "accept": "application/octet-stream"},
    ).content
    assert len(expected) == 1024 * 1024 * 4
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # keep the server waiting on us
    sock.settimeout(HANG_S)
    sock.connect((HOST, server.port))
    try:
        sock.sendall(raw_request("/v1/encodings/sinusoidal", SLOW))
        status, headers, body = read_head(sock)
        assert status == 200
        reads = 0
        while len(body) < int(headers["content-length"]):
            chunk = sock.recv(256 * 1024)
            assert chunk, "server closed mid-body"
            body += chunk
            reads += 1
            if reads % 32 == 0:
                time.sleep(0.02)
                # the server answers others while this response trickles out
                assert client.get("/healthz").status_code == 200
    finally:
        sock.close()
    assert body == expected
    table = np.frombuffer(body, dtype="<f4").reshape(1024, 1024)
    np.testing.assert_allclose(table[:4], sinusoidal(range(4), 1024), rtol=0, atol=1e-6)
    assert_healthy(server)


# --------------------------------------------------------------------------- malformed bodies

SIN = "/v1/encodings/sinusoidal"

# (path, raw body, content type): each must be a 4xx with a JSON detail
MALFORMED: list[tuple[str, bytes, str]] = [
    (SIN, b'{"seq_len": 4,', "application/json"),
    (SIN, b"", "application/json"),
    (SIN, b"null", "application/json"),
    (SIN, b"[1, 2]", "application/json"),
    (SIN, b'"seq_len"', "application/json"),
    (SIN, b"\xff\xfe{\x00", "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8}', "text/plain"),
    (SIN, b'{"seq_len": "ten", "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 7}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 3.5}', "application/json"),
    (SIN, b'{"seq_len": true, "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "layout": 5}', "application/json"),
    (SIN, b'{"positions": "1,2", "d_model": 8}', "application/json"),
    (SIN, b'{"positions": [[1, 2], [3]], "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "colour": "red"}', "application/json"),
    (SIN, b'{"seq_len": NaN, "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "base": NaN}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "base": Infinity}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "base": -Infinity}', "application/json"),
    (SIN, b'{"seq_len": Infinity, "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": -1, "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 0, "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": -2}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "offset": -5}', "application/json"),
    (SIN, b'{"positions": [-1], "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "offset": 9223372036854775808}', "application/json"),
    (SIN, b'{"positions": [18446744073709551616], "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "base": 1e400}', "application/json"),
    (SIN, b'{"seq_len": 1' + b"0" * 40 + b', "d_model": 8}', "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 1' + b"0" * 5000 + b"}", "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": 8, "dtype": "int8"}', "application/json"),
    (SIN, b'{"seq_len": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json"),
    (SIN, b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "application/json"),
    (SIN, b'{"seq_len": 4, "d_model": ' + b"[" * 500 + b"]" * 500 + b"}", "application/json"),
    (
        "/v1/encodings/learned",
        b'{"seq_len": 4, "d_model": 8, "seed": 18446744073709551616}',
        "application/json",
    ),
    ("/v1/encodings/learned", b'{"seq_len": 4, "d_model": 8, "seed": -1e999}', "application/json"),
    (
        "/v1/encodings/learned",
        b'{"seq_len": 4, "d_model": 8, "model": "no-such-model"}',
        "application/json",
    ),
    ("/v1/encodings/rope", b'{"seq_len": 4, "head_dim": 8, "base": NaN}', "application/json"),
    ("/v1/encodings/rope", b'{"seq_len": 4, "head_dim": 7}', "application/json"),
    ("/v1/encodings/rope", b'{"seq_len": 4, "head_dim": 8, "rotary_dim": 16}', "application/json"),
    (
        "/v1/encodings/rope",
        b'{"seq_len": 4, "head_dim": 8, "scaling": {"type": "linear", "factor": NaN}}',
        "application/json",
    ),
    (
        "/v1/encodings/rope",
        b'{"seq_len": 4, "head_dim": 8, "scaling": {"type": "warp"}}',
        "application/json",
    ),
    (
        "/v1/encodings/rope",
        b'{"seq_len": 4, "head_dim": 8, "preset": "no-such-preset"}',
        "application/json",
    ),
    ("/v1/biases/alibi", b'{"num_heads": -1, "seq_len": 4}', "application/json"),
    (
        "/v1/biases/alibi",
        b'{"num_heads": 4, "seq_len": 4, "max_bias": Infinity}',
        "application/json",
    ),
    ("/v1/biases/alibi", b'{"num_heads": 4, "seq_len": 8, "key_len": 4}', "application/json"),
    ("/v1/biases/relative", b'{"seq_len": 4, "num_buckets": 0}', "application/json"),
    (
        "/v1/biases/relative",
        b'{"seq_len": 4, "num_heads": 2, "seed": 99999999999999999999999}',
        "application/json",
    ),
    ("/v1/position-ids", b'{"input_ids": [1, 2, 3]}', "application/json"),
    ("/v1/position-ids", b'{"input_ids": []}', "application/json"),
    (
        "/v1/position-ids",
        b'{"input_ids": [[1, 2], [3]], "attention_mask": [[1, 1], [1, 1]]}',
        "application/json",
    ),
    (
        "/v1/position-ids",
        b'{"input_ids": [[1, 2]], "attention_mask": [[1, 7]]}',
        "application/json",
    ),
    ("/v1/embed", b'{"input_ids": [[1, "a"]]}', "application/json"),
    ("/v1/embed", b'{"input_ids": [[[1]]]}', "application/json"),
    ("/v1/embed", b'{"input_ids": [[1, 99999999]]}', "application/json"),
    ("/v1/embed", b'{"input_ids": [[1, -1]]}', "application/json"),
    ("/v1/embed", b'{"input_ids": [[1, 36893488147419103232]]}', "application/json"),
    ("/v1/embed", b'{"input_ids": [[1, 2]], "model": "no-such-model"}', "application/json"),
    ("/v1/embed", b'{"input_ids": [[1, 2]], "position_ids": [[0, 99999999]]}', "application/json"),
    ("/v1/embed", b'{"input_ids": [[1, 2]], "positional": "rotary"}', "application/json"),
    # huge nested lists: a million token ids (8 MB of JSON), and an output over the limit
    ("/v1/embed", json.dumps({"input_ids": [[7] * 1000] * 1000}).encode(), "application/json"),
    (
        "/v1/position-ids",
        json.dumps({"input_ids": [[[7] * 100] * 100] * 10}).encode(),
        "application/json",
    ),
    (
        SIN,
        json.dumps({"positions": list(range(300_000)), "d_model": 64}).encode(),
        "application/json",
    ),
]


def test_malformed_and_hostile_bodies_get_4xx_json_never_5xx(
    server: LiveServer, client: httpx.Client
) -> None:
    for path, body, content_type in MALFORMED:
        r = client.post(
            path, content=body, headers={"content-type": content_type, "accept": "application/json"}
        )
        assert_4xx_detail(r, (path, body[:120]))
    for query in (
        "seq_len=abc&d_model=8",
        "seq_len=4&d_model=8&positions=1,x",
        "seq_len=4&d_model=8&base=nan",
        "seq_len=-4&d_model=8",
        "seq_len=4&d_model=8&format=gif",
    ):
        r = client.get(f"{SIN}?{query}")
        assert_4xx_detail(r, query)
    r = client.get("/v1/encodings/rope?seq_len=4&head_dim=8&scaling={not json")
    assert_4xx_detail(r, "rope scaling not JSON")
    assert_healthy(server)
    assert_no_tracebacks(server)


# --------------------------------------------------------------------------- fuzzing

FIELDS: dict[str, list[str]] = {
    "/v1/encodings/sinusoidal": [
        "seq_len",
        "positions",
        "d_model",
        "base",
        "layout",
        "offset",
        "dtype",
    ],
    "/v1/encodings/learned": ["seq_len", "d_model", "model", "seed", "preset", "dtype"],
    "/v1/encodings/rope": [
        "seq_len",
        "positions",
        "head_dim",
        "rotary_dim",
        "base",
        "layout",
        "scaling",
        "preset",
        "dtype",
    ],
    "/v1/biases/alibi": ["num_heads", "seq_len", "key_len", "mode", "max_bias", "preset", "dtype"],
    "/v1/biases/relative": [
        "seq_len",
        "key_len",
        "num_buckets",
        "max_distance",
        "bidirectional",
        "bucketing",
        "num_heads",
        "seed",
        "preset",
        "dtype",
    ],
    "/v1/position-ids": [
        "input_ids",
        "pad_token_id",
        "attention_mask",
        "padding_side",
        "start",
        "pad_position",
    ],
    "/v1/embed": [
        "input_ids",
        "model",
        "attention_mask",
        "pad_token_id",
        "padding_side",
        "positional",
        "scale",
        "position_ids",
        "dtype",
    ],
}

_leaf = st.one_of(
    st.integers(-3, 70),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "float32",
            "bfloat16",
            "float64",
            "interleaved",
            "concat",
            "half",
            "causal",
            "clip",
            "left",
            "llama-2-7b",
            "t5-base",
            "gpt2",
            "yarn",
            "",
            "\x00",
            "é",
        ]
    ),
    st.booleans(),
    st.none(),
)
_value = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(
            st.sampled_from(["type", "factor", "x", "original_max_position_embeddings"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=12,
)
_request = st.sampled_from(sorted(FIELDS)).flatmap(
    lambda path: st.tuples(
        st.just(path),
        st.dictionaries(st.sampled_from(FIELDS[path]), _value, max_size=6),
        st.sampled_from(
            [
                "application/json",
                "application/octet-stream",
                "application/vnd.safetensors",
                "application/x-npy",
                "image/png",
            ]
        ),
    )
)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=_request)
def test_fuzzed_bodies_never_get_a_5xx(
    server: LiveServer, request: tuple[str, dict[str, Any], str]
) -> None:
    path, body, accept = request
    with httpx.Client(base_url=server.url, timeout=HANG_S) as c:
        r = c.post(
            path,
            content=json.dumps(body, allow_nan=True).encode(),
            headers={"content-type": "application/json", "accept": accept},
        )
    assert r.status_code < 500, (path, body, accept, r.status_code, r.text[:500])
    if r.status_code >= 400:
        assert_4xx_detail(r, (path, body))


def test_the_server_is_still_healthy_after_the_fuzzing(server: LiveServer) -> None:
    assert_healthy(server)
    assert_no_tracebacks(server)


# --------------------------------------------------------------------------- graceful shutdown


def test_sigterm_lets_the_in_flight_response_finish_then_exits_0(tmp_path: Path) -> None:
    live = start_server(tmp_path / "server.log")
    try:
        sock = connect(live)
        sock.sendall(raw_request("/v1/encodings/sinusoidal", BIG))
        status, headers, body = read_head(sock)  # the response has begun ...
        live.proc.send_signal(signal.SIGTERM)  # ... and the server is told to stop
        time.sleep(0.5)  # the server must wait for us, not drop the connection
        while len(body) < int(headers["content-length"]):
            chunk = sock.recv(1 << 20)
            assert chunk, f"connection closed after {len(body)} bytes"
            body += chunk
        sock.close()
        assert status == 200
        assert len(body) == MAX_ELEMENTS * 4
        table = np.frombuffer(body, dtype="<f4").reshape(4096, 1024)
        np.testing.assert_allclose(
            table[-2:], sinusoidal(range(4096), 1024)[-2:], rtol=0, atol=1e-6
        )
        assert live.proc.wait(timeout=HANG_S) == 0, live.log_text()[-3000:]
        with pytest.raises(httpx.ConnectError):  # and it is really gone
            httpx.get(live.url + "/healthz", timeout=5)
    finally:
        stop_service(live.proc)
