"""``POSENC_LOG_FORMAT=json``: every line a real ``python -m service`` writes is one JSON object,
and the access lines carry time, level, request id, method, route, status, duration, bytes and
cache hit (``service.observability.logs``, ``service.observability.request_id``)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from service.observability.logs import JsonFormatter, RequestIdFilter
from service.observability.request_id import request_id_var
from tests.helpers import GPT2_NAME, clean_env, free_port, start_service, stop_service, wait_ready

SIN = "/v1/encodings/sinusoidal"


def _json_lines(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "nothing logged"
    out = []
    for line in lines:
        obj = json.loads(line)  # every line, not just the access lines
        assert isinstance(obj, dict), line
        out.append(obj)
    return out


@pytest.mark.slow
def test_json_log_lines_from_a_real_server(tmp_path: Path, gpt2_file: Path) -> None:
    port = free_port()
    log = tmp_path / "service.log"
    env = clean_env(
        POSENC_DEVICE="cpu", POSENC_MODELS=f"{GPT2_NAME}={gpt2_file}", POSENC_LOG_FORMAT="json"
    )
    proc = start_service(port, log, env)
    url = f"http://127.0.0.1:{port}"
    body = {"seq_len": 16, "d_model": 8}
    try:
        wait_ready(proc, url, log)
        with httpx.Client(base_url=url) as client:
            miss = client.post(SIN, json=body, headers={"X-Request-ID": "json-miss"})
            hit = client.post(SIN, json=body, headers={"X-Request-ID": "json-hit"})
            gone = client.get("/v1/nope", headers={"X-Request-ID": "json-404"})
    finally:
        stop_service(proc)
    assert proc.returncode == 0
    records = _json_lines(log.read_text())
    print(next(r for r in records if r.get("request_id") == "json-hit"))  # for the report
    for record in records:
        assert {"time", "level", "logger", "message", "request_id"} <= record.keys(), record
        when = datetime.fromisoformat(record["time"].replace("Z", "+00:00"))
        assert abs((datetime.now(UTC) - when).total_seconds()) < 600
    assert any(r["logger"] == "service" and "ready" in r["message"] for r in records)
    assert any(r["logger"].startswith("uvicorn") for r in records)
    access = {r["request_id"]: r for r in records if r["logger"] == "service.access"}
    m, h, g = access["json-miss"], access["json-hit"], access["json-404"]
    assert (m["level"], m["method"], m["route"], m["status"], m["cache"]) == (
        "INFO",
        "POST",
        SIN,
        200,
        "miss",
    )
    assert (h["status"], h["cache"]) == (200, "hit")
    assert m["bytes"] == h["bytes"] == len(miss.content) == len(hit.content) > 0
    assert isinstance(m["duration_ms"], float) and m["duration_ms"] > 0
    assert (g["status"], g["route"], g["cache"], g["bytes"]) == (
        404,
        "unmatched",
        None,
        len(gone.content),
    )
    # the access log is ours only: uvicorn's own access line is off (no second line per request)
    assert not [r for r in records if r["logger"] == "uvicorn.access"]


def test_text_is_the_default(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "service.log"
    proc = start_service(port, log, clean_env(POSENC_DEVICE="cpu"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        httpx.get(url + "/healthz", headers={"X-Request-ID": "text-1"})
    finally:
        stop_service(proc)
    text = log.read_text()
    (line,) = [x for x in text.splitlines() if "id=text-1" in x]
    assert " INFO service.access: 127.0.0.1:" in line and '"GET /healthz HTTP/1.1" 200' in line
    assert not text.lstrip().startswith("{")


def test_json_formatter_carries_the_request_id_and_the_exception() -> None:
    record = logging.LogRecord("service.x", logging.ERROR, __file__, 1, "failed %s", ("x",), None)
    token = request_id_var.set("rid-7")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id_var.reset(token)
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    got = json.loads(line)
    assert (got["level"], got["logger"], got["message"], got["request_id"]) == (
        "ERROR",
        "service.x",
        "failed x",
        "rid-7",
    )
    assert got["exception"].startswith("Traceback") and "ValueError: bad\nthing" in got["exception"]


def test_bad_log_format_stops_start_up() -> None:
    import subprocess

    from tests.helpers import ROOT

    result = subprocess.run(
        [sys.executable, "-m", "service", "--port", str(free_port())],
        cwd=ROOT,
        env=clean_env(POSENC_LOG_FORMAT="yaml"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "POSENC_LOG_FORMAT='yaml'" in result.stderr and "Traceback" not in result.stderr
