"""JSON request bodies read off the event loop, in slices (issue 39).

A body of up to :data:`INLINE_BYTES` is parsed where it is read, as before: a few milliseconds
at most. A larger one (up to ``POSENC_MAX_BODY_BYTES``, 16 MiB by default) is parsed by
:func:`service.json_slices.loads` on a worker thread, and validated there: its ``json.loads`` calls
hold the GIL for one slice each, and pydantic's validation of the large fields is sliced the same
way (:mod:`service.sliced_validation`), so the event loop (``/healthz``, every other request)
gets the GIL between slices. What the client sees is unchanged: the same value, the same 422 or
400 for a body that is not JSON, the same validation errors.

:class:`JsonBodyRoute` does this for the routes whose model FastAPI reads (``body: Model``): it
parses and validates the body before FastAPI's handler, which then gets the model instance from
``request.json()`` and revalidates it at no cost (pydantic returns an instance of the model as it
is). The routes that read their body themselves call :func:`parse_json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from service import json_slices
from service.errors import is_json_media_type

#: Bodies up to this size are parsed and validated where they are read (the event loop).
INLINE_BYTES = 1 << 16


async def parse_json(body: bytes) -> Any:
    """``json.loads(body)``'s value or error; off the event loop, in slices, when large."""
    if len(body) <= INLINE_BYTES:
        return json_slices.loads(body)
    return await run_in_threadpool(json_slices.loads, body)


class _ParsedRequest(Request):
    """A request whose JSON body has been parsed and validated: ``json()`` is the model."""

    def __init__(self, request: Request, model: Any) -> None:
        super().__init__(request.scope, request.receive, request._send)
        self._body = request._body
        self._json = model


def _parsed_body(route: APIRoute, body: bytes) -> Any:
    """The body's model, validated as FastAPI validates it, or FastAPI's exception for it:
    ``json_invalid`` (422) for text that is not JSON, 400 for one that cannot be decoded or is
    nested too deeply, the validation errors (422) under ``body``."""
    try:
        raw = json_slices.loads(body)
    except json.JSONDecodeError as exc:
        error = {
            "type": "json_invalid",
            "loc": ("body", exc.pos),
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": exc.msg},
        }
        raise RequestValidationError([error], body=exc.doc) from exc
    except (RecursionError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise HTTPException(400, "There was an error parsing the body") from exc
    assert route.body_field is not None  # a JsonBodyRoute has a body
    model, errors = route.body_field.validate(raw, {}, loc=("body",))
    if errors:
        raise RequestValidationError(errors, body=raw)
    return model


class JsonBodyRoute(APIRoute):
    """An ``APIRoute`` whose JSON body is parsed and validated before FastAPI's handler: on a
    worker thread, in slices, when it is over :data:`INLINE_BYTES` (module docstring). Bodies
    that FastAPI does not read as JSON (no or another ``Content-Type``: FastAPI's strict
    content types) go to it as they are."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def parse_then_handle(request: Request) -> Response:
            if is_json_media_type(request.headers.get("content-type")):
                try:
                    body = await request.body()
                except HTTPException:  # over the body limit: its 413
                    raise
                except Exception as exc:  # a client gone (as FastAPI answers it)
                    raise HTTPException(400, "There was an error parsing the body") from exc
                if body:
                    if len(body) <= INLINE_BYTES:
                        model = _parsed_body(self, body)
                    else:
                        model = await run_in_threadpool(_parsed_body, self, body)
                    request = _ParsedRequest(request, model)
            return await handler(request)

        return parse_then_handle


__all__ = ["INLINE_BYTES", "JsonBodyRoute", "parse_json"]
