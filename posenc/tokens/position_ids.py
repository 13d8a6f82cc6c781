"""Padding ragged token batches and numbering their positions.

Real tokens count up from ``start`` in order, whatever the padding side (the cumulative-sum rule
of fairseq ``utils.make_positions`` and Hugging Face transformers
``RobertaEmbeddings.create_position_ids_from_input_ids``); padded slots get ``pad_position``.
RoBERTa is ``start = padding_idx + 1, pad_position = padding_idx``; GPT-2 and BERT are
``start = 0``.

Notation used for tensor shapes: ``B`` batch, ``T`` sequence length.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
from torch import Tensor

from posenc.core import kinds, slices
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.core.validate import (
    check_binary_mask,
    check_choice,
    check_int_matrix,
    device_or_cpu,
    dtype_name,
)
from posenc.tokens.tokenizer import tokenizer_of

PaddingSide = Literal["right", "left"]

PADDING_SIDES: tuple[str, ...] = get_args(PaddingSide)

Rows = Sequence[Sequence[int]]


@dataclass(frozen=True)
class PaddedBatch:
    """A padded batch of token ids with its mask and position ids.

    Attributes:
        input_ids: ``(B, T)`` int64; short rows padded with ``pad_token_id`` (0 when None).
        attention_mask: ``(B, T)`` int64; 1 for real tokens, 0 for padding.
        position_ids: ``(B, T)`` int64; real tokens count ``start, start+1, …``; pads get
            ``pad_position``.
    """

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor


def _row_lengths(rows: Rows, field: str) -> list[int]:
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
        raise InvalidArgument(
            f"{field} must be a list of lists of ints, got {type(rows).__name__}", field=field
        )
    if len(rows) == 0:
        raise InvalidArgument(f"{field} must have at least 1 row, got 0", field=field)
    lengths = []
    for b, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise InvalidArgument(
                f"{field}[{b}] must be a list of ints, got {type(row).__name__}",
                field=f"{field}[{b}]",
            )
        lengths.append(len(row))
    return lengths


def _flat_values(rows: Rows, lengths: np.ndarray, field: str) -> Tensor:
    """The values of ``rows`` (their ``lengths``), row-major, ``(N,)``: int64 for plain ints,
    else as ``torch.tensor`` reads them (a float dtype, or its error), a slice of at most
    :data:`~posenc.core.slices.SLICE_ITEMS` values at a time (issue 39)."""
    pieces: list[Tensor] = []
    for run in slices.runs(rows, lengths):
        try:  # plain ints: int64 at a quarter of torch.tensor's time
            fast = np.array(run)
        except (TypeError, ValueError, OverflowError):
            fast = None
        if fast is not None and fast.dtype == np.int64 and fast.ndim == 1:
            pieces.append(torch.from_numpy(fast))
            continue
        try:  # anything else as torch reads it (its dtype, or its error, checked below)
            pieces.append(torch.tensor(run))
        except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
            raise InvalidArgument(
                f"{field} must hold ints in int64 range: {exc}", field=field
            ) from exc
    if not pieces:
        return torch.zeros(0, dtype=torch.int64)
    if len({(piece.dtype, piece.dim()) for piece in pieces}) == 1:
        return torch.cat(pieces) if len(pieces) > 1 else pieces[0]
    for piece in pieces:  # what one torch.tensor of them all would say of a float or nesting
        if piece.dim() != 1 or piece.dtype.is_floating_point or piece.dtype.is_complex:
            return piece
    return torch.cat([piece.to(torch.int64) for piece in pieces])  # ints with bools


def _pad(
    rows: Rows,
    *,
    pad_value: int,
    padding_side: str,
    field: str,
    max_elements: int | None = None,
) -> tuple[Tensor, Tensor]:
    """``pad_rows`` with the name of the argument used in error messages."""
    check_choice("padding_side", padding_side, PADDING_SIDES)
    row_lengths = _row_lengths(rows, field)
    longest = slices.largest(row_lengths)
    check_elements(
        2 * len(row_lengths) * longest,
        what=f"the padded {field} and its mask (2 x B={len(row_lengths)} x T={longest})",
        max_elements=max_elements,
        field=field,
    )
    lengths = slices.nested_tensor(row_lengths, torch.int64)  # (B,)
    flat = _flat_values(rows, lengths.numpy(), field)
    if flat.numel() == 0:
        flat = flat.to(torch.int64)
    if flat.dim() != 1:
        raise InvalidArgument(
            f"{field} must be a list of lists of ints, got {flat.dim() + 1} levels of nesting",
            field=field,
        )
    if flat.dtype.is_floating_point or flat.dtype.is_complex:
        raise InvalidArgument(
            f"{field} must hold ints, got dtype {dtype_name(flat.dtype)}",
            field=field,
        )
    batch, seq_len = lengths.numel(), int(lengths.max())
    cols = torch.arange(seq_len)[None, :]  # (1, T)
    if padding_side == "right":
        slots = cols < lengths[:, None]  # (B, T)
    else:
        slots = cols >= (seq_len - lengths)[:, None]  # (B, T)
    ids = torch.full((batch, seq_len), pad_value, dtype=torch.int64)
    # row-major fill: each row's values in order. masked_scatter_, not ids[slots] = flat: the
    # same values, and a boolean index_put_ took 20 ms for 32 x 512 ids (masked_scatter_ 0.03)
    ids.masked_scatter_(slots, flat.to(torch.int64))
    return ids, slots.to(torch.int64)


def pad_rows(
    rows: Rows,
    *,
    pad_value: int = 0,
    padding_side: PaddingSide = "right",
    max_elements: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Pad a ragged list of rows into a rectangle.

    Args:
        rows: ``B`` lists of ints, lengths may differ (``T`` is the longest).
        pad_value: value written into the padded slots.
        padding_side: ``"right"`` pads after a short row's end, ``"left"`` before its start.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(ids, slots)``: ``(B, T)`` int64 values and ``(B, T)`` int64 mask, 1 where the row had
        a value.

    Raises:
        InvalidArgument: not a list of lists of ints, no rows, or an unknown padding side.
    """
    return _pad(
        rows,
        pad_value=pad_value,
        padding_side=padding_side,
        field="rows",
        max_elements=max_elements,
    )


