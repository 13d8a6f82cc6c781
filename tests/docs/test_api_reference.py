"""docs/api.md is generated from /openapi.json and must equal what the service documents.

The reference cannot drift: any change to an endpoint, field, default, media type or status code
changes the generated text, and this test fails until ``scripts/api_reference.py`` is re-run.
"""

from __future__ import annotations

import runpy
from pathlib import Path

from service.app import create_app
from service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "api.md"


def _generator() -> dict:
    return runpy.run_path(str(ROOT / "scripts" / "api_reference.py"))


def test_reference_is_up_to_date() -> None:
    spec = create_app(Settings(api_key=None)).openapi()
    expected = _generator()["render"](spec)
    assert REFERENCE.read_text() == expected, "docs/api.md is stale: run scripts/api_reference.py"


def test_reference_names_every_operation_field_and_status() -> None:
    spec = create_app(Settings(api_key=None)).openapi()
    text = REFERENCE.read_text()
    for path, item in spec["paths"].items():
        for method, op in item.items():
            heading = f"### `{method.upper()} {path}`"
            assert heading in text, heading
            section = text.split(heading, 1)[1].split("\n### ", 1)[0]
            for status in op["responses"]:
                assert f"| {status} |" in section, (method, path, status)
            for param in op.get("parameters", []):
                assert f"| `{param['name']}` |" in section, (method, path, param["name"])
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                ref = body["schema"].get("$ref", "")
                schema = spec["components"]["schemas"].get(ref.rsplit("/", 1)[-1], {})
                for field in schema.get("properties", {}):
                    assert f"| `{field}` |" in section, (method, path, field)


def test_nested_list_bounds_read_as_english() -> None:
    """A list of lists' bounds once read "each each ≥ 0"."""
    constraints = _generator()["_constraints"]
    rows = {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 3,
            "items": {"type": "integer", "minimum": 0}}}  # fmt: skip
    said = constraints(rows)
    assert "every inner value ≥ 0" in said and "each at least 3 items" in said
    assert not any("each each" in c for c in said)
    assert "each each" not in REFERENCE.read_text()
