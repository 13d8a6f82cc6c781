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

__version__ = "0.1.0"

__all__ = [
    "DeviceUnavailable",
    "InvalidArgument",
    "PosencError",
    "TokenOutOfRange",
    "TooLarge",
    "UnknownName",
    "__version__",
    "resolve_device",
    "resolve_dtype",
]