def position_ids_from_mask(
    attention_mask: Tensor, *, start: int = 0, pad_position: int = 0
) -> Tensor:
    """Position ids by the cumulative-sum rule.

    Real tokens (mask 1) count ``start, start+1, …`` in order along each row, whatever the
    padding side; padded slots (mask 0) get ``pad_position``. As fairseq
    ``utils.make_positions`` / transformers ``create_position_ids_from_input_ids`` with
    ``start = padding_idx + 1`` and ``pad_position = padding_idx``.

    Args:
        attention_mask: ``(B, T)`` of 0/1 (int or bool).
        start: position of each row's first real token.
        pad_position: the id given to padded slots.

    Returns:
        ``(B, T)`` int64 on the mask's device.

    Raises:
        InvalidArgument: the mask is not 2-D or holds values other than 0 and 1.
    """
    if attention_mask.dim() != 2:
        raise InvalidArgument(
            f"attention_mask must be 2-D (B, T), got shape {tuple(attention_mask.shape)}",
            field="attention_mask",
        )
    mask = attention_mask.to(torch.int64)
    check_binary_mask(mask, "attention_mask")
    counts = torch.cumsum(mask, dim=1)  # (B, T): real tokens so far, inclusive
    return torch.where(mask.bool(), counts - 1 + start, torch.full_like(mask, pad_position))


def _as_int_matrix(x: Tensor, field: str) -> Tensor:
    check_int_matrix(x, field)
    return x.to(device="cpu", dtype=torch.int64)


