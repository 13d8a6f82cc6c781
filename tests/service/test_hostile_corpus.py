"""The hostile-input corpus of issue 39, through a real uvicorn on loopback.

A review sent main (23adc70) small hostile bodies and queries: GGUF heads of millions of tiny
key/values or empty arrays (8.5-8.7 s of CPU on the event loop), arrays nested 3,000 deep and a
zero alignment (500s), npy and safetensors shapes that overflow int64 (500s), query JSON nested
3,000 deep (500), a preset name of 100,000 characters (6.4 s), llama.cpp's engine precision at
``head_dim`` 16,777,216 (18.9 s), and GGUF or chunked binary bodies past the body limit (read
whole). Each case here, and its neighbours, must:

- answer its 4xx, with words that say why;
- cost the server under 1 s of CPU (its own ``utime + stime`` from ``/proc``: CPU time, unlike
  wall time, does not grow when other processes load the machine);
- leave the keep-alive connection usable: the next request on the same socket is answered
  (after a 500, uvicorn closed it). A body refused over the limit is not read, so that 413
  closes the connection on purpose (``Connection: close``); a new one is then served.

And ``/healthz`` keeps answering while hostile requests run (:func:`test_healthz_answers_while_
hostile_requests_run`), and while JSON bodies just under the body limit are parsed and validated
(:func:`test_healthz_answers_while_large_json_bodies_run`: ``json.loads`` and pydantic held the
GIL, hence the event loop, 0.3-3.6 s per 16 MiB body before they ran in slices). The target is
100 ms. The test machine has 2 cores shared with other test processes, where the scheduler can
keep a runnable process off the CPU for a few time slices whatever it does; so every probe must
answer within 5 x the target (500 ms), and the median within the target itself. A blocked event
loop fails both by far: the stalls above held ``/healthz`` for 6-19 s.
"""

from __future__ import annotations

import http.client
import json
import statistics
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from tests.helpers import HOST, clean_env, free_port, start_service, stop_service, wait_ready

pytestmark = pytest.mark.slow

MiB = 1 << 20
BODY_LIMIT = 16 * MiB  # the default POSENC_MAX_BODY_BYTES
CPU_LIMIT_S = 0.5  # POSENC_MAX_REQUEST_CPU_SECONDS of the server under test
CPU_BOUND_S = 1.0  # what one hostile request may cost the server
OCTET = {"Content-Type": "application/octet-stream"}
NPY = {"Content-Type": "application/x-npy"}
SAFETENSORS = {"Content-Type": "application/vnd.safetensors"}
JSON = {"Content-Type": "application/json"}


# ------------------------------------------------------------------------------------ bodies


def _s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _gguf(n_tensors: int, n_kv: int, rest: bytes) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + rest


def _array(item: int, count: int, payload: bytes, nested: int = 0) -> bytes:
    inner = struct.pack("<IQ", item, count) + payload
    for _ in range(nested):
        inner = struct.pack("<IQ", 9, 1) + inner
    return _s(b"a") + struct.pack("<I", 9) + inner


