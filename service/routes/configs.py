"""``POST /v1/configs/positions``: what a model's ``config.json`` means for positions (JSON)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from posenc.attention.mask_engines import compare_mask_engines
from posenc.core.difference_plot import HEIGHT, WIDTH, difference_png
from posenc.core.errors import InvalidArgument
from posenc.engines import engine_names
from posenc.explain.describe import describe
from posenc.explain.engine_pairs import (
    DEFAULT_ENGINES,
    compare_pairs,
    pair_curves,
)
from posenc.explain.vllm_compare import compare_engines
from service.formats import FORMAT_MEDIA_TYPES
from service.json_body import JsonBodyRoute
from service.responses.negotiation import negotiate
from service.sliced_validation import SLICED_DICT
from service.state import State
from service.statuses import Does, declared_responses, with_ok

router = APIRouter(
    prefix="/v1/configs", tags=["configs"], route_class=JsonBodyRoute
)  # bodies off the loop

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

    config: Annotated[dict[str, Any], SLICED_DICT] = Field(
        ...,
        description="a model's Hugging Face config.json object, as published (a multimodal file "
        "whole: its text_config is read)",
    )
    engine: str = Field(
        "transformers",
        description="whose reading: transformers (default), vllm (its magnitudes, cache rows "
        "and softmax scale), llama.cpp or mlx (their rope arguments per layer type and the "
        "scaling type as each names it; see docs/engines.md), or another registered engine",
        json_schema_extra=lambda schema: schema.update(enum=list(engine_names())),
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="engine vllm: the server's --max-model-len (default the config's "
        "max_position_embeddings)",
    )

    @field_validator("engine")
    @classmethod
    def _registered(cls, engine: str) -> str:
        """One of the registry's text-RoPE engines, asked at the time of the request."""
        if engine not in engine_names():
            raise ValueError(f"engine must be one of {', '.join(engine_names())}")
        return engine


class RopeLayerInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    rope_type: str
    rope_theta: float
    head_dim: int
    rotary_dim: int
    attention_scaling: float


class ConfigPositions(BaseModel):
    """What the config means for positions (see ``posenc.readers.hf.results.ModelPositions``)."""

    model_type: str
    kind: str = Field(
        ...,
        description="rope, alibi, relative, learned, sinusoidal or none; vision_rope for a "
        "rotary vision tower's config sent alone (then vision describes it; a non-rotary "
        "tower's config alone is none, with vision saying what it uses); diffusion_rope or "
        "sincos_2d for a diffusers transformer config or model_index.json (then diffusers "
        "describes it)",
    )
    head_dim: int | None
    rotary_dim: int | None
    layout: str | None
    max_position_embeddings: int | None
    layer_types: list[str] = Field(..., description="one per layer; no_rope where none applies")
    rope: dict[str, RopeLayerInfo] = Field(
        ...,
        description="per distinct layer type: rope_type, rope_theta, scaling parameters, "
        "attention_scaling; exponent_dim where int(head_dim x partial_rotary_factor) is odd "
        "(the exponents' denominator; rotary_dim is then one more, the width the model rotates)",
    )
    per_layer_type: bool = Field(..., description="whether rope tables need a layer_type")
    softmax_scale: float | None
    attention_temperature: dict[str, float] | None
    sliding_window: int | None
    mrope_section: list[int] | None
    mrope_interleaved: bool
    rotation: str | None = Field(
        None,
        description="RoPE: positive, or negative where the model rotates by -theta (nanochat: "
        "its rotate_half is cat(x2, -x1)); the rope tables of the config then carry -sin",
    )
    rotated_channels: str | None = Field(
        None,
        description="RoPE: which rotary_dim channels of each head rotate: leading (x[..., :R]) "
        "or trailing (x[..., -R:], DeepSeek-V4's [nope | rope] heads); the tables are the same",
    )
    alibi: dict[str, Any] | None
    relative: dict[str, Any] | None
    learned: dict[str, Any] | None
    vision: dict[str, Any] | None = Field(
        None,
        description="the vision tower, null without a vision config: model_type, rotary and "
        "learned (both false: uses says what it has instead); a rotary tower's head_dim, "
        "rope_theta, layout, merge_size, fixed grid and reference, as POST "
        "/v1/encodings/vision-rope reads them; a learned table's native_grid, table_rows, "
        "width, class_token and resize rule, as POST /v1/encodings/vision-learned reads them; "
        "endpoint: the one that serves the tower's table",
    )
    query_scale: dict[str, Any] | None = Field(
        None,
        description="the position-dependent factor queries are multiplied by: {rule, alpha, "
        "period, offset, layers (the layer indices that apply it), endpoint}, where scale(p) = "
        "1 + alpha·ln(1 + floor((p + offset)/period)) (Llama 4's attn_temperature_tuning, "
        "llama_4_scaling_beta); null when none",
    )
    diffusers: dict[str, Any] | None = Field(
        None,
        description="a diffusers file (a _class_name, no model_type): which file it is (file: "
        "transformer_config or model_index), the transformer class, the rule and endpoint that "
        "serve it (kind diffusion_rope or sincos_2d) or why none does (reason), the values "
        "read and those that took the class default; null for a Hugging Face config",
    )
    layers: list[dict[str, Any]] | None = Field(
        None,
        description="every layer: index, layer_type, mixer (attention, linear_attention, "
        "mamba, attention+mamba, convolution, mlp, cross_attention), mask (the kind POST "
        "/v1/masks serves, null without attention), window, chunk_size, positions (rope, "
        "none for NoPE, or the model's kind), what (a phrase) and endpoint",
    )
    context_parallel: dict[str, Any] | None = Field(
        None,
        description="how each stack splits one sequence across context-parallel ranks by "
        "default: endpoint (POST /v1/positions/context-parallel) and stacks, each with stack, "
        "scheme (one sequence), packed_scheme (packed documents), reset_positions, source and "
        "note",
    )
    warnings: list[str]
    engine: str = Field(
        ..., description="transformers, vllm, llama.cpp or mlx: whose reading this is"
    )
    meta: dict[str, Any] = Field(..., description="engine, and max_model_len for vllm")


