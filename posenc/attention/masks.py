"""Attention masks: what each layer lets a query see, as transformers' ``masking_utils`` builds it.

Reference implementation: transformers 5 ``masking_utils`` (``create_causal_mask``,
``create_sliding_window_causal_mask``, ``create_chunked_causal_mask``,
``create_bidirectional_mask``, ``create_bidirectional_sliding_window_mask``) and Gemma 3's
image spans (``modeling_gemma3.create_masks_for_vision_model``). The kernels' own spellings of
the same masks are named beside them (:func:`kernel_spellings`): flash-attn's ``window_size``,
SDPA's ``is_causal`` and vLLM's ``sliding_window``.

Notation used for tensor shapes:
    B: batch rows.
    T: queries.
    S: keys (``S >= T``): the queries are the last ``T`` of the ``S`` positions (a cache holding
       ``S − T`` earlier keys), so query ``i`` sits at position ``i' = i + S − T``.
    N: rows of a block (flat rows ``b·T + i`` of the ``(B, T, S)`` mask).

The rules, for a query at position ``q`` and a key at position ``k`` (within one document when
sequences are packed, where positions restart at each document):

- ``causal``: ``k <= q``;
- ``sliding`` (window ``W``, transformers' ``sliding_window``): ``q − W < k <= q``: a query sees
  itself and the ``W − 1`` keys before it, which flash-attn spells ``window_size=(W − 1, 0)``;
- ``chunked`` (chunk ``C``, Llama 4's ``attention_chunk_size``): ``k <= q`` and
  ``⌊(k − p)/C⌋ = ⌊(q − p)/C⌋`` with ``p`` the row's left padding;
- ``bidirectional``: every key;
- ``sliding_bidirectional``: ``|q − k| <= W`` (transformers' bidirectional sliding window).

Padding (``attention_mask`` 0) removes keys, never queries: a padded query's row keeps what its
rule allows among the real keys (all false for a left-padded causal row), as transformers does.
Gemma 3's image spans (``token_type_ids`` 1) see each other both ways inside one run of image
tokens: ``causal OR same image``, and on sliding layers ``(causal OR same image) AND k > q − W``.
Packed documents (``cu_seqlens``, or a packed row's ``position_ids``) see only keys of their
own document.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc.attention.layers import layer_rule
from posenc.attention.position_bias import (
    ALIBI_FORMS,
    BIAS_DEFAULTS,
    POSITION_BIASES,
    PositionBias,
    bias_parameters,
    bias_rows,
    check_position_bias,
    config_position_bias,
    position_bias,
)
from posenc.core import kinds
from posenc.core.blocks import TableBlocks
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.core.validate import (
    check_bias_lengths,
    check_choice,
    check_int,
    check_lengths,
    device_or_cpu,
)
from posenc.tokens.position_ids import check_cu_seqlens, max_seqlen

__all__ = [
    "MASKED_VALUES",
    "MASKS",
    "MASK_KINDS",
    "MaskInputs",
    "MaskKind",
    "MaskRule",
    "attention_bias",
    "attention_mask",
    "combined_blocks",
    "flex_mask_mod",
    "kernel_spellings",
    "mask_blocks",
    "mask_inputs",
    "mask_rule",
    "packed_documents",
]

MaskKind = Literal["causal", "sliding", "chunked", "bidirectional", "sliding_bidirectional"]
MASK_KINDS: tuple[str, ...] = get_args(MaskKind)
MaskedValue = Literal["-inf", "min"]
MASKED_VALUES: tuple[str, ...] = get_args(MaskedValue)


@dataclass(frozen=True)
class MaskRule:
    """One layer's rule: its kind and the size that goes with it.

    Attributes:
        kind: see :data:`MaskKind`.
        window: ``W`` of ``sliding`` and ``sliding_bidirectional`` (else None).
        chunk_size: ``C`` of ``chunked`` (else None).
    """

    kind: MaskKind
    window: int | None = None
    chunk_size: int | None = None


def mask_rule(kind: str, *, window: int | None = None, chunk_size: int | None = None) -> MaskRule:
    """A checked :class:`MaskRule`: the size its kind needs, and no other.

    Raises:
        InvalidArgument: an unknown kind, a missing or non-positive size, or a size the kind
            does not take (``field`` names it).
    """
    check_choice("kind", kind, MASK_KINDS)
    sized = {"sliding": "window", "sliding_bidirectional": "window", "chunked": "chunk_size"}
    given = {"window": window, "chunk_size": chunk_size}
    need = sized.get(kind)
    for name, value in given.items():
        if name == need:
            if value is None:
                raise InvalidArgument(f"kind {kind} needs {name}", field=name)
            check_int(name, value, 1)
        elif value is not None:
            raise InvalidArgument(
                f"{name} applies to kind {'chunked' if name == 'chunk_size' else 'sliding'}, "
                f"not to kind {kind}",
                field=name,
            )
    return MaskRule(kind, window, chunk_size)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Inputs: padding, image spans and packed documents, checked once
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskInputs:
    """What a mask is built from besides its rule, checked (:func:`mask_inputs`).

    Attributes:
        batch: ``B``.
        seq_len: ``T``.
        key_len: ``S``.
        key_valid: ``(B, S)`` bool, false at padding; None without padding.
        left_padding: ``(B,)`` int64, the leading padded keys of each row (chunked layers start
            their chunks after them); None without padding.
        image_block: ``(B, S)`` int64, the image run of each position (0, 1, … counted per
            row) or −1 for text (Gemma 3's ``block_sequence_ids``); None without image spans.
        document: ``(S,)`` int64, the packed document of each position; None unpacked.
        positions: ``(S,)`` int64, each token's position inside its document (what the rule
            compares when packed: from 0 with ``cu_seqlens``, the ids given with
            ``position_ids``).
    """

    batch: int
    seq_len: int
    key_len: int
    key_valid: Tensor | None = None
    left_padding: Tensor | None = None
    image_block: Tensor | None = None
    document: Tensor | None = None
    positions: Tensor | None = None


def _rows_tensor(rows: Any, field: str, key_len: int) -> Tensor:
    """``B`` rows of ``S`` ints (lists or a ``(B, S)`` tensor) as an int64 tensor."""
    if isinstance(rows, Tensor):
        t = rows.to(torch.int64)
        if t.dim() != 2:
            raise InvalidArgument(
                f"{field} must be 2-D (B, S), got shape {tuple(t.shape)}", field=field
            )
    else:
        for r, row in enumerate(rows):
            if len(row) != key_len:
                raise InvalidArgument(
                    f"{field}[{r}] must have key_len = {key_len} items (one per key), got "
                    f"{len(row)}",
                    field=f"{field}[{r}]",
                )
        t = torch.tensor(list(rows), dtype=torch.int64).reshape(len(rows), key_len)
    if t.shape[0] < 1 or t.shape[1] != key_len:
        raise InvalidArgument(
            f"{field} must be B >= 1 rows of key_len = {key_len} items, got shape {tuple(t.shape)}",
            field=field,
        )
    return t


def _image_blocks(token_type_ids: Tensor) -> Tensor:
    """Gemma 3's ``get_block_sequence_ids_for_mask``: each run of image tokens (type 1) is a
    group numbered from 0 in its row; text (any other type) is −1. ``(B, S)`` int64."""
    is_image = token_type_ids == 1
    before = torch.zeros_like(is_image)
    before[:, 1:] = is_image[:, :-1]
    starts = is_image & ~before
    groups = torch.cumsum(starts.to(torch.int64), dim=1) - 1
    return torch.where(is_image, groups, torch.full_like(groups, -1))


def packed_documents(position_ids: Sequence[int] | Tensor) -> list[int]:
    """``cu_seqlens`` of a packed row's position ids, as transformers detects packing
    (``masking_utils.find_packed_sequence_indices``): a document starts at 0 and wherever a
    position is not the previous one plus 1. ``[0, 1, 2, 0, 1]`` -> ``[0, 3, 5]``."""
    ids = torch.as_tensor(position_ids, dtype=torch.int64).reshape(-1)
    if ids.numel() == 0:
        return [0]
    starts = torch.nonzero(ids[1:] - ids[:-1] != 1).reshape(-1) + 1
    return [0, *starts.tolist(), int(ids.numel())]


def _packing(
    seq_len: int,
    key_len: int,
    cu_seqlens: Sequence[int] | None,
    position_ids: Sequence[int] | None,
    attention_mask: Any,
    token_type_ids: Any,
    *,
    allocate: bool = True,
) -> tuple[Tensor, Tensor] | None:
    """The document and the in-document position of each of the ``T`` tokens of a packed row
    (``allocate=False``: the checks alone, None)."""
    field = "cu_seqlens" if cu_seqlens is not None else "position_ids"
    if cu_seqlens is not None and position_ids is not None:
        raise InvalidArgument("give cu_seqlens or position_ids, not both", field="position_ids")
    for name, given in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if given is not None:
            raise InvalidArgument(
                f"{field} and {name} together: a packed row has no padding and no image spans "
                "here (transformers detects packing only without a padding mask)",
                field=field,
            )
    if key_len != seq_len:
        raise InvalidArgument(
            f"{field} packs the T = {seq_len} queries with their own keys; key_len {key_len} "
            "must equal seq_len",
            field="key_len",
        )
    ids: Tensor | None = None
    if position_ids is not None:
        ids = torch.as_tensor(list(position_ids), dtype=torch.int64).reshape(-1)
        if ids.numel() != seq_len:
            raise InvalidArgument(
                f"position_ids must hold seq_len = {seq_len} positions (one packed row), got "
                f"{ids.numel()}",
                field="position_ids",
            )
        cu = packed_documents(ids)
        if len(cu) == 2:  # one document: transformers sees no packing and uses the indices
            ids = None
    else:
        cu = check_cu_seqlens(cu_seqlens or (), seq_len)
    if not allocate:
        return None
    lengths = torch.tensor([b - a for a, b in itertools.pairwise(cu)])
    document = torch.repeat_interleave(torch.arange(len(lengths)), lengths)  # (S,)
    if ids is None:
        ids = torch.arange(seq_len) - torch.tensor(cu[:-1], dtype=torch.int64)[document]
    return document, ids


def mask_inputs(
    rule: MaskRule,
    seq_len: int,
    key_len: int | None = None,
    *,
    attention_mask: Any = None,
    token_type_ids: Any = None,
    cu_seqlens: Sequence[int] | None = None,
    position_ids: Sequence[int] | None = None,
) -> MaskInputs:
    """The checked inputs of a mask.

    Args:
        rule: the layer's rule.
        seq_len: ``T``.
        key_len: ``S >= T`` (default ``T``).
        attention_mask: ``B`` rows of ``S`` 0/1 values (1 real, 0 padding), or None.
        token_type_ids: ``B`` rows of ``S`` token types (1 image), Gemma 3's; causal and sliding
            layers only.
        cu_seqlens: packed documents, ``0 < … < T`` (needs ``S = T``, one row, no padding).
        position_ids: one packed row's ``T`` position ids, packing detected as transformers'
            ``find_packed_sequence_indices`` does (a new document wherever a position is not
            the previous one plus 1); the rule then compares these positions (a row of one
            document is not packed, as transformers decides). Not with ``cu_seqlens``.

    Raises:
        InvalidArgument: rows of the wrong length, values outside 0/1, batch sizes that
            disagree, or packing with a cache, padding or image spans.
    """
    seq_len, key_len = check_lengths(seq_len, key_len)
    batch = 1
    key_valid = left_padding = image_block = document = positions = None
    if attention_mask is not None:
        m = _rows_tensor(attention_mask, "attention_mask", key_len)
        if bool(((m != 0) & (m != 1)).any()):
            raise InvalidArgument("attention_mask must hold only 0 and 1", field="attention_mask")
        key_valid = m == 1
        batch = m.shape[0]
        # transformers: (attention_mask.cumsum(-1) == 0).sum(-1), the leading zeros of each row
        left_padding = (torch.cumsum(m, dim=1) == 0).sum(dim=1)
    if token_type_ids is not None:
        if rule.kind not in ("causal", "sliding"):
            raise InvalidArgument(
                f"token_type_ids (Gemma 3's image spans) apply to causal and sliding layers, "
                f"not to kind {rule.kind}",
                field="token_type_ids",
            )
        tt = _rows_tensor(token_type_ids, "token_type_ids", key_len)
        if key_valid is not None and tt.shape[0] != batch:
            raise InvalidArgument(
                f"token_type_ids has {tt.shape[0]} rows, attention_mask {batch}",
                field="token_type_ids",
            )
        batch = tt.shape[0]
        image_block = _image_blocks(tt)
    if cu_seqlens is not None or position_ids is not None:
        packed = _packing(
            seq_len, key_len, cu_seqlens, position_ids, attention_mask, token_type_ids
        )
        document, positions = packed if packed is not None else (None, None)
    return MaskInputs(
        batch, seq_len, key_len, key_valid, left_padding, image_block, document, positions
    )


# ---------------------------------------------------------------------------------------------
# The rule, on rows of the mask
# ---------------------------------------------------------------------------------------------


def _allowed(rule: MaskRule, q: Tensor, k: Tensor, left: Tensor | None) -> Tensor:
    """The rule alone: ``q`` (N, 1) and ``k`` (N, S) or (1, S) int64 positions -> (N, S) bool."""
    window, chunk = rule.window or 0, rule.chunk_size or 1  # mask_rule gave the kind its size
    if rule.kind == "bidirectional":
        return (k >= 0) & (q >= 0)  # transformers: q_idx >= 0, every key
    if rule.kind == "sliding_bidirectional":
        return (q - k).abs() <= window
    causal = k <= q
    if rule.kind == "causal":
        return causal
    if rule.kind == "sliding":
        return causal & (k > q - window)
    shift = left if left is not None else torch.zeros_like(q)
    key_chunk = torch.div(k - shift, chunk, rounding_mode="floor")
    return causal & (key_chunk == torch.div(q - shift, chunk, rounding_mode="floor"))


def mask_rows(rule: MaskRule, inputs: MaskInputs, rows: Tensor) -> Tensor:
    """Rows ``b·T + i`` ``(N,)`` of the ``(B, T, S)`` mask, ``(N, S)`` bool.

    Every row is the same few tensor operations, so the whole mask and any block of its rows
    are the same values.
    """
    t, s = inputs.seq_len, inputs.key_len
    dev = rows.device
    b = torch.div(rows, t, rounding_mode="floor")  # (N,)
    q_abs = rows - b * t + (s - t)  # (N,) the query's position among the keys
    k_abs = torch.arange(s, device=dev)[None, :]  # (1, S)
    q, k = q_abs[:, None], k_abs
    same_document = None
    if inputs.document is not None and inputs.positions is not None:
        doc, pos = inputs.document.to(dev), inputs.positions.to(dev)
        q, k = pos[q_abs][:, None], pos[None, :]  # positions inside each document
        same_document = doc[q_abs][:, None] == doc[None, :]  # (N, S)
    left = inputs.left_padding.to(dev)[b][:, None] if inputs.left_padding is not None else None
    allowed = _allowed(rule, q, k, left)  # (N, S)
    if inputs.image_block is not None:
        blocks = inputs.image_block.to(dev)[b]  # (N, S)
        block_q = blocks.gather(1, q_abs[:, None])  # (N, 1)
        same_image = (blocks == block_q) & (block_q >= 0)
        if rule.kind == "sliding":  # Gemma 3: AND(OR(causal, image), k > q − W)
            allowed = ((k <= q) | same_image) & (k > q - (rule.window or 0))
        else:
            allowed = allowed | same_image
    if same_document is not None:
        allowed = allowed & same_document
    if inputs.key_valid is not None:
        allowed = allowed & inputs.key_valid.to(dev)[b]
    return allowed.expand(rows.shape[0], s)


def _bias_values(allowed: Tensor, dtype: torch.dtype, masked_value: str) -> Tensor:
    """0 where allowed, −inf (or ``finfo(dtype).min``, transformers' eager mask) elsewhere."""
    fill = float("-inf") if masked_value == "-inf" else torch.finfo(dtype).min
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.tensor(fill, dtype=dtype, device=allowed.device))


