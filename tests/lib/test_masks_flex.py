"""meta's FlexAttention ``mask_mod`` against transformers' own ``masking_utils`` functions.

The expression :func:`posenc.attention.masks.flex_mask_mod` gives is evaluated with ``masking_utils``'
functions (``causal_mask_function``, ``sliding_window_causal_mask_function``,
``chunked_causal_mask_function``, ``blockwise_overlay``, ``padding_mask_function``,
``packed_sequence_mask_function``, ``remap_positions_for_packed_sequence``, ``and_masks``,
``or_masks``, ``add_offsets_to_mask_function``) on index grids, the way ``sdpa_mask`` expands a
mask function without vmap, and the bool grid must be posenc's mask. The tensors it names are
built with transformers' own helpers (Gemma 3's ``get_block_sequence_ids_for_mask``,
``find_packed_sequence_indices``).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.attention.masks import (
    attention_mask,
    flex_mask_mod,
    mask_blocks,
    mask_inputs,
    mask_rule,
)

masking_utils = pytest.importorskip("transformers.masking_utils")
modeling_gemma3 = pytest.importorskip("transformers.models.gemma3.modeling_gemma3")

_NAMES = (
    "and_masks",
    "or_masks",
    "causal_mask_function",
    "bidirectional_mask_function",
    "sliding_window_overlay",
    "sliding_window_causal_mask_function",
    "sliding_window_bidirectional_mask_function",
    "chunked_causal_mask_function",
    "blockwise_overlay",
    "padding_mask_function",
    "packed_sequence_mask_function",
    "remap_positions_for_packed_sequence",
    "add_offsets_to_mask_function",
)


def _evaluate(expression: str, batch: int, seq_len: int, key_len: int, **tensors: Any) -> Any:
    """The mask_mod on (B, 1, T, S) index grids, as ``sdpa_mask``'s non-vmap expansion."""
    namespace = {name: getattr(masking_utils, name) for name in _NAMES}
    mask_mod = eval(expression, {"__builtins__": {}}, {**namespace, **tensors})
    b = torch.arange(batch)[:, None, None, None]
    h = torch.arange(1)[None, :, None, None]
    q = torch.arange(seq_len)[None, None, :, None]
    k = torch.arange(key_len)[None, None, None, :]
    grid = mask_mod(b, h, q, k)
    return grid.expand(batch, 1, seq_len, key_len)[:, 0]


def _rule(kind: str, size: int) -> Any:
    return mask_rule(
        kind,
        window=size if "sliding" in kind else None,
        chunk_size=size if kind == "chunked" else None,
    )


@settings(max_examples=80, derandomize=True, deadline=None)
@given(
    kind=st.sampled_from(
        ["causal", "sliding", "chunked", "bidirectional", "sliding_bidirectional"]
    ),
    seq_len=st.integers(1, 9),
    extra=st.integers(0, 6),
    size=st.integers(1, 6),
    pads=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=3),
    images=st.booleans(),
)
def test_mask_mod_of_padded_masks(
    kind: str,
    seq_len: int,
    extra: int,
    size: int,
    pads: list[tuple[int, int]],
    images: bool,
) -> None:
    """Every kind, with left and right padding, a cache and (causal, sliding) image spans."""
    key_len = seq_len + extra
    padding = torch.ones(len(pads), key_len, dtype=torch.int64)
    for row, (left, right) in enumerate(pads):
        padding[row, : min(left, key_len)] = 0
        if right:
            padding[row, -min(right, key_len) :] = 0
    rule = _rule(kind, size)
    types = None
    if images and kind in ("causal", "sliding"):
        types = (torch.arange(key_len)[None, :] // 2 + torch.arange(len(pads))[:, None]) % 3 == 1
        types = types.long()
    fields: dict[str, Any] = {"attention_mask": padding.tolist()}
    if types is not None:
        fields["token_type_ids"] = types.tolist()
    inputs = mask_inputs(rule, seq_len, key_len, **fields)
    expression = flex_mask_mod(rule, inputs)
    tensors = {
        "left_padding": (padding.cumsum(-1) == 0).sum(-1),
        "padding_mask": padding.bool(),
        "block_sequence_ids": (
            modeling_gemma3.get_block_sequence_ids_for_mask(types) if types is not None else None
        ),
    }
    got = _evaluate(expression, len(pads), seq_len, key_len, **tensors)
    want = attention_mask(rule, seq_len, key_len, **fields)
    assert torch.equal(got, want), expression
    if bool(padding.all()):
        assert "padding_mask_function" not in expression
    assert ("add_offsets_to_mask_function" in expression) == (extra > 0)


@pytest.mark.parametrize("kind", ["causal", "sliding", "chunked"])
@pytest.mark.parametrize("restart", [0, 3])
def test_mask_mod_of_packed_rows(kind: str, restart: int) -> None:
    """A packed row (position ids restarting, as transformers detects packing): its
    ``remap_positions_for_packed_sequence`` and ``packed_sequence_mask_function``."""
    cu = [0, 4, 5, 11, 14]
    position_ids = torch.cat(
        [
            torch.arange(b - a) + (restart if i else 0)
            for i, (a, b) in enumerate(itertools.pairwise(cu))
        ]
    )
    rule = _rule(kind, 3)
    ids = position_ids.tolist()
    inputs = mask_inputs(rule, 14, position_ids=ids)
    expression = flex_mask_mod(rule, inputs)
    assert "packed_sequence_mask_function(packed_sequence_mask)" in expression
    packed = masking_utils.find_packed_sequence_indices(position_ids[None])
    got = _evaluate(
        expression,
        1,
        14,
        14,
        left_padding=torch.zeros(1, dtype=torch.int64),
        position_ids=position_ids[None],
        packed_sequence_mask=packed,
    )
    want = mask_blocks(rule, inputs).whole()
    assert torch.equal(got, want), expression


def test_mask_mod_names_by_hand() -> None:
    """The plain spellings, worked out from masking_utils' definitions."""
    plain = mask_inputs(mask_rule("causal"), 4)
    assert flex_mask_mod(mask_rule("causal"), plain) == "causal_mask_function"
    sliding = mask_rule("sliding", window=3)
    assert flex_mask_mod(sliding, plain) == "sliding_window_causal_mask_function(3)"
    cached = mask_inputs(sliding, 2, 6, attention_mask=[[0, 1, 1, 1, 1, 1]])
    assert flex_mask_mod(sliding, cached) == (
        "add_offsets_to_mask_function(and_masks(sliding_window_causal_mask_function(3), "
        "padding_mask_function(padding_mask)), 4, 0)"
    )
    images = mask_inputs(sliding, 4, token_type_ids=[[0, 1, 1, 0]])
    assert flex_mask_mod(sliding, images) == (
        "and_masks(or_masks(causal_mask_function, blockwise_overlay(block_sequence_ids)), "
        "sliding_window_overlay(3))"
    )
