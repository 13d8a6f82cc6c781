"""Every route of the app declares exactly the statuses it can answer (``service.statuses``).

Each operation of ``/openapi.json`` is sent the requests that make each status happen: its own
example (and that example with ``If-None-Match: *``, with ``Accept: image/gif``), bodies that
are not UTF-8, not JSON, too large or of the wrong shape, query parameters that are not values,
an unknown name in its path; and the valid request again to an app with a key (401), with an
output limit of one element (413), with a full byte budget (429) and whose models are not loaded
(503). A status it answers that it does not declare fails, and so does one it declares that no
request makes. POST /v1/configs/compare once answered a non-UTF-8 body with an undeclared 400
(issue 28), which schemathesis found on some runs only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from posenc.readers.presets import PRESETS
from service.app import create_app
from service.config import Settings

BODY_LIMIT = 64_000
METHODS = ("get", "post")


def _app(**overrides: Any) -> FastAPI:
    values: dict[str, Any] = {
        "device": "cpu",
        "models": "",
        "api_key": None,
        "cors_origins": "",
        "max_body_bytes": BODY_LIMIT,
        "allow_reload": True,
    }
    values.update(overrides)
    return create_app(Settings(**values))


@pytest.fixture(scope="module")
def clients() -> Iterator[dict[str, TestClient]]:
    """``plain`` (reload allowed without a key); ``keyed`` (POSENC_API_KEY); ``locked`` (no
    key, reload not allowed); ``small`` (one element allowed); ``full`` (the
    byte budget taken, no queueing); ``cold`` (no lifespan run: nothing loaded)."""
    apps = {
        "plain": _app(),
        "keyed": _app(api_key="sesame"),
        "small": _app(max_elements=1, max_stream_elements=1),
        "full": _app(queue_timeout=0.0),
        "locked": _app(allow_reload=False),
    }
    started = {k: TestClient(a, raise_server_exceptions=False) for k, a in apps.items()}
    for c in started.values():
        c.__enter__()
    budget = apps["full"].state.posenc.budget
    budget.in_flight, budget.holders = budget.limit, 1  # as if one held it all: no room
    cold = TestClient(_app(), raise_server_exceptions=False)  # never entered: no lifespan
    try:
        yield {**started, "cold": cold}
    finally:
        for c in started.values():
            c.__exit__(None, None, None)


#: the OpenAPI document of the plain app, built once (each build is a whole app's walk)
DOC = _app().openapi()
OPERATIONS = [
    (method.upper(), path, op)
    for path, item in DOC["paths"].items()
    for method, op in item.items()
    if method in METHODS
]
_DOC_BODIES = {
    path: op["requestBody"]["content"]["application/json"]
    for method, path, op in OPERATIONS
    if method == "POST" and "requestBody" in op
}


def _example(path: str) -> dict[str, Any] | None:
    """The first JSON example of ``POST path``'s body (a GET twin takes the same fields)."""
    content = _DOC_BODIES.get(path)
    if content is None:
        return None
    schema = content.get("schema", {})
    ref = schema.get("$ref")
    if ref is not None:
        schema = DOC["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    examples = content.get("examples") or schema.get("examples")
    assert examples, f"POST {path} has no example to send"
    first = examples[0] if isinstance(examples, list) else next(iter(examples.values()))["value"]
    return dict(first)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return ",".join(map(str, value))
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _path(path: str, name: str) -> str:
    return path.replace("{name}", name)


class Probe:
    """One operation and the requests that exercise it."""

    def __init__(self, method: str, path: str, op: dict[str, Any]) -> None:
        self.method, self.path, self.op = method, path, op
        self.example = _example(path)
        self.query_names = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]

    def valid(self, client: TestClient, name: str, **headers: str) -> int:
        url = _path(self.path, name)
        if self.method == "POST":
            return client.post(url, json=self.example, headers=headers).status_code
        params = {k: _query_value(v) for k, v in (self.example or {}).items()}
        return client.get(url, params=params, headers=headers).status_code

    def statuses(self, clients: dict[str, TestClient], name: str) -> dict[int, str]:
        """{status: the request that gave it} over every probe."""
        seen: dict[int, str] = {}
        plain = clients["plain"]
        url = _path(self.path, name)

        def note(status: int, what: str) -> None:
            seen.setdefault(status, what)

        status = self.valid(plain, name)
        assert status == 200, f"{self.method} {self.path}: its own example gave {status}"
        note(self.valid(plain, name, **{"If-None-Match": "*"}), "If-None-Match: *")
        note(self.valid(plain, name, accept="image/gif"), "Accept: image/gif")
        note(self.valid(clients["keyed"], name), "no bearer token, with POSENC_API_KEY set")
        note(self.valid(clients["locked"], name), "no key set, POSENC_ALLOW_RELOAD off")
        note(self.valid(clients["small"], name), "POSENC_MAX_ELEMENTS=1")
        note(self.valid(clients["full"], name), "a full byte budget")
        note(self.valid(clients["cold"], name), "models not loaded")
        if "{name}" in self.path:
            note(plain.get(_path(self.path, "no-such-name")).status_code, "an unknown name")
        if self.method == "POST":
            json_type = {"content-type": "application/json"}
            bodies = {
                "a body that is not UTF-8": (b'{"seq_len": "\xff\xfe"}', json_type),
                "a text/plain body": (b"seq_len=8", {"content-type": "text/plain"}),
                "a body without Content-Type": (b"{}", {}),
                "a body over POSENC_MAX_BODY_BYTES": (
                    b'{"pad": "' + b"a" * BODY_LIMIT + b'"}',
                    json_type,
                ),
                "a JSON array": (b"[]", json_type),
                "an unknown field": (b'{"no_such_field": 1}', json_type),
            }
            if "requestBody" not in self.op:  # a body it reads but does not parse: its size
                bodies = {k: v for k, v in bodies.items() if "POSENC_MAX_BODY_BYTES" in k}
            for media_type in self.op.get("requestBody", {}).get("content", {}):
                if media_type != "application/json":
                    garbage_body = (b"\x00 not this format", {"content-type": media_type})
                    bodies[f"a malformed {media_type} body"] = garbage_body
            for what, (content, headers) in bodies.items():
                note(plain.post(url, content=content, headers=headers).status_code, what)
        else:
            garbage = {n: "not-a-value" for n in self.query_names}
            note(plain.get(url, params=garbage).status_code, "query parameters not values")
            # a GET with a declared body size over the limit: not read, not refused
            note(
                plain.request(
                    "GET", url, content=b"x" * (BODY_LIMIT + 1), headers={"content-type": "a/b"}
                ).status_code,
                "a GET with a body over POSENC_MAX_BODY_BYTES",
            )
        return seen