def mask_blocks(
    rule: MaskRule,
    inputs: MaskInputs,
    *,
    output: Literal["mask", "bias"] = "mask",
    dtype: torch.dtype = torch.float32,
    masked_value: MaskedValue = "-inf",
    device: str | torch.device | None = None,
) -> TableBlocks:
    """The ``(B, T, S)`` mask (bool) or bias (``dtype``) in blocks of its ``B·T`` rows."""
    check_choice("as", output, ("mask", "bias"))
    check_choice("masked_value", masked_value, MASKED_VALUES)
    dev = device_or_cpu(device)
    out_dtype = torch.bool if output == "mask" else resolve_dtype(dtype)
    shape = (inputs.batch, inputs.seq_len, inputs.key_len)

    def fill(start: int, stop: int, out: Tensor) -> None:
        allowed = mask_rows(rule, inputs, torch.arange(start, stop, device=dev))  # (N, S)
        out.copy_(allowed if output == "mask" else _bias_values(allowed, out_dtype, masked_value))

    return TableBlocks(output, shape, out_dtype, fill, dev)


def combined_blocks(
    rule: MaskRule,
    inputs: MaskInputs,
    bias: PositionBias,
    *,
    dtype: torch.dtype = torch.float32,
    masked_value: MaskedValue = "-inf",
    device: str | torch.device | None = None,
) -> TableBlocks:
    """The mask and a position bias as the model adds them to its scores: ``(B, H, T, S)``,
    the bias (:func:`posenc.attention.position_bias.bias_rows`) where the mask allows attention and −inf
    (``masked_value="min"``: ``finfo(dtype).min``) elsewhere, in blocks of its ``B·H·T`` rows.

    transformers' eager attention adds ``bias + finfo.min`` where masked, which is
    ``finfo.min`` itself in float32, bfloat16 and float16 for any bias below ``2**100``; so
    with ``masked_value="min"`` this is the sum BLOOM, MPT and T5 pass to their softmax.
    T5's buckets (``relative``) go both ways on bidirectional layers (its encoder), one way
    otherwise.
    """
    check_choice("masked_value", masked_value, MASKED_VALUES)
    dev = device_or_cpu(device)
    out_dtype = resolve_dtype(dtype)
    heads, t, s = bias.num_heads, inputs.seq_len, inputs.key_len
    shape = (inputs.batch, heads, t, s)
    bidirectional = _bidirectional(rule.kind)
    fill_value = float("-inf") if masked_value == "-inf" else torch.finfo(out_dtype).min
    key_pos = torch.arange(s, device=dev)[None, :]  # (1, S)
    parameters = bias_parameters(bias, device=dev)  # slopes (H,) or T5's table (NB, H)

    def fill(start: int, stop: int, out: Tensor) -> None:
        rows = torch.arange(start, stop, device=dev)  # (N,) (b·H + h)·T + i
        i = rows % t
        bh = torch.div(rows, t, rounding_mode="floor")
        b, head = torch.div(bh, heads, rounding_mode="floor"), bh % heads
        allowed = mask_rows(rule, inputs, b * t + i)  # (N, S)
        real = inputs.key_valid.to(dev)[b] if inputs.key_valid is not None else None
        values = bias_rows(
            bias,
            parameters,
            head,
            (i + (s - t))[:, None],
            key_pos,
            key_len=s,
            real_keys=real,
            bidirectional=bidirectional,
        ).to(out_dtype)  # (N, S), cast once
        masked = torch.tensor(fill_value, dtype=out_dtype, device=dev)
        out.copy_(torch.where(allowed, values, masked))

    return TableBlocks("combined", shape, out_dtype, fill, dev)