def _npy(shape: str, data: bytes = b"") -> bytes:
    header = f"{{'descr': '<i8', 'fortran_order': False, 'shape': {shape}, }}"
    text = (header + " " * (64 - (10 + len(header) + 1) % 64) + "\n").encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def _safetensors(shape: list[int], data: bytes = b"") -> bytes:
    entry = {"input_ids": {"dtype": "I64", "shape": shape, "data_offsets": [0, len(data)]}}
    header = json.dumps(entry).encode()
    return struct.pack("<Q", len(header)) + header + data


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _chunks(body: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    for at in range(0, len(body), size):
        yield body[at : at + size]


@dataclass(frozen=True)
class Case:
    """One hostile request and what it must answer."""

    name: str
    method: str
    path: str
    status: int
    words: str  # in the answer's detail
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    closes: bool = False  # a 413 over the body limit: the rest is never read

    @property
    def url(self) -> str:
        return self.path + ("?" + urlencode(self.query) if self.query else "")


KV13 = _s(b"") + struct.pack("<I", 0) + b"\x00"  # a 13-byte key/value pair
ROPE = "/v1/encodings/rope"
POSITIONS = "/v1/configs/positions"
BIG_GGUF = _gguf(0, 1, _array(0, 20 * MiB, b"\x00" * (20 * MiB)))

CASES = [
    # GGUF: counts over the budget, refused from the header
    Case("gguf 5.2 M key/values", "POST", POSITIONS, 422, "key/value pairs", _gguf(0, 5_200_000, KV13 * 200_000), OCTET),
    Case("gguf 65,537 key/values", "POST", POSITIONS, 422, "over the limit of 65536", _gguf(0, 65_537, KV13 * 65_537), OCTET),
    Case("gguf 65,536 key/values, no arch", "POST", POSITIONS, 422, "general.architecture", _gguf(0, 65_536, b"".join(_s(b"k%d" % i) + struct.pack("<I", 0) + b"\x00" for i in range(65_536))), OCTET),
    Case("gguf 5.5 M empty arrays", "POST", POSITIONS, 422, "array items", _gguf(0, 1, _array(9, 5_500_000, struct.pack("<IQ", 0, 0) * 1_000_000)), OCTET),
    Case("gguf 1 M empty arrays", "POST", POSITIONS, 422, "nested in arrays", _gguf(0, 1, _array(9, 1_000_000, struct.pack("<IQ", 0, 0) * 1_000_000)), OCTET),
    Case("gguf 1.5 M empty strings", "POST", POSITIONS, 422, "general.architecture", _gguf(0, 1, _array(8, 1_500_000, _s(b"") * 1_500_000)), OCTET),
    Case("gguf nested 3,000 deep", "POST", POSITIONS, 422, "nests arrays more than 3 deep", _gguf(0, 1, _array(0, 1, b"\x00", nested=3000)), OCTET),
    Case("gguf alignment 0", "POST", POSITIONS, 422, "general.alignment", _gguf(0, 1, _s(b"general.alignment") + struct.pack("<II", 4, 0)), OCTET),
    Case("gguf alignment false", "POST", POSITIONS, 422, "general.alignment", _gguf(0, 1, _s(b"general.alignment") + struct.pack("<I", 7) + b"\x00"), OCTET),
    Case("gguf alignment 3", "POST", ROPE, 422, "power of two", _gguf(0, 1, _s(b"general.alignment") + struct.pack("<II", 4, 3)), OCTET),
    Case("gguf tensor of 2^80 elements", "POST", POSITIONS, 422, "2^63 - 1 elements", _gguf(1, 0, _s(b"t") + struct.pack("<IQQ", 2, 2**40, 2**40) + struct.pack("<IQ", 0, 0)), OCTET),
    # GGUF past the body limit, declared or chunked
    Case("gguf 20 MiB", "POST", POSITIONS, 413, "POSENC_MAX_BODY_BYTES", BIG_GGUF, OCTET, closes=True),
    Case("gguf 20 MiB chunked", "POST", ROPE, 413, "POSENC_MAX_BODY_BYTES", BIG_GGUF, OCTET, chunked=True, closes=True),
    # npy and safetensors shapes that overflow int64
    Case("npy (2^32, 2^32) no data", "POST", "/v1/position-ids", 400, "2^63 - 1", _npy("(4294967296, 4294967296)"), NPY),
    Case("npy (2^62+1, 4)", "POST", "/v1/position-ids", 400, "2^63 - 1", _npy(f"({2**62 + 1}, 4)"), NPY),
    Case("npy (2^64, 1)", "POST", "/v1/embed", 400, "2^63 - 1", _npy(f"({2**64}, 1)"), NPY),
    Case("npy (2^63, 0)", "POST", "/v1/embed", 400, "2^63 - 1", _npy(f"({2**63}, 0)"), NPY),
    Case("safetensors (2^32, 2^32)", "POST", "/v1/position-ids", 400, "2^63 - 1", _safetensors([2**32, 2**32]), SAFETENSORS),
    Case("safetensors (2^62+1, 4)", "POST", "/v1/embed", 400, "2^63 - 1", _safetensors([2**62 + 1, 4]), SAFETENSORS),
    Case("safetensors (2^64, 1)", "POST", "/v1/position-ids", 400, "2^63 - 1", _safetensors([2**64, 1]), SAFETENSORS),
    Case("npy 20 MiB chunked", "POST", "/v1/position-ids", 413, "POSENC_MAX_BODY_BYTES", _npy("(1, 2621440)", bytes(20 * MiB)), NPY, chunked=True, closes=True),
    Case("safetensors 20 MiB", "POST", "/v1/embed", 413, "POSENC_MAX_BODY_BYTES", _safetensors([1, 2621440], bytes(20 * MiB)), SAFETENSORS, closes=True),
    # query JSON nested past the parser's depth
    Case("query config 3,000 deep", "GET", ROPE, 422, "nested too deeply", query={"config": _deep(3000), "seq_len": "4"}),
    Case("query scaling 3,000 deep", "GET", ROPE, 422, "nested too deeply", query={"scaling": _deep(3000), "seq_len": "4", "head_dim": "8"}),
    Case("query llamacpp 3,000 open", "GET", ROPE, 422, "nested too deeply", query={"llamacpp": "[" * 3000, "seq_len": "4"}),
    # JSON of millions of tiny arrays (issue 39): a 413 as soon as the count passes the limit
    Case("json 5 M empty arrays", "POST", "/v1/position-ids", 413, "arrays and objects", b'{"input_ids": [' + b",".join([b"[]"] * (5 * MiB)) + b"]}", JSON),
    Case("json 5 M empty objects", "POST", POSITIONS, 413, "arrays and objects", b'{"config": {"x": [' + b",".join([b"{}"] * (5 * MiB)) + b"]}}", JSON),
    # "did you mean" over a long preset name
    Case("preset of 100,000 characters", "POST", ROPE, 422, "100000 characters", json.dumps({"preset": "l" * 100_000, "seq_len": 4}).encode(), JSON),
    Case("preset of 1,000,000 digits", "POST", ROPE, 422, "unknown preset", json.dumps({"preset": "llama-3." + "1" * 1_000_000, "seq_len": 4}).encode(), JSON),
    # llama.cpp's engine precision: priced before it runs
    Case("llama.cpp engine, head_dim 2^24", "POST", ROPE, 413, "CPU-seconds", json.dumps({"positions": [0], "head_dim": 16_777_216, "engine": "llama.cpp", "precision": "engine"}).encode(), JSON),
    Case("llama.cpp engine stream, 4 GiB", "POST", ROPE + "?format=raw", 413, "CPU-seconds", json.dumps({"seq_len": 2**20, "head_dim": 512, "engine": "llama.cpp", "precision": "engine"}).encode(), JSON),
    # an operator's door without a key
    Case("reload without a key", "POST", "/v1/models/reload", 403, "POSENC_ALLOW_RELOAD"),
]  # fmt: skip


# ------------------------------------------------------------------------------------ server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """``python -m service`` with the defaults, CPU-priced at 0.5 s a request; (url, pid)."""
    log = tmp_path_factory.mktemp("hostile") / "server.log"
    port = free_port()
    env = clean_env(
        POSENC_DEVICE="cpu",
        POSENC_MODELS="",
        POSENC_ACCESS_LOG="false",
        POSENC_MAX_REQUEST_CPU_SECONDS=str(CPU_LIMIT_S),
    )
    proc = start_service(port, log, env)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log)
        yield url, proc.pid
    finally:
        stop_service(proc)
        tail = log.read_text(errors="replace")
        assert "Traceback" not in tail, tail[-3000:]


