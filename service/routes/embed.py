"""``POST /v1/embed``: token embeddings plus positional encoding for a ragged batch, from a JSON
body or token ids sent as npy / safetensors (``service.bodies``)."""

from __future__ import annotations

from typing import Any

import torch
from fastapi import APIRouter

from posenc import resolve_dtype
from posenc.embedding import embed_tokens
from posenc.errors import InvalidArgument
from posenc.position_ids import build_batch, pad_rows
from posenc.rope import rope_cos_sin
from service.bodies import TokenTensors, add_token_route
from service.formats import Bundle
from service.query import Source
from service.responding import Plan
from service.schemas import EmbedRequest
from service.state import ServiceState

_TENSOR_FIELDS = {"input_ids", "attention_mask", "position_ids"}

router = APIRouter(prefix="/v1", tags=["tokens"])


def embed_plan(
    req: EmbedRequest, state: ServiceState, source: Source, tensors: TokenTensors | None = None
) -> Plan:
    """The plan of one request; ``tensors`` (a binary body) replace the JSON rows when given."""
    model = state.model(req.model)
    positional = req.positional if req.positional is not None else model.positional
    scale = req.scale if req.scale is not None else model.scale
    if positional == "learned" and model.position_table is None:
        raise InvalidArgument(
            f"positional 'learned' needs a position table, and model {model.name!r} has none; "
            "use 'sinusoidal' or 'none'",
            field="positional",
        )
    rope = model.rope if positional == "rope" else None
    if positional == "rope" and rope is None:
        raise InvalidArgument(
            f"positional 'rope' needs a RoPE model, and model {model.name!r} is "
            f"{model.position_scheme}; use 'sinusoidal' or 'none'",
            field="positional",
        )
    ids_in: list[list[int]] | torch.Tensor  # JSON rows, or a binary body's (B, T) ids
    mask_in: list[list[int]] | torch.Tensor | None
    if tensors is None:
        batch_size = len(req.input_ids)
        seq_len = max(len(row) for row in req.input_ids)  # 0 when every row is empty
        ids_in, mask_in = req.input_ids, req.attention_mask
        params = {**req.model_dump(mode="json"), "model": model.name}
    else:
        batch_size, seq_len = tensors.shape
        ids_in, mask_in = tensors.input_ids, tensors.attention_mask
        # the ids' digest stands in for them in the cache key (no per-int work)
        params = {
            **req.model_dump(mode="json", exclude=_TENSOR_FIELDS),
            "model": model.name,
            "tensors": tensors.key,
        }
    d_model = model.d_model
    dtype = resolve_dtype(req.dtype)
    meta: dict[str, Any] = {
        "kind": "embed",
        "model": model.name,
        "positional": positional,
        "scale": scale,
        "vocab_size": model.vocab_size,
        "d_model": d_model,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "padding_side": req.padding_side,
        "dtype": req.dtype,
    }
    if rope is not None:  # cos/sin (B, T, R) follow the tensors above
        meta["rope"] = rope.as_dict()

    def compute() -> Bundle:
        batch = build_batch(
            ids_in,
            pad_token_id=req.pad_token_id,
            attention_mask=mask_in,
            padding_side=req.padding_side,
            device=state.device,
        )
        if tensors is not None and tensors.position_ids is not None:
            position_ids = tensors.position_ids.to(state.device)  # (B, T)
        elif tensors is None and req.position_ids is not None:
            position_ids, _ = pad_rows(req.position_ids, padding_side=req.padding_side)
            position_ids = position_ids.to(state.device)  # (B, T)
        else:
            position_ids = batch.position_ids  # (B, T)
        embeddings = embed_tokens(
            batch.input_ids,
            token_table=model.token_table,
            positional="none" if positional == "rope" else positional,  # rope: cos/sin, below
            position_table=model.position_table,
            position_ids=position_ids,
            attention_mask=batch.attention_mask,
            scale=scale,
            dtype=dtype,
            scale_value=model.embed_scale,
        )  # (B, T, D)
        out = {
            "embeddings": embeddings,
            "position_ids": position_ids,
            "attention_mask": batch.attention_mask,
        }
        if rope is not None:
            unique, inverse = torch.unique(position_ids, return_inverse=True)  # (U,), (B, T)
            tables = rope_cos_sin(
                unique.cpu(),
                rotary_dim=rope.rotary_dim,
                base=rope.base,
                layout=rope.layout,
                scaling=rope.scaling,
                device=state.device,
                dtype=dtype,
            )  # cos, sin (U, R), from max(positions) + 1 as the model's own rotary embedding
            out["cos"] = tables.cos[inverse.to(state.device)]  # (B, T, R)
            out["sin"] = tables.sin[inverse.to(state.device)]  # (B, T, R)
            meta["rope"]["attention_scaling"] = tables.attention_scaling
        return Bundle(out, meta)

    rope_elements = 0 if rope is None else 2 * batch_size * seq_len * rope.rotary_dim
    return Plan(
        route="/v1/embed",
        params=params,
        elements=batch_size * seq_len * d_model + 2 * batch_size * seq_len + rope_elements,
        compute=compute,
        names=("embeddings", "position_ids", "attention_mask"),
        model=model.name,
        cache_tensors=False,
    )


add_token_route(
    router,
    "/embed",
    EmbedRequest,
    embed_plan,
    names=("embeddings", "position_ids", "attention_mask"),
    summary="Embed token batches",
    description=(
        "Token embedding (× √D when `scale`) plus the positional encoding, for a ragged batch; "
        "padded slots are zeros, and an empty row is a row of padding. A token id outside "
        "[0, vocab_size) is a 422 naming `input_ids[ROW][COL]`. Tensors: `embeddings` "
        "(B, T, D), `position_ids` (B, T), `attention_mask` (B, T); for a RoPE model "
        "(positional `rope`, its default) also `cos` and `sin` (B, T, R) at the position ids, "
        "from the rope settings of its config.\n\nThe token ids may also be sent as "
        "`application/x-npy` (input_ids) or `application/vnd.safetensors` (input_ids, "
        "attention_mask, position_ids), with the other fields as query parameters."
    ),
)
