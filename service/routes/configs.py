"""``POST /v1/configs/positions``: what a model's ``config.json`` means for positions (JSON)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from posenc.hf_config import read_positions
from posenc.query_scale import describe_query_scale
from service.schemas import ErrorBody, ValidationErrorBody

router = APIRouter(prefix="/v1/configs", tags=["configs"])

_EXAMPLE_CONFIG: JsonDict = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}


class ConfigPositionsRequest(BaseModel):
    """Body of ``POST /v1/configs/positions``."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"config": _EXAMPLE_CONFIG}]}
    )

    config: dict[str, Any] = Field(
        ...,
        description="a model's Hugging Face config.json object, as published (a multimodal file "
        "whole: its text_config is read)",
    )


class RopeLayerInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    rope_type: str
    rope_theta: float
    head_dim: int
    rotary_dim: int
    attention_scaling: float


class ConfigPositions(BaseModel):
    """What the config means for positions (see ``posenc.hf_config.ModelPositions``)."""

    model_type: str
    kind: str = Field(..., description="rope, alibi, relative, learned, sinusoidal or none")
    head_dim: int | None
    rotary_dim: int | None
    layout: str | None
    max_position_embeddings: int | None
    layer_types: list[str] = Field(..., description="one per layer; no_rope where none applies")
    rope: dict[str, RopeLayerInfo] = Field(
        ...,
        description="per distinct layer type: rope_type, rope_theta, scaling parameters, "
        "attention_scaling",
    )
    per_layer_type: bool = Field(..., description="whether rope tables need a layer_type")
    softmax_scale: float | None
    attention_temperature: dict[str, float] | None
    sliding_window: int | None
    mrope_section: list[int] | None
    mrope_interleaved: bool
    alibi: dict[str, Any] | None
    relative: dict[str, Any] | None
    learned: dict[str, Any] | None
    query_scale: dict[str, Any] | None = Field(
        None,
        description="the position-dependent factor queries are multiplied by: {rule, alpha, "
        "period, offset, layers (the layer indices that apply it), endpoint}, where scale(p) = "
        "1 + alpha·ln(1 + floor((p + offset)/period)) (Llama 4's attn_temperature_tuning, "
        "llama_4_scaling_beta); null when none",
    )
    warnings: list[str]


@router.post(
    "/positions",
    response_model=ConfigPositions,
    summary="What a model config means for positions",
    description=(
        "Reads a Hugging Face config.json as transformers 5 does: the kind of positional "
        "encoding, head and rotary dims, layout, the layer types (no_rope where a layer applies "
        "none), RoPE parameters per layer type with their attention scaling, the attention's "
        "softmax scale, Llama 4's temperature settings, the sliding window, the relative scheme "
        "(T5, DeBERTa, Swin), the position-dependent query scale and the layers that apply it "
        "(query_scale), and warnings for "
        "legacy or ignored keys. An unreadable config is a 422 naming the key."
    ),
    responses={
        400: {"model": ErrorBody, "description": "a body that cannot be read at all"},
        401: {"model": ErrorBody, "description": "POSENC_API_KEY is set and no valid token"},
        422: {"model": ValidationErrorBody, "description": "a key of the config is unreadable"},
    },
)
def config_positions(body: ConfigPositionsRequest) -> dict[str, Any]:
    return {
        **read_positions(body.config).to_dict(),
        "query_scale": describe_query_scale(body.config),
    }
