"""Which statuses a route can answer, derived from what it does: every route's ``responses=``.

A route says what it does (:class:`Does`) and :func:`declared_responses` gives the statuses that
follow, with their bodies (:mod:`service.error_bodies`), each as ``application/json`` and as
``application/problem+json`` (RFC 9457, :mod:`service.problem`):

| it ... | so it can answer |
| --- | --- |
| lives under ``/v1/`` (``POSENC_API_KEY``, ``service.middleware.BearerAuthMiddleware``) | 401 |
| is an operator's door (``POSENC_ADMIN_KEY``, ``service.middleware.admin_refusal``) | 401, 403 |
| takes a body (``service.body_limit``, ``service.errors``) | 400 unreadable, 413 over ``POSENC_MAX_BODY_BYTES``, 415 media type |
| validates fields (body or query) | 422 |
| counts its output against ``POSENC_MAX_ELEMENTS`` | 413 |
| is admitted by the byte and CPU budgets and computes on the device | 413 (CPU cost), 429, 503 (out of device memory) |
| negotiates formats (``?format=`` / ``Accept``) | 406 |
| sends an ETag (``If-None-Match``) | 304 on GET, 412 on POST |
| reads a name from its path | 404 |
| reads the loaded models (``service.state.read_state``; ``/readyz``) | 503 while starting |

``tests/service/test_statuses.py`` sends every route of the app the requests that make
each of these happen and fails when a route answers a status it does not declare, or declares
one that no request makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from service.error_bodies import (
    BodyTooLargeBody,
    ErrorBody,
    NotAcceptableBody,
    OverLimitBody,
    OverloadedBody,
    TooLargeBody,
    UnsupportedMediaTypeBody,
    ValidationErrorBody,
    error_content,
)

Responses = dict[int | str, dict[str, Any]]

_RETRY_AFTER = {
    "Retry-After": {
        "description": "whole seconds after which a retry is likely to be admitted",
        "schema": {"type": "integer", "minimum": 1},
    }
}


@dataclass(frozen=True)
class Does:
    """What a route does, as far as its statuses go (see the module's table).

    ``raw_body``: it reads a body it does not parse (only its size can be refused: 413).
    ``output_limit`` and ``validates`` may be strings: they then describe the limit or the
    invalid fields of this route in its 413 or 422."""

    body: bool = False
    raw_body: bool = False
    validates: bool | str = False
    output_limit: bool | str = False
    budget: bool = False
    formats: bool = False
    etag: bool = False
    path_name: bool = False
    state: bool = False
    admin: bool = False


def _too_large(does: Does) -> dict[str, Any] | None:
    reasons: list[str] = []
    models: list[type[BaseModel]] = []
    if does.output_limit:
        reasons.append(
            does.output_limit
            if isinstance(does.output_limit, str)
            else "the output would be over POSENC_MAX_ELEMENTS elements"
        )
        models.append(TooLargeBody)
    if does.budget:  # priced before it runs (service.admission.cost)
        reasons.append("its estimated CPU cost is over POSENC_MAX_REQUEST_CPU_SECONDS")
    if does.body or does.raw_body:
        json = ", or its JSON holds more than POSENC_MAX_JSON_CONTAINERS arrays and objects"
        reasons.append(
            "the request body is over POSENC_MAX_BODY_BYTES" + (json if does.body else "")
        )
        models.append(BodyTooLargeBody)
    if not reasons:
        return None
    model = models[0] if len(models) == 1 else OverLimitBody
    return {"model": model, "description": "; or ".join(reasons)}


def declared_responses(method: str, path: str, does: Does) -> Responses:
    """The error responses ``method path`` can answer, given what it ``does``: pass as the
    route's ``responses=`` (merged with its own 200 by :func:`with_ok`)."""
    out: Responses = {}
    if path == "/v1" or path.startswith("/v1/"):
        out[401] = {
            "model": ErrorBody,
            "description": "POSENC_API_KEY is set and no valid bearer token was sent",
            "headers": {
                "WWW-Authenticate": {
                    "description": 'Bearer realm="posenc"',
                    "schema": {"type": "string"},
                }
            },
        }
    if does.admin:
        out[401] = {
            **out.get(401, {"model": ErrorBody}),
            "description": "POSENC_API_KEY or POSENC_ADMIN_KEY is set and neither was sent as "
            "the bearer token",
            "headers": {
                "WWW-Authenticate": {
                    "description": 'Bearer realm="posenc"',
                    "schema": {"type": "string"},
                }
            },
        }
        out[403] = {
            "model": ErrorBody,
            "description": "neither POSENC_API_KEY nor POSENC_ADMIN_KEY is set, and "
            "POSENC_ALLOW_RELOAD is off: an operator's door stays shut",
        }
    if does.body:
        out[400] = {"model": ErrorBody, "description": "a body that cannot be read at all"}
        out[415] = {
            "model": UnsupportedMediaTypeBody,
            "description": "a body in a media type the endpoint does not read (or without "
            "Content-Type); lists the types it reads",
        }
    too_large = _too_large(does)
    if too_large is not None:
        out[413] = too_large
    if does.validates:
        out[422] = {
            "model": ValidationErrorBody,
            "description": does.validates
            if isinstance(does.validates, str)
            else "a field is invalid",
        }
    if does.formats:
        out[406] = {
            "model": NotAcceptableBody,
            "description": "no acceptable format; lists the types",
        }
    if does.etag and method == "GET":
        out[304] = {"description": "an If-None-Match that matches the ETag"}
    if does.etag and method != "GET":
        out[412] = {"model": ErrorBody, "description": "an If-None-Match that matches the ETag"}
    if does.path_name:
        out[404] = {"model": ErrorBody, "description": "no such name"}
    if does.budget:
        out[429] = {
            "model": OverloadedBody,
            "description": "no room in POSENC_MAX_INFLIGHT_BYTES (or "
            "POSENC_MAX_INFLIGHT_CPU_SECONDS) within POSENC_QUEUE_TIMEOUT seconds; retry after "
            "Retry-After seconds",
            "headers": _RETRY_AFTER,
        }
    if does.budget or does.state:
        reasons = ["still starting (models loading)"] if does.state else []
        reasons += ["out of device memory"] if does.budget else []
        out[503] = {
            "model": ErrorBody,
            "description": "; or ".join(reasons),
            "headers": _RETRY_AFTER,
        }
    for response in out.values():  # each error body also as application/problem+json
        if "model" in response:
            response["content"] = error_content(response["model"])
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def with_ok(ok: dict[str, Any], errors: Responses) -> Responses:
    """``{200: ok, **errors}``: a route's whole ``responses=``."""
    return {200: ok, **errors}
