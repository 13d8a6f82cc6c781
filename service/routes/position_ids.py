"""``POST /v1/position-ids``: position ids and attention mask of a ragged token batch."""

from __future__ import annotations

import torch
from fastapi import APIRouter

from posenc.position_ids import build_batch
from service.bodies import TokenTensors, add_token_route
from service.formats import Bundle
from service.query import Source
from service.responding import Plan
from service.schemas import PositionIdsRequest
from service.state import ServiceState

router = APIRouter(prefix="/v1", tags=["tokens"])


def position_ids_plan(
    req: PositionIdsRequest,
    state: ServiceState,
    source: Source,
    tensors: TokenTensors | None = None,
) -> Plan:
    """The plan of one request; ``tensors`` (a binary body) replace the JSON rows when given."""
    ids_in: list[list[int]] | torch.Tensor  # JSON rows, or a binary body's (B, T) ids
    mask_in: list[list[int]] | torch.Tensor | None
    if tensors is None:
        batch_size = len(req.input_ids)
        seq_len = max(len(row) for row in req.input_ids)  # 0 when every row is empty
        ids_in, mask_in = req.input_ids, req.attention_mask
        params = req.model_dump(mode="json")
    else:
        batch_size, seq_len = tensors.shape
        ids_in, mask_in = tensors.input_ids, tensors.attention_mask
        params = {
            **req.model_dump(mode="json", exclude={"input_ids", "attention_mask"}),
            "tensors": tensors.key,
        }
    meta = {
        "kind": "position_ids",
        "batch_size": batch_size,
        "seq_len": seq_len,
        "padding_side": req.padding_side,
        "start": req.start,
        "pad_position": req.pad_position,
        "pad_token_id": req.pad_token_id,
    }

    def compute() -> Bundle:
        batch = build_batch(
            ids_in,
            pad_token_id=req.pad_token_id,
            attention_mask=mask_in,
            padding_side=req.padding_side,
            start=req.start,
            pad_position=req.pad_position,
            device=state.device,
        )
        return Bundle(
            {"position_ids": batch.position_ids, "attention_mask": batch.attention_mask}, meta
        )  # (B, T) each

    return Plan(
        route="/v1/position-ids",
        params=params,
        elements=2 * batch_size * seq_len,
        compute=compute,
        names=("position_ids", "attention_mask"),
        cache_tensors=False,
    )


add_token_route(
    router,
    "/position-ids",
    PositionIdsRequest,
    position_ids_plan,
    names=("position_ids", "attention_mask"),
    summary="Position ids of a padded batch",
    description=(
        "Pads a ragged batch and numbers its real tokens from `start` in order; padded slots get "
        "`pad_position`. Padding: `attention_mask` wins; else tokens equal to `pad_token_id`; "
        "else the slots beyond a short row's end. Tensors: `position_ids` (B, T) int64, "
        "`attention_mask` (B, T) int64. An empty row is a row of padding.\n\nThe token ids "
        "may also be sent as `application/x-npy` (input_ids) or `application/vnd.safetensors` "
        "(input_ids, attention_mask), with the other fields as query parameters."
    ),
)
