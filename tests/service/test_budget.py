"""Admission control (issue 11): the in-flight byte budget, its 429, its metrics, the client's
``Retry-After``, and a live server hammered by many clients that answers only 200 or 429 and
stays under the memory bound that its settings give (docs/sizing.md).

No timing thresholds: the waits below are only long enough for an event loop to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
import torch

from posenc.client import PosencClient, TooManyRequests, retry_after_seconds
from service.admission.budget import (
    REQUEST_OVERHEAD,
    ByteBudget,
    HeldResponse,
    Overloaded,
    estimate_bytes,
)
from service.formats import Bundle, encode_bundle
from service.observability.metrics import Metrics
from tests.helpers import HOST, clean_env, free_port, start_service, stop_service, wait_ready
from tests.references import sinusoidal

MiB = 1 << 20


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def settle() -> None:
    """Let every ready task run (a few loop iterations)."""
    for _ in range(50):
        await asyncio.sleep(0)


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


# ---------------------------------------------------------------------------------------------
# ByteBudget
# ---------------------------------------------------------------------------------------------


def test_budget_takes_and_releases_bytes() -> None:
    metrics = Metrics()

    async def main() -> None:
        budget = ByteBudget(100, 1.0, metrics=metrics)
        assert await budget.acquire(60) == 0.0
        assert await budget.acquire(40) == 0.0
        assert (budget.in_flight, budget.holders) == (100, 2)
        assert sample(metrics, "posenc_inflight_bytes") == 100
        budget.release(60)
        budget.release(40)
        assert (budget.in_flight, budget.holders, budget.peak) == (0, 0, 100)
        assert sample(metrics, "posenc_inflight_bytes") == 0

    run(main())


def test_budget_is_fifo_a_small_request_does_not_overtake_a_waiting_large_one() -> None:
    async def main() -> list[str]:
        budget = ByteBudget(100, 5.0)
        order: list[str] = []
        await budget.acquire(60)  # A holds 60

        async def take(name: str, n: int) -> None:
            await budget.acquire(n)
            order.append(name)

        b = asyncio.create_task(take("B", 50))  # does not fit beside A: waits
        await settle()
        c = asyncio.create_task(take("C", 10))  # would fit beside A, but B came first
        await settle()
        assert order == [] and budget.queued == 2 and budget.in_flight == 60
        budget.release(60)  # A done: B (50) then C (10) both fit, in that order
        await asyncio.gather(b, c)
        assert budget.in_flight == 60 and budget.queued == 0
        return order

    assert run(main()) == ["B", "C"]


def test_budget_times_out_with_overloaded_that_states_the_numbers() -> None:
    metrics = Metrics()

    async def main() -> Overloaded:
        budget = ByteBudget(100, 0.05, metrics=metrics)
        await budget.acquire(90)
        with pytest.raises(Overloaded) as info:
            await budget.acquire(30)
        assert budget.queued == 0 and budget.in_flight == 90 and budget.holders == 1
        return info.value

    exc = run(main())
    assert (exc.requested, exc.in_flight, exc.limit, exc.queued) == (30, 90, 100, 0)
    assert exc.waited >= 0.05
    assert exc.retry_after >= 1 and isinstance(exc.retry_after, int)
    assert "POSENC_MAX_INFLIGHT_BYTES=100" in exc.detail and "30 bytes" in exc.detail
    assert exc.body()["retry_after"] == exc.retry_after
    assert sample(metrics, "posenc_rejected_total", {"reason": "overload"}) == 1
    assert sample(metrics, "posenc_queue_wait_seconds_count") == 2  # the admitted and the refused


def test_budget_with_zero_timeout_refuses_at_once() -> None:
    async def main() -> None:
        budget = ByteBudget(10, 0.0)
        await budget.acquire(10)
        with pytest.raises(Overloaded):
            await budget.acquire(1)

    run(main())


def test_a_request_larger_than_the_budget_is_admitted_alone_and_only_alone() -> None:
    async def main() -> None:
        budget = ByteBudget(100, 0.05)
        assert await budget.acquire(500) == 0.0  # nothing in flight: admitted
        assert budget.in_flight == 500
        with pytest.raises(Overloaded):  # even 1 byte waits for it
            await budget.acquire(1)
        budget.release(500)
        await budget.acquire(40)
        with pytest.raises(Overloaded):  # not alone any more: the oversized one waits
            await budget.acquire(500)

    run(main())


def test_a_cancelled_waiter_leaves_the_queue_and_unblocks_those_behind_it() -> None:
    async def main() -> None:
        budget = ByteBudget(100, 5.0)
        await budget.acquire(50)
        big = asyncio.create_task(budget.acquire(80))  # head of the queue, does not fit
        await settle()
        small = asyncio.create_task(budget.acquire(30))  # fits, but queued behind big
        await settle()
        assert budget.queued == 2 and not small.done()
        big.cancel()  # e.g. the server shutting down
        await settle()
        assert small.done() and budget.in_flight == 80 and budget.queued == 0
        with pytest.raises(asyncio.CancelledError):
            await big

    run(main())


def test_hold_releases_on_an_exception() -> None:
    async def main() -> None:
        budget = ByteBudget(100, 1.0)
        with pytest.raises(RuntimeError, match="boom"):
            async with budget.hold(70):
                assert budget.in_flight == 70
                raise RuntimeError("boom")
        assert (budget.in_flight, budget.holders) == (0, 0)

    run(main())


def test_shrink_keeps_part_and_wakes_waiters() -> None:
    async def main() -> None:
        budget = ByteBudget(100, 5.0)
        await budget.acquire(90)
        waiter = asyncio.create_task(budget.acquire(50))
        await settle()
        assert not waiter.done()
        assert budget.shrink(90, 40) == 40  # compute buffers gone, the body stays
        await settle()
        assert waiter.done() and budget.in_flight == 90 and budget.holders == 2

    run(main())


def test_bad_arguments_are_value_errors_with_the_numbers() -> None:
    with pytest.raises(ValueError, match="got 0"):
        ByteBudget(0)
    with pytest.raises(ValueError, match="got -1"):
        ByteBudget(10, -1)
    with pytest.raises(ValueError, match="got -5"):
        run(ByteBudget(10).acquire(-5))


# ---------------------------------------------------------------------------------------------
# HeldResponse: bytes held until the body is sent, released however sending ends
# ---------------------------------------------------------------------------------------------


def _send_held(body: bytes, fail_after: int | None = None) -> tuple[ByteBudget, list[dict]]:
    from starlette.responses import Response

    sent: list[dict] = []

    async def main() -> ByteBudget:
        budget = ByteBudget(10 * len(body) + 1, 1.0)
        await budget.acquire(len(body))

        async def send(message: dict) -> None:
            if fail_after is not None and len(sent) >= fail_after:
                raise OSError("client went away")
            sent.append(message)

        async def receive() -> dict:
            return {"type": "http.disconnect"}

        held = HeldResponse(
            Response(body, media_type="application/json"), budget, len(body), time.monotonic()
        )
        assert budget.in_flight == len(body)
        with contextlib.suppress(OSError):  # the failing send re-raises after the release
            await held({"type": "http", "method": "GET"}, receive, send)  # type: ignore[arg-type]
        return budget

    return run(main()), sent


def test_held_response_sends_the_same_response_then_releases() -> None:
    body = bytes(range(256)) * 4099
    budget, sent = _send_held(body)
    assert budget.in_flight == 0 and budget.holders == 0
    start, message, last = sent
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-length"] == str(len(body)).encode()
    assert headers[b"content-type"] == b"application/json"
    assert message["body"] == body and message["more_body"]
    assert last["body"] == b"" and not last["more_body"]


def test_held_response_releases_when_the_client_disconnects_mid_response() -> None:
    budget, sent = _send_held(b"x" * 1000, fail_after=1)  # headers sent, then the socket is gone
    assert len(sent) == 1
    assert budget.in_flight == 0 and budget.holders == 0


def test_held_response_dropped_unsent_releases_on_its_loop() -> None:
    from starlette.responses import Response

    async def main() -> ByteBudget:
        budget = ByteBudget(100, 1.0)
        await budget.acquire(60)
        held = HeldResponse(Response(b"{}"), budget, 60, time.monotonic())
        del held  # e.g. a middleware answered instead
        await settle()
        return budget

    budget = run(main())
    assert budget.in_flight == 0 and budget.holders == 0


# ---------------------------------------------------------------------------------------------
# The estimate is an upper bound of what the request holds
# ---------------------------------------------------------------------------------------------

# Worst cases of JSON number text: the longest shortest-round-trip forms of each dtype.
_WORST = {
    "float16": -6.1035e-05,
    "bfloat16": -1.1754944e-38,
    "float32": -1.1754944e-38,
    "float64": -2.2250738585072014e-308,
}


@pytest.mark.parametrize("dtype", list(_WORST))
@pytest.mark.parametrize("fmt", ["json", "json-base64", "safetensors", "raw", "npy"])
def test_estimate_covers_tensor_float64_buffers_and_the_longest_body(dtype: str, fmt: str) -> None:
    """The estimate must hold the tensor, the float64 buffer its compute worked in, and the
    encoded body of adversarial values (the longest number text of the dtype)."""
    if fmt == "npy" and dtype == "bfloat16":
        pytest.skip("npy has no bfloat16")
    n = 4096
    tensor = torch.full((n // 64, 64), _WORST[dtype], dtype=getattr(torch, dtype))
    base64 = fmt == "json-base64"
    wire = "json" if base64 else fmt
    body = encode_bundle(Bundle({"x": tensor}), wire, base64=base64).body
    floor = n * (tensor.element_size() + 8) + len(body)
    estimate = estimate_bytes(n, wire, base64=base64, dtype=dtype)
    assert estimate >= floor, (estimate, floor)
    assert estimate - REQUEST_OVERHEAD <= 4 * floor  # an upper bound, not a refusal of all


def test_estimate_grows_with_elements_and_dtype() -> None:
    assert estimate_bytes(0, "json") == REQUEST_OVERHEAD
    f32 = estimate_bytes(1000, "json", dtype="float32") - REQUEST_OVERHEAD
    f64 = estimate_bytes(1000, "json", dtype="float64") - REQUEST_OVERHEAD
    assert f64 > f32 > 0 and f32 % 1000 == 0
    # an unknown dtype name (integer outputs) costs as much as float64
    assert estimate_bytes(1000, "json", dtype="int64") == estimate_bytes(
        1000, "json", dtype="float64"
    )


# ---------------------------------------------------------------------------------------------
# Client: Retry-After
# ---------------------------------------------------------------------------------------------


def test_retry_after_seconds_reads_both_forms() -> None:
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("soon") is None
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    when = 1445412480.0  # that date as a Unix timestamp
    assert retry_after_seconds(date, now=when - 5) == pytest.approx(5.0)
    assert retry_after_seconds(date, now=when + 5) == 0.0


def _scripted_client(statuses: list[tuple[int, str | None]], **kwargs: object):  # type: ignore[no-untyped-def]
    calls: list[float] = []
    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        status, retry_after = statuses[min(len(calls), len(statuses)) - 1]
        headers = {"Retry-After": retry_after} if retry_after else {}
        if status == 200:
            return httpx.Response(200, json={"status": "ok"})
        return httpx.Response(status, json={"detail": "busy"}, headers=headers)

    client = PosencClient("http://test", transport=httpx.MockTransport(handler), **kwargs)  # type: ignore[arg-type]
    client._sleep = slept.append  # type: ignore[method-assign,assignment]
    return client, calls, slept


def test_client_waits_retry_after_on_429_and_503_within_backoff_max() -> None:
    client, _, slept = _scripted_client(
        [(429, "3"), (503, "1"), (429, "120"), (200, None)],
        max_attempts=4,
        backoff=0.25,
        backoff_max=10.0,
    )
    assert client._json(_call()) == {"status": "ok"}
    # 3 s asked > 0.25 backoff; 1 s asked > 0.5; 120 s asked, capped at backoff_max
    assert slept == [3.0, 1.0, 10.0]


def test_client_raises_too_many_requests_after_the_last_attempt() -> None:
    client, calls, slept = _scripted_client([(429, "2")], max_attempts=2, backoff=0.1)
    with pytest.raises(TooManyRequests) as info:
        client._json(_call())
    assert info.value.status_code == 429 and len(calls) == 2 and slept == [2.0]


def test_client_without_retry_after_keeps_its_backoff() -> None:
    client, _, slept = _scripted_client(
        [(503, None), (503, None), (200, None)], max_attempts=3, backoff=0.5
    )
    client._json(_call())
    assert slept == [0.5, 1.0]


def _call():  # type: ignore[no-untyped-def]
    from posenc.client.calls import Call

    return Call("GET", "/v1/info")


# ---------------------------------------------------------------------------------------------
# Live: a small budget, many clients
# ---------------------------------------------------------------------------------------------


def _rss(pid: int, key: str) -> int:
    """``VmRSS`` or ``VmHWM`` of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


