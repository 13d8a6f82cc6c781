"""posenc: transformer positional encodings, exact to the published conventions.

The library needs torch only (never FastAPI or pydantic). Angles and tables are computed in
float64 and cast once at the end, so float32 tables stay within 1e-6 of the float64 formula at
every position below 2**20.
"""

from posenc.absolute.learned import learned_table, seeded_normal
from posenc.absolute.sinusoidal import (
    SinusoidalLayout,
    SinusoidalPositionalEncoding,
    sinusoidal_frequencies,
    sinusoidal_table,
)
from posenc.attention.query_scale import query_scale
from posenc.catalog import KINDS  # registers the built-in kinds
from posenc.core.device import resolve_device, resolve_dtype
from posenc.core.errors import (
    DeviceUnavailable,
    InvalidArgument,
    PosencError,
    TokenOutOfRange,
    TooLarge,
    UnknownName,
)
from posenc.embedding import Positional, TokenPositionEmbedding, embed_tokens
from posenc.readers.models import EmbeddingModel, default_model, load_safetensors_model
from posenc.readers.presets import PRESETS, Preset, PresetKind, get_preset
from posenc.relative_schemes.alibi import AlibiMode, alibi_bias, alibi_slopes
from posenc.relative_schemes.relative import (
    Bucketing,
    clipped_bucket,
    num_relative_buckets,
    relative_bias,
    relative_bias_table,
    relative_buckets,
    relative_position_bucket,
    relative_positions,
)
from posenc.relative_schemes.relative_sinusoidal import relative_sinusoidal_table
from posenc.rope import (
    RopeLayout,
    RopeScaling,
    RopeTables,
    RotaryEmbedding,
    ScalingType,
    apply_rope,
    rope_cos_sin,
    rope_inv_freq,
)
from posenc.rope.mrope_ids import MRopeSettings, mrope_position_ids, mrope_settings
from posenc.rope.xpos import xpos_scales
from posenc.tokens.position_ids import (
    PaddedBatch,
    PaddingSide,
    build_batch,
    pad_rows,
    position_ids_from_mask,
)

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "PRESETS",
    "AlibiMode",
    "Bucketing",
    "DeviceUnavailable",
    "EmbeddingModel",
    "InvalidArgument",
    "MRopeSettings",
    "PaddedBatch",
    "PaddingSide",
    "PosencError",
    "Positional",
    "Preset",
    "PresetKind",
    "RopeLayout",
    "RopeScaling",
    "RopeTables",
    "RotaryEmbedding",
    "ScalingType",
    "SinusoidalLayout",
    "SinusoidalPositionalEncoding",
    "TokenOutOfRange",
    "TokenPositionEmbedding",
    "TooLarge",
    "UnknownName",
    "__version__",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "build_batch",
    "clipped_bucket",
    "default_model",
    "embed_tokens",
    "get_preset",
    "learned_table",
    "load_safetensors_model",
    "mrope_position_ids",
    "mrope_settings",
    "num_relative_buckets",
    "pad_rows",
    "position_ids_from_mask",
    "query_scale",
    "relative_bias",
    "relative_bias_table",
    "relative_buckets",
    "relative_position_bucket",
    "relative_positions",
    "relative_sinusoidal_table",
    "resolve_device",
    "resolve_dtype",
    "rope_cos_sin",
    "rope_inv_freq",
    "seeded_normal",
    "sinusoidal_frequencies",
    "sinusoidal_table",
    "xpos_scales",
]
