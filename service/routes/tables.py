"""Registering a compute endpoint: its POST (JSON body) and, for the table endpoints, a GET that
takes the same fields as query parameters and gives the same bytes.

(No ``from __future__ import annotations`` here: the handlers are made in a factory and FastAPI
must see their annotations as objects, not as strings naming a local variable.)
"""

import copy
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import BaseModel

from service.formats import FORMAT_MEDIA_TYPES
from service.json_body import JsonBodyRoute
from service.query import (
    OUTPUT_OPENAPI_PARAMETERS,
    SCALARS_ONLY,
    QueryShape,
    Source,
    parse_query,
    query_openapi,
    read_output,
)
from service.responses.negotiation import negotiate_output
from service.responses.plans import Plan
from service.responses.respond import respond
from service.schemas import TensorBundleJSON
from service.state import ServiceState, read_state
from service.statuses import Does, declared_responses, with_ok

PlanFn = Callable[[Any, ServiceState, Source], Plan]

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_HEADERS = {
    "ETag": {"description": "entity tag of this representation", "schema": {"type": "string"}},
    "Vary": {"description": "always Accept", "schema": {"type": "string"}},
    "Server-Timing": {
        "description": "compute;dur=MS, encode;dur=MS, cache;desc=hit|miss. A binary table "
        "sent while it is computed (a large miss, or a stream over POSENC_MAX_ELEMENTS) gives "
        'only cache;desc="miss" or cache;desc="stream": its times are not known when the '
        "headers leave, and ASGI servers send no HTTP trailers",
        "schema": {"type": "string"},
    },
}


# What a compute endpoint does (service.statuses): it validates its fields, counts its output,
# is admitted by the byte budget, negotiates formats and sends an ETag; its POST takes a body.
_OUTPUT_LIMIT = (
    "output over POSENC_MAX_ELEMENTS elements (tables: JSON and PNG; raw, npy and safetensors "
    "stream up to POSENC_MAX_STREAM_ELEMENTS)"
)
COMPUTE = Does(
    validates=True, output_limit=_OUTPUT_LIMIT, budget=True, formats=True, etag=True, state=True
)


def compute_responses(
    method: str, path: str, names: Sequence[str]
) -> dict[int | str, dict[str, Any]]:
    """The documented responses of ``method path``, a compute endpoint whose tensors are
    ``names``."""
    primary = names[0]
    # application/octet-stream first: a generated client (openapi-python-client and the like)
    # parses a 200 by the first media type it knows, and JSON first made it call
    # response.json() on safetensors, npy, raw and png bodies (UnicodeDecodeError); bytes
    # first, it hands back the body's bytes whatever the format. Swagger UI sends the first
    # media type as Accept, so its copy of the document puts JSON first again (openapi_30).
    content: dict[str, Any] = {FORMAT_MEDIA_TYPES["raw"]: _BINARY, FORMAT_MEDIA_TYPES["json"]: {}}
    content.update({m: _BINARY for m in FORMAT_MEDIA_TYPES.values() if m not in content})
    ok = {
        "model": TensorBundleJSON,
        "description": (
            f"tensors {', '.join(names)}: JSON, safetensors (all tensors), or npy / raw / png "
            f"of {primary}, chosen by ?format= or Accept"
        ),
        "content": content,
        "headers": _HEADERS,
    }
    does = replace(COMPUTE, body=method == "POST")
    return with_ok(ok, declared_responses(method, path, does))


def add_post_route(
    router: APIRouter,
    path: str,
    handler: Callable[..., Any],
    *,
    model_cls: type[BaseModel],
    names: Sequence[str],
    summary: str,
    description: str,
    request_body: dict[str, Any] | None = None,
) -> None:
    """Register ``handler`` as ``POST path`` of a compute endpoint whose tensors are ``names``:
    its operation id, the output-option query parameters, the documented responses, and the
    request body's OpenAPI when the handler reads the body itself (``request_body``)."""
    stem = (router.prefix + path).strip("/").replace("/", "_").replace("-", "_")  # v1_embed
    handler.__name__ = f"post_{stem}"
    handler.posenc_model = model_cls  # type: ignore[attr-defined]  # for 422 hints
    openapi_extra: dict[str, Any] = {"parameters": copy.deepcopy(OUTPUT_OPENAPI_PARAMETERS)}
    if request_body is not None:
        openapi_extra["requestBody"] = request_body
    router.add_api_route(
        path,
        handler,
        methods=["POST"],
        summary=summary,
        description=description,
        responses=compute_responses("POST", router.prefix + path, names),
        response_class=Response,
        openapi_extra=openapi_extra,
        operation_id=f"post_{stem}",
        # a JSON body FastAPI reads is parsed and validated off the event loop when large
        route_class_override=JsonBodyRoute,
    )


def _plan_query(
    request: Request,
    model_cls: type[BaseModel],
    query: QueryShape,
    plan: PlanFn,
    state: ServiceState,
) -> Plan:
    """A GET's plan from its query string (JSON fields parsed): blocking, on a worker thread."""
    return plan(parse_query(request, model_cls, query), state, "query")


def add_compute_routes(
    router: APIRouter,
    path: str,
    model_cls: type[BaseModel],
    plan: PlanFn,
    *,
    names: Sequence[str],
    summary: str,
    description: str,
    get: bool = True,
    query: QueryShape = SCALARS_ONLY,
) -> None:
    """Register ``POST path`` (and ``GET path`` when ``get``, its list and JSON fields written
    in the query string as ``query`` says) computing ``plan(request)``."""
    stem = (router.prefix + path).strip("/").replace("/", "_").replace("-", "_")  # v1_embed

    # async handlers: the torch work (a cache miss) goes to the thread pool in respond(),
    # a cache hit, a 304 or an error is answered on the event loop without a thread hop. The
    # body is the only thing FastAPI resolves; the state and the output options are read from
    # the request directly (documented by OUTPUT_OPENAPI_PARAMETERS), which keeps FastAPI's
    # dependency solving, most of its per-request cost, to one parameter.
    async def post_handler(body: model_cls, request: Request) -> Response:  # type: ignore[valid-type]
        out = read_output(request)
        state = read_state(request)
        # planning resolves presets, configs and models: work, never on the event loop
        made = await run_in_threadpool(plan, body, state, "body")
        return await respond(request, state, made, negotiate_output(request, out))

    add_post_route(
        router, path, post_handler, model_cls=model_cls, names=names, summary=summary,
        description=description,
    )  # fmt: skip
    if not get:
        return

    async def get_handler(request: Request) -> Response:
        out = read_output(request)
        state = read_state(request)
        made = await run_in_threadpool(_plan_query, request, model_cls, query, plan, state)
        return await respond(request, state, made, negotiate_output(request, out))

    get_handler.__name__ = f"get_{stem}"
    get_handler.posenc_model = model_cls  # type: ignore[attr-defined]  # for 422 hints
    router.add_api_route(
        path,
        get_handler,
        methods=["GET"],
        summary=summary + " (GET)",
        description=description
        + "\n\nThe same fields as query parameters (lists of ints comma-separated, objects as "
        "JSON text); the same bytes as the POST, and cacheable.",
        responses=compute_responses("GET", router.prefix + path, names),
        response_class=Response,
        openapi_extra={
            "parameters": copy.deepcopy(OUTPUT_OPENAPI_PARAMETERS)
            + query_openapi(model_cls, query)["parameters"]
        },
        operation_id=f"get_{stem}",
    )
