"""The client's errors (:mod:`posenc.client.errors`): each 4xx / 5xx status raises its class
with the server's ``detail`` (a string, FastAPI's list of validation errors as ``loc: msg``, or
the body's text where it is not JSON), other 5xx are :class:`ServerError`, other 4xx the base
:class:`PosencHTTPError`, and a status below 400 raises nothing. Responses are built by hand."""

from __future__ import annotations

import httpx
import pytest

from posenc.client.errors import (
    Conflict,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    PosencHTTPError,
    PreconditionFailed,
    ServerError,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    ValidationError,
    raise_for_status,
)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, Unauthorized),
        (404, NotFound),
        (406, NotAcceptable),
        (409, Conflict),
        (412, PreconditionFailed),
        (413, PayloadTooLarge),
        (422, ValidationError),
        (429, TooManyRequests),
        (503, ServiceUnavailable),
        (500, ServerError),
        (502, ServerError),
        (400, PosencHTTPError),
        (418, PosencHTTPError),
    ],
)
def test_each_status_raises_its_class_with_the_detail(status: int, cls: type) -> None:
    response = httpx.Response(status, json={"detail": f"said {status}"})
    with pytest.raises(PosencHTTPError) as info:
        raise_for_status(response)
    assert type(info.value) is cls
    assert info.value.status_code == status and info.value.detail == f"said {status}"
    assert str(info.value) == f"HTTP {status}: said {status}"
    assert info.value.response is response


def test_a_validation_list_is_one_line_of_loc_and_msg() -> None:
    detail = [
        {"loc": ["body", "seq_len"], "msg": "Input should be greater than 0", "type": "x"},
        {"loc": [], "msg": "bad body"},
        "plain",
    ]
    with pytest.raises(ValidationError) as info:
        raise_for_status(httpx.Response(422, json={"detail": detail}))
    assert info.value.detail == detail
    assert (
        str(info.value) == "HTTP 422: body.seq_len: Input should be greater than 0; bad body; plain"
    )


def test_a_body_that_is_not_json_is_its_text_and_json_without_detail_is_whole() -> None:
    with pytest.raises(ServerError) as info:
        raise_for_status(httpx.Response(500, text="Internal Server Error"))
    assert info.value.detail == "Internal Server Error"
    with pytest.raises(NotFound) as found:
        raise_for_status(httpx.Response(404, json={"error": "no"}))
    assert found.value.detail == {"error": "no"}


@pytest.mark.parametrize("status", [200, 204, 304, 399])
def test_below_400_raises_nothing(status: int) -> None:
    raise_for_status(httpx.Response(status))
