"""service.json_body: every JSON door parses a large body off the event loop, in slices, and
answers what it answered when the body was parsed whole on the loop (issue 39).

The mechanism is asserted, not the time (no wall-clock bound in the fast lane): a spy on
``json_slices.loads`` records whether an event loop runs in the calling thread (it does on the
loop, not on a worker thread), and the sizes of its ``json.loads`` calls. The same request with
the inline limit raised past its size (parsed where it is read, as before) must give the same
status and the same bytes. ``tests/service/test_hostile_corpus.py`` holds ``/healthz`` under its
bound while such bodies run through a real uvicorn (slow lane).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service import json_body, json_slices
from service.app import create_app
from tests.helpers import make_settings

JSON = {"content-type": "application/json"}


def _big(head: str, item: str, tail: str, size: int = 200_000) -> bytes:
    return (head + ",".join([item] * (size // (len(item) + 1))) + tail).encode()


def _keys(size: int = 200_000) -> str:
    return ", ".join(f'"k{i}": {i}' for i in range(size // 12))


DOORS = [
    ("/v1/encodings/rope", _big('{"head_dim": 8, "positions": [', "7", "]}")),
    ("/v1/encodings/rope", _big('{"head_dim": 8, "seq_len": 2, "junk": [', '"ab"', "]}")),
    ("/v1/position-ids", _big('{"input_ids": [[', "12345", "]]}")),
    ("/v1/embed", _big('{"input_ids": [[', "1", ', "x"]]}')),
    ("/v1/tokenize", _big('{"text": [', '"a b"', "]}", 100_000)),
    ("/v1/detokenize", _big('{"input_ids": [[', "42", "]]}")),
    ("/v1/configs/positions", ('{"config": {' + _keys() + "}}").encode()),
    ("/v1/configs/compare", ('{"seq_len": 4, "config": {' + _keys() + "}}").encode()),
    ("/v1/configs/check", _big('{"head_dim": 4, "seq_len": 1, "cos": [[', "0.5", "]]}")),
    ("/v1/rope/apply", _big('{"seq_len": 1, "q": [[[', "0.5", "]]]}")),
    ("/v1/rope/shift", _big('{"positions": [0], "delta": 1, "k": [[[', "0.5", "]]]}")),
    ("/v1/encodings/rope", b'{"head_dim": 8, "positions": [' + b"1," * 50_000 + b"]}"),
    ("/v1/encodings/rope", b'{"head_dim": 8, "positions": [' + b"1," * 50_000 + b"x]}"),
]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The calls of ``json_slices.loads``: on the event loop or not, and the slices' sizes."""
    calls: list[dict[str, Any]] = []

    def loads(raw: bytes, slice_bytes: int = json_slices.SLICE_BYTES) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        record: dict[str, Any] = {"bytes": len(raw), "on_loop": on_loop, "slices": None}
        calls.append(record)  # (no slices recorded when the body is not JSON)
        value, record["slices"] = json_slices.loads_counted(raw, slice_bytes)
        return value

    monkeypatch.setattr(json_slices, "loads", loads)
    return calls


@pytest.mark.parametrize("path,body", DOORS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(DOORS)])
def test_a_large_json_body_is_parsed_off_the_loop_with_the_same_answer(
    app_client: Any,
    spy: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    body: bytes,
) -> None:
    assert len(body) > json_body.INLINE_BYTES
    r = app_client.post(path, content=body, headers=JSON)
    assert r.status_code < 500, r.text[:300]
    (call,) = [c for c in spy if c["bytes"] == len(body)]
    assert not call["on_loop"], f"{path}: the body was parsed on the event loop"
    if call["slices"] is not None:
        assert max(call["slices"]) <= json_slices.SLICE_BYTES + 2
        assert len(call["slices"]) >= len(body) // json_slices.SLICE_BYTES

    monkeypatch.setattr(json_body, "INLINE_BYTES", 1 << 30)  # parsed where read, as before
    for name in ("service.routes.tensor_bodies", "service.routes.check"):
        monkeypatch.setattr(f"{name}.INLINE_BYTES", 1 << 30)
    again = app_client.post(path, content=body, headers=JSON)
    assert (again.status_code, again.content) == (r.status_code, r.content)


