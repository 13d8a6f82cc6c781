"""Token embedding plus positional encoding, as the input layer of GPT-2, BERT and Vaswani et al.

``out = F.embedding(ids, token_table) * (sqrt(D) if scale else 1) + positional part``, with the
positional part one of: a learned table looked up at the position ids (GPT-2 ``wpe``, BERT
``position_embeddings``), the sinusoidal table at the position ids (Vaswani et al., 2017, §3.4-3.5,
where the token part is scaled by ``sqrt(D)``), or nothing. For float32 tables the result is
bit-exact to ``wte[ids] + wpe[pos]`` (the reference: transformers ``GPT2Model.forward``). No
dropout. Padded slots (mask 0) are zeros.

Notation used for tensor shapes: ``B`` batch, ``T`` sequence length, ``D`` model dimension,
``V`` vocabulary size, ``P`` table positions.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.absolute.sinusoidal import sinusoidal_table
from posenc.core import kinds
from posenc.core.blocks import TableBlocks, tensor_blocks
from posenc.core.errors import InvalidArgument, TokenOutOfRange
from posenc.core.limits import check_elements
from posenc.core.validate import (
    check_binary_mask,
    check_choice,
    check_int_matrix,
    dtype_name,
    first_true,
)
from posenc.rope import rope_cos_sin
from posenc.rope.llamacpp import llamacpp_rope_tables
from posenc.tokens.position_ids import (
    ADD_SPECIAL_TOKENS_FIELD,
    ATTENTION_MASK_FIELD,
    INPUT_IDS_FIELD,
    PAD_TOKEN_ID_FIELD,
    PADDING_SIDE_FIELD,
    TEXT_EXAMPLE,
    TEXT_FIELD,
    PaddedBatch,
    build_batch,
    check_ids_or_text,
    pad_rows,
    text_ids,
    tokenize_text,
)

if TYPE_CHECKING:
    from posenc.readers.models import EmbeddingModel

Positional = Literal["learned", "sinusoidal", "none"]

_POSITIONALS: tuple[str, ...] = get_args(Positional)

OutputAllocator = Callable[[tuple[int, ...], torch.dtype], "Tensor | None"]
"""``(shape, dtype) -> tensor or None``: an empty C-contiguous CPU tensor of that shape and dtype
for :func:`embed_tokens` to write into, or None for a fresh one. A server passes one to reuse
buffers: a batch is tens of MB, and fresh memory costs its page faults every request."""


def _check_ids(
    x: Tensor, field: str, shape: torch.Size | None = None, *, ints: bool = True
) -> None:
    check_int_matrix(x, field, ints=ints)
    if shape is not None and x.shape != shape:
        raise InvalidArgument(
            f"{field} must have the shape of input_ids {tuple(shape)}, got {tuple(x.shape)}",
            field=field,
        )


def _check_table(table: Tensor, field: str) -> None:
    if table.dim() != 2 or table.shape[0] < 1 or table.shape[1] < 1:
        raise InvalidArgument(
            f"{field} must be a non-empty 2-D table, got shape {tuple(table.shape)}", field=field
        )
    if not table.dtype.is_floating_point:
        raise InvalidArgument(
            f"{field} must be floating point, got dtype {dtype_name(table.dtype)}",
            field=field,
        )


def _common_range_start(pos: Tensor) -> int | None:
    """``s`` when every row of the ``(B, T)`` positions is ``s, s+1, …, s+T-1``, else None."""
    if pos.numel() == 0:
        return None
    start = int(pos[0, 0])
    expected = torch.arange(start, start + pos.shape[1], device=pos.device, dtype=pos.dtype)
    return start if bool((pos == expected).all()) else None


def embed_tokens(  # noqa: PLR0915 (allowed: pyproject.toml)
    input_ids: Tensor,
    *,
    token_table: Tensor,
    positional: Positional = "learned",
    position_table: Tensor | None = None,
    position_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    scale: bool = False,
    sinusoidal_base: float = 10000.0,
    dtype: torch.dtype | None = None,
    scale_value: float | None = None,
    max_elements: int | None = None,
    out: Tensor | None = None,
    allocator: OutputAllocator | None = None,
) -> Tensor:
    """Embed a padded batch of token ids and add the positional encoding.

    The sum is computed in the tables' dtype (float64 when ``dtype`` is float64) and cast once
    at the end, so float32 tables give exactly ``wte[ids] + wpe[pos]``. Ids and positions are
    checked only in real slots (mask 1): padded slots are never looked up, and come out as zeros.

    Args:
        input_ids: ``(B, T)`` integer token ids.
        token_table: ``(V, D)`` token embedding table (GPT-2 ``wte``).
        positional: ``"learned"`` (needs ``position_table``), ``"sinusoidal"`` (interleaved,
            Vaswani et al., computed in float64 and cast to the table dtype) or ``"none"``.
        position_table: ``(P, D)`` learned position table (GPT-2 ``wpe``).
        position_ids: ``(B, T)`` integer positions; default the cumulative count of real tokens
            from 0 (``0 … T-1`` without a mask), pads 0.
        attention_mask: ``(B, T)`` of 0/1 (int, bool or float); default all ones.
        scale: multiply the token part by ``sqrt(D)`` (Vaswani et al., §3.4).
        sinusoidal_base: the wavelength base of the sinusoidal table.
        dtype: the output dtype; ``None`` keeps the tables' dtype.
        scale_value: the multiplier used when ``scale`` (default ``sqrt(D)``), e.g. Gemma's
            ``sqrt(hidden_size)`` already rounded to the table dtype.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).
        out: an optional preallocated ``(B, T, D)`` C-contiguous tensor of the output dtype on
            the token table's device: the tokens are gathered straight into it (no fresh
            buffer to page-fault), and it is returned. A server can reuse one per shape.
        allocator: without ``out``, where a CPU output without a final cast comes from
            (:data:`OutputAllocator`); None: a new tensor.

    Returns:
        ``(B, T, D)`` embeddings of ``dtype``, on the token table's device.

    Raises:
        TokenOutOfRange: a real token id outside ``[0, V)``; ``field`` is ``input_ids[ROW][COL]``
            (the first such slot, row-major).
        InvalidArgument: a real position outside ``[0, P)`` (``field`` ``position_ids[ROW][COL]``),
            mismatched shapes or widths, an unknown ``positional``.
    """
    check_choice("positional", positional, _POSITIONALS)
    _check_table(token_table, "token_table")
    _check_ids(input_ids, "input_ids")
    vocab_size, d_model = token_table.shape
    batch, length = input_ids.shape
    check_elements(
        batch * length * d_model,
        what=f"the embeddings (B={batch}, T={length}, D={d_model})",
        max_elements=max_elements,
    )
    device = token_table.device
    ids = input_ids.to(device=device, dtype=torch.int64)  # (B, T)

    if attention_mask is None:
        real = torch.ones_like(ids, dtype=torch.bool)  # (B, T)
    else:
        _check_ids(attention_mask, "attention_mask", ids.shape, ints=False)
        mask = attention_mask.to(device=device)
        check_binary_mask(mask, "attention_mask")
        real = mask.bool()

    bad = real & ((ids < 0) | (ids >= vocab_size))
    if bool(bad.any()):
        row, col = first_true(bad)
        raise TokenOutOfRange(
            f"token id {int(ids[row, col])} at input_ids[{row}][{col}] is outside "
            f"[0, {vocab_size}) (vocab_size {vocab_size})",
            field=f"input_ids[{row}][{col}]",
        )

    if position_ids is None:
        pos = (torch.cumsum(real.to(torch.int64), dim=1) - 1).clamp_min(0)  # (B, T)
    else:
        _check_ids(position_ids, "position_ids", ids.shape)
        pos = position_ids.to(device=device, dtype=torch.int64)

    if positional == "learned":
        if position_table is None:
            raise InvalidArgument(
                "positional 'learned' needs a position_table, got None", field="position_table"
            )
        _check_table(position_table, "position_table")
        if position_table.shape[1] != d_model:
            raise InvalidArgument(
                f"position_table width must equal the token table's d_model {d_model}, "
                f"got {position_table.shape[1]}",
                field="position_table",
            )
        num_positions = position_table.shape[0]
        bad_pos = real & ((pos < 0) | (pos >= num_positions))
        if bool(bad_pos.any()):
            row, col = first_true(bad_pos)
            raise InvalidArgument(
                f"position {int(pos[row, col])} at position_ids[{row}][{col}] is outside the "
                f"learned position table of {num_positions} positions [0, {num_positions})",
                field=f"position_ids[{row}][{col}]",
            )
        work = torch.promote_types(token_table.dtype, position_table.dtype)
    else:
        if positional == "sinusoidal":
            bad_pos = real & (pos < 0)
            if bool(bad_pos.any()):
                row, col = first_true(bad_pos)
                raise InvalidArgument(
                    f"position {int(pos[row, col])} at position_ids[{row}][{col}] must be >= 0",
                    field=f"position_ids[{row}][{col}]",
                )
        work = token_table.dtype
    if dtype == torch.float64:
        work = torch.float64
    out_dtype = work if dtype is None else dtype

    # Padded slots are looked up at id/position 0 (always valid) and zeroed at the end.
    all_real = bool(real.all())
    safe_ids = ids if all_real else ids.masked_fill(~real, 0)  # (B, T)
    safe_pos = pos if all_real else pos.masked_fill(~real, 0)  # (B, T)

    # One (B, T, D) buffer, gathered into and then updated in place: a batch is tens of MB, and
    # every out-of-place step would allocate (and page-fault) another buffer of that size.
    if out is None and allocator is not None and device.type == "cpu" and out_dtype == work:
        out = allocator((batch, length, d_model), work)
    if out is not None:
        want = (batch, length, d_model)
        if tuple(out.shape) != want or out.dtype != out_dtype or out_dtype != work:
            raise InvalidArgument(
                f"out must be a {want} tensor of dtype {dtype_name(work)} (the working dtype), "
                f"got {tuple(out.shape)} {dtype_name(out.dtype)}",
                field="out",
            )
        if out.device != device or not out.is_contiguous():
            raise InvalidArgument(
                f"out must be C-contiguous on {device}, got {out.device}", field="out"
            )
        if token_table.dtype == work:
            torch.index_select(token_table, 0, safe_ids.reshape(-1), out=out.view(-1, d_model))
        else:
            out.copy_(F.embedding(safe_ids, token_table))
    else:
        out = F.embedding(safe_ids, token_table)  # (B, T, D), a fresh tensor
        if out.dtype != work:
            out = out.to(work)
    if scale:
        out.mul_(math.sqrt(d_model) if scale_value is None else scale_value)
    if positional == "learned" and position_table is not None:  # (None was refused above)
        start = _common_range_start(safe_pos) if all_real else None
        if start is not None:  # every row is start … start+T-1: add one (T, D) slice
            out.add_(position_table[start : start + safe_pos.shape[1]].to(work))
        else:
            out.add_(F.embedding(safe_pos, position_table).to(work))  # (B, T, D)
    elif positional == "sinusoidal" and safe_pos.numel() > 0:
        unique, inverse = torch.unique(safe_pos, return_inverse=True)  # (U,), (B, T)
        table = sinusoidal_table(
            unique, d_model=d_model, base=sinusoidal_base, device=device, dtype=torch.float64
        )  # (U, D)
        out.add_(F.embedding(inverse, table.to(work)))  # (B, T, D)
    if not all_real:
        out.masked_fill_(~real[..., None], 0)
    return out.to(out_dtype)


class TokenPositionEmbedding(nn.Module):
    """The input layer of a transformer: token embedding (× sqrt(D)) plus positional encoding.

    GPT-2 (Radford et al., 2019; transformers ``GPT2Model``: ``wte(ids) + wpe(pos)``), BERT
    without token types and LayerNorm, and Vaswani et al. (sinusoidal, scaled). Built on
    :func:`embed_tokens`; the tables are buffers, no dropout.

    Args:
        token_table: ``(V, D)``.
        position_table: ``(P, D)``, needed for ``positional="learned"``.
        positional: ``"learned"``, ``"sinusoidal"`` or ``"none"``.
        scale: multiply the token part by ``sqrt(D)`` (or ``scale_value``).
        sinusoidal_base: the wavelength base of the sinusoidal table.
        scale_value: the multiplier when ``scale``, e.g. Gemma's ``sqrt(D)`` in the table dtype.
    """

    token_table: Tensor  # (V, D) buffer
    position_table: Tensor | None  # (P, D) buffer, or None

    def __init__(
        self,
        token_table: Tensor,
        position_table: Tensor | None = None,
        *,
        positional: Positional = "learned",
        scale: bool = False,
        sinusoidal_base: float = 10000.0,
        scale_value: float | None = None,
    ) -> None:
        super().__init__()
        check_choice("positional", positional, _POSITIONALS)
        if positional == "learned" and position_table is None:
            raise InvalidArgument(
                "positional 'learned' needs a position_table, got None", field="position_table"
            )
        self.positional: Positional = positional
        self.scale = scale
        self.sinusoidal_base = sinusoidal_base
        self.scale_value = scale_value
        self.register_buffer("token_table", token_table)  # (V, D)
        self.register_buffer("position_table", position_table)  # (P, D) or None

    @classmethod
    def from_model(cls, model: EmbeddingModel) -> TokenPositionEmbedding:
        """The input layer of a loaded :class:`~posenc.readers.models.EmbeddingModel`.

        A RoPE model adds nothing to its token embeddings (its attention rotates by cos/sin), so
        its layer has ``positional="none"``. The model's own multiplier (Gemma) is kept.
        """
        positional = "none" if model.positional == "rope" else model.positional
        return cls(
            model.token_table,
            model.position_table,
            positional=positional,
            scale=model.scale,
            scale_value=model.embed_scale,
        )

    def forward(
        self,
        input_ids: Tensor,
        *,
        position_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        dtype: torch.dtype | None = None,
    ) -> Tensor:
        """Embed ``(B, T)`` token ids; returns ``(B, T, D)`` (see :func:`embed_tokens`)."""
        return embed_tokens(
            input_ids,
            token_table=self.token_table,
            positional=self.positional,
            position_table=self.position_table,
            position_ids=position_ids,
            attention_mask=attention_mask,
            scale=self.scale,
            sinusoidal_base=self.sinusoidal_base,
            dtype=dtype,
            scale_value=self.scale_value,
        )


# ---------------------------------------------------------------------------------------------
# The embed endpoint kind (posenc.core.kinds): a loaded model's input layer over a token batch
# ---------------------------------------------------------------------------------------------


def _embed_check(p: Mapping[str, Any]) -> None:
    """Exactly one of ``input_ids`` and ``text``; ``position_ids``, when given, has the shape of
    ``input_ids`` (ragged rows row by row)."""
    check_ids_or_text(p)
    _positions_fit(p)


def _positions_fit(p: Mapping[str, Any]) -> None:
    ids, pos = p.get("input_ids"), p.get("position_ids")
    if ids is None or pos is None:
        return
    if isinstance(ids, Tensor) or isinstance(pos, Tensor):
        if kinds.batch_shape(ids) != kinds.batch_shape(pos):
            raise InvalidArgument(
                f"position_ids must have the shape of input_ids {kinds.batch_shape(ids)}, got "
                f"{kinds.batch_shape(pos)}",
                field="position_ids",
            )
        return
    if len(pos) != len(ids):
        raise InvalidArgument(
            f"position_ids must have the {len(ids)} rows of input_ids, got {len(pos)}",
            field="position_ids",
        )
    for r, (row, positions) in enumerate(zip(ids, pos, strict=True)):
        if len(row) != len(positions):
            raise InvalidArgument(
                f"position_ids[{r}] must have the {len(row)} entries of input_ids[{r}], got "
                f"{len(positions)}",
                field=f"position_ids[{r}]",
            )


def _embed_complete(p: dict[str, Any], models: Callable[[str | None], Any]) -> dict[str, Any]:
    """Text tokenized by the model's tokenizer; the model's own positional encoding and scaling
    unless given; what it cannot do refused."""
    model = models(p["model"])
    if model.vision is not None:
        raise InvalidArgument(
            f"model {model.name!r} is a vision model ({model.model_type}): it has no token "
            "embeddings to embed; its position table is served by POST "
            "/v1/encodings/vision-learned with model",
            field="model",
        )
    if p["text"] is not None:
        p = tokenize_text(p, model, elements_per_token=model.d_model + 3)
        _positions_fit(p)  # explicit positions against the tokenized rows
    positional = p["positional"] if p["positional"] is not None else model.positional
    if positional == "learned" and model.position_table is None:
        raise InvalidArgument(
            f"positional 'learned' needs a position table, and model {model.name!r} has none; "
            + _what_fits(model),
            field="positional",
        )
    if positional == "rope" and model.rope is None:
        raise InvalidArgument(
            f"positional 'rope' needs a RoPE model, and model {model.name!r} is "
            f"{model.position_scheme}; " + _what_fits(model),
            field="positional",
        )
    rope = model.rope if positional == "rope" else None
    return {
        **p,
        "model": model.name,
        "positional": positional,
        "scale": p["scale"] if p["scale"] is not None else model.scale,
        "vocab_size": model.vocab_size,
        "d_model": model.d_model,
        "rope": None if rope is None else rope.as_dict(),
    }


def _what_fits(model: Any) -> str:
    """The positional values that fit ``model``: its own, and ``none`` (the token part alone).
    Never ``sinusoidal`` for a model whose positions are not a sinusoidal table: adding one to
    a RoPE or ALiBi model's embeddings is no input that model ever sees."""
    own = model.positional
    fits = [own] + (["none"] if own != "none" else [])
    return "use " + " or ".join(repr(f) for f in fits) + f" (its own is {own!r})"


