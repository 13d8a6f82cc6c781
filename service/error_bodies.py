"""The JSON bodies of every error the service answers, for the OpenAPI document.

One home for each body's schema: :mod:`service.errors` (and the middleware beside it) writes
these bodies, :mod:`service.statuses` declares them on the routes, ``docs/errors.md`` shows them.
Each is declared as ``application/json`` and as its RFC 9457 form, ``application/problem+json``
(:func:`error_content`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, RootModel

from service.problem import PROBLEM_JSON


class ErrorBody(BaseModel):
    """400, 401, 404, 412, 503: one message."""

    detail: str = Field(..., description="what is wrong, naming the offending field")
    field: str | None = None


class NotAcceptableBody(BaseModel):
    """406: no format the request accepts."""

    detail: str
    available: list[str] = Field(..., description="the media types this endpoint can produce")


class TooLargeBody(BaseModel):
    """413 of an output over ``POSENC_MAX_ELEMENTS`` (counted before anything is allocated)."""

    detail: str
    field: str | None = None
    limit: int = Field(..., description="POSENC_MAX_ELEMENTS")
    requested: int = Field(..., description="elements the request would produce")


class BodyTooLargeBody(BaseModel):
    """413 of a request body over ``POSENC_MAX_BODY_BYTES`` (``service.body_limit``), or of a
    JSON body of too many arrays and objects (``service.json_slices``)."""

    detail: str
    field: str = Field(..., description="always body")
    limit: int = Field(
        ..., description="POSENC_MAX_BODY_BYTES, or the most arrays and objects a JSON body holds"
    )


class OverLimitBody(RootModel[TooLargeBody | BodyTooLargeBody]):
    """413 of a route that both counts its output and takes a body: either of the two."""


class UnsupportedMediaTypeBody(BaseModel):
    """415: a body in a media type the endpoint does not read (or without Content-Type)."""

    detail: str
    accepted: list[str]


class ValidationItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str
    input: Any | None = None
    ctx: dict[str, Any] | None = None


class ValidationErrorBody(BaseModel):
    """422: FastAPI's list of validation errors, or one domain message naming the field."""

    detail: list[ValidationItem] | str = Field(
        ...,
        description="FastAPI's list of validation errors, or one message that starts with the "
        "offending field (e.g. input_ids[1][3])",
    )
    field: str | None = None
    type: str | None = None


class OverloadedBody(BaseModel):
    """The JSON body of a 429 (``service.admission.budget.Overloaded``)."""

    detail: str = Field(..., description="names POSENC_MAX_INFLIGHT_BYTES and the numbers")
    limit: int = Field(..., description="POSENC_MAX_INFLIGHT_BYTES")
    requested: int = Field(..., description="estimated peak bytes of this response")
    in_flight: int = Field(..., description="bytes held by responses in flight")
    queued: int = Field(..., description="other requests waiting for room")
    retry_after: int = Field(..., description="the Retry-After header's seconds")


# What service.problem adds to an error body when the client's Accept names
# application/problem+json (RFC 9457 §3.1); the body's own members stay as they are.
PROBLEM_MEMBERS: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {
            "type": "string",
            "description": "a URI reference naming the problem type: about:blank, or the "
            "body's own type where it has one (a 422 of an unknown name: unknown_name)",
        },
        "title": {"type": "string", "description": "the status's reason phrase"},
        "status": {"type": "integer", "description": "the HTTP status code"},
    },
}


def error_content(model: type[BaseModel]) -> dict[str, Any]:
    """The media types an error body of ``model`` comes in, for a route's ``responses=``: beside
    FastAPI's ``application/json`` (from ``model``), ``application/problem+json``: the same
    members plus :data:`PROBLEM_MEMBERS` (:mod:`service.problem` rewrites it so)."""
    own = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {
        "application/json": {"schema": own},
        PROBLEM_JSON: {"schema": {"allOf": [own, PROBLEM_MEMBERS]}},
    }