# every route in the whole suite; every third (a fixed sample) in the fast lane
@pytest.mark.parametrize(
    ("method", "path", "op"),
    [
        pytest.param(*o, marks=() if i % 3 == 0 else (pytest.mark.slow,))
        for i, o in enumerate(OPERATIONS)
    ],
    ids=[f"{m} {p}" for m, p, _ in OPERATIONS],
)
def test_route_declares_exactly_the_statuses_it_answers(
    clients: dict[str, TestClient], method: str, path: str, op: dict[str, Any]
) -> None:
    probe = Probe(method, path, op)
    name = next(iter(PRESETS)) if path.startswith("/v1/presets/") else "posenc-base"
    seen = probe.statuses(clients, name)
    seen.setdefault(200, "its own example")
    declared = {int(s) for s in op["responses"]}
    undeclared = {s: seen[s] for s in seen if s not in declared}
    unmade = declared - set(seen)
    assert not undeclared, f"{method} {path} answers undeclared statuses: {undeclared}"
    assert not unmade, f"{method} {path} declares {sorted(unmade)}, which no request made"


def test_every_route_of_the_app_is_walked() -> None:
    """The walk covers every API route of the app (its routers flattened), not a list kept by
    hand: a route left out of the OpenAPI document would escape the check above."""
    app = _app()
    routed = {
        (method, context.original_route.path_format)
        for context in iter_route_contexts(app.routes)
        if isinstance(context.original_route, APIRoute) and context.original_route.include_in_schema
        for method in context.original_route.methods
    }
    walked = {(m, p) for m, p, _ in OPERATIONS}
    assert len(routed) >= 30
    assert routed == walked
