"""Request and response models of the HTTP API (``docs/api.md``).

Every request model forbids unknown fields (422) and carries an OpenAPI example that works as
given. Size-like ints have no small upper bound here on purpose: a request that is too large
gets the contract's 413 (which states the limit and the size asked), not a 422. Values are
bounded only where torch itself would fail (int64 ids, positions exact in float64).

``preset`` fields name a preset of ``/v1/presets``: its params are defaults that the fields the
client actually sent override (``model_fields_set``), so some fields are optional here and
required only after that merge (the routes check them, answering 422 like pydantic would).
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
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # what torch.manual_seed takes


def _not_bool(value: Any) -> Any:
    """JSON ``true`` is not the number 1: refuse booleans where a number is asked."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]
Position = Annotated[Int, Field(ge=0, le=MAX_POSITION)]
TokenId = Annotated[Int, Field(ge=INT64_MIN, le=INT64_MAX)]
MaskValue = Annotated[Int, Field(ge=0, le=1)]

DType = Literal["float32", "float16", "bfloat16", "float64"]
PaddingSide = Literal["right", "left"]
SinusoidalLayout = Literal["interleaved", "concat", "tensor2tensor"]
RopeLayout = Literal["half", "interleaved"]
ScalingType = Literal["linear", "dynamic", "yarn", "longrope", "llama3", "proportional"]
AlibiMode = Literal["causal", "symmetric"]
Bucketing = Literal["log", "clip"]
Positional = Literal["learned", "sinusoidal", "none", "rope"]

_DTYPE_DESC = (
    "dtype of the float tensors: float32 (default), float16, bfloat16 or float64; integer "
    "tensors are always int64. bfloat16 cannot be sent as npy (406)."
)
_PRESET_DESC = "name of a preset from GET /v1/presets; its params are defaults the body overrides"
_CONFIG_DESC = (
    "a model's Hugging Face config.json object, pasted as published (a multimodal file whole): "
    "read as transformers 5 reads it; its values are defaults the body overrides. Not together "
    "with preset. See POST /v1/configs/positions for what it means."
)
ModelConfig = dict[str, Any]


class RequestModel(BaseModel):
    """Base of every request body: unknown fields are a 422."""

    model_config = ConfigDict(extra="forbid")


def _exactly_one_of_seq_len_positions(seq_len: int | None, positions: list[Any] | None) -> None:
    if (seq_len is None) == (positions is None):
        got = "both" if seq_len is not None else "neither"
        raise ValueError(
            f"give exactly one of seq_len (int >= 1) or positions (list of ints >= 0), got {got}"
        )


def _key_len_at_least_seq_len(key_len: int | None, seq_len: int) -> None:
    if key_len is not None and key_len < seq_len:
        raise ValueError(
            f"key_len must be >= seq_len (the queries are the last seq_len of key_len "
            f"positions), got key_len {key_len} < seq_len {seq_len}"
        )


# ---------------------------------------------------------------------------------------------
# Encodings
# ---------------------------------------------------------------------------------------------