def _cpu_s(pid: int) -> float:
    """The server's CPU time so far (user + system), from ``/proc/<pid>/stat``."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _send(conn: http.client.HTTPConnection, case: Case) -> http.client.HTTPResponse:
    conn.request(case.method, case.url, body=case.body or None, headers=dict(case.headers))
    return conn.getresponse()


def _answer(url: str, case: Case) -> tuple[int, str, bool, bool]:
    """(status, detail, whether the connection was kept, whether the next request on it or a
    new one was answered)."""
    if case.closes:  # refused before the body is read: httpx takes the early answer
        content = _chunks(case.body) if case.chunked else case.body
        with httpx.Client(base_url=url, timeout=60) as client:
            r = client.request(case.method, case.url, content=content, headers=case.headers)
            nxt = client.get("/healthz")  # on a new connection
            kept = r.headers.get("connection") != "close"
            return r.status_code, r.json().get("detail", ""), kept, nxt.json() == {"status": "ok"}
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        response = _send(conn, case)
        body = response.read()
        detail = json.loads(body).get("detail", "") if body else ""
        kept = not response.will_close
        sock = conn.sock
        conn.request("GET", "/healthz")
        after = conn.getresponse()
        served = after.status == 200 and json.loads(after.read()) == {"status": "ok"}
        if kept:  # answered on the same socket
            served = served and conn.sock is sock
        return response.status, str(detail), kept, served
    finally:
        conn.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_request_is_a_quick_4xx_and_the_connection_lives(
    server: tuple[str, int], case: Case
) -> None:
    url, pid = server
    before = _cpu_s(pid)
    status, detail, kept, served = _answer(url, case)
    spent = _cpu_s(pid) - before
    assert status == case.status, (status, detail[:300])
    assert case.words in detail, detail[:300]
    assert spent < CPU_BOUND_S, f"{case.name}: {spent:.2f} s of server CPU"
    assert kept != case.closes, "a refused body closes; every other answer keeps the connection"
    assert served, "the next request was not answered"


def test_peak_rss_stays_within_the_body_limit(server: tuple[str, int]) -> None:
    """Whatever is sent, the server holds at most the body limit of it: 64 MiB of GGUF and of
    npy, chunked, after all the cases above, leave its peak RSS where they found it plus the
    limit."""
    url, pid = server

    def peak_kib() -> int:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    before = peak_kib()
    big = bytes(64 * MiB)
    for headers in (OCTET, NPY):
        with httpx.Client(base_url=url, timeout=60) as client:
            r = client.post(POSITIONS if headers is OCTET else "/v1/position-ids",
                            content=_chunks(b"GGUF" + big), headers=headers)  # fmt: skip
            assert r.status_code == 413, r.text[:300]
    assert (peak_kib() - before) * 1024 < BODY_LIMIT + 16 * MiB


def _hostile_loop(url: str, stop: threading.Event, sent: list[int]) -> None:
    """Send the cases that stalled the event loop, over and over, until ``stop``."""
    stalling = [
        c for c in CASES if c.name.startswith(("gguf 1.5", "gguf 65,536", "preset", "llama"))
    ]
    while not stop.is_set():
        for case in stalling:
            _answer(url, case)
            sent.append(1)


def test_healthz_answers_while_hostile_requests_run(server: tuple[str, int]) -> None:
    url, _ = server
    stop = threading.Event()
    sent: list[int] = []
    workers = [threading.Thread(target=_hostile_loop, args=(url, stop, sent)) for _ in range(2)]
    for w in workers:
        w.start()
    times: list[float] = []
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            time.sleep(0.5)  # the hostile requests under way
            for _ in range(60):
                start = time.perf_counter()
                r = client.get("/healthz")
                times.append(time.perf_counter() - start)
                assert r.status_code == 200
                time.sleep(0.05)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert len(sent) >= 4, "the hostile requests did not run meanwhile"
    assert max(times) < 0.5, f"slowest /healthz {max(times) * 1000:.0f} ms"
    assert statistics.median(times) < 0.1, (
        f"median /healthz {statistics.median(times) * 1e3:.0f} ms"
    )


def _filled(head: bytes, item: bytes, tail: bytes) -> bytes:
    """``head item,item,... tail`` just under the body limit."""
    count = (BODY_LIMIT - 1024 - len(head) - len(tail)) // (len(item) + 1)
    return head + b",".join([item] * count) + tail


def _large_json() -> list[tuple[str, bytes]]:
    """Bodies just under the limit, one per kind of JSON door (FastAPI's model, token ids,
    the hand-read ones), of numbers, keys and strings."""
    keys = b", ".join(b'"k%07d": 0' % i for i in range((BODY_LIMIT - 1024) // 15))
    return [
        ("/v1/position-ids", _filled(b'{"input_ids": [[', b"12345", b"]]}")),
        ("/v1/configs/positions", b'{"config": {' + keys + b"}}"),
        ("/v1/configs/check", _filled(b'{"head_dim": 4, "seq_len": 1, "cos": [[', b"0.5", b"]]}")),
        ("/v1/encodings/rope", _filled(b'{"seq_len": 4, "head_dim": 8, "junk": [', b'"ab"', b"]}")),
        ("/v1/encodings/rope", _filled(b'{"head_dim": 8, "positions": [', b"1", b"]}")),
        ("/v1/rope/shift", _filled(b'{"positions": [0], "delta": 1, "k": [[[', b"0.5", b"]]]}")),
        ("/v1/detokenize", _filled(b'{"input_ids": [[', b"1", b"]]}")),
    ]


def test_healthz_answers_while_large_json_bodies_run(server: tuple[str, int]) -> None:
    """Issue 39: /healthz within the target while 16 MiB JSON bodies are parsed and validated
    (bounds as in :func:`test_healthz_answers_while_hostile_requests_run`)."""
    url, _ = server
    bodies = _large_json()
    stop = threading.Event()
    answers: list[tuple[int, str]] = []

    def send() -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            for path, body in bodies:
                r = client.post(path, content=body, headers=JSON)
                answers.append((r.status_code, r.text[:300]))
        stop.set()

    worker = threading.Thread(target=send)
    worker.start()
    times: list[float] = []
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                start = time.perf_counter()
                r = client.get("/healthz")
                times.append(time.perf_counter() - start)
                assert r.status_code == 200
                time.sleep(0.05)
    finally:
        worker.join()
    assert len(answers) == len(bodies) and all(s < 500 for s, _ in answers), answers
    assert not [w for _, w in answers if "POSENC_MAX_BODY_BYTES" in w], "a body was not read"
    assert max(times) < 0.5, (
        f"slowest /healthz {max(times) * 1000:.0f} ms while 16 MiB JSON bodies were parsed "
        "(each GIL-holding step must stay short: service.json_slices, sliced_validation)"
    )
    assert statistics.median(times) < 0.1, (
        f"median /healthz {statistics.median(times) * 1e3:.0f} ms"
    )
    assert len(times) >= 10, "the large bodies were answered too fast to probe /healthz"
