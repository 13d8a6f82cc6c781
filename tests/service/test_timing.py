"""Where a request's time went (``service.observability.timing``): ``Server-Timing`` gives the
queue, compute and encode of a miss computed whole, and only the queue of one sent as it is
computed; the access record gives all four phases (send included) for every miss, and none for
a hit."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.observability.timing import server_timing
from tests.helpers import make_settings

SIN = "/v1/encodings/sinusoidal"
ROPE = "/v1/encodings/rope"
MS = r"\d+\.\d{3}"


def test_server_timing_orders_the_phases_given() -> None:
    assert server_timing("hit", compute=0.0, encode=0.0) == (
        'compute;dur=0.000, encode;dur=0.000, cache;desc="hit"'
    )
    assert server_timing("miss", encode=0.002, queue=0.0015, compute=0.25) == (
        'queue;dur=1.500, compute;dur=250.000, encode;dur=2.000, cache;desc="miss"'
    )
    assert server_timing("stream") == 'cache;desc="stream"'


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="service.access")
    return caplog


def _access(caplog: pytest.LogCaptureFixture, request_id: str) -> Any:  # a LogRecord
    (record,) = [
        r
        for r in caplog.records
        if r.name == "service.access" and getattr(r, "request_id", None) == request_id
    ]
    return record


def test_each_path_reports_its_phases(gpt2_file, records) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(gpt2_file, max_elements=1 << 22)
    small = {"seq_len": 16, "d_model": 8}
    big = {"seq_len": 2048, "d_model": 768, "offset": 7}  # 6 MiB raw: sent as computed, kept
    stream = {"seq_len": 1 << 16, "head_dim": 128}  # 2^23 elements, over max_elements
    with TestClient(create_app(settings)) as c:
        whole = c.post(SIN, json=small, headers={"X-Request-ID": "whole"})
        hit = c.post(SIN, json=small, headers={"X-Request-ID": "hit"})
        kept = c.post(SIN, json=big, params={"format": "raw"}, headers={"X-Request-ID": "kept"})
        streamed = c.post(
            ROPE, json=stream, params={"format": "raw"}, headers={"X-Request-ID": "streamed"}
        )
    assert {r.status_code for r in (whole, hit, kept, streamed)} == {200}
    assert re.fullmatch(
        f'queue;dur={MS}, compute;dur={MS}, encode;dur={MS}, cache;desc="miss"',
        whole.headers["server-timing"],
    )
    assert re.fullmatch(f'queue;dur={MS}, cache;desc="miss"', kept.headers["server-timing"])
    assert streamed.headers["server-timing"] == 'cache;desc="stream"'

    w = _access(records, "whole")
    assert all(getattr(w, f"{p}_ms") >= 0 for p in ("queue", "compute", "encode", "send"))
    assert w.compute_ms > 0 and w.duration_ms >= w.compute_ms + w.encode_ms
    h = _access(records, "hit")
    assert not any(hasattr(h, f"{p}_ms") for p in ("queue", "compute", "encode"))
    assert h.send_ms >= 0
    k = _access(records, "kept")
    assert k.compute_ms > 0 and k.send_ms > 0 and not hasattr(k, "encode_ms")
    s = _access(records, "streamed")
    assert s.compute_ms > 0 and s.send_ms > 0 and s.duration_ms >= s.send_ms
    assert f"compute={s.compute_ms:.3f}" in s.getMessage()
