"""Request and response models of the HTTP API (``docs/api.md``).

Every request model forbids unknown fields (422) and carries an OpenAPI example that works as
given. Size-like ints have no small upper bound here on purpose: a request that is too large
gets the contract's 413 (which states the limit and the size asked), not a 422. Values are
bounded only where torch itself would fail (int64 ids, positions exact in float64).

The table and bias endpoints have no model here: their request models are derived from the
library's registry of kinds (:mod:`posenc.kinds`, :mod:`service.routes.registered`). These are
the token-batch endpoints' and the responses'.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator

# ---------------------------------------------------------------------------------------------
# Field types
# ---------------------------------------------------------------------------------------------

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
MAX_POSITION = 2**53  # positions are exact in float64 up to here
# Sizes (seq_len, d_model, heads, buckets, ...): anything near this is a 413 anyway; the bound
# keeps every number JSON- and int64-safe (2**53 is exact in float64 and in JavaScript).
MAX_SIZE = 2**53


def _not_bool(value: Any) -> Any:
    """JSON ``true`` is not the number 1: refuse booleans where a number is asked."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]
Position = Annotated[Int, Field(ge=0, le=MAX_POSITION)]
TokenId = Annotated[Int, Field(ge=INT64_MIN, le=INT64_MAX)]

DType = Literal["float32", "float16", "bfloat16", "float64"]
PaddingSide = Literal["right", "left"]
Positional = Literal["learned", "sinusoidal", "none", "rope"]

_DTYPE_DESC = (
    "dtype of the float tensors: float32 (default), float16, bfloat16 or float64; integer "
    "tensors are always int64. bfloat16 cannot be sent as npy (406)."
)


class RequestModel(BaseModel):
    """Base of every request body: unknown fields are a 422."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------
# Token batches
# ---------------------------------------------------------------------------------------------

# Token batches hold thousands of ints: strict ints (no bool, no "5", no 5.0) are checked in
# pydantic's core, without the Python call per element that Int's bool check costs (32x512 ids:
# 10 ms -> 1 ms).
BatchTokenId = Annotated[int, Strict(), Field(ge=INT64_MIN, le=INT64_MAX)]
BatchMaskValue = Annotated[int, Strict(), Field(ge=0, le=1)]
BatchPosition = Annotated[int, Strict(), Field(ge=0, le=MAX_POSITION)]
Rows = list[list[BatchTokenId]]  # an empty row is a row of padding
MaskRows = list[list[BatchMaskValue]]


class PositionIdsRequest(RequestModel):
    """``POST /v1/position-ids``: tensors ``position_ids`` (B, T), ``attention_mask`` (B, T)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"input_ids": [[5, 6, 7], [8, 9]], "pad_token_id": 0}]},
    )

    input_ids: Rows = Field(..., min_length=1, description="B rows of token ids (ragged allowed)")
    pad_token_id: TokenId | None = Field(None, description="tokens equal to it are padding")
    attention_mask: MaskRows | None = Field(
        None, description="0/1, the shape of input_ids; wins over pad_token_id"
    )
    padding_side: PaddingSide = Field("right", description="where short rows are padded")
    start: Int = Field(0, ge=0, le=MAX_POSITION, description="the first real token's position")
    pad_position: Int = Field(
        0, ge=INT64_MIN, le=INT64_MAX, description="the position id given to padded slots"
    )


class EmbedRequest(RequestModel):
    """``POST /v1/embed``: tensors ``embeddings`` (B, T, D), ``position_ids``, ``attention_mask``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"input_ids": [[1, 2, 3], [4, 5]]}]},
    )

    input_ids: Rows = Field(..., min_length=1, description="B rows of token ids (ragged allowed)")
    model: str | None = Field(None, description="name from GET /v1/models (default: the default)")
    attention_mask: MaskRows | None = Field(
        None, description="0/1, the shape of input_ids; wins over pad_token_id"
    )
    pad_token_id: TokenId | None = Field(None, description="tokens equal to it are padding")
    padding_side: PaddingSide = Field("right", description="where short rows are padded")
    positional: Positional | None = Field(
        None, description="learned, sinusoidal, none or rope (default: the model's own)"
    )
    scale: bool | None = Field(
        None, description="multiply token embeddings by sqrt(D) (default: the model's own)"
    )
    position_ids: list[list[BatchPosition]] | None = Field(
        None, description="explicit positions, the shape of input_ids"
    )
    dtype: DType = Field("float32", description=_DTYPE_DESC)

    @model_validator(mode="after")
    def _shapes(self) -> EmbedRequest:
        if self.position_ids is not None:
            if len(self.position_ids) != len(self.input_ids):
                raise ValueError(
                    f"position_ids must have the {len(self.input_ids)} rows of input_ids, "
                    f"got {len(self.position_ids)}"
                )
            for r, (ids, pos) in enumerate(zip(self.input_ids, self.position_ids, strict=True)):
                if len(ids) != len(pos):
                    raise ValueError(
                        f"position_ids[{r}] must have the {len(ids)} entries of input_ids[{r}], "
                        f"got {len(pos)}"
                    )
        return self


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


class ModelList(BaseModel):
    default: str
    models: list[ModelInfo]


class PresetInfo(BaseModel):
    name: str
    kind: Literal["rope", "alibi", "relative", "learned"]
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


class ErrorBody(BaseModel):
    detail: str = Field(..., description="what is wrong, naming the offending field")
    field: str | None = None


class NotAcceptableBody(BaseModel):
    detail: str
    available: list[str] = Field(..., description="the media types this endpoint can produce")


class TooLargeBody(BaseModel):
    detail: str
    field: str | None = None
    limit: int = Field(..., description="POSENC_MAX_ELEMENTS")
    requested: int = Field(..., description="elements the request would produce")


class ValidationItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str
    input: Any | None = None
    ctx: dict[str, Any] | None = None


class ValidationErrorBody(BaseModel):
    detail: list[ValidationItem] | str = Field(
        ...,
        description="FastAPI's list of validation errors, or one message that starts with the "
        "offending field (e.g. input_ids[1][3])",
    )
    field: str | None = None
    type: str | None = None