_ENGINE_EXAMPLE: JsonDict = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [4.0] * 48},
}


class CompareRequest(BaseModel):
    """Body of ``POST /v1/configs/compare``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"config": _ENGINE_EXAMPLE, "seq_len": 4096, "max_model_len": 131072}]
        },
    )

    config: Annotated[dict[str, Any], SLICED_DICT] = Field(
        ..., description="a model's Hugging Face config.json object"
    )
    seq_len: int | None = Field(None, ge=1, description="T: positions 0 … T−1")
    positions: list[int] | None = Field(
        None, min_length=1, description="explicit positions (ints ≥ 0) instead of seq_len"
    )
    max_model_len: int | None = Field(
        None, ge=1, description="vLLM's --max-model-len (default max_position_embeddings)"
    )
    layer_type: str | None = Field(
        None, description="for per-layer-type RoPE (Gemma 3): which layer type"
    )
    engines: list[str | dict[str, str]] | None = Field(  # issue 30
        None,
        min_length=2,
        description="two or more of transformers, vllm, llama.cpp, mlx (the registered "
        'engines), "exact", or {engine, precision}; default ["transformers", "vllm"]. With '
        "more than two, pairs answers",
    )

    @model_validator(mode="after")
    def _one_of(self) -> CompareRequest:
        if (self.seq_len is None) == (self.positions is None):
            raise ValueError("give exactly one of seq_len or positions")
        return self


class Difference(BaseModel):
    model_config = ConfigDict(extra="allow")

    max_abs_diff: float | None
    first_position: int | None = Field(
        ..., description="the first requested position differing by more than 1e-6, or null"
    )


class EngineComparison(BaseModel):
    """Where transformers' and vLLM's RoPE for a config differ."""

    model_config = ConfigDict(extra="allow")

    engines: list[str]
    cos: Difference | None = None
    sin: Difference | None = None
    attention_scaling: Difference | None = None
    softmax_scale: Difference | None = None
    differences: list[str] = Field(
        [], description="one sentence per rule on which the engines disagree here"
    )
    pairs: list[dict[str, Any]] | None = Field(
        None,
        description="with engines: each pair's {a, b, cos, sin, attention_scaling, "
        "softmax_scale, trend, differences}",
    )
    meta: dict[str, Any]
    masks: dict[str, Any] | None = Field(
        None,
        description="each layer's mask as transformers and vLLM apply it: {engines, "
        "window_convention, layers, differences (index, windows in keys, keys_differ_by, "
        "first_position), agree}; null where the layers cannot be read",
    )


def _with_masks(answer: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The 1.2 answer plus ``masks`` (issue 32), null where the layers cannot be read."""
    try:
        answer["masks"] = compare_mask_engines(config)
    except InvalidArgument:
        answer["masks"] = None
    return answer


