"""The OpenAPI document and the ``/docs`` explorer.

``/openapi.json`` is FastAPI's OpenAPI 3.1 document (plus the bearer scheme when
``POSENC_API_KEY`` is set); ``/docs`` is Swagger UI served from the ``swagger_ui_bundle`` package
by this process (no CDN, no internet), which renders only OpenAPI 3.0, so it loads the copy that
:func:`openapi_30` makes at ``/docs/openapi.json``. Both documents validate
(``tests/service/test_openapi.py``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from service.config import Settings
from service.observability.request_id import HEADER as REQUEST_ID
from service.observability.request_id import PATTERN as REQUEST_ID_PATTERN

__all__ = [
    "custom_openapi",
    "declare_request_id",
    "drop_implicit_422",
    "hoist_inline_models",
    "install_docs",
    "json_schema_keywords",
    "openapi_30",
]


def openapi_30(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of an OpenAPI 3.1 document that Swagger UI 4 (OpenAPI 3.0 only) can render.

    ``anyOf [X, null]`` becomes ``nullable``, schema ``examples`` lists become ``example``,
    ``const`` becomes a one-value ``enum`` and numeric ``exclusiveMinimum`` the 3.0 boolean form.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        any_of = out.get("anyOf")
        if isinstance(any_of, list) and {"type": "null"} in any_of:
            rest = [s for s in any_of if s != {"type": "null"}]
            del out["anyOf"]
            if len(rest) == 1 and "$ref" not in rest[0]:
                out = {**rest[0], **out}
            elif len(rest) == 1:
                out["allOf"] = rest
            else:
                out["anyOf"] = rest
            out["nullable"] = True
        if isinstance(out.get("type"), list):
            types = [t for t in out["type"] if t != "null"]
            out["type"] = types[0] if len(types) == 1 else types
            if len(types) < len(node["type"]):
                out["nullable"] = True
        if isinstance(out.get("examples"), list) and out["examples"]:
            out["example"] = out.pop("examples")[0]
        if "const" in out:
            out["enum"] = [out.pop("const")]
        for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            value = out.get(bound)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[plain] = value
                out[bound] = True
        return out

    doc = walk(copy.deepcopy(spec))
    doc["openapi"] = "3.0.3"
    for item in doc.get("paths", {}).values():
        for operation in item.values():
            for response in (
                operation.get("responses", {}).values() if isinstance(operation, dict) else ()
            ):
                content = response.get("content") if isinstance(response, dict) else None
                if content and "application/json" in content:
                    # JSON first: "Try it out" sends the first media type as Accept
                    response["content"] = {
                        "application/json": content["application/json"],
                        **{k: v for k, v in content.items() if k != "application/json"},
                    }
    return doc


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs``: Swagger UI from the ``swagger_ui_bundle`` package (no CDN), on the 3.0 copy."""
    app.mount("/docs/static", StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}/docs/openapi.json",
            title="posenc API",
            swagger_js_url=f"{root}/docs/static/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/static/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/static/favicon-32x32.png",
            swagger_ui_parameters={
                "tryItOutEnabled": True,
                "deepLinking": True,
                "displayRequestDuration": True,
                "defaultModelsExpandDepth": 0,
            },
        )

    @app.get("/docs/openapi.json", include_in_schema=False)
    def swagger_openapi() -> JSONResponse:
        """The schema as OpenAPI 3.0 for the bundled Swagger UI (4.x renders no 3.1)."""
        return JSONResponse(openapi_30(app.openapi()))


# pydantic writes a bound it could not attach to the type itself (an ``int | None`` field whose
# int carries a validator) under its own constraint names; JSON Schema, and so every generator
# and validator, reads only its own keywords.
_PYDANTIC_BOUNDS = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
    "multiple_of": "multipleOf",
}
_PYDANTIC_LENGTHS = {
    "min_length": ("minItems", "minLength"),
    "max_length": ("maxItems", "maxLength"),
}


