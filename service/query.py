"""Reading a request beyond its JSON body: the output options every compute endpoint takes as
query parameters (``format``, ``encoding``, ``index``) and how they appear in OpenAPI, a GET's
fields as query parameters (``positions`` comma-separated, ``scaling`` and ``config`` as JSON
text) with their OpenAPI parameters, and FastAPI-shaped 422s for fields checked after pydantic
(``missing``, ``revalidate``), located under ``body`` or ``query``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError

from service.formats import FORMAT_MEDIA_TYPES

Source = Literal["body", "query"]


M = TypeVar("M", bound=BaseModel)


# Query parameters that choose the representation, on every compute endpoint (GET and POST).
OUTPUT_PARAMS = ("format", "encoding", "index")


@dataclass(frozen=True)
class QueryShape:
    """How a GET's fields that are not scalars are written in its query string.

    Attributes:
        lists: fields given as comma-separated integers (``positions=0,1,2``), each with the
            OpenAPI schema of its query parameter.
        json: fields given as JSON text (``scaling={"type":"linear","factor":2}``), likewise.
    """

    lists: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    json: Mapping[str, dict[str, Any]] = field(default_factory=dict)


SCALARS_ONLY = QueryShape()


@dataclass(frozen=True)
class OutputOptions:
    format: str | None
    encoding: str | None
    index: int | None


class _OutputQuery(BaseModel):
    format: str | None = None
    encoding: Literal["float", "base64"] | None = None
    index: int | None = Field(default=None, ge=0, le=2**31 - 1)  # (JSON keys hold 64 bits)


_NO_OUTPUT_OPTIONS = OutputOptions(format=None, encoding=None, index=None)


def read_output(request: Request) -> OutputOptions:
    """The output options from the query string; a bad value is FastAPI's 422 under ``query``.

    Compute routes read these here rather than through a FastAPI dependency: solving
    dependencies is most of the framework's per-request cost on a cache hit.
    """
    params = request.query_params
    given = {k: params[k] for k in OUTPUT_PARAMS if k in params}
    if not given:
        return _NO_OUTPUT_OPTIONS
    q = revalidate(_OutputQuery, given, "query")
    return OutputOptions(format=q.format, encoding=q.encoding, index=q.index)


# How read_output's parameters appear in the OpenAPI document of every compute operation.
OUTPUT_OPENAPI_PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "format",
        "in": "query",
        "required": False,
        "description": "output format; wins over Accept: json, safetensors, npy, raw or png "
        "(anything else is a 406 listing what is available)",
        "schema": {"type": "string", "enum": list(FORMAT_MEDIA_TYPES)},
    },
    {
        "name": "encoding",
        "in": "query",
        "required": False,
        "description": "JSON only: base64 gives each tensor's data as base64 of its raw bytes",
        "schema": {"type": "string", "enum": ["float", "base64"]},
    },
    {
        "name": "index",
        "in": "query",
        "required": False,
        "description": "png only: the leading index of a 3-D tensor to draw",
        "schema": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
    },
]


def validation_error(source: Source, errors: Sequence[Mapping[str, Any]]) -> RequestValidationError:
    """A RequestValidationError (FastAPI's 422 list) with locations under ``source``."""
    items = []
    for e in errors:
        item = dict(e)
        item["loc"] = (source, *tuple(e.get("loc", ())))
        item.pop("url", None)
        items.append(item)
    return RequestValidationError(items)


def missing(source: Source, name: str, message: str) -> RequestValidationError:
    return validation_error(source, [{"type": "missing", "loc": (name,), "msg": message}])


def revalidate(model_cls: type[M], data: Mapping[str, Any], source: Source) -> M:
    """Validate ``data`` as ``model_cls``; pydantic errors become FastAPI's 422 under ``source``."""
    try:
        return model_cls.model_validate(dict(data))
    except ValidationError as exc:
        raise validation_error(source, exc.errors(include_url=False)) from None


def query_fields(request: Request, shape: QueryShape = SCALARS_ONLY) -> dict[str, Any]:
    """The query string as a request dict: list fields comma-separated, JSON fields as JSON
    text, other fields as their text (pydantic converts it); the output options left out."""
    data: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    params = request.query_params
    for key in dict.fromkeys(params.keys()):
        if key in OUTPUT_PARAMS:
            continue
        values = params.getlist(key)
        if key in shape.lists:
            text = ",".join(values)
            try:
                data[key] = [int(v) for v in text.split(",")]
            except ValueError:
                errors.append(
                    {
                        "type": "int_parsing",
                        "loc": (key,),
                        "msg": f"{key} must be comma-separated integers, e.g. 0,1,2; got {text!r}",
                        "input": text,
                    }
                )
            continue
        if len(values) > 1:
            errors.append(
                {
                    "type": "value_error",
                    "loc": (key,),
                    "msg": f"{key} is given {len(values)} times; give it once",
                    "input": values,
                }
            )
            continue
        value = values[0]
        if key in shape.json:
            try:
                data[key] = json.loads(value)
            except (ValueError, RecursionError) as exc:
                # nested past the parser's depth: refused as a body nested as deep is
                why = "it is nested too deeply to parse" if isinstance(exc, RecursionError) else exc
                errors.append(
                    {
                        "type": "json_invalid",
                        "loc": (key,),
                        "msg": f"{key} must be JSON text (an object or null): {why}",
                        "input": value if len(value) <= 256 else value[:256] + "...",
                    }
                )
            continue
        data[key] = value
    if errors:
        raise validation_error("query", errors)
    return data


def parse_query(request: Request, model_cls: type[M], shape: QueryShape = SCALARS_ONLY) -> M:
    return revalidate(model_cls, query_fields(request, shape), "query")


def query_openapi(model_cls: type[BaseModel], shape: QueryShape = SCALARS_ONLY) -> dict[str, Any]:
    """``openapi_extra`` documenting the fields of ``model_cls`` as GET query parameters."""
    schema = model_cls.model_json_schema(ref_template="#/components/schemas/{model}")
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    examples = (schema.get("examples") or [{}])[0]
    parameters = []
    for name, prop in props.items():
        prop = dict(prop)
        description = prop.pop("description", None)
        prop.pop("title", None)
        param_schema = dict(shape.lists.get(name) or shape.json.get(name) or prop)
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": param_schema,
        }
        if description:
            parameter["description"] = description
        if name in examples:
            value = examples[name]
            if name in shape.json or isinstance(value, dict):  # JSON text in the query
                value = json.dumps(value, separators=(",", ":"))
            elif isinstance(value, list):
                value = ",".join(str(v) for v in value)
            parameter["example"] = value
        parameters.append(parameter)
    return {"parameters": parameters}