class LearnedRequest(RequestModel):
    """``POST /v1/encodings/learned``: tensors ``encoding`` (T, D).

    Without ``model`` the table is ``torch.manual_seed(seed); nn.Embedding(max(seq_len, 1),
    d_model).weight``; with ``model`` it is the first ``seq_len`` rows of that model's position
    table (all of them when ``seq_len`` is omitted).
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"seq_len": 8, "d_model": 16, "seed": 0}]},
    )

    seq_len: Int | None = Field(
        None, ge=1, le=MAX_SIZE, description="T (required unless model or preset gives it)"
    )
    d_model: Int | None = Field(
        None, ge=1, le=MAX_SIZE, description="D (may be omitted with model)"
    )
    model: str | None = Field(None, description="name from GET /v1/models: use its position table")
    seed: Int = Field(0, ge=SEED_MIN, le=SEED_MAX, description="torch.manual_seed of the table")
    preset: str | None = Field(None, description=_PRESET_DESC + " (kind learned)")
    config: ModelConfig | None = Field(
        None, description=_CONFIG_DESC + " Gives d_model and the table size (seq_len)."
    )
    dtype: DType = Field("float32", description=_DTYPE_DESC)


class RopeScalingRequest(RequestModel):
    """RoPE scaling, with the names of transformers' ``rope_parameters`` (``rope_type`` or ``type``)."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                }
            ]
        },
    )

    type: ScalingType = Field(
        ..., description="linear, dynamic, yarn, longrope, llama3 or proportional (Gemma 4)"
    )
    factor: Float | None = Field(None, gt=0, allow_inf_nan=False)
    original_max_position_embeddings: Int | None = Field(None, ge=1, le=MAX_POSITION)
    beta_fast: Float | None = Field(None, allow_inf_nan=False)
    beta_slow: Float | None = Field(None, allow_inf_nan=False)
    mscale: Float | None = Field(None, allow_inf_nan=False)
    mscale_all_dim: Float | None = Field(None, allow_inf_nan=False)
    attention_factor: Float | None = Field(None, gt=0, allow_inf_nan=False)
    low_freq_factor: Float | None = Field(None, gt=0, allow_inf_nan=False)
    high_freq_factor: Float | None = Field(None, gt=0, allow_inf_nan=False)
    short_factor: list[Annotated[Float, Field(allow_inf_nan=False)]] | None = None
    long_factor: list[Annotated[Float, Field(allow_inf_nan=False)]] | None = None
    truncate: bool | None = Field(
        None, description="YaRN: round the correction range (default true)"
    )
    partial_rotary_factor: Float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="proportional only: the fraction of the head's frequencies that rotate",
    )

    @model_validator(mode="before")
    @classmethod
    def _rope_type_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "rope_type" in data:
            data = dict(data)
            rope_type = data.pop("rope_type")
            if "type" in data and data["type"] != rope_type:
                raise ValueError(
                    f"type {data['type']!r} and rope_type {rope_type!r} disagree; give one of them"
                )
            data["type"] = rope_type
        return data


# M-RoPE positions: three rows (temporal, height, width), (3, T)
MropePositions = Annotated[
    list[Annotated[list[Position], Field(min_length=1)]], Field(min_length=3, max_length=3)
]