BUDGET = 96 * MiB
QUEUE_TIMEOUT = 0.3


@pytest.fixture(scope="module")
def tight_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real service with a 96 MiB in-flight budget, a short queue and no cache."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("overload") / "service.log"
    env = clean_env(
        POSENC_DEVICE="cpu",
        POSENC_MAX_INFLIGHT_BYTES=str(BUDGET),
        POSENC_QUEUE_TIMEOUT=str(QUEUE_TIMEOUT),
        POSENC_CACHE_BYTES="0",
        POSENC_ACCESS_LOG="false",
    )
    proc = start_service(port, log_path, env)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log_path)
        yield url, proc.pid
    finally:
        stop_service(proc)
        assert proc.returncode == 0, log_path.read_text(errors="replace")[-4000:]


def test_overloaded_server_answers_only_200_or_429_and_stays_under_its_memory_bound(
    tight_server: tuple[str, int],
) -> None:
    url, pid = tight_server
    # the baseline: idle, after one small request of each kind used below
    httpx.post(url + "/v1/encodings/sinusoidal", json={"seq_len": 8, "d_model": 8}, timeout=30)
    baseline = _rss(pid, "VmRSS")

    seq_len, d_model = 1024, 1024  # 1 Mi elements: ~26 MiB estimated, ~11 MB of JSON
    per_request = estimate_bytes(seq_len * d_model, "json", dtype="float32")
    assert 2 * per_request < BUDGET < 8 * per_request  # a few fit at once, not all

    clients, rounds = 12, 4
    peak = [baseline]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss(pid, "VmRSS"))
            time.sleep(0.01)

    def one(i: int) -> tuple[int, dict[str, str], bytes, int]:
        offset = 1000 * i  # distinct tables: every request computes
        with httpx.Client(base_url=url, timeout=120) as http:
            r = http.post(
                "/v1/encodings/sinusoidal",
                json={"seq_len": seq_len, "d_model": d_model, "offset": offset},
            )
        return r.status_code, dict(r.headers), r.content, offset

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(one, range(clients * rounds)))
    finally:
        stop.set()
        watcher.join()
    hwm = _rss(pid, "VmHWM")

    statuses = sorted({status for status, *_ in results})
    assert set(statuses) <= {200, 429}, statuses
    ok = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 429]
    assert ok, "nothing was served"
    assert refused, "the budget never filled: the test does not overload the service"
    for _, headers, content, _ in refused:
        assert re.fullmatch(r"[1-9][0-9]*", headers["retry-after"])
        body = orjson.loads(content)
        assert "POSENC_MAX_INFLIGHT_BYTES" in body["detail"]
        assert body["limit"] == BUDGET and body["requested"] == per_request
        assert body["retry_after"] == int(headers["retry-after"])
        assert body["in_flight"] + body["requested"] > BUDGET
    # the served tables are right (spot check against the float64 closed form)
    _, _, content, offset = ok[-1]
    got = np.asarray(orjson.loads(content)["tensors"]["encoding"]["data"], dtype=np.float64)
    want = sinusoidal(range(offset, offset + seq_len), d_model)
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=0)

    # memory: baseline + cache (0) + the budget (no single request exceeds it) + runtime slack
    slack = 64 * MiB  # thread stacks, allocator rounding, the watcher's sampling granularity
    bound = baseline + BUDGET + slack
    assert peak[0] <= bound, (peak[0] - baseline) / MiB
    assert hwm <= bound, (hwm - baseline) / MiB

    # alive, and the metrics account for what happened
    metrics = httpx.get(url + "/metrics", timeout=30).text
    rejected = float(
        re.search(r'^posenc_rejected_total\{reason="overload"\} (\S+)$', metrics, re.M).group(1)
    )
    assert rejected == len(refused)
    assert re.search(r"^posenc_inflight_bytes 0\.0$", metrics, re.M)
    waits = float(re.search(r"^posenc_queue_wait_seconds_count (\S+)$", metrics, re.M).group(1))
    assert waits == len(ok) + len(refused) + 1  # + the baseline request
    assert httpx.get(url + "/healthz", timeout=30).status_code == 200