def test_a_large_body_that_is_not_json_is_json_s_error(app_client: Any) -> None:
    body = b'{"head_dim": 8, "positions": [' + b"1, " * 50_000 + b"2 3]}"
    want = None
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        want = exc
    assert want is not None
    r = app_client.post("/v1/encodings/rope", content=body, headers=JSON)
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["type"] == "json_invalid" and error["loc"] == ["body", want.pos]
    assert error["ctx"]["error"] == want.msg == "Expecting ',' delimiter"
    r = app_client.post("/v1/position-ids", content=body.replace(b"positions", b"input_ids"))
    assert r.status_code in (415, 422)
    r = app_client.post(
        "/v1/position-ids", content=body.replace(b"positions", b"input_ids"), headers=JSON
    )
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"


@pytest.mark.parametrize("path", ["/v1/encodings/rope", "/v1/configs/check", "/v1/rope/shift"])
def test_json_nested_past_the_limit_is_a_400(app_client: Any, path: str) -> None:
    levels = json_slices.MAX_DEPTH + 1
    body = b'{"config": ' + b"[" * levels + b"]" * levels + b"}"
    r = app_client.post(path, content=body, headers=JSON)
    assert r.status_code == 400 and "nested too deeply" in r.json()["detail"], r.text[:300]


CONTAINER_DOORS = [
    ("/v1/encodings/rope", '{"seq_len": 4, "config": {"x": [', "]}}"),
    ("/v1/position-ids", '{"input_ids": [', "]}"),
    ("/v1/embed", '{"input_ids": [', "]}"),
    ("/v1/tokenize", '{"text": [', "]}"),
    ("/v1/detokenize", '{"input_ids": [', "]}"),
    ("/v1/configs/positions", '{"config": {"x": [', "]}}"),
    ("/v1/configs/compare", '{"seq_len": 4, "config": {"x": [', "]}}"),
    ("/v1/configs/check", '{"head_dim": 4, "seq_len": 1, "cos": [', "]}"),
    ("/v1/rope/apply", '{"seq_len": 1, "q": [', "]}"),
    ("/v1/rope/shift", '{"positions": [0], "delta": 1, "k": [', "]}"),
]


@pytest.fixture(scope="module")
def few_containers(gpt2_file: Path) -> Iterator[TestClient]:
    """An app whose JSON bodies may hold at most 1,024 arrays and objects."""
    with TestClient(create_app(make_settings(gpt2_file, max_json_containers=1024))) as client:
        yield client


@pytest.mark.parametrize("path,head,tail", CONTAINER_DOORS, ids=[d[0] for d in CONTAINER_DOORS])
def test_a_body_of_too_many_arrays_is_a_413_on_every_door(
    few_containers: TestClient, path: str, head: str, tail: str
) -> None:
    """Issue 39: millions of tiny arrays cost far more than their bytes (memory, the garbage
    collector's walks, freeing them): past POSENC_MAX_JSON_CONTAINERS (1,024 here) a JSON body
    is a 413 naming the limit, found as it is parsed, and the connection is reusable."""
    body = _big(head, "[]", tail)
    assert len(body) > json_slices.SLICE_BYTES  # parsed in slices, where the count is kept
    r = few_containers.post(path, content=body, headers=JSON)
    assert r.status_code == 413, r.text[:300]
    detail = r.json()["detail"]
    assert detail.startswith("the JSON body holds more than 1024 arrays and objects"), detail
    assert r.json()["field"] == "body" and r.json()["limit"] == 1024
    fine = few_containers.post(path, content=_big(head, "[]", tail, 1_000), headers=JSON)
    assert fine.status_code != 413, fine.text[:300]  # under the limit: the route's own answer


def test_the_default_limit_is_the_parsers(app_client: Any) -> None:
    """POSENC_MAX_JSON_CONTAINERS defaults to the parser's own limit, and an app sets it for
    its requests only: outside one, the parser keeps its default."""
    from service.config import Settings

    assert Settings.model_fields["max_json_containers"].default == json_slices.MAX_CONTAINERS
    assert json_slices.max_containers() == json_slices.MAX_CONTAINERS
    with json_slices.container_limit(2048):
        assert json_slices.max_containers() == 2048
    assert json_slices.max_containers() == json_slices.MAX_CONTAINERS
