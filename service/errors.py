"""Every error the service answers, mapped to HTTP in one place.

| raised | status | body |
| --- | --- | --- |
| pydantic validation of a request (body or query) | 422 | FastAPI's ``{"detail": [{"loc", "msg", "type"}]}``; an unknown field's ``msg`` lists the accepted names and the closest |
| a body that cannot be parsed (not UTF-8, too deeply nested, a malformed binary body) | 400 | ``{"detail"}`` saying what is wrong |
| a body in a media type the endpoint does not read (or JSON without ``Content-Type``) | 415 | ``{"detail", "accepted": [media types]}`` |
| ``InvalidArgument`` / ``TokenOutOfRange`` | 422 | ``{"detail": "FIELD: message", "field": FIELD}`` |
| ``UnknownName`` in a request field (``model``, ``preset``) | 422 | as above, listing the known names and ``did you mean 'X'?`` (``type: unknown_name``, ``suggestion``) |
| ``UnknownName`` in a path (``/v1/models/{name}``) | 404 | the route raises ``HTTPException`` itself |
| ``TooLarge`` | 413 | ``{"detail", "field", "limit", "requested"}`` (before any allocation) |
| ``NotAcceptable`` (``service.formats``) | 406 | ``{"detail", "available": [media types]}`` |
| ``DeviceUnavailable``, out of memory, ``NotReady`` | 503 | ``{"detail"}`` |
| ``Overloaded`` (``service.admission.budget``: no room in ``POSENC_MAX_INFLIGHT_BYTES``) | 429 | ``{"detail", "limit", "requested", "in_flight", "queued", "retry_after"}`` and ``Retry-After`` |
| anything else | 500 | ``{"detail": "internal error ..."}``, the traceback only in the log |

Domain errors give ``detail`` as one string that names the offending field (``token id 50257
at input_ids[1][3] is outside [0, 50257)``; the field is prefixed where the message lacks it), so
``"input_ids[1][3]" in detail`` holds; validation errors keep FastAPI's list shape. ``docs/errors.md`` shows every status with an example.
"""

from __future__ import annotations

import difflib
import email.message
import logging
import math
import typing
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from posenc.core.errors import DeviceUnavailable, PosencError, TooLarge, UnknownName
from posenc.facts.config_keys import CONFIG_KEYS, config_key_hint
from service.admission.budget import Overloaded
from service.formats import NotAcceptable
from service.query import OUTPUT_PARAMS

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
        if exc.suggestion is not None:
            body["suggestion"] = exc.suggestion
    return body


class BadBody(Exception):
    """A request body that cannot be read at all (400), or of a media type the endpoint does
    not read (415, ``accepted`` lists the types it does)."""

    def __init__(self, detail: str, *, status: int = 400, accepted: list[str] | None = None):
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.accepted = accepted or []


def bad_body_response(exc: BadBody) -> JSONResponse:
    body: dict[str, Any] = {"detail": exc.detail}
    if exc.accepted:
        body["accepted"] = exc.accepted
    return JSONResponse(body, status_code=exc.status)


async def _bad_body(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, BadBody):
        raise exc
    return bad_body_response(exc)