def _embed_shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    b, t = kinds.batch_shape(p["input_ids"])
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings": (b, t, p["d_model"]),
        "position_ids": (b, t),
        "attention_mask": (b, t),
    }
    if p["rope"] is not None:  # cos/sin at the position ids
        shapes["cos"] = shapes["sin"] = (b, t, p["rope"]["rotary_dim"])
    if p.get("text") is not None:
        shapes["input_ids"] = (b, t)
    return shapes


def _embed_batch(p: Mapping[str, Any], ctx: kinds.Context) -> tuple[Any, PaddedBatch, Tensor]:
    """The model, the padded batch and the position ids ``(B, T)`` of an embed request."""
    model = ctx.models(p["model"])
    batch = build_batch(
        p["input_ids"],
        pad_token_id=p["pad_token_id"],
        attention_mask=p["attention_mask"],
        padding_side=p["padding_side"],
        device=ctx.device,
    )
    given = p["position_ids"]
    if isinstance(given, Tensor):
        position_ids = given.to(ctx.device)  # (B, T)
    elif given is not None:
        position_ids = pad_rows(given, padding_side=p["padding_side"])[0].to(ctx.device)
    else:
        position_ids = batch.position_ids  # (B, T)
    return model, batch, position_ids


def _embed_tokens_of(
    p: Mapping[str, Any], ctx: kinds.Context, model: Any, columns: slice = slice(None)
) -> Callable[..., Tensor]:
    """``embed_tokens`` with the request's settings and ``model``'s tables (their first
    ``columns``): the caller gives ids, positions and mask."""
    positional = p["positional"]
    table = model.position_table
    return functools.partial(
        embed_tokens,
        token_table=model.token_table[:, columns],
        positional="none" if positional == "rope" else positional,  # rope: cos/sin apart
        position_table=None if table is None else table[:, columns],
        scale=p["scale"],
        dtype=ctx.dtype,
        scale_value=model.embed_scale,
    )


