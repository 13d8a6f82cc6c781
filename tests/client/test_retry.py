"""The client's retry policy (:mod:`posenc.client.retry`): exponential backoff capped at
``backoff_max`` on connection errors, giving up after ``max_attempts``, the async client alike,
and a ``Retry-After`` (delay-seconds or an HTTP-date, RFC 9110 §10.2.3) read as the seconds it
asks. ``httpx.MockTransport`` stands in for the server; the expected waits are worked by hand."""

from __future__ import annotations

import asyncio
import email.utils

import httpx
import pytest

from posenc.client import (
    AsyncPosencClient,
    NotFound,
    PosencClient,
    PosencConnectionError,
    TooManyRequests,
)
from posenc.client.calls import Call
from posenc.client.retry import Backoff, RetryConfig, retry_after_seconds


def _flaky_transport(failures: int, calls: list[httpx.Request]) -> httpx.MockTransport:
    """Refuses the first ``failures`` connections, then answers 200."""

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) <= failures:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"status": "ok"})

    return httpx.MockTransport(handler)


def test_retries_connection_errors_with_exponential_backoff() -> None:
    calls: list[httpx.Request] = []
    slept: list[float] = []
    c = PosencClient(
        max_attempts=4, backoff=0.5, backoff_max=1.5, transport=_flaky_transport(3, calls)
    )
    c._sleep = slept.append  # type: ignore[method-assign,assignment]
    assert c.healthz() == {"status": "ok"}
    assert len(calls) == 4
    assert slept == [0.5, 1.0, 1.5]  # doubled each time, capped at backoff_max


def test_gives_up_after_max_attempts() -> None:
    calls: list[httpx.Request] = []
    c = PosencClient(max_attempts=2, backoff=0.0, transport=_flaky_transport(5, calls))
    with pytest.raises(PosencConnectionError) as info:
        c.sinusoidal(seq_len=2, d_model=4)  # a POST: deterministic, so retried too
    assert len(calls) == 2 and info.value.attempts == 2
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert all(r.method == "POST" for r in calls)


def test_async_retries() -> None:
    calls: list[httpx.Request] = []
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    async def run() -> dict:
        async with AsyncPosencClient(
            max_attempts=3, backoff=0.25, transport=_flaky_transport(2, calls)
        ) as ac:
            ac._sleep = fake_sleep  # type: ignore[method-assign]
            return await ac.healthz()

    assert asyncio.run(run()) == {"status": "ok"}
    assert len(calls) == 3 and slept == [0.25, 0.5]


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    assert retry_after_seconds(None) is None
    assert retry_after_seconds(" 7 ") == 7.0
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)  # "Tue, 14 Nov 2023 22:13:50 GMT"
    assert retry_after_seconds(date, now=now) == pytest.approx(30.0, abs=1e-9)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry_after_seconds(past, now=now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("-3") is None  # not delay-seconds, not a date


def _config(max_attempts: int = 4) -> RetryConfig:
    return RetryConfig(
        base_url="http://x",
        max_attempts=max_attempts,
        backoff=0.5,
        backoff_max=3.0,
        retry_statuses=frozenset({429, 503}),
    )


def test_the_delay_doubles_up_to_its_cap() -> None:
    assert [_config().delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_longer_retry_after_sets_the_wait_within_the_cap() -> None:
    call = Call("POST", "/v1/encodings/sinusoidal")
    request = httpx.Request("POST", "http://x/v1/encodings/sinusoidal")
    policy = Backoff(_config(), call)
    busy = httpx.Response(
        429, headers={"retry-after": "2"}, json={"detail": "busy"}, request=request
    )
    assert policy.settle(busy) == 2.0  # over the first backoff (0.5)
    assert policy.settle(httpx.Response(503, headers={"retry-after": "60"}, request=request)) == 3.0
    assert policy.settle(httpx.Response(503, request=request)) == 2.0  # no header: the backoff
    with pytest.raises(TooManyRequests) as info:  # the last attempt raises the status
        policy.settle(busy)
    assert info.value.status_code == 429 and info.value.detail == "busy"


def test_a_status_outside_the_retried_ones_is_raised_at_once() -> None:
    policy = Backoff(_config(), Call("GET", "/v1/models/x"))
    missing = httpx.Response(404, json={"detail": "unknown model 'x'"})
    with pytest.raises(NotFound, match="HTTP 404: unknown model 'x'"):
        policy.settle(missing)
    assert policy.attempt == 1
