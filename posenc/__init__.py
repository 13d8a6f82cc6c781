"""posenc: transformer positional encodings, exact to the published conventions.

The library needs torch only (never FastAPI or pydantic). Angles and tables are computed in
float64 and cast once at the end, so float32 tables stay within 1e-6 of the float64 formula at
every position below 2**20.
"""

from posenc.device import resolve_device, resolve_dtype
from posenc.embedding import Positional, TokenPositionEmbedding, embed_tokens
from posenc.errors import (
    DeviceUnavailable,
    InvalidArgument,
    PosencError,
    TokenOutOfRange,
    TooLarge,
    UnknownName,
)
from posenc.learned import learned_table, seeded_normal
from posenc.models import EmbeddingModel, default_model, load_safetensors_model
from posenc.position_ids import (
    PaddedBatch,
    PaddingSide,
    build_batch,
    pad_rows,
    position_ids_from_mask,
)
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
from posenc.sinusoidal import (
    SinusoidalLayout,
    SinusoidalPositionalEncoding,
    sinusoidal_frequencies,
    sinusoidal_table,
)

__version__ = "0.1.0"

__all__ = [
    "DeviceUnavailable",
    "EmbeddingModel",
    "InvalidArgument",
    "PaddedBatch",
    "PaddingSide",
    "PosencError",
    "Positional",
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
    "apply_rope",
    "build_batch",
    "default_model",
    "embed_tokens",
    "learned_table",
    "load_safetensors_model",
    "pad_rows",
    "position_ids_from_mask",
    "resolve_device",
    "resolve_dtype",
    "rope_cos_sin",
    "rope_inv_freq",
    "seeded_normal",
    "sinusoidal_frequencies",
    "sinusoidal_table",
]