@router.post(
    "/positions",
    response_model=ConfigPositions,
    summary="What a model config means for positions",
    description=(
        "Reads a Hugging Face config.json as transformers 5 does: the kind of positional "
        "encoding, head and rotary dims, layout, the layer types (no_rope where a layer applies "
        "none), RoPE parameters per layer type with their attention scaling, the attention's "
        "softmax scale, Llama 4's temperature settings, the sliding window, the relative scheme "
        "(T5, DeBERTa, Swin; Parakeet's relative sinusoidal, with its endpoint), the "
        "position-dependent query scale and the layers that apply it "
        "(query_scale), and warnings for "
        "legacy or ignored keys. A diffusers transformer/config.json or model_index.json (a "
        "_class_name, no model_type) is read as diffusers reads it: `diffusers` says which "
        "file it is and which endpoint serves its positions. An unreadable config is a 422 "
        "naming the key."
    ),
    responses=declared_responses(
        "POST",
        "/v1/configs/positions",
        Does(body=True, validates="a key of the config is unreadable"),
    ),
)
def config_positions(body: ConfigPositionsRequest) -> dict[str, Any]:
    return describe(body.config, body.engine, body.max_model_len)


config_positions.posenc_model = ConfigPositionsRequest  # type: ignore[attr-defined]  # 422 hints


_COMPARE_PNG = (
    f"format=png (or Accept: image/png): a {WIDTH} x {HEIGHT} PNG of |difference| of cos and "
    "sin (the larger at each position) against position, log scale, one line per pair in its "
    "own colour; the PNG text chunk posenc:plot gives the box, decades and each pair's colour"
)


@router.post(
    "/compare",
    response_model=EngineComparison,
    summary="Where transformers' and vLLM's RoPE tables for a config differ",
    description=(
        "Reads the config as transformers 5 and as vLLM's get_rope do and compares, at the "
        "requested positions: cos and sin per (position, frequency) whatever the layouts, the "
        "attention scaling (magnitude), the softmax scale and a position-dependent query scale "
        "one engine applies (llama_4_scaling_beta). Each gives max_abs_diff and first_position "
        "(the first requested position differing by more than 1e-6, or null); `differences` has "
        "one sentence per rule on which the engines disagree there (see docs/engines.md). "
        "Positions beyond vLLM's cache are named there and not compared. JSON, or "
        + _COMPARE_PNG
        + "."
    ),
    responses=with_ok(
        {
            "description": "the comparison as JSON, or " + _COMPARE_PNG,
            "content": {
                FORMAT_MEDIA_TYPES["json"]: {},
                FORMAT_MEDIA_TYPES["png"]: {"schema": {"type": "string", "format": "binary"}},
            },
        },
        declared_responses(
            "POST",
            "/v1/configs/compare",
            Does(
                body=True,
                validates="an unreadable config or field",
                output_limit="more values than POSENC_MAX_ELEMENTS",
                formats=True,
                state=True,
            ),
        ),
    ),
)
def config_compare(
    body: CompareRequest,
    state: State,
    request: Request,
    format: Annotated[
        str | None,
        Query(description="json (default) or png; wins over Accept (another: 406)"),
    ] = None,
) -> Any:
    if negotiate(request.headers.get("accept"), format, ("json", "png")) == "png":
        return _compare_png(body, state)
    if body.engines is not None and list(body.engines) != list(DEFAULT_ENGINES):  # issue 30
        return _with_masks(
            compare_pairs(
                body.config,
                body.engines,
                seq_len=body.seq_len,
                positions=body.positions,
                max_model_len=body.max_model_len,
                layer_type=body.layer_type,
                max_elements=state.settings.max_elements,
            ),
            body.config,
        )
    return _with_masks(
        compare_engines(
            body.config,
            seq_len=body.seq_len,
            positions=body.positions,
            max_model_len=body.max_model_len,
            layer_type=body.layer_type,
            max_elements=state.settings.max_elements,
        ),
        body.config,
    )


def _compare_png(body: CompareRequest, state: State) -> Response:
    """Each pair's |difference| against position, drawn (posenc.core.difference_plot)."""
    answer, positions, deltas = pair_curves(
        body.config,
        body.engines if body.engines is not None else list(DEFAULT_ENGINES),
        seq_len=body.seq_len,
        positions=body.positions,
        max_model_len=body.max_model_len,
        layer_type=body.layer_type,
        max_elements=state.settings.max_elements,
    )
    labels = [f"{p['a']} vs {p['b']}" for p in answer["pairs"]]
    model = body.config.get("model_type", "config")
    png = difference_png(
        positions.numpy(),
        [(label, d.numpy()) for label, d in zip(labels, deltas, strict=True)],
        title=f"|difference| of cos and sin against position ({model})",
    )
    return Response(png, media_type=FORMAT_MEDIA_TYPES["png"])


config_compare.posenc_model = CompareRequest  # type: ignore[attr-defined]  # 422 hints