class RopeRequest(RequestModel):
    """``POST /v1/encodings/rope``: tensors ``cos`` (T, R), ``sin`` (T, R), ``inv_freq`` (R/2)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"seq_len": 8, "head_dim": 16},
                {"positions": [0, 1, 2, 4096], "preset": "llama-3.1-8b"},
            ]
        },
    )

    seq_len: Int | None = Field(None, ge=1, le=MAX_SIZE, description="T: positions 0 … T−1")
    positions: list[Position] | MropePositions | None = Field(
        None,
        min_length=1,
        description="explicit positions (ints ≥ 0) instead of seq_len; or three lists "
        "(temporal, height, width: (3, T)) with mrope_section",
    )
    head_dim: Int | None = Field(
        None,
        ge=2,
        le=MAX_SIZE,
        multiple_of=2,
        description="Dh, even (required unless a preset gives it)",
    )
    rotary_dim: Int | None = Field(
        None, ge=2, le=MAX_SIZE, multiple_of=2, description="R, even ≤ head_dim (default head_dim)"
    )
    # base and layout have no schema default: a preset or config gives them, and a generated
    # client would otherwise send the default explicitly, overriding the preset's value.
    base: Float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="rope_theta (default 10000 when neither preset nor config gives it)",
    )
    layout: RopeLayout | None = Field(
        None,
        description="half (GPT-NeoX, Llama) or interleaved (GPT-J, RoFormer); default half when "
        "neither preset nor config gives it",
    )
    scaling: RopeScalingRequest | None = Field(None, description="null or a scaling object")
    preset: str | None = Field(None, description=_PRESET_DESC + " (kind rope)")
    config: ModelConfig | None = Field(None, description=_CONFIG_DESC)
    layer_type: str | None = Field(
        None,
        description="for a config with RoPE parameters per layer type (Gemma 3: "
        "sliding_attention, full_attention): which type; required there, refused otherwise",
    )
    mrope_section: list[Annotated[Int, Field(ge=0, le=MAX_SIZE)]] | None = Field(
        None,
        min_length=3,
        max_length=3,
        description="M-RoPE: three ints (temporal, height, width) summing to rotary_dim/2",
    )
    mrope_interleaved: bool | None = Field(
        None,
        description="M-RoPE: false (default) Qwen2-VL's contiguous sections, true Qwen3-VL's "
        "interleaving",
    )
    dtype: DType = Field("float32", description=_DTYPE_DESC)

    @model_validator(mode="after")
    def _check(self) -> RopeRequest:
        _exactly_one_of_seq_len_positions(self.seq_len, self.positions)
        if (
            self.head_dim is not None
            and self.rotary_dim is not None
            and self.rotary_dim > self.head_dim
        ):
            raise ValueError(
                f"rotary_dim must be <= head_dim, got rotary_dim {self.rotary_dim} > "
                f"head_dim {self.head_dim}"
            )
        return self


# ---------------------------------------------------------------------------------------------
# Biases
# ---------------------------------------------------------------------------------------------


class AlibiRequest(RequestModel):
    """``POST /v1/biases/alibi``: tensors ``bias`` (H, T, S), ``slopes`` (H)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"num_heads": 8, "seq_len": 4}]},
    )

    num_heads: Int | None = Field(
        None, ge=1, le=MAX_SIZE, description="H (required unless a preset gives it)"
    )
    seq_len: Int = Field(..., ge=1, le=MAX_SIZE, description="T, the number of queries")
    key_len: Int | None = Field(
        None, ge=1, le=MAX_SIZE, description="S ≥ T (default T); query i sits at position i + S − T"
    )
    mode: AlibiMode = Field(
        "causal", description="causal: −m_h·(i−j), −inf above the diagonal; symmetric: −m_h·|i−j|"
    )
    max_bias: Float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="slope exponent scale (default 8 when neither preset nor config gives it)",
    )
    preset: str | None = Field(None, description=_PRESET_DESC + " (kind alibi)")
    config: ModelConfig | None = Field(
        None, description=_CONFIG_DESC + " BLOOM, MPT (attn_config) or Falcon with alibi."
    )
    dtype: DType = Field("float32", description=_DTYPE_DESC)

    @model_validator(mode="after")
    def _check(self) -> AlibiRequest:
        _key_len_at_least_seq_len(self.key_len, self.seq_len)
        return self


class RelativeRequest(RequestModel):
    """``POST /v1/biases/relative``: tensors ``buckets`` (T, S) int64 and ``bias`` (H, T, S)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"seq_len": 4, "num_heads": 2}]},
    )

    seq_len: Int = Field(..., ge=1, le=MAX_SIZE, description="T, the number of queries")
    key_len: Int | None = Field(None, ge=1, le=MAX_SIZE, description="S (default T)")
    num_buckets: Int | None = Field(
        None,
        ge=2,
        le=MAX_SIZE,
        description="log bucketing: the number of buckets (default 32 when neither preset nor "
        "config gives it)",
    )
    max_distance: Int | None = Field(
        None,
        ge=1,
        le=MAX_SIZE,
        description="log: distance of the last bucket; clip: the clamp (default 128 when "
        "neither preset nor config gives it)",
    )
    bidirectional: bool | None = Field(
        None, description="keys on both sides of the query (default true)"
    )
    bucketing: Bucketing = Field(
        "log", description="log: T5's _relative_position_bucket; clip: clamp to ±max_distance"
    )
    num_heads: Int | None = Field(
        None, ge=1, le=MAX_SIZE, description="H: when given, also the bias tensor"
    )
    seed: Int = Field(
        0, ge=SEED_MIN, le=SEED_MAX, description="torch.manual_seed of the bias table"
    )
    preset: str | None = Field(None, description=_PRESET_DESC + " (kind relative)")
    config: ModelConfig | None = Field(
        None,
        description=_CONFIG_DESC + " T5: relative_attention_num_buckets, "
        "relative_attention_max_distance, num_heads.",
    )
    dtype: DType = Field("float32", description=_DTYPE_DESC)

    @model_validator(mode="after")
    def _check(self) -> RelativeRequest:
        _key_len_at_least_seq_len(self.key_len, self.seq_len)
        return self


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