def test_413_is_answered_without_waiting_for_a_full_budget(tight_server: tuple[str, int]) -> None:
    """Size checks come before admission: a too-large request is refused at once even while
    the budget is held by a slow reader (no timing threshold: it must not be a 429)."""
    url, _ = tight_server
    r = httpx.post(
        url + "/v1/encodings/sinusoidal", json={"seq_len": 1 << 20, "d_model": 1024}, timeout=30
    )
    assert r.status_code == 413 and r.json()["limit"] == 67_108_864


def test_client_retries_429_until_admitted(tight_server: tuple[str, int]) -> None:
    """Many PosencClients at once against the small budget: with Retry-After honoured and
    enough attempts, every call ends with the right table."""
    url, _ = tight_server

    def one(i: int) -> float:
        with PosencClient(url, max_attempts=30, backoff=0.05, backoff_max=1.0) as client:
            r = client.sinusoidal(seq_len=1024, d_model=1024, offset=7 * i, format="json")
            want = sinusoidal(range(7 * i, 7 * i + 1024), 1024)
            return float(np.abs(np.asarray(r.primary, dtype=np.float64) - want).max())

    with ThreadPoolExecutor(10) as pool:
        errors = list(pool.map(one, range(10)))
    assert max(errors) < 2e-4
    assert not math.isnan(max(errors))