def _rope_at(p: Mapping[str, Any], ctx: kinds.Context, model: Any, position_ids: Tensor) -> Any:
    """``cos``, ``sin`` ``(B, T, R)`` at the position ids, from max(positions) + 1 as the model's
    own rotary embedding (dynamic scaling depends on it): the whole batch's at once."""
    rope = model.rope
    unique, inverse = torch.unique(position_ids, return_inverse=True)  # (U,), (B, T)
    index = inverse.to(ctx.device)
    if rope.llamacpp is not None:  # a GGUF's scaled rope: llama.cpp's rule, float64
        cos, sin = llamacpp_rope_tables(unique.cpu(), rope.llamacpp)  # (U, R/2) each
        if rope.layout == "interleaved":
            cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)  # (U, R)
        else:
            cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (U, R)
        cos, sin = (t.to(device=ctx.device, dtype=ctx.dtype) for t in (cos, sin))
        return cos[index], sin[index]  # (B, T, R) each
    tables = rope_cos_sin(
        unique.cpu(),
        rotary_dim=rope.rotary_dim,
        base=rope.base,
        layout=rope.layout,
        scaling=rope.scaling,
        device=ctx.device,
        dtype=ctx.dtype,
    )  # cos, sin (U, R)
    return tables.cos[index], tables.sin[index]  # (B, T, R) each


