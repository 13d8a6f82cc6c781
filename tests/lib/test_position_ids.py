"""Padding and position ids: hand-worked batches and parity with RoBERTa in transformers."""

from __future__ import annotations

from typing import Literal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

from posenc import InvalidArgument, build_batch, pad_rows, position_ids_from_mask
from posenc.core import slices

t = torch.tensor


def test_hand_worked_left_padded_roberta_batch():
    # RoBERTa: padding_idx 1, real tokens count from 2, pads get 1.
    batch = build_batch(
        [[0, 31414, 2], [0, 2]], pad_token_id=1, padding_side="left", start=2, pad_position=1
    )
    assert torch.equal(batch.input_ids, t([[0, 31414, 2], [1, 0, 2]]))
    assert torch.equal(batch.attention_mask, t([[1, 1, 1], [0, 1, 1]]))
    assert torch.equal(batch.position_ids, t([[2, 3, 4], [1, 2, 3]]))
    for x in (batch.input_ids, batch.attention_mask, batch.position_ids):
        assert x.dtype == torch.int64


def test_hand_worked_right_padded_ragged_batch_without_pad_token():
    batch = build_batch([[7, 8, 9, 10], [5], [6, 6]])
    assert torch.equal(batch.input_ids, t([[7, 8, 9, 10], [5, 0, 0, 0], [6, 6, 0, 0]]))
    assert torch.equal(batch.attention_mask, t([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]))
    assert torch.equal(batch.position_ids, t([[0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 0, 0]]))


def test_pads_get_pad_position_not_minus_one():
    """The seed tutorial's helper gives -1 to pads while saying 0; pads get pad_position."""
    mask = t([[0, 0, 1, 1], [1, 1, 1, 0]])
    assert torch.equal(position_ids_from_mask(mask), t([[0, 0, 0, 1], [0, 1, 2, 0]]))
    assert torch.equal(
        position_ids_from_mask(mask, start=5, pad_position=9), t([[9, 9, 5, 6], [5, 6, 7, 9]])
    )


def test_attention_mask_wins_over_pad_token_id():
    # token 0 is the pad token, but the mask says the first row's 0 is real.
    batch = build_batch([[4, 0, 5], [0, 6]], pad_token_id=0, attention_mask=[[1, 1, 1], [0, 1]])
    assert torch.equal(batch.input_ids, t([[4, 0, 5], [0, 6, 0]]))
    assert torch.equal(batch.attention_mask, t([[1, 1, 1], [0, 1, 0]]))
    assert torch.equal(batch.position_ids, t([[0, 1, 2], [0, 0, 0]]))


def test_left_padded_mask_is_padded_with_its_row():
    batch = build_batch(
        [[3, 4, 5], [6, 7]], attention_mask=[[1, 1, 1], [1, 1]], padding_side="left"
    )
    assert torch.equal(batch.input_ids, t([[3, 4, 5], [0, 6, 7]]))
    assert torch.equal(batch.attention_mask, t([[1, 1, 1], [0, 1, 1]]))
    assert torch.equal(batch.position_ids, t([[0, 1, 2], [0, 0, 1]]))


def test_pad_rows_both_sides():
    ids, slots = pad_rows([[1, 2, 3], [4]], pad_value=-1)
    assert torch.equal(ids, t([[1, 2, 3], [4, -1, -1]]))
    assert torch.equal(slots, t([[1, 1, 1], [1, 0, 0]]))
    ids, slots = pad_rows([[1, 2, 3], [4]], pad_value=-1, padding_side="left")
    assert torch.equal(ids, t([[1, 2, 3], [-1, -1, 4]]))
    assert torch.equal(slots, t([[1, 1, 1], [0, 0, 1]]))


def test_tensor_input_is_taken_as_is():
    ids = t([[5, 1, 6], [1, 1, 7]])
    batch = build_batch(ids, pad_token_id=1, start=2, pad_position=1)
    assert torch.equal(batch.input_ids, ids)
    assert torch.equal(batch.position_ids, t([[2, 1, 3], [1, 1, 2]]))


roberta_rows = st.lists(
    st.lists(st.integers(0, 6), min_size=0, max_size=12), min_size=1, max_size=5
)