def is_json_media_type(content_type: str | None) -> bool:
    """``application/json`` or ``application/*+json`` (parameters such as charset ignored)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def media_type_refusal(content_type: str | None, accepted: list[str]) -> BadBody:
    """The 415 for a body sent without ``Content-Type`` or with one the endpoint does not read."""
    wanted = " or ".join(accepted)
    if not content_type:
        detail = (
            f"the request has a body but no Content-Type header: send the JSON body with "
            f"'Content-Type: application/json' (this endpoint reads {wanted})"
        )
    else:
        detail = f"Content-Type {content_type!r} is not read here; send {wanted}"
        if "application/json" in accepted:
            detail += " (a JSON body needs 'Content-Type: application/json')"
    return BadBody(detail, status=415, accepted=accepted)


def unparsable_body(cause: BaseException | None) -> BadBody:
    """The 400 for a JSON body that the parser gave up on, saying why."""
    if isinstance(cause, UnicodeDecodeError):
        return BadBody(
            f"the body is not UTF-8 text (byte 0x{cause.object[cause.start]:02x} at offset "
            f"{cause.start}): a JSON body must be UTF-8; token ids can also be sent as "
            "application/x-npy or application/vnd.safetensors to /v1/embed and /v1/position-ids"
        )
    if isinstance(cause, RecursionError):
        return BadBody("the JSON body is nested too deeply to parse")
    name = type(cause).__name__ if cause is not None else "unknown error"
    return BadBody(f"the body could not be parsed as JSON ({name})")


def _method_not_allowed(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """405 with the methods of every route at this path (a table's GET twin is a route of its
    own) in ``Allow`` and the detail."""
    given = (exc.headers or {}).get("Allow", "")
    methods = {m.strip() for m in given.split(",") if m.strip()}
    for route in getattr(request.app.state, "routes", ()):
        if route.matches(request.scope)[0] != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    allow = ", ".join(sorted(methods))
    detail = (
        f"method {request.method} is not allowed on {request.url.path}: use {allow} "
        "(the Allow header lists them)"
    )
    return JSONResponse({"detail": detail}, status_code=405, headers={"Allow": allow})


async def _http_exception(request: Request, exc: Exception) -> Any:
    if not isinstance(exc, StarletteHTTPException):
        raise exc
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        # FastAPI's own words for a body json.loads gave up on (not UTF-8, nested too deeply)
        return bad_body_response(unparsable_body(exc.__cause__))
    if exc.status_code == 405:
        return _method_not_allowed(request, exc)
    return await http_exception_handler(request, exc)


def _model_at(model: type[BaseModel] | None, path: tuple[Any, ...]) -> type[BaseModel] | None:
    """The (nested) request model at ``path`` (field names) inside ``model``."""
    for name in path:
        if model is None or not isinstance(name, str) or name not in model.model_fields:
            return None
        annotation = model.model_fields[name].annotation
        candidates = [annotation, *typing.get_args(annotation)]
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return model


def request_model(request: Request) -> type[BaseModel] | None:
    """The request model of the route that served ``request`` (set by ``add_compute_routes``
    as the handler's ``posenc_model``), or None."""
    endpoint = getattr(request.scope.get("route"), "endpoint", None)
    model = getattr(endpoint, "posenc_model", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def unknown_field_message(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str | None:
    """``unknown field 'd_modle'; accepted: ...; did you mean 'd_model'?`` for an
    ``extra_forbidden`` error at ``loc`` (``("body", ..., name)``), None when the model at that
    place is not known."""
    if len(loc) < 2 or not isinstance(loc[-1], str):
        return None
    owner = _model_at(model, tuple(loc[1:-1]))
    if owner is None:
        return None
    accepted = list(owner.model_fields)
    if loc[0] == "query":
        accepted += [p for p in OUTPUT_PARAMS if p not in accepted]
    message = f"unknown field {loc[-1]!r}; accepted fields: {', '.join(accepted)}"
    hint = config_key_hint(loc[-1], accepted)
    close = difflib.get_close_matches(loc[-1], accepted, n=1, cutoff=0.6)
    if hint is not None:  # rope_theta is base, not a misspelt mrope_section
        message += f"; {hint}"
    elif close:
        message += f"; did you mean {close[0]!r}?"
    return message


def pasted_config_error(
    model: type[BaseModel] | None, raw: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """One error for a config.json sent as the body itself (``-d @config.json``), where the
    endpoint takes it as ``{"config": ...}``: the body's top-level keys are refused as unknown
    fields, among them ``model_type`` or ``architectures`` and at least one other config.json
    key. None for any other body."""
    if model is None or "config" not in model.model_fields:
        return None
    unknown = [
        e["loc"][1]
        for e in raw
        if e.get("type") == "extra_forbidden"
        and len(e.get("loc", ())) == 2
        and e["loc"][0] == "body"
        and isinstance(e["loc"][1], str)
    ]
    # every config.json has model_type (and most architectures); a body field misspelt in
    # config terms (rope_theta beside rope_scaling) is not a pasted file
    if "model_type" not in unknown and "architectures" not in unknown:
        return None
    if len([k for k in unknown if k in CONFIG_KEYS or k == "architectures"]) < 2:
        return None
    return {
        "type": "config_not_wrapped",
        "loc": ["body"],
        "msg": 'this looks like a config.json: send it as {"config": ...} (with curl: '
        "jq '{config: .}' config.json | curl --json @- ...); its keys "
        f"{', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''} are not body fields",
    }


async def _posenc_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, PosencError):  # registered for PosencError only
        raise exc
    return JSONResponse(posenc_error_body(exc), status_code=status_for(exc))


async def _not_acceptable(request: Request, exc: Exception) -> JSONResponse:
    available = list(getattr(exc, "available", []) or [])
    detail = getattr(exc, "detail", None) or str(exc)
    return JSONResponse({"detail": detail, "available": available}, status_code=406)


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity (Python's json module reads them): echo them as text.
    Bytes (a body FastAPI did not parse) are echoed as text, undecodable bytes escaped."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _short(value: Any) -> bool:
    """Whether ``value``'s repr is at most ``_MAX_ECHOED_INPUT`` characters, without writing the
    repr of a long string, list or object first (8 M token ids: 0.5 s on the event loop)."""
    return _room(value, 4 * _MAX_ECHOED_INPUT) >= 0 and len(repr(value)) <= _MAX_ECHOED_INPUT


def _room(value: Any, budget: int) -> int:
    """``budget`` less a lower bound of the length of ``value``'s repr; below 0 when over (the
    walk stops there, so it visits at most ``budget`` items)."""
    if isinstance(value, str | bytes | bytearray):
        return budget - len(value)
    if isinstance(value, list | tuple | dict):
        if len(value) > budget:
            return -1
        for item in value.items() if isinstance(value, dict) else value:
            budget = _room(item, budget - 1)
            if budget < 0:
                return budget
        return budget
    return budget - 1


def _clean_validation_error(err: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": err.get("type", "value_error"), "loc": list(err.get("loc", ()))}
    out["msg"] = str(err.get("msg", ""))
    if "input" in err and _short(err["input"]):
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
    raw = [dict(e) for e in exc.errors()]
    content_type = request.headers.get("content-type")
    if any(
        tuple(e.get("loc", ())) == ("body",) and e.get("type") != "missing" for e in raw
    ) and not is_json_media_type(content_type):
        # FastAPI hands a body without a JSON Content-Type to the model as bytes: say why.
        return bad_body_response(media_type_refusal(content_type, ["application/json"]))
    model = request_model(request)
    pasted = pasted_config_error(model, raw)
    if pasted is not None:
        return JSONResponse({"detail": [pasted]}, status_code=422)
    errors = []
    for e in raw:
        loc = tuple(e.get("loc", ()))
        if e.get("type") == "extra_forbidden":
            message = unknown_field_message(model, loc)
            if message is not None:
                e["msg"] = message
        elif e.get("type") == "missing" and loc == ("body",):
            e["msg"] = "a JSON body is required (send it with Content-Type: application/json)"
        errors.append(_clean_validation_error(e))
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
    app.add_exception_handler(BadBody, _bad_body)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(NotReady, _not_ready)
    app.add_exception_handler(Overloaded, _overloaded)
    app.add_exception_handler(torch.OutOfMemoryError, _out_of_memory)
    app.add_exception_handler(MemoryError, _out_of_memory)
    app.add_exception_handler(Exception, _internal_error)