def _embed_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    model, batch, position_ids = _embed_batch(p, ctx)
    out = {
        "embeddings": _embed_tokens_of(p, ctx, model)(
            batch.input_ids,
            position_ids=position_ids,
            attention_mask=batch.attention_mask,
            allocator=ctx.allocator,
        ),  # (B, T, D)
        "position_ids": position_ids,
        "attention_mask": batch.attention_mask,
    }
    if p["rope"] is not None:
        out["cos"], out["sin"] = _rope_at(p, ctx, model, position_ids)  # (B, T, R)
    if p.get("text") is not None:
        out["input_ids"] = text_ids(p, ctx.device)  # (B, T)
    return out


def _working_dtype(p: Mapping[str, Any], ctx: kinds.Context, model: Any) -> torch.dtype | None:
    """The dtype :func:`embed_tokens` computes the request's embeddings in when that is also
    the output's (so it can write into an ``out`` of it), else None."""
    work = model.token_table.dtype
    if p["positional"] == "learned" and model.position_table is not None:
        work = torch.promote_types(work, model.position_table.dtype)
    if ctx.dtype == torch.float64:
        work = torch.float64
    return work if ctx.dtype in (None, work) else None


def _embed_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, TableBlocks]:
    """The embed bundle as row blocks, for a batch over the service's element limit: the
    embeddings ``(B, T, D)`` are ``B·T`` rows of ``D``, each block a run of tokens embedded as
    the whole batch embeds them (gather, scale, add the position part, zero the pads: every
    step is per token, and sinusoidal rows are the same whatever rows are computed with them),
    so the bytes are those of the whole answer. The small ``(B, T)`` tensors, and ``cos`` /
    ``sin`` (taken from the whole batch's positions), are made whole. Every id and position is
    checked before the first block (on two columns of the tables), so a bad one is a 422, not a
    broken stream."""
    model, batch, position_ids = _embed_batch(p, ctx)
    _embed_tokens_of(p, ctx, model, slice(0, 2))(
        batch.input_ids, position_ids=position_ids, attention_mask=batch.attention_mask
    )  # (B, T, 2): the checks of the whole batch, at 2/D of the cost (sinusoidal: D even)
    embed = _embed_tokens_of(p, ctx, model)
    work = _working_dtype(p, ctx, model)  # a block of it is gathered straight into the body
    device = model.token_table.device
    b, t = batch.input_ids.shape
    ids, pos = batch.input_ids.reshape(1, -1), position_ids.reshape(1, -1)  # (1, B·T)
    mask = batch.attention_mask.reshape(1, -1)  # (1, B·T)

    def fill(start: int, stop: int, out: Tensor) -> None:
        rows = slice(start, stop)
        block = {"position_ids": pos[:, rows], "attention_mask": mask[:, rows]}
        direct = out.dtype == work and out.device == device and out.is_contiguous()
        if direct:  # no block tensor, no copy
            embed(ids[:, rows], **block, out=out.view(1, stop - start, -1))  # (1, N, D)
        else:
            out.copy_(embed(ids[:, rows], **block).view(stop - start, -1))  # (N, D)

    tables = {
        "embeddings": TableBlocks("embeddings", (b, t, model.d_model), ctx.dtype, fill, ctx.device),
        "position_ids": tensor_blocks("position_ids", position_ids),
        "attention_mask": tensor_blocks("attention_mask", batch.attention_mask),
    }
    if p["rope"] is not None:
        cos, sin = _rope_at(p, ctx, model, position_ids)
        tables["cos"], tables["sin"] = tensor_blocks("cos", cos), tensor_blocks("sin", sin)
    if p.get("text") is not None:
        tables["input_ids"] = tensor_blocks("input_ids", text_ids(p, ctx.device))
    return tables


