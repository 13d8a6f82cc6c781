"""Response models of the HTTP API, for ``/openapi.json`` (``docs/api.md``).

The request models are derived from the library's registry of kinds (:mod:`posenc.core.kinds`, by
:mod:`service.routes.registered`); ``/v1/configs/positions`` keeps its own in its route module.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from posenc.readers.presets import PresetKind

# ---------------------------------------------------------------------------------------------
# Responses (for the OpenAPI schema)
# ---------------------------------------------------------------------------------------------


class TensorJSON(BaseModel):
    shape: list[int] = Field(..., description="sizes, in the endpoint's notation")
    dtype: str = Field(..., description="float32, float16, bfloat16, float64 or int64")
    data: list[Any] | str = Field(
        ...,
        description="nested lists (−inf as null), or with ?encoding=base64 a base64 string of the "
        "raw little-endian C-order bytes",
    )


class TensorBundleJSON(BaseModel):
    tensors: dict[str, TensorJSON]
    meta: dict[str, Any]


class ModelInfo(BaseModel):
    name: str
    vocab_size: int
    d_model: int
    max_positions: int
    positional: str
    scale: bool
    pad_token_id: int | None
    source: str
    position_scheme: str | None = None
    embed_scale: float | None = None
    rope: dict[str, Any] | None = None
    family: str | None = None
    model_type: str | None = None
    tokenizer: bool = Field(
        False, description="it reads text: /v1/tokenize, /v1/detokenize, text in /v1/embed"
    )
    dtype: str | None = Field(None, description="the token table's stored dtype, e.g. bfloat16")
    shape: list[int] | None = Field(None, description="the token table's shape [V, D]")
    loaded_at: str | None = Field(
        None, description="when its files were read (ISO 8601, UTC); a reload renews it"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what was guessed or overruled reading it (an unknown model_type, a "
        "config vocab_size other than the table's rows); also logged",
    )
    serves: list[str] = Field(
        default_factory=list, description="the endpoints that take this model's name"
    )
    vision: dict[str, Any] | None = Field(
        None,
        description="a vision model folder (ViT, DINOv2, CLIP, SigLIP...): its position table "
        "(model_type, tensor, table_rows, width, native_grid, class_token, resize, dtype), "
        "served by /v1/encodings/vision-learned; it has no token table (/v1/embed is a 422)",
    )
    gguf: dict[str, Any] | None = Field(
        None,
        description="a .gguf model file: version, tensor_type (token_embd's ggml type, also "
        "given as dtype; the table is dequantized to float32), file_type (general.file_type) "
        "and llamacpp_rope (the rope arguments llama.cpp passes for it)",
    )


class ModelList(BaseModel):
    default: str
    models: list[ModelInfo]


class ReloadError(BaseModel):
    name: str
    path: str
    detail: str = Field(description="why its files could not be read: it keeps its old weights")


class ReloadAnswer(ModelList):
    errors: list[ReloadError] = Field(
        default_factory=list, description="the models that kept their old weights, and why"
    )


class PresetInfo(BaseModel):
    name: str
    kind: PresetKind
    params: dict[str, Any]
    source: str


class PresetList(BaseModel):
    presets: list[PresetInfo]


class Limits(BaseModel):
    max_elements: int
    cache_bytes: int
    max_stream_elements: int | None = None  # tables over max_elements stream up to this


class Info(BaseModel):
    version: str
    torch_version: str
    device: str
    cuda_available: bool
    cuda_device_count: int
    default_model: str
    formats: dict[str, str]
    limits: Limits
    auth: bool


class Status(BaseModel):
    status: str
