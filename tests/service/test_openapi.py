"""The OpenAPI documents are valid, and their constraints are JSON Schema's, not pydantic's.

``/openapi.json`` (3.1) is what generators and validators read; ``/docs/openapi.json`` (3.0) is
what the bundled Swagger UI renders. Both must validate, and a bound such as ``seq_len >= 1``
must reach them as ``minimum`` (pydantic's own ``ge``/``le``/``multiple_of`` keywords leak
into a schema when a constraint cannot be attached to the type, and no tool reads those).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import OpenAPIV30SpecValidator, OpenAPIV31SpecValidator

from service.app import create_app
from service.config import Settings
from service.openapi import openapi_30

PYDANTIC_KEYWORDS = ("ge", "gt", "le", "lt", "multiple_of", "min_length", "max_length")


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    with TestClient(create_app(Settings(api_key="k"))) as client:
        return {
            "3.1": client.get("/openapi.json").json(),
            "3.0": client.get("/docs/openapi.json").json(),
        }


@pytest.mark.parametrize("version", ["3.1", "3.0"])
def test_document_validates(documents: dict[str, dict[str, Any]], version: str) -> None:
    validator = OpenAPIV31SpecValidator if version == "3.1" else OpenAPIV30SpecValidator
    errors = [
        f"{list(e.absolute_path)}: {e.message[:160]}"
        for e in validator(documents[version]).iter_errors()
    ]
    assert errors == []


def test_no_pydantic_keywords_leak(documents: dict[str, dict[str, Any]]) -> None:
    text = json.dumps(documents["3.1"])
    alternatives = "|".join(PYDANTIC_KEYWORDS)
    leaked = sorted(set(re.findall(rf'"({alternatives})":', text)))
    assert leaked == []


def test_bounds_reach_the_schema(documents: dict[str, dict[str, Any]]) -> None:
    schemas = documents["3.1"]["components"]["schemas"]
    d_model = schemas["SinusoidalRequest"]["properties"]["d_model"]
    assert d_model["minimum"] == 2 and d_model["multipleOf"] == 2
    seq_len = schemas["SinusoidalRequest"]["properties"]["seq_len"]
    assert {"type": "integer", "minimum": 1, "maximum": 2**53} in seq_len["anyOf"]
    get = documents["3.0"]["paths"]["/v1/encodings/rope"]["get"]["parameters"]
    head_dim = next(p for p in get if p["name"] == "head_dim")["schema"]
    assert head_dim["minimum"] == 2 and head_dim["multipleOf"] == 2 and head_dim["nullable"] is True


def test_the_30_copy_keeps_every_path(documents: dict[str, dict[str, Any]]) -> None:
    assert documents["3.0"]["openapi"].startswith("3.0")
    assert set(documents["3.0"]["paths"]) == set(documents["3.1"]["paths"])
    assert openapi_30(documents["3.1"])["paths"] == documents["3.0"]["paths"]


def test_binary_first_for_generated_clients_json_first_for_swagger(
    documents: dict[str, dict[str, Any]],
) -> None:
    """A generated client parses a 200 by the first media type it knows: bytes first, it
    returns every format's bytes. Swagger UI's "Try it out" sends the first as Accept: JSON
    first there."""
    for path in ("/v1/encodings/rope", "/v1/embed", "/v1/biases/alibi"):
        first = {
            v: next(iter(documents[v]["paths"][path]["post"]["responses"]["200"]["content"]))
            for v in ("3.1", "3.0")
        }
        assert first == {"3.1": "application/octet-stream", "3.0": "application/json"}, path


def test_integer_bounds_are_integers(documents: dict[str, dict[str, Any]]) -> None:
    """An integer's minimum, maximum and multipleOf are written as integers (2, not 2.0), in both
    documents: generators that type the bound by its JSON value see an int."""
    found: list[tuple[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "integer":
                for keyword in ("minimum", "maximum", "exclusiveMinimum", "multipleOf"):
                    if keyword in node:
                        found.append((keyword, node[keyword]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for document in documents.values():
        walk(document)
    assert len(found) > 50
    assert [f for f in found if not isinstance(f[1], int) or isinstance(f[1], bool)] == []
