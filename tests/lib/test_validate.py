"""The library's argument checks (:mod:`posenc.core.validate`): each refuses with
:class:`~posenc.core.errors.InvalidArgument` whose ``field`` names the argument and whose message
states the value, in the exact words the public functions and the service's 422s use; and each
returns what it accepted. Expected messages are written out here."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.core.validate import (
    check_binary_mask,
    check_choice,
    check_finite,
    check_int,
    check_int_at_least,
    check_int_matrix,
    check_lengths,
    check_seq_len_or_positions,
    dtype_name,
    first_true,
    is_number,
)


def _refusal(call, *args, **kwargs) -> InvalidArgument:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as info:
        call(*args, **kwargs)
    return info.value


def test_is_number_leaves_out_bool() -> None:
    assert [is_number(v) for v in (1, 2.5, math.inf, True, "1", None)] == [
        True, True, True, False, False, False,
    ]  # fmt: skip


def test_check_int_two_messages() -> None:
    assert check_int("seq_len", 4, 1) == 4
    err = _refusal(check_int, "seq_len", 2.0, 1)
    assert (str(err), err.field) == ("seq_len must be an integer, got 2.0", "seq_len")
    assert str(_refusal(check_int, "seq_len", True)) == "seq_len must be an integer, got True"
    assert str(_refusal(check_int, "seq_len", 0, 1)) == "seq_len must be >= 1, got 0"


def test_check_int_at_least_one_message() -> None:
    assert check_int_at_least("heads", 8, 1) == 8
    for bad in (0, "8", False):
        assert str(_refusal(check_int_at_least, "heads", bad, 1)) == (
            f"heads must be an int >= 1, got {bad!r}"
        )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1", None, True, 0.0, -2])
def test_check_finite_with_a_bound(bad: object) -> None:
    err = _refusal(check_finite, "base", bad, greater_than=0, field="scaling.base")
    assert str(err) == f"base must be a finite number > 0, got {bad!r}"
    assert err.field == "scaling.base"


def test_check_finite_keeps_the_value_and_its_type() -> None:
    assert check_finite("x", 3) == 3 and isinstance(check_finite("x", 3), int)
    assert check_finite("x", -0.5) == -0.5
    assert str(_refusal(check_finite, "x", math.nan)) == "x must be a finite number, got nan"


def test_check_choice_lists_the_choices() -> None:
    assert check_choice("layout", "half", ["half", "interleaved"]) == "half"
    err = _refusal(check_choice, "layout", "halves", ["half", "interleaved"])
    assert str(err) == "layout must be one of ['half', 'interleaved'], got 'halves'"


def test_check_lengths_defaults_the_keys_to_the_queries() -> None:
    assert check_lengths(5, None) == (5, 5)
    assert check_lengths(5, 9) == (5, 9)
    err = _refusal(check_lengths, 5, 4)
    assert err.field == "key_len"
    assert str(err).endswith("got key_len=4 and seq_len=5")
    assert _refusal(check_lengths, 0, None).field == "seq_len"


def test_exactly_one_of_seq_len_and_positions() -> None:
    check_seq_len_or_positions(4, None)
    check_seq_len_or_positions(None, [0, 1])
    assert str(_refusal(check_seq_len_or_positions, 4, [0])).endswith("got both")
    assert str(_refusal(check_seq_len_or_positions, None, None)).endswith("got neither")


def test_int_matrices_and_binary_masks_name_the_entry() -> None:
    check_int_matrix(torch.zeros(2, 3, dtype=torch.int64), "input_ids")
    assert str(_refusal(check_int_matrix, torch.zeros(3, dtype=torch.int64), "input_ids")) == (
        "input_ids must be 2-D (B, T), got shape (3,)"
    )
    assert str(_refusal(check_int_matrix, torch.zeros(2, 2), "input_ids")) == (
        "input_ids must hold ints, got dtype float32"
    )
    check_int_matrix(torch.zeros(2, 2), "x", ints=False)
    mask = torch.tensor([[1, 1, 0], [1, 2, 3]])
    err = _refusal(check_binary_mask, mask, "attention_mask")
    assert str(err) == "attention_mask must hold 0 or 1, got 2 at attention_mask[1][1]"
    assert err.field == "attention_mask[1][1]"
    assert first_true(mask > 1) == (1, 1)
    assert dtype_name(torch.bfloat16) == "bfloat16"