@settings(max_examples=80, deadline=None)
@given(
    rows=roberta_rows,
    padding_idx=st.integers(0, 3),
    side=st.sampled_from(["right", "left"]),
)
def test_roberta_parity_with_transformers(rows, padding_idx, side):
    """transformers 5.x ``RobertaEmbeddings.create_position_ids_from_input_ids``
    (models/roberta/modeling_roberta.py): ``cumsum(ids != padding_idx) * mask + padding_idx``.
    Every token equal to padding_idx is padding there, also in the middle of a row."""
    batch = build_batch(
        rows,
        pad_token_id=padding_idx,
        padding_side=side,
        start=padding_idx + 1,
        pad_position=padding_idx,
    )
    reference = RobertaEmbeddings.create_position_ids_from_input_ids(batch.input_ids, padding_idx)
    assert torch.equal(batch.position_ids, reference)
    assert torch.equal(batch.attention_mask, batch.input_ids.ne(padding_idx).long())


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=5),
    side=st.sampled_from(["right", "left"]),
    start=st.integers(0, 3),
)
def test_real_tokens_count_up_from_start_whatever_the_side(lengths, side, start):
    rows = [list(range(100, 100 + n)) for n in lengths]
    batch = build_batch(rows, padding_side=side, start=start, pad_position=-7)
    real = batch.attention_mask.bool()
    for b, n in enumerate(lengths):
        assert batch.position_ids[b][real[b]].tolist() == list(range(start, start + n))
        assert batch.input_ids[b][real[b]].tolist() == rows[b]
        assert set(batch.position_ids[b][~real[b]].tolist()) <= {-7}


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        (
            {"input_ids": [[1, 2], [3]], "attention_mask": [[1, 1], [1, 1]]},
            r"attention_mask\[1\] must have the length of input_ids\[1\] \(1\), got 2",
            "attention_mask[1]",
        ),
        (
            {"input_ids": [[1, 2], [3]], "attention_mask": [[1, 1]]},
            r"as many rows as input_ids \(2\), got 1",
            "attention_mask",
        ),
        (
            {"input_ids": [[1, 2], [3]], "attention_mask": [[1, 2], [1]]},
            r"must hold 0 or 1, got 2 at attention_mask\[0\]\[1\]",
            "attention_mask[0][1]",
        ),
        ({"input_ids": [[1, 2.5]]}, "input_ids must hold ints, got dtype float", "input_ids"),
        ({"input_ids": [5, 6]}, r"input_ids\[0\] must be a list of ints, got int", "input_ids[0]"),
        ({"input_ids": []}, "at least 1 row, got 0", "input_ids"),
        ({"input_ids": [[1]], "padding_side": "middle"}, "'middle'", "padding_side"),
    ],
)
def test_bad_batches_name_the_field(kwargs, error, field):
    with pytest.raises(InvalidArgument, match=error) as info:
        build_batch(**kwargs)
    assert info.value.field == field


def test_rows_read_in_slices_pad_as_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: the ids are made into a tensor a slice at a time (16 ids here): short rows
    grouped, a long row cut, a run of empty rows longer than a slice; the batch is the one of
    one conversion, and a float or a nested list late in the batch is refused as before."""
    gen = torch.Generator().manual_seed(0)
    lengths = [0, 3, 40, 1, *[0] * 20, 16, 17, 5]
    rows = [torch.randint(0, 2**40, (n,), generator=gen).tolist() for n in lengths]
    sides: tuple[Literal["right", "left"], ...] = ("right", "left")
    want = {side: pad_rows(rows, padding_side=side) for side in sides}
    batch = build_batch(rows, pad_token_id=None)
    monkeypatch.setattr(slices, "SLICE_ITEMS", 16)
    for side, (ids, mask) in want.items():
        got_ids, got_mask = pad_rows(rows, padding_side=side)
        assert torch.equal(got_ids, ids) and torch.equal(got_mask, mask)
    again = build_batch(rows, pad_token_id=None)
    assert torch.equal(again.input_ids, batch.input_ids)
    assert torch.equal(again.position_ids, batch.position_ids)
    bad = [list(r) for r in rows]
    bad[-1][3] = 2.5
    with pytest.raises(InvalidArgument, match="input_ids must hold ints, got dtype float"):
        build_batch(bad)
    bad[-1][3] = [1, 2]
    with pytest.raises(InvalidArgument, match="input_ids"):
        build_batch(bad)
    mixed = [list(r) for r in rows]
    mixed[2] = [True] * 40  # a slice of bools only, among int slices: ints, as torch reads them
    assert torch.equal(pad_rows(mixed)[0][2], torch.ones(40, dtype=torch.int64))