def _embed_row_elements(p: Mapping[str, Any]) -> int:
    """The widest row of the bundle: ``D`` of the embeddings, ``T`` of the ``(B, T)`` tensors."""
    return max(int(p["d_model"]), kinds.batch_shape(p["input_ids"])[1])


def _embed_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    b, t = kinds.batch_shape(p["input_ids"])
    meta = {
        "kind": "embed",
        **{k: p[k] for k in ("model", "positional", "scale", "vocab_size", "d_model")},
        "batch_size": b,
        "seq_len": t,
        "padding_side": p["padding_side"],
        "dtype": p["dtype"],
    }
    if p["rope"] is not None:
        meta["rope"] = p["rope"]
    return meta


EMBED: kinds.Kind = kinds.Kind(
    name="embed",
    path="/v1/embed",
    tag="tokens",
    summary="Embed token batches",
    description="Token embedding (× √D when `scale`) plus the positional encoding, for a "
    "ragged batch; padded slots are zeros, and an empty row is a row of padding. A token id "
    "outside [0, vocab_size) is a 422 naming `input_ids[ROW][COL]`. For a RoPE model "
    "(positional `rope`, its default) also `cos` and `sin` at the position ids, from the "
    "rope settings of its config. `text` in place of `input_ids`: the rows are the model's "
    "tokenizer's ids (the same result as sending them), and the response adds them as "
    "`input_ids`.",
    fields=(
        dataclasses.replace(INPUT_IDS_FIELD, default=None, example=[[1, 2, 3], [4, 5]]),
        kinds.FieldSpec("model", "str", "name from GET /v1/models (default: the default)", None),
        TEXT_FIELD,
        ADD_SPECIAL_TOKENS_FIELD,
        ATTENTION_MASK_FIELD,
        PAD_TOKEN_ID_FIELD,
        PADDING_SIDE_FIELD,
        kinds.FieldSpec(
            "positional",
            "str",
            "learned, sinusoidal, none or rope (default: the model's own)",
            None,
            choices=(*_POSITIONALS, "rope"),
        ),
        kinds.FieldSpec(
            "scale",
            "bool",
            "multiply token embeddings by sqrt(D) (default: the model's own)",
            None,
        ),
        kinds.FieldSpec(
            "position_ids",
            "int_rows",
            "explicit positions, the shape of input_ids",
            None,
            minimum=0,
        ),
    ),
    tensors=(
        kinds.TensorSpec("embeddings", ("B", "T", "D")),
        kinds.TensorSpec("position_ids", ("B", "T"), integer=True),
        kinds.TensorSpec("attention_mask", ("B", "T"), integer=True),
        kinds.TensorSpec("cos", ("B", "T", "R")),
        kinds.TensorSpec("sin", ("B", "T", "R")),
        kinds.TensorSpec("input_ids", ("B", "T"), integer=True),
    ),
    shapes=_embed_shapes,
    compute=_embed_compute,
    check=_embed_check,
    meta=_embed_meta,
    get=False,
    complete=_embed_complete,
    examples=({"input_ids": [[1, 2, 3], [4, 5]]}, TEXT_EXAMPLE),
    model_field="model",
    binary_fields=("input_ids", "attention_mask", "position_ids"),
    cache_tensors=False,
    blocks=_embed_blocks,
    row_elements=_embed_row_elements,
)
"""The embed endpoint kind (see :mod:`posenc.core.kinds`)."""
