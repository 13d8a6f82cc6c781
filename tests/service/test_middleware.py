"""The service's own ASGI middleware (:mod:`service.middleware`) on a small Starlette app of its
own: the bearer check of ``/v1/`` (401 with ``WWW-Authenticate``, nothing outside ``/v1/``, CORS
preflights let through, the admin key on the operator's doors only), ``admin_refusal``'s three
answers, and ``Vary: Accept`` and ``Server-Timing`` added where a route set none. The whole app
with these settings: test_service_http.py and test_reload_door.py."""

from __future__ import annotations

import json
import re

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from service.middleware import BearerAuthMiddleware, ResponseHeadersMiddleware, admin_refusal


def _ok(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _own_headers(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok", headers={"Vary": "Origin", "Server-Timing": "compute;dur=1"})


ROUTES = [
    Route("/v1/x", _ok, methods=["GET", "POST", "OPTIONS"]),
    Route("/v1/models/reload", _ok, methods=["POST"]),
    Route("/healthz", _ok),
    Route("/v1/own", _own_headers),
]


def _client(**keys: str) -> TestClient:
    app = Starlette(routes=ROUTES)
    app.add_middleware(BearerAuthMiddleware, api_key="k1", routes=ROUTES, **keys)
    app.add_middleware(ResponseHeadersMiddleware)
    return TestClient(app)


def test_v1_needs_the_api_key_and_nothing_else_does() -> None:
    c = _client()
    missing = c.get("/v1/x")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="posenc"'
    assert missing.json() == {
        "detail": "Authorization: this endpoint needs the header "
        "'Authorization: Bearer <POSENC_API_KEY>'",
        "field": "Authorization",
    }
    wrong = c.get("/v1/x", headers={"Authorization": "Bearer k2"})
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"] == 'Bearer realm="posenc", error="invalid_token"'
    assert wrong.json()["detail"].endswith("(the token given is not valid)")
    assert c.get("/v1/x", headers={"Authorization": "bearer  k1 "}).text == "ok"
    assert c.get("/healthz").text == "ok"
    assert c.options("/v1/x").status_code == 200  # a CORS preflight carries no credentials


def test_the_admin_key_opens_the_operators_doors_only() -> None:
    c = _client(admin_key="adm")
    admin = {"Authorization": "Bearer adm"}
    assert c.post("/v1/models/reload", headers=admin).text == "ok"
    assert c.post("/v1/x", headers=admin).status_code == 401


def test_admin_refusal_shut_open_and_keyed() -> None:
    shut = admin_refusal([], api_key=None, admin_key=None, allow=False)
    assert shut is not None and shut.status_code == 403
    assert json.loads(bytes(shut.body))["field"] == "Authorization"
    assert admin_refusal([], api_key=None, admin_key=None, allow=True) is None
    keyed = {"api_key": "k1", "admin_key": "adm", "allow": False}
    for token in (b"Bearer adm", b"Bearer k1"):
        assert admin_refusal([(b"authorization", token)], **keyed) is None  # type: ignore[arg-type]
    refused = admin_refusal([(b"authorization", b"Bearer nope")], **keyed)  # type: ignore[arg-type]
    assert refused is not None and refused.status_code == 401
    assert refused.headers["www-authenticate"] == 'Bearer realm="posenc", error="invalid_token"'
    # only the API key set: the bearer middleware has checked it already
    assert admin_refusal([], api_key="k1", admin_key=None, allow=False) is None


def test_vary_accept_and_server_timing_where_the_route_set_none() -> None:
    c = _client()
    plain = c.get("/healthz")
    assert plain.headers["vary"] == "Accept"
    assert re.fullmatch(r"app;dur=\d+\.\d{3}", plain.headers["server-timing"])
    own = c.get("/v1/own", headers={"Authorization": "Bearer k1"})
    assert own.headers["vary"] == "Origin, Accept"
    assert own.headers["server-timing"] == "compute;dur=1"
