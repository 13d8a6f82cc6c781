"""Every error the service answers, mapped to HTTP in one place.

| raised | status | body |
| --- | --- | --- |
| pydantic validation of a request (body or query) | 422 | FastAPI's ``{"detail": [{"loc", "msg", "type"}]}`` |
| ``InvalidArgument`` / ``TokenOutOfRange`` | 422 | ``{"detail": "FIELD: message", "field": FIELD}`` |
| ``UnknownName`` in a request field (``model``, ``preset``) | 422 | as above, listing the known names |
| ``UnknownName`` in a path (``/v1/models/{name}``) | 404 | the route raises ``HTTPException`` itself |
| ``TooLarge`` | 413 | ``{"detail", "field", "limit", "requested"}`` (before any allocation) |
| ``NotAcceptable`` (``service.formats``) | 406 | ``{"detail", "available": [media types]}`` |
| ``DeviceUnavailable``, out of memory, ``NotReady`` | 503 | ``{"detail"}`` |
| ``Overloaded`` (``service.admission``: no room in ``POSENC_MAX_INFLIGHT_BYTES``) | 429 | ``{"detail", "limit", "requested", "in_flight", "queued", "retry_after"}`` and ``Retry-After`` |
| anything else | 500 | ``{"detail": "internal error ..."}``, the traceback only in the log |

Domain errors give ``detail`` as one string that names the offending field (``token id 50257
at input_ids[1][3] is outside [0, 50257)``; the field is prefixed where the message lacks it), so
``"input_ids[1][3]" in detail`` holds; validation errors keep FastAPI's list shape.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from posenc.errors import DeviceUnavailable, PosencError, TooLarge, UnknownName
from service.admission import Overloaded
from service.formats import NotAcceptable

logger = logging.getLogger("service.errors")

# ``input`` values longer than this (as repr) are left out of 422 bodies: a model-level error
# would otherwise echo a whole request of a million token ids back to the client.
_MAX_ECHOED_INPUT = 256


class NotReady(Exception):
    """The service has not finished starting (models still loading): 503."""


def status_for(exc: PosencError) -> int:
    """The HTTP status of a domain error raised while serving a request field."""
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, DeviceUnavailable):
        return 503
    return 422  # InvalidArgument, TokenOutOfRange, UnknownName (in a request field)


def error_detail(exc: PosencError) -> str:
    """The message, prefixed by the field it is about unless it already names it."""
    message = exc.message
    if exc.field and exc.field not in message:
        return f"{exc.field}: {message}"
    return message


def posenc_error_body(exc: PosencError) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": error_detail(exc)}
    if exc.field:
        body["field"] = exc.field
    if isinstance(exc, TooLarge):
        body["limit"] = exc.limit
        body["requested"] = exc.requested
    if isinstance(exc, UnknownName):
        body["type"] = "unknown_name"
    return body


async def _posenc_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, PosencError):  # registered for PosencError only
        raise exc
    return JSONResponse(posenc_error_body(exc), status_code=status_for(exc))


async def _not_acceptable(request: Request, exc: Exception) -> JSONResponse:
    available = list(getattr(exc, "available", []) or [])
    detail = getattr(exc, "detail", None) or str(exc)
    return JSONResponse({"detail": detail, "available": available}, status_code=406)


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity (Python's json module reads them): echo them as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _clean_validation_error(err: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": err.get("type", "value_error"), "loc": list(err.get("loc", ()))}
    out["msg"] = str(err.get("msg", ""))
    if "input" in err and len(repr(err["input"])) <= _MAX_ECHOED_INPUT:
        out["input"] = _finite(err["input"])
    ctx = err.get("ctx")
    if ctx:
        # ctx may hold the raised exception object; keep only JSON-able values.
        out["ctx"] = {
            k: (_finite(v) if isinstance(v, str | int | float | bool | type(None)) else str(v))
            for k, v in ctx.items()
        }
    return out


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestValidationError):
        raise exc
    errors = [_clean_validation_error(dict(e)) for e in exc.errors()]
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


async def _not_ready(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "1"})


async def _out_of_memory(request: Request, exc: Exception) -> JSONResponse:
    logger.warning("out of memory serving %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(
        {"detail": "the device ran out of memory for this request; ask for less or retry later"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


async def _overloaded(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, Overloaded):  # registered for Overloaded only
        raise exc
    return JSONResponse(exc.body(), status_code=429, headers={"Retry-After": str(exc.retry_after)})


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error serving %s %s", request.method, request.url.path)
    return JSONResponse(
        {"detail": f"internal error ({type(exc).__name__}); the server log has the details"},
        status_code=500,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register every handler of the table above on ``app``."""
    app.add_exception_handler(PosencError, _posenc_error)
    app.add_exception_handler(NotAcceptable, _not_acceptable)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(NotReady, _not_ready)
    app.add_exception_handler(Overloaded, _overloaded)
    app.add_exception_handler(torch.OutOfMemoryError, _out_of_memory)
    app.add_exception_handler(MemoryError, _out_of_memory)
    app.add_exception_handler(Exception, _internal_error)
