"""The parts of the Ray Serve application that need no Ray (deploy/ray/asgi.py and
deploy/ray/metrics.py), in process: a request carried as plain values through the service's app
gets the bytes Starlette's TestClient gets; the lifespan starts and stops the app as uvicorn
does; an app that fails gives uvicorn's 500, never a cut-short 200; and the replicas' metrics
join into one exposition that Prometheus' parser reads back, each sample with its replica."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.ray.asgi import HttpCall, Lifespan, call_app
from deploy.ray.metrics import merge_expositions
from tests.helpers import GPT2_NAME, make_settings

REQUESTS = [
    HttpCall("GET", "/v1/encodings/sinusoidal", b"seq_len=16&d_model=8"),
    HttpCall(
        "POST",
        "/v1/encodings/rope",
        b"format=safetensors",
        [(b"content-type", b"application/json")],
        b'{"seq_len": 64, "head_dim": 32}',
    ),
    HttpCall(
        "POST",
        "/v1/embed",
        f"format=raw&model={GPT2_NAME}".encode(),
        [(b"content-type", b"application/json")],
        b'{"input_ids": [[1, 2, 3]]}',
    ),
    HttpCall("GET", "/v1/encodings/sinusoidal", b"seq_len=-1&d_model=8"),
    HttpCall("GET", "/no/such/path"),
]


def test_call_app_gives_the_bytes_a_client_gets(gpt2_file: Path) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app

    async def through_lifespan() -> list[Any]:
        app = create_app(make_settings(gpt2_file))
        lifespan = Lifespan(app)
        await lifespan.start()
        assert app.state.posenc.ready
        answers = [await call_app(app, call, lifespan.state) for call in REQUESTS]
        await lifespan.stop()
        assert not app.state.posenc.ready
        return answers

    answers = asyncio.run(through_lifespan())
    with TestClient(create_app(make_settings(gpt2_file))) as client:
        for call, answer in zip(REQUESTS, answers, strict=True):
            expected = client.request(
                call.method,
                call.path + ("?" + call.query.decode() if call.query else ""),
                content=call.body or None,
                headers={k.decode(): v.decode() for k, v in call.headers},
            )
            assert answer.status == expected.status_code, call
            assert answer.body == expected.content, call
            headers = dict(answer.headers)
            assert headers[b"content-type"].decode() == expected.headers["content-type"]
            assert int(headers[b"content-length"]) == len(answer.body)
    assert [a.status for a in answers] == [200, 200, 200, 422, 404]


def test_an_app_that_fails_gives_a_500_never_a_short_answer() -> None:
    async def cut_short(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"half", "more_body": True})
        raise RuntimeError("failed in the middle")

    async def whole_then_fails(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": [(b"x", b"1")]})
        await send({"type": "http.response.body", "body": b"all"})
        raise RuntimeError("failed after the answer")

    short = asyncio.run(call_app(cut_short, HttpCall("GET", "/")))
    assert (short.status, short.body) == (500, b"Internal Server Error")
    assert dict(short.headers)[b"content-length"] == b"21"
    whole = asyncio.run(call_app(whole_then_fails, HttpCall("GET", "/")))
    assert (whole.status, whole.headers, whole.body) == (201, [(b"x", b"1")], b"all")


def test_a_failed_start_up_raises() -> None:
    async def refuses(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no device"})

    with pytest.raises(RuntimeError, match="no device"):
        asyncio.run(Lifespan(refuses).start())


REPLICA = """\
# HELP posenc_requests_total HTTP requests.
# TYPE posenc_requests_total counter
posenc_requests_total{route="/v1/x",status="200"} %d
# HELP posenc_requests_in_progress In progress.
# TYPE posenc_requests_in_progress gauge
posenc_requests_in_progress %d
"""


def test_replicas_metrics_join_with_their_replica_label() -> None:
    text = merge_expositions({"b": REPLICA % (7, 1), "a": REPLICA % (3, 0)}).decode()
    assert text.count("# TYPE posenc_requests_total counter") == 1
    assert text.count("# TYPE posenc_requests_in_progress gauge") == 1
    values = {
        (s.name, s.labels["replica"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert values == {
        ("posenc_requests_total", "a"): 3,
        ("posenc_requests_total", "b"): 7,
        ("posenc_requests_in_progress", "a"): 0,
        ("posenc_requests_in_progress", "b"): 1,
    }
