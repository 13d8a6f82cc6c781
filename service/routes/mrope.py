"""``POST /v1/position-ids/mrope``: Qwen2-VL / Qwen2.5-VL / Qwen3-VL multimodal RoPE position ids.

The request model lives here (not in ``service/schemas.py``): it is this endpoint's alone.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from posenc.mrope import mrope_position_ids, mrope_settings
from posenc.position_ids import build_batch
from service.formats import Bundle
from service.query import Source
from service.responding import Plan
from service.routes.tables import add_compute_routes
from service.schemas import MAX_SIZE, Float, Int, MaskRows, PaddingSide, RequestModel, Rows
from service.state import ServiceState

router = APIRouter(prefix="/v1", tags=["tokens"])

GridEntry = Annotated[Int, Field(ge=1, le=MAX_SIZE)]
Grid = Annotated[list[GridEntry], Field(min_length=3, max_length=3)]

_NAMES = ("position_ids", "rope_deltas")

# Qwen2-VL-7B-Instruct's config.json, the keys this endpoint reads.
_EXAMPLE_CONFIG: JsonDict = {
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {"spatial_merge_size": 2},
}


class MRopeRequest(RequestModel):
    """``POST /v1/position-ids/mrope``: tensors ``position_ids`` (3, B, T), ``rope_deltas`` (B, 1)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "input_ids": [[9906, 151652, 151655, 151655, 151655, 151655, 151653, 30]],
                    "image_grid_thw": [[1, 4, 4]],
                    "config": _EXAMPLE_CONFIG,
                }
            ]
        },
    )

    input_ids: Rows = Field(..., min_length=1, description="B rows of token ids (ragged allowed)")
    attention_mask: MaskRows | None = Field(
        None, description="0/1, the shape of input_ids; padded slots (0) get id 0"
    )
    padding_side: PaddingSide = Field("right", description="where short rows are padded")
    image_grid_thw: list[Grid] | None = Field(
        None, description="[t, h, w] of each image (in patches), in the order the images appear"
    )
    video_grid_thw: list[Grid] | None = Field(
        None, description="[t, h, w] of each video (in patches), in the order the videos appear"
    )
    second_per_grid_ts: list[Annotated[Float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        None,
        description="Qwen2.5-VL: seconds per temporal grid step of each video (default 1); "
        "read as float32, as the processor's tensor",
    )
    config: dict[str, Any] = Field(
        ...,
        description="the model's config.json: model_type (qwen2_vl, qwen2_5_vl, qwen3_vl, "
        "qwen3_vl_moe) selects the rule; image_token_id, video_token_id, "
        "vision_config.spatial_merge_size, vision_config.tokens_per_second are read",
    )


def mrope_plan(req: MRopeRequest, state: ServiceState, source: Source) -> Plan:
    settings = mrope_settings(req.config)  # 422 naming the key, before any tensor work
    batch_size = len(req.input_ids)
    seq_len = max(len(row) for row in req.input_ids)
    ignored = []
    if req.second_per_grid_ts is not None and settings.rule != "qwen2_5_vl":
        ignored.append("second_per_grid_ts")  # transformers' other rules take no such input
    meta = {
        "kind": "mrope_position_ids",
        "model_type": settings.model_type,
        "rule": settings.rule,
        "image_token_id": settings.image_token_id,
        "video_token_id": settings.video_token_id,
        "spatial_merge_size": settings.spatial_merge_size,
        "tokens_per_second": settings.tokens_per_second,
        "defaulted": list(settings.defaulted),
        "ignored": ignored,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "padding_side": req.padding_side,
    }

    def compute() -> Bundle:
        batch = build_batch(
            req.input_ids, attention_mask=req.attention_mask, padding_side=req.padding_side
        )
        position_ids, rope_deltas = mrope_position_ids(
            batch.input_ids,
            attention_mask=batch.attention_mask,
            image_grid_thw=req.image_grid_thw,
            video_grid_thw=req.video_grid_thw,
            second_per_grid_ts=req.second_per_grid_ts,
            **settings.kwargs(),
        )  # (3, B, T), (B, 1)
        return Bundle(
            {
                "position_ids": position_ids.to(state.device),
                "rope_deltas": rope_deltas.to(state.device),
            },
            meta,
        )

    return Plan(
        route="/v1/position-ids/mrope",
        # The settings read, not the raw config: configs differing only in keys not read give
        # the same key (and ETag), and unread keys never reach the canonical JSON.
        params={**req.model_dump(mode="json", exclude={"config"}), "settings": settings.kwargs()},
        elements=3 * batch_size * seq_len + batch_size,
        compute=compute,
        names=_NAMES,
        cache_tensors=False,
    )


add_compute_routes(
    router,
    "/position-ids/mrope",
    MRopeRequest,
    mrope_plan,
    names=_NAMES,
    summary="Multimodal RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)",
    description=(
        "The 3-D (temporal, height, width) position ids of transformers 5's `get_rope_index` for "
        "the model whose `config.json` is given: runs of image (video) placeholder tokens take "
        "the next `image_grid_thw` (`video_grid_thw`) entry and must hold its "
        "`t·(h/m)·(w/m)` tokens (Qwen3-VL: one run per video frame); Qwen2.5-VL spaces video "
        "frames by `tokens_per_second · second_per_grid_ts`. Padded slots get 0. Tensors: "
        "`position_ids` (3, B, T) int64, `rope_deltas` (B, 1) int64."
    ),
    get=False,
)
