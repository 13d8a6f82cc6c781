"""Small things users hit (API 1.3): ``/`` points to the docs, a 405 says which method to use,
and errors come as RFC 9457 ``application/problem+json`` when the client's Accept asks, keeping
``detail`` and ``field``. In process and through a real uvicorn (the ``api`` fixture)."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest

PROBLEM = {"Accept": "application/json, application/problem+json"}


def test_root_points_to_the_docs_and_the_openapi_document(api: httpx.Client) -> None:
    r = api.get("/")
    assert r.status_code == 200
    assert r.json()["docs"] == "/docs" and r.json()["openapi"] == "/openapi.json"
    assert api.get(r.json()["openapi"]).json()["openapi"].startswith("3.")
    assert api.get(r.json()["docs"]).status_code == 200


def test_a_405_names_the_method_to_use(api: httpx.Client) -> None:
    r = api.get("/v1/embed")
    assert r.status_code == 405
    assert r.headers["Allow"] == "POST"
    assert "use POST" in r.json()["detail"] and "GET" in r.json()["detail"]
    r = api.delete("/v1/encodings/sinusoidal")
    assert r.status_code == 405 and set(r.headers["Allow"].split(", ")) >= {"GET", "POST"}


def test_errors_are_problem_details_when_asked(api: httpx.Client) -> None:
    body = {"input_ids": [[1, 99999]]}
    plain = api.post("/v1/embed", json=body)
    problem = api.post("/v1/embed", json=body, headers=PROBLEM)
    assert plain.headers["content-type"] == "application/json"
    assert problem.headers["content-type"] == "application/problem+json"
    assert problem.status_code == plain.status_code == 422
    got = problem.json()
    assert got == {
        "type": "about:blank",
        "title": "Unprocessable Entity",
        "status": 422,
        **plain.json(),
    }
    assert got["field"] == "input_ids[0][1]" and "99999" in got["detail"]
    assert int(problem.headers["content-length"]) == len(problem.content)
    # a 404 and a 405 too; a success is untouched
    assert api.get("/v1/models/nope", headers=PROBLEM).json()["status"] == 404
    assert api.get("/v1/embed", headers=PROBLEM).json()["title"] == "Method Not Allowed"
    ok = api.post("/v1/embed", json={"input_ids": [[1]]}, headers=PROBLEM)
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/json"


def _problem_schema(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``doc``'s components, so that jsonschema resolves its ``$ref``s."""
    return {**schema, "components": doc["components"]}


def test_every_error_response_declares_problem_json_beside_json(api: httpx.Client) -> None:
    """Each 4xx/5xx response of /openapi.json offers application/problem+json: the JSON body's
    own schema and RFC 9457's type, title and status (``service.error_bodies``)."""
    doc = api.get("/openapi.json").json()
    errors = [
        (f"{method.upper()} {path} {status}", response)
        for path, item in doc["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict)
        for status, response in operation.get("responses", {}).items()
        if int(status) >= 400
    ]
    assert len(errors) > 100  # every route declares its 401, most their 422 …
    for where, response in errors:
        content = response.get("content", {})
        assert list(content) == ["application/json", "application/problem+json"], where
        own = content["application/json"]["schema"]
        problem = content["application/problem+json"]["schema"]["allOf"]
        assert problem[0] == own, where
        assert problem[1]["required"] == ["type", "title", "status"], where
        assert problem[1]["properties"]["status"]["type"] == "integer", where


def test_a_problem_body_matches_its_declared_schema(api: httpx.Client) -> None:
    """The bodies the service sends as problem+json validate against what /openapi.json
    declares for them, and a plain JSON body does not (it has no title or status)."""
    doc = api.get("/openapi.json").json()
    sent = [
        ("post", "/v1/embed", "422", api.post("/v1/embed", json={"input_ids": [[1, 99999]]},
                                              headers=PROBLEM)),
        ("get", "/v1/models/{name}", "404", api.get("/v1/models/nope", headers=PROBLEM)),
        ("post", "/v1/embed", "415", api.post("/v1/embed", content=b"x",
                                              headers={**PROBLEM, "content-type": "text/csv"})),
        ("get", "/v1/encodings/sinusoidal", "413", api.get(
            "/v1/encodings/sinusoidal", params={"seq_len": 2**20, "d_model": 2**16},
            headers=PROBLEM)),
    ]  # fmt: skip
    for method, path, status, r in sent:
        assert r.status_code == int(status), (path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        content = doc["paths"][path][method]["responses"][status]["content"]
        schema = _problem_schema(doc, content["application/problem+json"]["schema"])
        jsonschema.validate(r.json(), schema)
        plain = {k: v for k, v in r.json().items() if k not in ("title", "status")}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(plain, schema)
