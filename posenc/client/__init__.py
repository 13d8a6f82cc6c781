"""Typed HTTP client for the posenc service (its API: ``docs/api.md``).

Two clients with the same methods, one per endpoint of the contract:

- :class:`PosencClient` (sync, ``httpx.Client``)
- :class:`AsyncPosencClient` (async, ``httpx.AsyncClient``; every method is awaited)

Tensor endpoints ask for safetensors by default (``Accept: application/vnd.safetensors``) and
return a :class:`TensorResult`: the named tensors of the bundle, in the endpoint's order (the first
is the primary tensor), as numpy arrays (``as_="numpy"``, default) or torch tensors on a device
the caller names (``as_="torch", device="cuda"``), plus ``meta`` (parsed from the safetensors
``__metadata__["meta"]``). ``format="json"`` decodes nested lists (``null`` -> ``-inf``);
``format="npy"`` and ``format="raw"`` carry the primary tensor only; ``format="png"`` keeps the
heatmap's bytes in :attr:`TensorResult.content`.

Keyword arguments map 1:1 to the contract's body fields; arguments left as ``None`` are not sent,
so the server's defaults apply.

Errors are typed: :class:`PosencHTTPError` (``.status_code``, ``.detail`` from the server's JSON)
and its children :class:`ValidationError` (422), :class:`PayloadTooLarge` (413),
:class:`Unauthorized` (401), :class:`NotAcceptable` (406), :class:`NotFound` (404), ...; a server
that cannot be reached after every retry raises :class:`PosencConnectionError`.

Example:
    >>> from posenc.client import PosencClient
    >>> with PosencClient("http://127.0.0.1:8000") as client:
    ...     pe = client.sinusoidal(seq_len=2048, d_model=768).encoding   # (2048, 768) float32
    ...     rope = client.rope(preset="llama-3.1-8b", seq_len=8192, as_="torch", device="cuda")
    ...     cos, sin = rope.cos, rope.sin

This module is the ``client`` extra (``pip install posenc[client]``: httpx and safetensors);
``import posenc`` never imports it.
"""

from posenc.client.aio import AsyncPosencClient
from posenc.client.base import kind_method
from posenc.client.calls import DEFAULT_BASE_URL, MEDIA_TYPES, Format, Method
from posenc.client.errors import (
    Conflict,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    PosencClientError,
    PosencConnectionError,
    PosencHTTPError,
    PreconditionFailed,
    ServerError,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    ValidationError,
)
from posenc.client.results import ArrayKind, SavedTable, TensorResult
from posenc.client.retry import retry_after_seconds
from posenc.client.sync import PosencClient

__all__ = [
    "DEFAULT_BASE_URL",
    "MEDIA_TYPES",
    "ArrayKind",
    "AsyncPosencClient",
    "Conflict",
    "Format",
    "Method",
    "NotAcceptable",
    "NotFound",
    "PayloadTooLarge",
    "PosencClient",
    "PosencClientError",
    "PosencConnectionError",
    "PosencHTTPError",
    "PreconditionFailed",
    "SavedTable",
    "ServerError",
    "ServiceUnavailable",
    "TensorResult",
    "TooManyRequests",
    "Unauthorized",
    "ValidationError",
    "kind_method",
    "retry_after_seconds",
]
