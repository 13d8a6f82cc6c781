"""Small things users hit (API 1.3): ``/`` points to the docs, a 405 says which method to use,
and errors come as RFC 9457 ``application/problem+json`` when the client's Accept asks, keeping
``detail`` and ``field``. In process and through a real uvicorn (the ``api`` fixture)."""

from __future__ import annotations

import httpx

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
