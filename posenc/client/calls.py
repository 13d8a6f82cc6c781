"""Requests: the output options, the JSON body and GET query of a call, and one prepared call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from posenc.client.results import ArrayKind, TensorResult, decode_response

DEFAULT_BASE_URL = "http://127.0.0.1:8000"

Format = Literal["safetensors", "json", "npy", "raw", "png"]
Method = Literal["POST", "GET"]

MEDIA_TYPES: dict[str, str] = {
    "json": "application/json",
    "safetensors": "application/vnd.safetensors",
    "npy": "application/x-npy",
    "raw": "application/octet-stream",
    "png": "image/png",
}

# --------------------------------------------------------------------------------------- requests


def request_body(fields: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON body: ``fields`` without their ``None`` values (the server's defaults apply),
    then ``extra`` as given (``None`` there is sent as ``null``, e.g. to clear a preset's
    ``scaling``); numpy/torch values become plain JSON."""
    out: dict[str, Any] = {}
    items = [(k, v) for k, v in fields.items() if v is not None] + list((extra or {}).items())
    for key, value in items:
        if hasattr(value, "tolist"):  # numpy array / torch tensor / numpy scalar
            value = value.tolist()
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[key] = value
    return out


def query_params(body: Mapping[str, Any]) -> dict[str, str]:
    """A body as the GET query of the table endpoints (lists comma-separated, objects as JSON)."""
    out: dict[str, str] = {}
    for key, value in body.items():
        if value is None:
            out[key] = "null"
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, list):
            out[key] = ",".join(str(v) for v in value)
        elif isinstance(value, Mapping):
            out[key] = json.dumps(value, separators=(",", ":"))
        else:
            out[key] = str(value)
    return out


@dataclass(frozen=True)
class Call:
    """One request, prepared: everything the sync and async transports need."""

    method: str
    path: str
    json_body: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    content: bytes | None = None  # a binary body (token ids as npy / safetensors)
    headers: dict[str, str] = field(default_factory=dict)
    fmt: str | None = None  # None: a JSON endpoint (models, info...)
    as_: ArrayKind = "numpy"
    device: str | None = None
    retry_on_status: bool = True  # False for healthz/readyz: their status is the answer

    def decode(self, response: httpx.Response) -> TensorResult:
        """The :class:`TensorResult` of this call's ``response``."""
        return decode_response(response, self.path, self.fmt or "json", self.as_, self.device)


def check_output(format: str, as_: str, device: str | None) -> None:
    """Reject an unknown format or array kind, and a device for numpy arrays.

    Raises:
        ValueError: naming the bad value.
    """
    if format not in MEDIA_TYPES:
        raise ValueError(f"format must be one of {list(MEDIA_TYPES)}, got {format!r}")
    if as_ not in ("numpy", "torch"):
        raise ValueError(f"as_ must be 'numpy' or 'torch', got {as_!r}")
    if device is not None and as_ != "torch":
        raise ValueError(f"device={device!r} needs as_='torch' (numpy arrays live on the CPU)")
