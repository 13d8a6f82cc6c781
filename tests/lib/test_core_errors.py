"""posenc's errors (:mod:`posenc.core.errors`): every one is a ``ValueError`` carrying its
``field``; :class:`TooLarge` carries the limit and the size asked; :class:`UnknownName` suggests
the closest known name (difflib's ratio >= 0.6, case-insensitive) and only a close one, and a
name far longer than every known one is compared to none."""

from __future__ import annotations

import pytest

from posenc.core.errors import (
    InvalidArgument,
    MissingField,
    PosencError,
    TokenOutOfRange,
    TooLarge,
    UnknownName,
    closest_name,
)

PRESETS = ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "gpt2"]


def test_every_error_is_a_value_error_with_its_field() -> None:
    for cls in (InvalidArgument, MissingField, TokenOutOfRange):
        err = cls("input_ids[1][2] must be < 50257, got 60000", field="input_ids[1][2]")
        assert isinstance(err, PosencError) and isinstance(err, ValueError)
        assert (err.message, err.field) == (str(err), "input_ids[1][2]")
    assert issubclass(MissingField, InvalidArgument) and PosencError("x").field is None


def test_too_large_keeps_the_numbers() -> None:
    err = TooLarge("too large", limit=10**8, requested=176_947_200, field="seq_len")
    assert (err.limit, err.requested, err.field) == (10**8, 176_947_200, "seq_len")


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("llama-3.1-8", "llama-3.1-8b"),
        ("LLAMA-2-7B", "llama-2-7b"),  # case does not matter, the known spelling is returned
        ("mistral", "mistral-7b"),
        ("gpt-2", "gpt2"),
        ("bert-base", None),
        ("", None),
        (7, None),  # not a string
        ("llama-3.1-8b" * 3, None),  # more than 7/3 of the longest known name
    ],
)
def test_closest_name(name: object, closest: str | None) -> None:
    assert closest_name(name, PRESETS) == closest
    assert closest_name(name, []) is None


def test_unknown_name_adds_did_you_mean_only_when_one_is_close() -> None:
    err = UnknownName(
        "unknown preset 'llama-3.1-8'", field="preset", name="llama-3.1-8", known=PRESETS
    )
    assert str(err) == "unknown preset 'llama-3.1-8'; did you mean 'llama-3.1-8b'?"
    assert (err.suggestion, err.field) == ("llama-3.1-8b", "preset")
    far = UnknownName("unknown preset 'bert'", name="bert", known=PRESETS)
    assert str(far) == "unknown preset 'bert'" and far.suggestion is None
