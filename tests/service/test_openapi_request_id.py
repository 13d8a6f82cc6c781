"""``X-Request-ID`` is declared in both OpenAPI documents as the service sends and honours it.

Every response carries the header (``service/observability/request_id.py``), so every response of every
operation declares it, required, with the pattern of the ids the service sends; the caller's own
id is honoured when sane, so every operation declares it as an optional header parameter. The
declared pattern is checked against real responses (generated ids and echoed ones) and against
ids the middleware refuses.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.config import Settings

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def client() -> Any:
    with TestClient(create_app(Settings(api_key="k", models=""))) as c:
        yield c


@pytest.fixture(scope="module")
def documents(client: TestClient) -> dict[str, dict[str, Any]]:
    return {
        "3.1": client.get("/openapi.json").json(),
        "3.0": client.get("/docs/openapi.json").json(),
    }


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


@pytest.mark.parametrize("version", ["3.1", "3.0"])
def test_every_response_of_every_operation_declares_it(
    documents: dict[str, dict[str, Any]], version: str
) -> None:
    doc = documents[version]
    operations = _operations(doc)
    assert len(operations) >= 20
    missing = []
    for method, path, op in operations:
        for status, response in op["responses"].items():
            header = response.get("headers", {}).get("X-Request-ID")
            if header is None or header.get("required") is not True:
                missing.append(f"{method} {path} {status}")
            elif header["schema"]["type"] != "string":
                missing.append(f"{method} {path} {status}: type {header['schema']}")
    assert missing == []


@pytest.mark.parametrize("version", ["3.1", "3.0"])
def test_every_operation_takes_it_as_an_optional_header(
    documents: dict[str, dict[str, Any]], version: str
) -> None:
    for method, path, op in _operations(documents[version]):
        found = [
            p
            for p in op.get("parameters", [])
            if p["in"] == "header" and p["name"].lower() == "x-request-id"
        ]
        assert len(found) == 1, (method, path)
        assert found[0].get("required", False) is False, (method, path)


def test_other_response_headers_are_kept(documents: dict[str, dict[str, Any]]) -> None:
    """Declaring X-Request-ID adds to a response's headers; it replaces none."""
    doc = documents["3.1"]
    kept = [
        set(response["headers"]) - {"X-Request-ID"}
        for _, _, op in _operations(doc)
        for response in op["responses"].values()
    ]
    assert any(kept), "no operation declares another response header any more"


def _pattern(documents: dict[str, dict[str, Any]]) -> re.Pattern[str]:
    op = documents["3.1"]["paths"]["/healthz"]["get"]
    return re.compile(op["responses"]["200"]["headers"]["X-Request-ID"]["schema"]["pattern"])


def test_real_ids_match_the_declared_pattern(
    client: TestClient, documents: dict[str, dict[str, Any]]
) -> None:
    pattern = _pattern(documents)
    generated = [
        client.get("/healthz").headers["x-request-id"],
        client.get("/v1/info").headers["x-request-id"],  # a 401: no key
        client.get("/nowhere").headers["x-request-id"],  # a 404
    ]
    assert all(pattern.search(value) for value in generated), generated
    assert len(set(generated)) == 3
    sane = "trace-7:a/b+c=d@e.f_" + "x" * 100
    assert client.get("/healthz", headers={"X-Request-ID": sane}).headers["x-request-id"] == sane
    assert pattern.search(sane)
    for refused in ("", "has space", "x" * 129, "semi;colon"):
        echoed = client.get("/healthz", headers={"X-Request-ID": refused}).headers["x-request-id"]
        assert echoed != refused and pattern.search(echoed)
        assert not pattern.search(refused)
