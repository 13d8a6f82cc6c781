"""The declared error bodies (:mod:`service.error_bodies`) hold what :mod:`service.errors`
writes: each body built by the service's own functions validates against its model, the 413's
two bodies both parse as the route's either-or model, a body missing a member the schema
requires is refused, and each model is declared as ``application/json`` and as RFC 9457's
``application/problem+json`` (its members and ``type``, ``title``, ``status``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from posenc.core.errors import InvalidArgument, TooLarge, UnknownName
from service.error_bodies import (
    PROBLEM_MEMBERS,
    BodyTooLargeBody,
    ErrorBody,
    OverLimitBody,
    TooLargeBody,
    UnsupportedMediaTypeBody,
    ValidationErrorBody,
    error_content,
)
from service.errors import media_type_refusal, posenc_error_body
from service.problem import PROBLEM_JSON


def test_the_bodies_the_service_writes_fit_their_models() -> None:
    big = posenc_error_body(TooLarge("too many", limit=100, requested=250, field="seq_len"))
    assert TooLargeBody.model_validate(big).model_dump() == big
    unknown = posenc_error_body(
        UnknownName("unknown preset 'gtp2'", field="preset", name="gtp2", known=["gpt2"])
    )
    parsed = ValidationErrorBody.model_validate(unknown)
    assert (parsed.field, parsed.type) == ("preset", "unknown_name")
    plain = posenc_error_body(InvalidArgument("must be >= 1, got 0", field="seq_len"))
    assert ErrorBody.model_validate(plain).detail == "seq_len: must be >= 1, got 0"
    refusal = media_type_refusal("text/plain", ["application/json"])
    body = {"detail": refusal.detail, "accepted": refusal.accepted}
    assert UnsupportedMediaTypeBody.model_validate(body).accepted == ["application/json"]


def test_a_fastapi_422_list_fits_the_validation_body() -> None:
    body = {
        "detail": [
            {"loc": ["body", "seq_len"], "msg": "Input should be greater than 0", "type": "greater_than",
             "input": 0, "ctx": {"gt": 0}},
        ]
    }  # fmt: skip
    parsed = ValidationErrorBody.model_validate(body)
    assert not isinstance(parsed.detail, str) and parsed.detail[0].loc == ["body", "seq_len"]


def test_both_413s_parse_as_the_either_or_body_and_a_missing_member_is_refused() -> None:
    output = {"detail": "d", "field": "seq_len", "limit": 10, "requested": 20}
    body = {"detail": "d", "field": "body", "limit": 1024}
    assert isinstance(OverLimitBody.model_validate(output).root, TooLargeBody)
    assert isinstance(OverLimitBody.model_validate(body).root, BodyTooLargeBody)
    with pytest.raises(ValidationError):
        TooLargeBody.model_validate({"detail": "d", "limit": 10})  # no requested


def test_each_body_is_declared_as_json_and_as_problem_json() -> None:
    content = error_content(TooLargeBody)
    own = {"$ref": "#/components/schemas/TooLargeBody"}
    assert content == {
        "application/json": {"schema": own},
        PROBLEM_JSON: {"schema": {"allOf": [own, PROBLEM_MEMBERS]}},
    }
    assert PROBLEM_JSON == "application/problem+json"
    assert PROBLEM_MEMBERS["required"] == ["type", "title", "status"]
