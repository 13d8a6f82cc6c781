"""The service's one map from errors to HTTP (:mod:`service.errors`), function by function: a
domain error's status (413 too large, 503 no device, else 422), its ``detail`` prefixed by the
field unless it names it, its JSON body (``limit``/``requested``, ``unknown_name`` and the
suggestion), which media types are JSON, and the 415 that says what to send. Expected bodies
and sentences are written out here; the same errors over HTTP are in test_problem.py and
test_statuses.py."""

from __future__ import annotations

import pytest

from posenc.core.errors import (
    DeviceUnavailable,
    InvalidArgument,
    TokenOutOfRange,
    TooLarge,
    UnknownName,
)
from service.errors import (
    error_detail,
    is_json_media_type,
    media_type_refusal,
    posenc_error_body,
    status_for,
)


def test_the_status_of_each_domain_error() -> None:
    assert status_for(TooLarge("big", limit=1, requested=2)) == 413
    assert status_for(DeviceUnavailable("no cuda")) == 503
    for exc in (InvalidArgument("x"), TokenOutOfRange("x"), UnknownName("x")):
        assert status_for(exc) == 422


def test_the_detail_names_the_field_once() -> None:
    assert error_detail(InvalidArgument("must be >= 1, got 0", field="seq_len")) == (
        "seq_len: must be >= 1, got 0"
    )
    said = InvalidArgument("seq_len must be >= 1, got 0", field="seq_len")
    assert error_detail(said) == "seq_len must be >= 1, got 0"
    assert error_detail(InvalidArgument("bad")) == "bad"


def test_the_bodies_of_too_large_and_unknown_name() -> None:
    big = TooLarge(
        "the table has 176947200 elements", limit=10**8, requested=176947200, field="seq_len"
    )
    assert posenc_error_body(big) == {
        "detail": "seq_len: the table has 176947200 elements",
        "field": "seq_len",
        "limit": 10**8,
        "requested": 176947200,
    }
    unknown = UnknownName(
        "no such name 'llama-2-7'", field="preset", name="llama-2-7", known=["llama-2-7b"]
    )
    assert posenc_error_body(unknown) == {
        "detail": "preset: no such name 'llama-2-7'; did you mean 'llama-2-7b'?",
        "field": "preset",
        "type": "unknown_name",
        "suggestion": "llama-2-7b",
    }
    assert posenc_error_body(UnknownName("unknown model 'x'")) == {
        "detail": "unknown model 'x'",
        "type": "unknown_name",
    }


@pytest.mark.parametrize(
    ("content_type", "json"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/problem+json", True),
        ("application/x-npy", False),
        ("text/json", False),
        ("", False),
        (None, False),
    ],
)
def test_json_media_types(content_type: str | None, json: bool) -> None:
    assert is_json_media_type(content_type) is json


def test_the_415_says_what_to_send() -> None:
    accepted = ["application/json", "application/x-npy"]
    missing = media_type_refusal(None, accepted)
    assert (missing.status, missing.accepted) == (415, accepted)
    assert missing.detail == (
        "the request has a body but no Content-Type header: send the JSON body with "
        "'Content-Type: application/json' (this endpoint reads application/json or "
        "application/x-npy)"
    )
    other = media_type_refusal("text/plain", accepted)
    assert other.detail == (
        "Content-Type 'text/plain' is not read here; send application/json or application/x-npy "
        "(a JSON body needs 'Content-Type: application/json')"
    )
    binary = media_type_refusal("text/plain", ["application/vnd.safetensors"])
    assert (
        binary.detail
        == "Content-Type 'text/plain' is not read here; send application/vnd.safetensors"
    )
