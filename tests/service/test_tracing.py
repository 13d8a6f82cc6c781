"""OpenTelemetry tracing (``service.observability.tracing``, the ``otel`` extra): a SERVER span per request
with ``posenc.compute`` and ``posenc.encode`` inside it, recorded by the SDK's in-memory
exporter; and the standard ``OTEL_*`` variables configuring a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.helpers import ROOT, clean_env, make_settings

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

SIN = "/v1/encodings/sinusoidal"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (settable once per process), exporting into memory."""
    memory = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not isinstance(provider, TracerProvider):  # pragma: no cover - another SDK's provider
        pytest.skip("a tracer provider of another kind is set in this process")
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()  # apps of later tests keep no spans in memory


@pytest.fixture
def client(exporter: InMemorySpanExporter, gpt2_file):  # type: ignore[no-untyped-def]
    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file))) as c:
        exporter.clear()
        yield c


def by_name(exporter: InMemorySpanExporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


def test_a_computed_table_has_compute_and_encode_spans_inside_the_request_span(
    client: TestClient, exporter: InMemorySpanExporter
) -> None:
    r = client.post(SIN, json={"seq_len": 33, "d_model": 8}, headers={"X-Request-ID": "t-1"})
    assert r.status_code == 200
    spans = by_name(exporter)
    (server,) = spans[f"POST {SIN}"]
    (compute,) = spans["posenc.compute"]
    (encode,) = spans["posenc.encode"]
    assert server.kind == trace.SpanKind.SERVER
    assert server.attributes["http.route"] == SIN
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["posenc.request_id"] == "t-1"
    for child in (compute, encode):
        assert child.context.trace_id == server.context.trace_id
        assert child.parent is not None and child.parent.span_id == server.context.span_id
        assert server.start_time <= child.start_time <= child.end_time <= server.end_time
    assert compute.end_time <= encode.start_time  # compute first, then encode
    assert compute.attributes["posenc.route"] == SIN
    assert encode.attributes["posenc.format"] == "json"


@pytest.mark.parametrize("rows", [33, 4096])  # one block on the event loop; blocks in threads
def test_a_binary_miss_has_compute_spans_inside_the_request_span(
    client: TestClient, exporter: InMemorySpanExporter, rows: int
) -> None:
    # kept (service.responses.streaming.kept_response): written as computed, no encode step
    r = client.post(SIN + "?format=raw", json={"seq_len": rows, "d_model": 512})
    assert r.status_code == 200
    spans = by_name(exporter)
    (server,) = spans[f"POST {SIN}"]
    computes = spans["posenc.compute"]
    assert len(computes) == (1 if rows == 33 else 8) and "posenc.encode" not in spans
    for child in computes:
        assert child.context.trace_id == server.context.trace_id
        assert child.parent is not None and child.parent.span_id == server.context.span_id
        assert child.attributes["posenc.route"] == SIN


def test_a_cache_hit_computes_nothing(client: TestClient, exporter: InMemorySpanExporter) -> None:
    body = {"seq_len": 9, "d_model": 4}
    client.post(SIN, json=body)
    exporter.clear()
    r = client.post(SIN, json=body)
    assert 'cache;desc="hit"' in r.headers["server-timing"]
    spans = by_name(exporter)
    assert list(spans) == [f"POST {SIN}"]


def test_the_callers_traceparent_is_continued(
    client: TestClient, exporter: InMemorySpanExporter
) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent_id = "00f067aa0ba902b7"
    client.get("/healthz", headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    (server,) = by_name(exporter)["GET /healthz"]
    assert format(server.context.trace_id, "032x") == trace_id
    assert format(server.parent.span_id, "016x") == parent_id


def test_errors_are_marked(client: TestClient, exporter: InMemorySpanExporter) -> None:
    r = client.post(SIN, json={"seq_len": -1, "d_model": 4})
    assert r.status_code == 422
    (server,) = by_name(exporter)[f"POST {SIN}"]
    assert server.attributes["http.response.status_code"] == 422
    assert "posenc.compute" not in by_name(exporter)
    client.get("/nowhere")
    (unmatched,) = by_name(exporter)["GET"]
    assert unmatched.attributes["http.response.status_code"] == 404


SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from fastapi.testclient import TestClient
from service.app import create_app
from service.config import Settings
with TestClient(create_app(Settings(device="cpu"))) as c:
    assert c.post("/v1/encodings/sinusoidal", json={"seq_len": 3, "d_model": 2}).status_code == 200
from opentelemetry import trace
trace.get_tracer_provider().shutdown()  # flushes the batch processor
"""


def test_otel_variables_configure_a_real_process() -> None:
    """OTEL_TRACES_EXPORTER=console, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read by
    the SDK in a fresh process; OTEL_SDK_DISABLED=true turns it off."""
    env = clean_env(
        OTEL_TRACES_EXPORTER="console",
        OTEL_SERVICE_NAME="posenc-under-test",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=ci",
    )
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # ConsoleSpanExporter writes one indented JSON object per span
    decoder, text, spans, i = json.JSONDecoder(), result.stdout, [], 0
    while (i := text.find("{", i)) != -1:
        obj, end = decoder.raw_decode(text, i)
        spans.append(obj)
        i = end
    names = {s["name"] for s in spans}
    assert {"posenc.compute", "posenc.encode", f"POST {SIN}"} <= names, names
    resource = spans[0]["resource"]["attributes"]
    assert resource["service.name"] == "posenc-under-test"
    assert resource["deployment.environment"] == "ci"

    env["OTEL_SDK_DISABLED"] = "true"
    off = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT.replace("trace.get_tracer_provider().shutdown()", ""),
            str(ROOT),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert off.returncode == 0, off.stderr[-2000:]
    assert "posenc.compute" not in off.stdout