def build_batch(
    input_ids: Rows | Tensor,
    *,
    pad_token_id: int | None = None,
    attention_mask: Rows | Tensor | None = None,
    padding_side: PaddingSide = "right",
    start: int = 0,
    pad_position: int = 0,
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> PaddedBatch:
    """Pad a batch and work out its attention mask and position ids.

    Padding: ``attention_mask`` wins (same ragged shape as ``input_ids``, padded the same way);
    else tokens equal to ``pad_token_id`` are padding; else only the slots beyond a short row's
    end are.

    Args:
        input_ids: ``B`` ragged lists of ints, or a ``(B, T)`` integer tensor.
        pad_token_id: the padding token; short rows are padded with it (0 when None).
        attention_mask: optional, 1 for real tokens and 0 for padding, shaped as ``input_ids``.
        padding_side: ``"right"`` or ``"left"``: where short rows are padded.
        start: position of each row's first real token (RoBERTa: ``padding_idx + 1``).
        pad_position: position id of padded slots (RoBERTa: ``padding_idx``).
        device: where the tensors go; ``None`` means the CPU.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        :class:`PaddedBatch` of ``(B, T)`` int64 tensors.

    Raises:
        InvalidArgument: bad ids, a mask row whose length differs from its ``input_ids`` row
            (``field`` ``attention_mask[ROW]``), a mask value other than 0/1.
    """
    check_choice("padding_side", padding_side, PADDING_SIDES)
    pad_value = 0 if pad_token_id is None else pad_token_id
    if isinstance(input_ids, Tensor):
        ids = _as_int_matrix(input_ids, "input_ids")
        slots = torch.ones_like(ids)
        lengths = [ids.shape[1]] * ids.shape[0]
    else:
        lengths = _row_lengths(input_ids, "input_ids")
        longest = slices.largest(lengths)
        check_elements(
            3 * len(lengths) * longest,
            what=f"the batch (3 tensors of B={len(lengths)} x T={longest})",
            max_elements=max_elements,
            field="input_ids",
        )
        ids, slots = _pad(
            input_ids, pad_value=pad_value, padding_side=padding_side, field="input_ids"
        )

    if attention_mask is not None:
        if isinstance(attention_mask, Tensor):
            mask_t = _as_int_matrix(attention_mask, "attention_mask")
            mask_lengths = [mask_t.shape[1]] * mask_t.shape[0]
        else:
            mask_lengths = _row_lengths(attention_mask, "attention_mask")
        if len(mask_lengths) != len(lengths):
            raise InvalidArgument(
                f"attention_mask must have as many rows as input_ids ({len(lengths)}), "
                f"got {len(mask_lengths)}",
                field="attention_mask",
            )
        for b, (n_ids, n_mask) in enumerate(zip(lengths, mask_lengths, strict=True)):
            if n_ids != n_mask:
                raise InvalidArgument(
                    f"attention_mask[{b}] must have the length of input_ids[{b}] ({n_ids}), "
                    f"got {n_mask}",
                    field=f"attention_mask[{b}]",
                )
        if isinstance(attention_mask, Tensor):
            mask = mask_t
        else:
            mask, _ = _pad(
                attention_mask, pad_value=0, padding_side=padding_side, field="attention_mask"
            )
        check_binary_mask(mask, "attention_mask")
        mask = mask * slots
    elif pad_token_id is not None:
        mask = (ids != pad_token_id).to(torch.int64) * slots
    else:
        mask = slots

    positions = position_ids_from_mask(mask, start=start, pad_position=pad_position)
    dev = device_or_cpu(device)
    return PaddedBatch(
        input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=positions.to(dev)
    )


# ---------------------------------------------------------------------------------------------
# The position-ids endpoint kind (posenc.core.kinds), and the token fields other kinds share
# ---------------------------------------------------------------------------------------------

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def check_cu_seqlens(
    cu_seqlens: Sequence[int], total: int, *, field: str = "cu_seqlens"
) -> list[int]:
    """``cu_seqlens`` as flash-attn's varlen calls take them: ``0 = c_0 < c_1 < … < c_n = total``.

    Returns:
        the boundaries as a list of ints.

    Raises:
        InvalidArgument: not starting at 0, not ending at ``total``, or not increasing (an
            empty document), naming the first bad entry.
    """
    cu = [int(c) for c in cu_seqlens]
    if len(cu) < 2 or cu[0] != 0:
        raise InvalidArgument(
            f"{field} must start at 0 and hold at least two boundaries, got {cu[:8]}",
            field=field,
        )
    for i in range(1, len(cu)):
        if cu[i] <= cu[i - 1]:
            raise InvalidArgument(
                f"{field} must increase (every document holds a token): {field}[{i}] = "
                f"{cu[i]} after {cu[i - 1]}",
                field=f"{field}[{i}]",
            )
    if cu[-1] != total:
        raise InvalidArgument(
            f"{field} must end at the sequence length {total}, got {cu[-1]}",
            field=f"{field}[{len(cu) - 1}]",
        )
    return cu


def max_seqlen(cu_seqlens: Sequence[int]) -> int:
    """The longest document of ``cu_seqlens`` (flash-attn's ``max_seqlen``)."""
    return max(b - a for a, b in itertools.pairwise(cu_seqlens))


def packed_position_ids(
    cu_seqlens: Sequence[int], *, start: int = 0, device: str | torch.device | None = None
) -> Tensor:
    """``(T,)`` int64 position ids of documents packed in one row: each document counts from
    ``start`` again, so the row equals its documents numbered one by one.

    ``[0, 2, 5]`` -> ``[0, 1, 0, 1, 2]``.
    """
    cu = torch.tensor(list(cu_seqlens), dtype=torch.int64)
    lengths = cu[1:] - cu[:-1]
    first = torch.repeat_interleave(cu[:-1], lengths)  # (T,) each token's document start
    return (torch.arange(int(cu[-1])) - first + start).to(device_or_cpu(device))


def packed_row(p: Mapping[str, Any], length: int) -> list[int]:
    """A kind's checked ``cu_seqlens`` for one packed row of ``length`` tokens: one row, no
    padding (``attention_mask`` or ``pad_token_id`` would say where it is)."""
    rows = p["input_ids"]
    batch = kinds.batch_shape(rows)[0]
    if batch != 1:
        raise InvalidArgument(
            f"cu_seqlens packs documents into one row; input_ids has {batch} rows",
            field="cu_seqlens",
        )
    for name in ("attention_mask", "pad_token_id"):
        if p.get(name) is not None:
            raise InvalidArgument(
                f"cu_seqlens and {name} together: a packed row has no padding", field=name
            )
    return check_cu_seqlens(p["cu_seqlens"], length)


CU_SEQLENS_TENSOR = kinds.TensorSpec("cu_seqlens", ("D+1",), integer=True)
"""The documents' boundaries, answered beside packed ids (``D`` documents)."""


def with_cu_seqlens(p: Mapping[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """``shapes`` plus the ``(D + 1,)`` ``cu_seqlens`` of a packed request."""
    if p.get("cu_seqlens") is not None:
        shapes["cu_seqlens"] = (len(p["cu_seqlens"]),)
    return shapes


CU_SEQLENS_FIELD = kinds.FieldSpec(
    "cu_seqlens",
    "ints",
    "documents packed in the one row of input_ids: 0 < … < T (flash-attn's varlen "
    "cu_seqlens); positions restart at each document, as if each were sent alone",
    None,
    minimum=0,
)


INPUT_IDS_FIELD = kinds.FieldSpec(
    "input_ids",
    "int_rows",
    "B rows of token ids (ragged allowed; an empty row is a row of padding)",
    minimum=_INT64_MIN,
    maximum=_INT64_MAX,
    example=[[5, 6, 7], [8, 9]],
)
ATTENTION_MASK_FIELD = kinds.FieldSpec(
    "attention_mask",
    "int_rows",
    "0/1, the shape of input_ids; wins over pad_token_id",
    None,
    minimum=0,
    maximum=1,
)
PAD_TOKEN_ID_FIELD = kinds.FieldSpec(
    "pad_token_id",
    "int",
    "tokens equal to it are padding",
    None,
    minimum=_INT64_MIN,
    maximum=_INT64_MAX,
)
PADDING_SIDE_FIELD = kinds.FieldSpec(
    "padding_side", "str", "where short rows are padded", "right", choices=PADDING_SIDES
)
TEXT_FIELD = kinds.FieldSpec(
    "text",
    "strs",
    "texts (a string is one row), in place of input_ids (exactly one of the two): the model's "
    "tokenizer gives the rows (encode_batch), padded as ragged input_ids are; the response "
    "adds input_ids (B, T)",
    None,
)
TEXT_EXAMPLE = {"text": ["Hello world", "Positions count from zero."]}
ADD_SPECIAL_TOKENS_FIELD = kinds.FieldSpec(
    "add_special_tokens",
    "bool",
    "with text: add the tokenizer's special tokens (its post-processor); ignored with input_ids",
    True,
)
TEXT_MODEL_FIELD = kinds.FieldSpec(
    "model",
    "str",
    "name from GET /v1/models whose tokenizer reads text (default: the default)",
    None,
)


def check_ids_or_text(p: Mapping[str, Any]) -> None:
    """Exactly one of ``input_ids`` and ``text``."""
    has_ids, has_text = p.get("input_ids") is not None, p.get("text") is not None
    if has_ids == has_text:
        raise InvalidArgument(
            "give exactly one of input_ids and text, got " + ("both" if has_ids else "neither"),
            field="text" if has_ids else "input_ids",
        )


def tokenize_text(p: dict[str, Any], model: Any, elements_per_token: int = 3) -> dict[str, Any]:
    """The fields with ``text`` read by ``model``'s tokenizer: ``input_ids`` its ragged rows,
    ``text_pad`` what pads the response's ``input_ids`` (the request's ``pad_token_id``, else
    the model's, else 0). Fields without text come back as they are. ``elements_per_token``:
    the fewest output elements each token makes (:meth:`posenc.tokens.tokenizer.TextTokenizer.ids`
    stops early under a limit)."""
    if p.get("text") is None:
        return p
    rows = tokenizer_of(model).ids(
        p["text"], add_special_tokens=p["add_special_tokens"], elements_per_token=elements_per_token
    )
    pad = p["pad_token_id"] if p["pad_token_id"] is not None else model.pad_token_id
    return {**p, "input_ids": rows, "text_pad": 0 if pad is None else pad}


def text_ids(p: Mapping[str, Any], device: torch.device) -> Tensor:
    """The response's ``input_ids`` (B, T) of a text request: the rows padded as the batch is."""
    ids, _ = _pad(
        p["input_ids"], pad_value=p["text_pad"], padding_side=p["padding_side"], field="input_ids"
    )
    return ids.to(device)


def packed_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    """``cu_seqlens`` and ``max_seqlen`` of a packed request for its meta (nothing unpacked)."""
    if p.get("cu_seqlens") is None:
        return {}
    cu = list(p["cu_seqlens"])
    return {"cu_seqlens": cu, "max_seqlen": max_seqlen(cu)}


def _with_text_ids(p: Mapping[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """``shapes`` plus the (B, T) ``input_ids`` of a text request."""
    if p.get("text") is not None:
        shapes["input_ids"] = kinds.batch_shape(p["input_ids"])
    return shapes


def _position_ids_complete(
    p: dict[str, Any], models: Callable[[str | None], Any]
) -> dict[str, Any]:
    """A named model is checked; text is tokenized by its tokenizer."""
    if p["model"] is None and p["text"] is None:
        return p  # ids alone need no model (the library's lookup would build one)
    model = models(p["model"])
    return tokenize_text({**p, "model": model.name}, model)


def _position_ids_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    batch = build_batch(
        p["input_ids"],
        pad_token_id=p["pad_token_id"],
        attention_mask=p["attention_mask"],
        padding_side=p["padding_side"],
        start=p["start"],
        pad_position=p["pad_position"],
        device=ctx.device,
    )
    out = {"position_ids": batch.position_ids, "attention_mask": batch.attention_mask}
    if p["cu_seqlens"] is not None:
        cu = packed_row(p, batch.input_ids.shape[1])
        out["position_ids"] = packed_position_ids(cu, start=p["start"], device=ctx.device)[None]
        out["cu_seqlens"] = torch.tensor(cu, dtype=torch.int64, device=ctx.device)
    if p.get("text") is not None:
        out["input_ids"] = text_ids(p, ctx.device)
    return out


POSITION_IDS: kinds.Kind = kinds.Kind(
    name="position_ids",
    path="/v1/position-ids",
    tag="tokens",
    summary="Position ids of a padded batch",
    description="Pads a ragged batch and numbers its real tokens from `start` in order; "
    "padded slots get `pad_position`. Padding: `attention_mask` wins; else tokens equal to "
    "`pad_token_id`; else the slots beyond a short row's end. An empty row is a row of "
    "padding. `text` in place of `input_ids`: the rows are the model's tokenizer's ids, and "
    "the response adds them as `input_ids`. `cu_seqlens` packs documents into the one row: "
    "positions restart at each, and `meta` gives `cu_seqlens` and `max_seqlen`.",
    fields=(
        dataclasses.replace(INPUT_IDS_FIELD, default=None),
        TEXT_FIELD,
        TEXT_MODEL_FIELD,
        ADD_SPECIAL_TOKENS_FIELD,
        dataclasses.replace(PAD_TOKEN_ID_FIELD, example=0),
        ATTENTION_MASK_FIELD,
        PADDING_SIDE_FIELD,
        kinds.FieldSpec("start", "int", "the first real token's position", 0, minimum=0),
        kinds.FieldSpec(
            "pad_position",
            "int",
            "the position id given to padded slots",
            0,
            minimum=_INT64_MIN,
            maximum=_INT64_MAX,
        ),
        CU_SEQLENS_FIELD,
    ),
    tensors=(
        kinds.TensorSpec("position_ids", ("B", "T"), integer=True),
        kinds.TensorSpec("attention_mask", ("B", "T"), integer=True),
        kinds.TensorSpec("input_ids", ("B", "T"), integer=True),
        CU_SEQLENS_TENSOR,
    ),
    shapes=lambda p: with_cu_seqlens(
        p,
        _with_text_ids(
            p,
            dict.fromkeys(("position_ids", "attention_mask"), kinds.batch_shape(p["input_ids"])),
        ),
    ),
    compute=_position_ids_compute,
    check=check_ids_or_text,
    complete=_position_ids_complete,
    examples=({"input_ids": [[5, 6, 7], [8, 9]], "pad_token_id": 0}, TEXT_EXAMPLE),
    model_field="model",
    meta=lambda p: {
        "kind": "position_ids",
        **dict(zip(("batch_size", "seq_len"), kinds.batch_shape(p["input_ids"]), strict=True)),
        **{k: p[k] for k in ("padding_side", "start", "pad_position", "pad_token_id")},
        **packed_meta(p),
    },
    get=False,
    binary_fields=("input_ids", "attention_mask"),
    cache_tensors=False,
)
"""The position-ids endpoint kind (see :mod:`posenc.core.kinds`)."""