@pytest.fixture(scope="module")
def cached_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real service with a 64 MiB cache (a 22 MB JSON body stays in it)."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("overload-hits") / "service.log"
    env = clean_env(
        POSENC_DEVICE="cpu", POSENC_CACHE_BYTES=str(64 * MiB), POSENC_ACCESS_LOG="false"
    )
    proc = start_service(port, log_path, env)
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(proc, url, log_path)
        yield url, proc.pid
    finally:
        stop_service(proc)


def test_slow_readers_of_a_cached_body_do_not_each_hold_a_copy(
    cached_server: tuple[str, int],
) -> None:
    """Cache hits take no budget: 24 readers of one cached 22 MB body that do not read for a
    while must share the cached bytes, not hold a copy each (uvloop's transport keeps a
    reference to the body it could not send yet)."""
    url, pid = cached_server
    path = "/v1/encodings/sinusoidal?seq_len=2048&d_model=1024"
    first = httpx.get(url + path, timeout=60)  # computed and cached
    assert first.status_code == 200 and len(first.content) > 20_000_000
    assert httpx.get(url + path, timeout=60).headers["server-timing"].endswith('"hit"')
    baseline = _rss(pid, "VmRSS")

    port = int(url.rsplit(":", 1)[1])
    readers = 24
    socks = []
    for _ in range(readers):
        s = socket.create_connection((HOST, port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        socks.append(s)
    time.sleep(1.0)  # the server has sent what the sockets take; the rest waits
    stalled = _rss(pid, "VmRSS")
    bodies = []
    for s in socks:
        with s:
            chunks = []
            while chunk := s.recv(1 << 20):
                chunks.append(chunk)
            bodies.append(b"".join(chunks))
    for raw in bodies:
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and body == first.content

    assert stalled - baseline <= readers * 2 * MiB + 32 * MiB, (stalled - baseline) / MiB


def test_openapi_documents_429_with_retry_after_on_compute_endpoints(
    app_client: httpx.Client,
) -> None:
    spec = app_client.get("/openapi.json").json()
    for path in ("/v1/encodings/rope", "/v1/biases/alibi", "/v1/embed"):
        op = spec["paths"][path]["post"]
        too_many = op["responses"]["429"]
        assert "POSENC_MAX_INFLIGHT_BYTES" in too_many["description"]
        assert too_many["headers"]["Retry-After"]["schema"]["type"] == "integer"
        schema = too_many["content"]["application/json"]["schema"]
        ref = schema["$ref"].rsplit("/", 1)[-1]
        props = spec["components"]["schemas"][ref]["properties"]
        assert {"detail", "limit", "requested", "in_flight", "retry_after"} <= set(props)


def test_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.config import Settings

    monkeypatch.delenv("POSENC_MAX_INFLIGHT_BYTES", raising=False)
    monkeypatch.delenv("POSENC_QUEUE_TIMEOUT", raising=False)
    s = Settings()
    assert (s.max_inflight_bytes, s.queue_timeout) == (1 << 30, 2.0)
    monkeypatch.setenv("POSENC_MAX_INFLIGHT_BYTES", "1234")
    monkeypatch.setenv("POSENC_QUEUE_TIMEOUT", "0.5")
    s = Settings()
    assert (s.max_inflight_bytes, s.queue_timeout) == (1234, 0.5)
    monkeypatch.setenv("POSENC_MAX_INFLIGHT_BYTES", "0")
    with pytest.raises(ValueError, match="max_inflight_bytes"):
        Settings()


def test_a_client_that_disconnects_mid_body_releases_its_bytes(
    tight_server: tuple[str, int],
) -> None:
    """Clients that read a few bytes of a large miss and hang up: the budget is back to 0."""
    url, _ = tight_server
    port = int(url.rsplit(":", 1)[1])
    for i in range(4):
        with socket.create_connection((HOST, port)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            path = f"/v1/encodings/sinusoidal?seq_len=1024&d_model=1024&offset={777 + i}"
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert s.recv(12).startswith(b"HTTP/1.1 200")
        # closed with most of the 11 MB body unsent
    deadline = time.monotonic() + 60  # a bound on the wait, not a timing assertion
    inflight = None
    while time.monotonic() < deadline:
        metrics = httpx.get(url + "/metrics", timeout=30).text
        inflight = float(re.search(r"^posenc_inflight_bytes (\S+)$", metrics, re.M).group(1))
        if inflight == 0:
            break
        time.sleep(0.05)
    assert inflight == 0
    ok = httpx.get(url + "/v1/encodings/sinusoidal?seq_len=4&d_model=4", timeout=30)
    assert ok.status_code == 200


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=30).text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match is not None, name
    return float(match.group(1))


def test_slow_readers_keep_their_bytes_counted_until_sent(tight_server: tuple[str, int]) -> None:
    """Ten clients that ask for fresh 11 MB JSON tables and do not read: their bodies sit in the
    server's write buffers, so their bytes stay counted; the budget is full, the next request
    gets a 429 with Retry-After, and a PosencClient retrying it (honouring Retry-After) gets the
    right table once the readers have read. Then the budget is back to 0."""
    url, _ = tight_server
    port = int(url.rsplit(":", 1)[1])
    estimate = estimate_bytes(1 << 20, "json")
    socks: list[socket.socket] = []
    in_flight = 0.0
    try:
        # one stalled reader at a time, until the next table's estimate no longer fits
        while in_flight + estimate <= BUDGET and len(socks) < 20:
            s = socket.socket()
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # before connect
            s.connect((HOST, port))
            path = f"/v1/encodings/sinusoidal?seq_len=1024&d_model=1024&offset={5000 + len(socks)}"
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            deadline = time.monotonic() + 30  # until it was computed and its estimate shrunk
            now = in_flight
            while time.monotonic() < deadline:
                now = _metric(url, "posenc_inflight_bytes")
                if now > in_flight and now - in_flight < estimate:
                    break
                time.sleep(0.05)
            assert now > in_flight, "a stalled reader's body is not counted in flight"
            in_flight = now
        assert in_flight + estimate > BUDGET, in_flight / MiB
        _check_refusal_and_client(url, socks, in_flight)
    finally:
        for s in socks:
            s.close()
    assert _metric(url, "posenc_inflight_bytes") == 0


def _check_refusal_and_client(url: str, socks: list[socket.socket], in_flight: float) -> None:
    probe = httpx.post(
        url + "/v1/encodings/sinusoidal",
        json={"seq_len": 1024, "d_model": 1024, "offset": 99},
        timeout=60,
    )
    assert probe.status_code == 429
    assert int(probe.headers["retry-after"]) >= 1
    assert probe.json()["in_flight"] == in_flight

    rejected_before = _metric(url, 'posenc_rejected_total{reason="overload"}')
    result: dict[str, object] = {}

    def call() -> None:
        with PosencClient(url, max_attempts=20, backoff=0.1, backoff_max=2.0) as client:
            result["r"] = client.sinusoidal(seq_len=1024, d_model=1024, offset=99, format="json")

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 60  # until the client has been refused at least once
    while time.monotonic() < deadline:
        if _metric(url, 'posenc_rejected_total{reason="overload"}') > rejected_before:
            break
        time.sleep(0.05)
    statuses = []
    for s in socks:  # the readers read: their bytes are sent and released
        with contextlib.closing(s):
            chunks = []
            while chunk := s.recv(1 << 20):
                chunks.append(chunk)
        statuses.append(b"".join(chunks)[:12])
    caller.join(120)
    assert _metric(url, 'posenc_rejected_total{reason="overload"}') > rejected_before
    assert set(statuses) == {b"HTTP/1.1 200"}
    got = np.asarray(result["r"].primary, dtype=np.float64)  # type: ignore[attr-defined]
    np.testing.assert_allclose(got, sinusoidal(range(99, 99 + 1024), 1024), atol=2e-4, rtol=0)