def _sized_inputs(
    what: str,
    rule: MaskRule,
    seq_len: int,
    key_len: int | None,
    attention_mask: Any,
    token_type_ids: Any,
    cu_seqlens: Sequence[int] | None,
    max_elements: int | None,
) -> MaskInputs:
    """:func:`mask_inputs`, then the ``(B, T, S)`` size checked against ``max_elements``."""
    inputs = mask_inputs(
        rule,
        seq_len,
        key_len,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        cu_seqlens=cu_seqlens,
    )
    check_elements(
        inputs.batch * inputs.seq_len * inputs.key_len,
        what=f"the {what} (B={inputs.batch}, T={inputs.seq_len}, S={inputs.key_len})",
        max_elements=max_elements,
    )
    return inputs


def attention_mask(
    rule: MaskRule,
    seq_len: int,
    key_len: int | None = None,
    *,
    attention_mask: Any = None,
    token_type_ids: Any = None,
    cu_seqlens: Sequence[int] | None = None,
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> Tensor:
    """The ``(B, T, S)`` boolean mask, true where the query may attend the key.

    Equal to transformers' ``sdpa_mask`` output ``(B, 1, T, S)`` for the same layer (the head
    axis dropped). See :func:`mask_inputs` for the arguments.

    Raises:
        InvalidArgument: see :func:`mask_inputs`; TooLarge past ``max_elements``.
    """
    inputs = _sized_inputs(
        "mask", rule, seq_len, key_len, attention_mask, token_type_ids, cu_seqlens, max_elements
    )
    return mask_blocks(rule, inputs, device=device).whole()


def attention_bias(
    rule: MaskRule,
    seq_len: int,
    key_len: int | None = None,
    *,
    attention_mask: Any = None,
    token_type_ids: Any = None,
    cu_seqlens: Sequence[int] | None = None,
    dtype: torch.dtype = torch.float32,
    masked_value: MaskedValue = "-inf",
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> Tensor:
    """The ``(B, T, S)`` additive bias: 0 where attention is allowed, −inf elsewhere
    (``masked_value="min"``: ``torch.finfo(dtype).min``, as transformers' ``eager_mask``)."""
    inputs = _sized_inputs(
        "bias", rule, seq_len, key_len, attention_mask, token_type_ids, cu_seqlens, max_elements
    )
    blocks = mask_blocks(
        rule, inputs, output="bias", dtype=dtype, masked_value=masked_value, device=device
    )
    return blocks.whole()


# ---------------------------------------------------------------------------------------------
# The same mask in each kernel's terms
# ---------------------------------------------------------------------------------------------

_TRANSFORMERS_FUNCTIONS = {
    "causal": "create_causal_mask",
    "sliding": "create_sliding_window_causal_mask",
    "chunked": "create_chunked_causal_mask",
    "bidirectional": "create_bidirectional_mask",
    "sliding_bidirectional": "create_bidirectional_sliding_window_mask",
}


def _plain_kind(rule: MaskRule, key_len: int) -> str | None:
    """``causal`` or ``bidirectional`` when the rule is that at these lengths (a window or a
    chunk wider than the keys changes nothing), else None."""
    if rule.kind in ("causal", "bidirectional"):
        return rule.kind
    if rule.kind == "sliding" and key_len <= rule.window:  # type: ignore[operator]
        return "causal"
    if rule.kind == "chunked" and key_len <= rule.chunk_size:  # type: ignore[operator]
        return "causal"
    if rule.kind == "sliding_bidirectional" and key_len - 1 <= rule.window:  # type: ignore[operator]
        return "bidirectional"
    return None


_FLEX_BASE = {
    "causal": "causal_mask_function",
    "sliding": "sliding_window_causal_mask_function({window})",
    "chunked": "chunked_causal_mask_function({chunk}, left_padding)",
    "bidirectional": "bidirectional_mask_function",
    "sliding_bidirectional": "sliding_window_bidirectional_mask_function({window})",
}


def flex_mask_mod(rule: MaskRule, inputs: MaskInputs) -> str:
    """The FlexAttention ``mask_mod`` transformers composes for this mask, as an expression in
    ``masking_utils``' own names, in the order its ``create_*_mask`` and
    ``flex_attention_mask`` compose them.

    The base is the kind's function (``causal_mask_function``,
    ``sliding_window_causal_mask_function(W)`` = ``and_masks(sliding_window_overlay(W),
    causal_mask_function)``, ``chunked_causal_mask_function(C, left_padding)``,
    ``bidirectional_mask_function``, ``sliding_window_bidirectional_mask_function(W)``). Then:

    - image spans (Gemma 3's ``create_masks_for_vision_model``): full layers
      ``or_masks(causal_mask_function, blockwise_overlay(block_sequence_ids))``, sliding layers
      that ``and_masks(…, sliding_window_overlay(W))``;
    - packed documents: ``and_masks(remap_positions_for_packed_sequence(base, position_ids),
      packed_sequence_mask_function(packed_sequence_mask))``;
    - padding (a row with a 0): ``and_masks(…, padding_mask_function(padding_mask))``;
    - a cache (``S > T``): ``add_offsets_to_mask_function(…, S − T, 0)``, as
      ``flex_attention_mask`` adds the query offset.

    The free names are tensors of the request: ``left_padding`` ``(B,)`` (leading padded keys,
    zeros without padding), ``padding_mask`` ``(B, S)`` bool (``attention_mask == 1``),
    ``block_sequence_ids`` ``(B, S)`` (each image run numbered from 0 in its row, −1 for text),
    ``position_ids`` ``(1, T)`` (positions inside each document) and ``packed_sequence_mask``
    ``(1, T)`` (each token's document).
    """
    w, c = rule.window, rule.chunk_size
    mod = _FLEX_BASE[rule.kind].format(window=w, chunk=c)
    if inputs.image_block is not None:
        mod = "or_masks(causal_mask_function, blockwise_overlay(block_sequence_ids))"
        if rule.kind == "sliding":
            mod = f"and_masks({mod}, sliding_window_overlay({w}))"
    if inputs.document is not None:
        mod = (
            f"and_masks(remap_positions_for_packed_sequence({mod}, position_ids), "
            "packed_sequence_mask_function(packed_sequence_mask))"
        )
    if inputs.key_valid is not None and not bool(inputs.key_valid.all()):
        mod = f"and_masks({mod}, padding_mask_function(padding_mask))"
    if inputs.key_len > inputs.seq_len:
        mod = f"add_offsets_to_mask_function({mod}, {inputs.key_len - inputs.seq_len}, 0)"
    return mod


def kernel_spellings(rule: MaskRule, inputs: MaskInputs) -> dict[str, Any]:
    """The same mask as each kernel is told it.

    - ``flash_attn_window_size``: ``[left, right]`` of flash-attn's ``window_size`` (−1
      unbounded): query ``i`` sees keys ``i + S − T − left … i + S − T + right``. Causal
      ``[-1, 0]``, sliding ``[W − 1, 0]``, bidirectional ``[-1, -1]``, bidirectional sliding
      ``[W, W]``; None for chunked (no window spells it). Padding and packing go to its varlen
      call (``cu_seqlens``), image spans cannot be spelled.
    - ``flash_attn_causal``: its ``causal`` flag.
    - ``sdpa_is_causal``: when SDPA needs no mask tensor, its ``is_causal`` (true: the causal
      mask, which SDPA aligns top-left, so only for ``T = S``; false: every key); None when a
      tensor is needed.
    - ``vllm_sliding_window``: the ``sliding_window`` vLLM's attention layer takes (the config's
      ``W``; its flash-attn backend turns it into ``(W − 1, 0)``); None without a window.
    - ``vllm_attention_chunk_size``: vLLM's chunked local attention (Llama 4), or None.
    - ``transformers_function``: the ``masking_utils`` function that builds it.
    - ``flex_attention_mask_mod``: FlexAttention's ``mask_mod`` in ``masking_utils``' names
      (:func:`flex_mask_mod`).
    """
    w = rule.window
    windows: dict[str, list[int] | None] = {
        "causal": [-1, 0],
        "sliding": [w - 1, 0] if w is not None else None,
        "chunked": None,
        "bidirectional": [-1, -1],
        "sliding_bidirectional": [w, w] if w is not None else None,
    }
    extra = inputs.key_valid is not None and not bool(inputs.key_valid.all())
    extra = extra or (inputs.image_block is not None and bool((inputs.image_block >= 0).any()))
    extra = extra or (inputs.document is not None and int(inputs.document[-1]) > 0)
    plain = None if extra else _plain_kind(rule, inputs.key_len)
    is_causal: bool | None = None
    if plain == "bidirectional" or (plain == "causal" and inputs.seq_len == 1):
        is_causal = False  # one query at the end sees every key
    elif plain == "causal" and inputs.seq_len == inputs.key_len:
        is_causal = True
    return {
        "flash_attn_window_size": windows[rule.kind],
        "flash_attn_causal": rule.kind in ("causal", "sliding", "chunked"),
        "sdpa_is_causal": is_causal,
        "vllm_sliding_window": w if rule.kind == "sliding" else None,
        "vllm_attention_chunk_size": rule.chunk_size,
        "transformers_function": _TRANSFORMERS_FUNCTIONS[rule.kind],
        "flex_attention_mask_mod": flex_mask_mod(rule, inputs),
    }


# ---------------------------------------------------------------------------------------------
# The masks endpoint kind (posenc.core.kinds)
# ---------------------------------------------------------------------------------------------


def _rule_of(p: Mapping[str, Any]) -> MaskRule:
    """The rule the resolved fields name (``complete`` put a config's into ``rule``)."""
    r = p["rule"]
    return mask_rule(r["kind"], window=r["window"], chunk_size=r["chunk_size"])


def _masks_complete(p: dict[str, Any], _models: Any) -> dict[str, Any]:
    """The layer's rule, from ``kind`` or from the config's layer (a 422 before any work).

    As everywhere in posenc, the caller's fields win over the config's: ``kind``, ``window``
    and ``chunk_size`` given with a config replace the layer's own.
    """
    layer_info: dict[str, Any] | None = None
    kind, window, chunk = p["kind"], p["window"], p["chunk_size"]
    if p["config"] is not None:
        chosen = layer_rule(p["config"], layer_type=p["layer_type"], layer=p["layer"])
        layer_info = chosen.to_dict()
        kind = kind or chosen.mask
        if window is None and kind in ("sliding", "sliding_bidirectional"):
            window = chosen.window
        if chunk is None and kind == "chunked":
            chunk = chosen.chunk_size
    else:
        for name in ("layer_type", "layer"):
            if p[name] is not None:
                raise InvalidArgument(f"{name} needs config (a model's config.json)", field=name)
    rule = _rule_dict(mask_rule(kind or "causal", window=window, chunk_size=chunk))
    if p["config"] is not None and p["as"] == "combined":
        given = {name: p[name] for name in _BIAS_FIELDS}
        p = {
            **p,
            **config_position_bias(p["config"], given, bidirectional=_bidirectional(rule["kind"])),
        }
    bias = _bias_of(p)  # a 422 before any work
    if bias is not None:
        check_position_bias(bias, bidirectional=_bidirectional(rule["kind"]))
    if p["cu_seqlens"] is not None and all(
        p[name] is None for name in ("position_ids", "attention_mask", "token_type_ids")
    ):
        # boundaries alone are checked as numbers: the (T,) arrays of a packed row wait for the
        # size check (a last boundary of 2**40 is a 413, not an allocation)
        t, s = check_lengths(p["seq_len"], p["key_len"])
        _packing(t, s, p["cu_seqlens"], None, None, None, allocate=False)
    else:
        _inputs({**p, "rule": rule})  # every input checked before any work
    return {**p, "rule": rule, "layer_info": layer_info}


#: the fields of a position bias a config gives (:func:`config_position_bias`)
_BIAS_FIELDS = (
    "position_bias",
    "num_heads",
    "max_bias",
    "alibi_form",
    "num_buckets",
    "max_distance",
)


def _bidirectional(kind: str) -> bool:
    """Whether a layer of this mask kind sees both ways (T5's encoder buckets)."""
    return kind in ("bidirectional", "sliding_bidirectional")


def _bias_of(p: Mapping[str, Any]) -> PositionBias | None:
    """The position bias ``as: "combined"`` adds (None for a mask or bias alone).

    Raises:
        InvalidArgument: ``combined`` without ``position_bias``, or ``position_bias`` with
            another ``as``.
    """
    kind = p["position_bias"]
    if p["as"] != "combined":
        if kind is not None:
            raise InvalidArgument(
                f"position_bias ({kind}) is added to the mask with as: combined, not with "
                f"as: {p['as']}",
                field="position_bias",
            )
        return None
    if kind is None:
        raise InvalidArgument(
            "as: combined needs position_bias (alibi or relative) and num_heads, or a config "
            "of a model that adds one (BLOOM, MPT, T5…)",
            field="position_bias",
        )
    given = {name: p[name] for name in BIAS_DEFAULTS if p[name] is not None}
    return position_bias(
        kind, num_heads=p["num_heads"], seed=p["seed"], **{**BIAS_DEFAULTS, **given}
    )


def _rule_dict(rule: MaskRule) -> dict[str, Any]:
    return {"kind": rule.kind, "window": rule.window, "chunk_size": rule.chunk_size}


def _inputs(p: Mapping[str, Any]) -> MaskInputs:
    return mask_inputs(
        _rule_of(p),
        p["seq_len"],
        p["key_len"],
        attention_mask=p["attention_mask"],
        token_type_ids=p["token_type_ids"],
        cu_seqlens=p["cu_seqlens"],
        position_ids=p["position_ids"],
    )


def _masks_shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    t, s = check_lengths(p["seq_len"], p["key_len"])
    batch = 1
    for name in ("attention_mask", "token_type_ids"):
        if p[name] is not None:
            batch = kinds.batch_shape(p[name])[0]
    if p["as"] == "combined":
        return {"combined": (batch, p["num_heads"], t, s)}
    return {p["as"]: (batch, t, s)}


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> TableBlocks:
    bias = _bias_of(p)
    if bias is not None:
        return combined_blocks(
            _rule_of(p),
            _inputs(p),
            bias,
            dtype=ctx.dtype,
            masked_value=p["masked_value"],
            device=ctx.device,
        )
    return mask_blocks(
        _rule_of(p),
        _inputs(p),
        output=p["as"],
        dtype=ctx.dtype,
        masked_value=p["masked_value"],
        device=ctx.device,
    )


# Rows filled at once when the whole mask is computed: the (N, S) intermediates (bools, and
# int64 for chunked padding and image spans) stay a few MiB whatever the mask's size.
_WHOLE_BLOCK_ELEMENTS = 2**20


def _masks_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    blocks = _blocks(p, ctx)
    return {p["as"]: blocks.whole(_WHOLE_BLOCK_ELEMENTS * blocks.element_size)}


def _masks_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    rule, inputs = _rule_of(p), _inputs(p)
    meta: dict[str, Any] = {
        "kind": "masks",
        "mask_kind": rule.kind,
        "window": rule.window,
        "chunk_size": rule.chunk_size,
        "batch_size": inputs.batch,
        "seq_len": inputs.seq_len,
        "key_len": inputs.key_len,
        "as": p["as"],
        "layer": p["layer_info"],
        **kernel_spellings(rule, inputs),
    }
    if p["as"] in ("bias", "combined"):
        meta.update(dtype=p["dtype"], masked_value=p["masked_value"])
    bias = _bias_of(p)
    if bias is not None:
        meta["position_bias"] = {
            "kind": bias.kind,
            "num_heads": bias.num_heads,
            **(
                {"max_bias": bias.max_bias, "alibi_form": bias.alibi_form}
                if bias.kind == "alibi"
                else {
                    "num_buckets": bias.num_buckets,
                    "max_distance": bias.max_distance,
                    "seed": bias.seed,
                    "bidirectional": _bidirectional(rule.kind),
                }
            ),
        }
    if inputs.document is not None:
        cu = p["cu_seqlens"] or packed_documents(p["position_ids"])
        meta.update(cu_seqlens=cu, max_seqlen=max_seqlen(cu))
    return meta


def _rows_field(name: str, description: str, maximum: int) -> kinds.FieldSpec:
    return kinds.FieldSpec(name, "int_rows", description, None, minimum=0, maximum=maximum)


MASKS: kinds.Kind = kinds.Kind(
    name="masks",
    path="/v1/masks",
    tag="biases",
    summary="The attention mask a layer applies",
    description="The mask (B, T, S) of one layer, exactly as transformers' `masking_utils` "
    "builds it: causal, sliding (a query sees itself and the window − 1 keys before it: "
    "flash-attn's window_size (W − 1, 0)), chunked (Llama 4), bidirectional; Gemma 3's image "
    "spans (`token_type_ids`) both ways; padding (`attention_mask`) removes keys; packed "
    "documents (`cu_seqlens`) see only their own keys. The queries are the last T of the S "
    "positions. `meta` spells the same mask for flash-attn, SDPA, FlexAttention and vLLM. "
    "`as: combined` adds a position bias (ALiBi, T5) where the mask allows, as the model "
    "adds them. A layer without "
    "attention (Mamba, linear attention) is a 422 that says what it is.",
    fields=(
        kinds.FieldSpec("seq_len", "int", "T, the number of queries", minimum=1, example=6),
        kinds.FieldSpec(
            "key_len",
            "int",
            "S ≥ T (default T); the queries are the last T positions",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "kind",
            "str",
            "the rule (default: the config's layer's, else causal): causal, sliding (with "
            "window), chunked (with chunk_size), bidirectional, sliding_bidirectional "
            "(|q − k| ≤ window)",
            None,
            choices=MASK_KINDS,
        ),
        kinds.FieldSpec(
            "window",
            "int",
            "W of kind sliding (transformers' sliding_window: the query and the W − 1 keys "
            "before it); with config, replaces the layer's",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "chunk_size",
            "int",
            "C of kind chunked (attention_chunk_size); with config, replaces the layer's",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "config",
            "object",
            "a model's config.json: the rule of its layer (layer_type or layer); see "
            "POST /v1/configs/positions' layers",
            None,
        ),
        kinds.FieldSpec(
            "layer_type",
            "str",
            "with config: the layer type (full_attention, sliding_attention, chunked_attention…)",
            None,
        ),
        kinds.FieldSpec("layer", "int", "with config: the layer's index", None, minimum=0),
        _rows_field("attention_mask", "B rows of S: 1 for a real token, 0 for padding", 1),
        _rows_field(
            "token_type_ids",
            "B rows of S (Gemma 3's): 1 marks image tokens, which see their own image both "
            "ways (causal and sliding layers)",
            kinds.INT_BOUND,
        ),
        kinds.FieldSpec(
            "cu_seqlens",
            "ints",
            "packed documents: 0 < … < T, as flash-attn's varlen calls take them (S = T, no "
            "padding)",
            None,
            minimum=0,
        ),
        kinds.FieldSpec(
            "position_ids",
            "ints",
            "one packed row's T position ids (in place of cu_seqlens): a document starts "
            "wherever a position is not the previous plus 1, as transformers detects packing",
            None,
            minimum=0,
        ),
        kinds.FieldSpec(
            "as",
            "str",
            "mask: the tensor `mask` (B, T, S) bool, true where attention is allowed; bias: "
            "the tensor `bias`, 0 or −inf, in dtype; combined: the tensor `combined` "
            "(B, H, T, S), the position_bias where allowed and −inf elsewhere, as the model "
            "adds them to its scores",
            "mask",
            choices=("mask", "bias", "combined"),
            python_name="output",
        ),
        kinds.FieldSpec(
            "position_bias",
            "str",
            "with as: combined, the bias the model adds beside the mask: alibi (its form in "
            "alibi_form) or relative (T5's bucketed table: both ways on bidirectional layers, "
            "its encoder; one way otherwise, its decoder); default: the config's model's "
            "(BLOOM, MPT: alibi; T5, mT5, UMT5, Switch, Pop2Piano: relative), and another is "
            "a 422",
            None,
            choices=POSITION_BIASES,
        ),
        kinds.FieldSpec(
            "num_heads",
            "int",
            "H of position_bias (required with it, unless config gives n_head, n_heads or "
            "num_heads)",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "max_bias",
            "float",
            "ALiBi's slope exponent scale (default: MPT's attn_config.alibi_bias_max with "
            "config, else 8)",
            None,
            exclusive_minimum=0,
        ),
        kinds.FieldSpec(
            "alibi_form",
            "str",
            "paper: −m·|q − k|; key_index: m·(the key's index among the real tokens), as "
            "BLOOM's build_alibi_tensor; from_last: m·(k − S + 1), as MPT's "
            "build_mpt_alibi_tensor (default: the config's model's form, else paper)",
            None,
            choices=ALIBI_FORMS,
        ),
        kinds.FieldSpec(
            "num_buckets",
            "int",
            "T5's relative_attention_num_buckets (default: the config's, else 32)",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "max_distance",
            "int",
            "T5's relative_attention_max_distance (default: the config's, else 128)",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "seed",
            "int",
            "T5's table: torch.manual_seed(seed); nn.Embedding(num_buckets, num_heads).weight",
            0,
            minimum=0,
        ),
        kinds.FieldSpec(
            "masked_value",
            "str",
            "the bias where attention is masked: -inf, or min (torch.finfo(dtype).min, as "
            "transformers' eager attention adds it)",
            "-inf",
            choices=MASKED_VALUES,
        ),
    ),
    tensors=(
        kinds.TensorSpec("mask", ("B", "T", "S"), integer=True),
        kinds.TensorSpec("bias", ("B", "T", "S")),
        kinds.TensorSpec("combined", ("B", "H", "T", "S")),
    ),
    shapes=_masks_shapes,
    compute=_masks_compute,
    check=check_bias_lengths,
    meta=_masks_meta,
    blocks=lambda p, ctx: {p["as"]: _blocks(p, ctx)},
    row_elements=lambda p: check_lengths(p["seq_len"], p["key_len"])[1],
    complete=_masks_complete,
    examples=(
        {"seq_len": 6, "kind": "sliding", "window": 3},
        {"seq_len": 5, "attention_mask": [[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]], "as": "bias"},
        {"seq_len": 6, "cu_seqlens": [0, 2, 6]},
        {"seq_len": 4, "as": "combined", "position_bias": "alibi", "num_heads": 2},
    ),
)
"""The masks endpoint kind (see :mod:`posenc.core.kinds`)."""