def json_schema_keywords(node: Any) -> Any:
    """A copy of a document with pydantic's constraint names (``ge``, ``le``, ``multiple_of``…)
    turned into JSON Schema's (``minimum``, ``maximum``, ``multipleOf``…), wherever they are, and
    an integer's bounds written as integers."""
    if isinstance(node, list):
        return [json_schema_keywords(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: json_schema_keywords(v) for k, v in node.items()}
    if "type" not in out and "$ref" not in out and "anyOf" not in out:
        return out  # not a schema (e.g. a properties map that names a field "ge")
    for name, keyword in _PYDANTIC_BOUNDS.items():
        if name in out and not isinstance(out[name], dict):
            out.setdefault(keyword, out.pop(name))
    for name, (for_array, for_string) in _PYDANTIC_LENGTHS.items():
        if name in out and not isinstance(out[name], dict):
            out.setdefault(for_array if out.get("type") == "array" else for_string, out.pop(name))
    if out.get("type") == "integer":  # the bounds of an integer as integers (1, not 1.0)
        for keyword in _PYDANTIC_BOUNDS.values():
            value = out.get(keyword)
            if isinstance(value, float) and value.is_integer():
                out[keyword] = int(value)
    return out


_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def hoist_inline_models(doc: dict[str, Any]) -> dict[str, Any]:
    """Move every request and response model written inline in ``doc`` (an object schema with
    a ``title``, and the ``$defs`` it carries) under ``components/schemas``, in place, and
    refer to it by ``$ref``.

    FastAPI writes the body of a route that reads its request itself (the token endpoints,
    which also take binary bodies) inline, so generators named it after the operation
    (``PostV1EmbedJsonEmbedRequest``); under ``components`` it keeps its own name
    (``EmbedRequest``).
    """
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})

    def hoist(holder: dict[str, Any]) -> None:
        schema = holder.get("schema")
        if not isinstance(schema, dict) or "$ref" in schema:
            return
        for name, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        title = schema.get("title")
        if schema.get("type") != "object" or not isinstance(title, str):
            return
        if schemas.setdefault(title, schema) != schema:
            return  # another schema has this name: leave this one inline
        holder["schema"] = {"$ref": f"#/components/schemas/{title}"}

    for item in doc.get("paths", {}).values():
        for method, operation in item.items():
            if method not in _METHODS or not isinstance(operation, dict):
                continue
            bodies = [operation.get("requestBody", {})]
            bodies += [r for r in operation.get("responses", {}).values() if isinstance(r, dict)]
            for body in bodies:
                for media in body.get("content", {}).values():
                    if isinstance(media, dict):
                        hoist(media)
    return doc


def declare_request_id(doc: dict[str, Any]) -> dict[str, Any]:
    """Declare ``X-Request-ID`` (``service.observability.request_id``) in every operation of ``doc``, in place.

    Every response carries it, so each response of each operation gets it as a required header
    (beside the headers it already declares); the caller's own id is kept when it matches the
    pattern, so each operation takes it as an optional header parameter. The parameter's schema
    is a plain string: any other value is not refused, only replaced by a generated id.
    """
    response_header = {
        "description": (
            "The request's id: the caller's X-Request-ID when it matches the pattern, else "
            "32 hex digits generated here. The access log records it."
        ),
        "required": True,
        "schema": {"type": "string", "pattern": f"^{REQUEST_ID_PATTERN}$"},
    }
    parameter = {
        "name": REQUEST_ID,
        "in": "header",
        "required": False,
        "description": (
            f"Your id for this request, sent back as {REQUEST_ID} and written to the access "
            f"log when it is 1 to 128 of A-Z a-z 0-9 - _ . : / + = @; any other value is "
            "replaced by a generated id (not refused)."
        ),
        "schema": {"type": "string"},
    }
    for item in doc.get("paths", {}).values():
        for method, operation in item.items():
            if method not in _METHODS or not isinstance(operation, dict):
                continue
            parameters = operation.setdefault("parameters", [])
            if not any(
                p.get("in") == "header" and str(p.get("name", "")).lower() == REQUEST_ID.lower()
                for p in parameters
            ):
                parameters.append(copy.deepcopy(parameter))
            for response in operation.get("responses", {}).values():
                if isinstance(response, dict) and "$ref" not in response:
                    headers = response.setdefault("headers", {})
                    headers.setdefault(REQUEST_ID, copy.deepcopy(response_header))
    return doc


def drop_implicit_422(doc: dict[str, Any]) -> dict[str, Any]:
    """Remove, in place, the 422 FastAPI adds to every operation with parameters that declares
    none itself (``/v1/models/{name}``: its name is any string, it cannot be invalid): the
    statuses of each route are those :mod:`service.statuses` derives, no more."""
    for item in doc.get("paths", {}).values():
        for method, operation in item.items():
            if method not in _METHODS or not isinstance(operation, dict):
                continue
            implicit = operation.get("responses", {}).get("422", {})
            ref = implicit.get("content", {}).get("application/json", {}).get("schema", {})
            if ref.get("$ref", "").endswith("/HTTPValidationError"):
                del operation["responses"]["422"]
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's, now unused
        if f'#/components/schemas/{name}"' not in json.dumps(doc):
            schemas.pop(name, None)
    return doc


def custom_openapi(app: FastAPI, settings: Settings) -> Callable[[], dict[str, Any]]:
    """``app.openapi``: the generated document, with ``X-Request-ID`` declared on every
    operation and the bearer scheme when a key is set."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
                tags=app.openapi_tags,
            )
            schema = drop_implicit_422(schema)
            schema = declare_request_id(hoist_inline_models(json_schema_keywords(schema)))
            if settings.api_key is not None:
                components = schema.setdefault("components", {})
                components.setdefault("securitySchemes", {})["bearerAuth"] = {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "POSENC_API_KEY",
                }
                for path, operations in schema.get("paths", {}).items():
                    if path.startswith("/v1/"):
                        for operation in operations.values():
                            operation["security"] = [{"bearerAuth": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi
