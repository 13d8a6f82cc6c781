"""posenc: transformer positional encodings, exact to the published conventions.

The library needs torch only (never FastAPI or pydantic). Angles and tables are computed in
float64 and cast once at the end, so float32 tables stay within 1e-6 of the float64 formula at
every position below 2**20.
"""

from posenc.device import resolve_device, resolve_dtype
from posenc.errors import (
    DeviceUnavailable,
    InvalidArgument,
    PosencError,
    TokenOutOfRange,
    TooLarge,
    UnknownName,
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

__version__ = "0.1.0"

__all__ = [
    "DeviceUnavailable",
    "InvalidArgument",
    "PosencError",
    "RopeLayout",
    "RopeScaling",
    "RopeTables",
    "RotaryEmbedding",
    "ScalingType",
    "TokenOutOfRange",
    "TooLarge",
    "UnknownName",
    "__version__",
    "apply_rope",
    "resolve_device",
    "resolve_dtype",
    "rope_cos_sin",
    "rope_inv_freq",
]
