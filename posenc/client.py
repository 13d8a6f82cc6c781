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

from __future__ import annotations

import asyncio
import base64 as _base64
import email.utils
import inspect
import io
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

import httpx
import numpy as np

from posenc._token_bodies import token_body

__all__ = [
    "DEFAULT_BASE_URL",
    "AsyncPosencClient",
    "Conflict",
    "Format",
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
]

DEFAULT_BASE_URL = "http://127.0.0.1:8000"

Format = Literal["safetensors", "json", "npy", "raw", "png"]
ArrayKind = Literal["numpy", "torch"]
Method = Literal["POST", "GET"]

MEDIA_TYPES: dict[str, str] = {
    "json": "application/json",
    "safetensors": "application/vnd.safetensors",
    "npy": "application/x-npy",
    "raw": "application/octet-stream",
    "png": "image/png",
}

# Tensor names of the token-batch endpoints' bundles, in the contract's order (the first is the
# primary one); the registry's kinds give their own. Safetensors files list their tensors in
# their own order; results follow this one.
_TENSOR_ORDER: dict[str, tuple[str, ...]] = {
    "/v1/position-ids": ("position_ids", "attention_mask"),
    "/v1/position-ids/mrope": ("position_ids", "rope_deltas"),
    "/v1/embed": ("embeddings", "position_ids", "attention_mask", "cos", "sin"),
}

_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "float64": np.dtype("<f8"),
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype("?"),
}


# --------------------------------------------------------------------------------------- errors


class PosencClientError(Exception):
    """Base class of every error this client raises."""


class PosencConnectionError(PosencClientError):
    """The server could not be reached (or the connection broke) on every attempt.

    The last ``httpx`` transport error is chained as ``__cause__``.

    Attributes:
        attempts: how many attempts were made.
    """

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class PosencHTTPError(PosencClientError):
    """The server answered with a 4xx or 5xx status.

    Attributes:
        status_code: the HTTP status.
        detail: the ``detail`` of the server's JSON body (a string, or FastAPI's list of
            validation errors for 422), or the body's text where it is not JSON.
        response: the ``httpx.Response``.
    """

    def __init__(self, status_code: int, detail: Any, response: httpx.Response | None = None):
        self.status_code = status_code
        self.detail = detail
        self.response = response
        super().__init__(f"HTTP {status_code}: {_format_detail(detail)}")


class Unauthorized(PosencHTTPError):
    """401: the server has ``POSENC_API_KEY`` set and the key was missing or wrong."""


class NotFound(PosencHTTPError):
    """404: unknown path, model or preset."""


class NotAcceptable(PosencHTTPError):
    """406: the endpoint cannot produce the asked format (e.g. ``bfloat16`` as ``npy``)."""


class Conflict(PosencHTTPError):
    """409."""


class PreconditionFailed(PosencHTTPError):
    """412: an ``If-None-Match`` matched on a POST."""


class PayloadTooLarge(PosencHTTPError):
    """413: the output would exceed the server's ``POSENC_MAX_ELEMENTS``."""


class ValidationError(PosencHTTPError):
    """422: a body field is missing, unknown or out of range; ``detail`` names it."""


class TooManyRequests(PosencHTTPError):
    """429: the server's in-flight byte budget (``POSENC_MAX_INFLIGHT_BYTES``) stayed full for
    its ``POSENC_QUEUE_TIMEOUT``; raised once the retries (which honour ``Retry-After``) ran out."""


class ServerError(PosencHTTPError):
    """5xx."""


class ServiceUnavailable(ServerError):
    """503: e.g. ``/readyz`` before the models are loaded."""


_ERRORS: dict[int, type[PosencHTTPError]] = {
    401: Unauthorized,
    404: NotFound,
    406: NotAcceptable,
    409: Conflict,
    412: PreconditionFailed,
    413: PayloadTooLarge,
    422: ValidationError,
    429: TooManyRequests,
    503: ServiceUnavailable,
}


def _format_detail(detail: Any) -> str:
    """One line from a ``detail``; FastAPI's 422 list becomes ``loc: msg; loc: msg``."""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, Mapping) and "msg" in item:
                loc = ".".join(str(x) for x in item.get("loc", ()))
                parts.append(f"{loc}: {item['msg']}" if loc else str(item["msg"]))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, Mapping) else body
    except ValueError:
        detail = response.text
    code = response.status_code
    cls = _ERRORS.get(code, ServerError if code >= 500 else PosencHTTPError)
    raise cls(code, detail, response)


# --------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class SavedTable:
    """A table written to a file by :meth:`PosencClient.save_table`.

    Attributes:
        path: the file.
        nbytes: bytes written (the whole body).
        headers: the response headers (``X-Tensor-Shape``, ``ETag`` ...).
    """

    path: Any
    nbytes: int
    headers: httpx.Headers


@dataclass
class TensorResult:
    """A decoded bundle: named tensors plus ``meta``.

    Tensors are reachable as ``result["cos"]``, ``result.cos`` or :attr:`primary`; iteration
    gives the names in the endpoint's order.

    Attributes:
        tensors: name -> ``numpy.ndarray`` or ``torch.Tensor``, the endpoint's order. ``npy``
            and ``raw`` hold the primary tensor only; ``png`` holds none.
        meta: the bundle's ``meta`` (``{}`` for ``npy``, ``raw`` and ``png``, which carry none).
        format: the format that was asked for.
        media_type: the response's ``Content-Type``.
        headers: the response headers (``ETag``, ``Server-Timing``, ``X-Tensor-*``...).
        content: the response body as received (e.g. the PNG, or the safetensors file).
    """

    tensors: dict[str, Any]
    meta: dict[str, Any]
    format: str
    media_type: str
    headers: httpx.Headers = field(repr=False)
    content: bytes = field(repr=False)

    @property
    def primary(self) -> Any:
        """The bundle's primary tensor (the first the endpoint lists)."""
        if not self.tensors:
            raise KeyError(f"a {self.format!r} response holds no tensors")
        return next(iter(self.tensors.values()))

    def __getitem__(self, name: str) -> Any:
        return self.tensors[name]

    def __getattr__(self, name: str) -> Any:
        tensors = self.__dict__.get("tensors")
        if tensors is not None and name in tensors:
            return tensors[name]
        raise AttributeError(name)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def keys(self) -> list[str]:
        """The tensor names, the endpoint's order."""
        return list(self.tensors)


# --------------------------------------------------------------------------------------- decoding


def _tensor_order(path: str) -> tuple[str, ...]:
    """The endpoint's tensor names, primary first (the registry's kinds included)."""
    if path in _TENSOR_ORDER:
        return _TENSOR_ORDER[path]
    from posenc.kinds import REGISTRY

    for kind in REGISTRY.values():
        if kind.path == path:
            return tuple(t.name for t in kind.tensors)
    return ()


def _ordered(path: str, tensors: dict[str, Any]) -> dict[str, Any]:
    order = _tensor_order(path)
    out = {name: tensors[name] for name in order if name in tensors}
    out.update((k, v) for k, v in tensors.items() if k not in out)
    return out


def _safetensors_header(body: bytes) -> dict[str, Any]:
    if len(body) < 8:
        raise PosencClientError(f"not a safetensors body: {len(body)} bytes")
    n = int.from_bytes(body[:8], "little")
    header: dict[str, Any] = json.loads(body[8 : 8 + n])
    return header


def _convert(arrays: dict[str, Any], as_: ArrayKind, device: str | None) -> dict[str, Any]:
    """numpy arrays or torch tensors -> the kind asked for (bfloat16 -> float32 for numpy)."""
    if as_ == "torch":
        import torch

        out: dict[str, Any] = {}
        for name, a in arrays.items():
            t = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
            out[name] = t.to(device) if device is not None else t
        return out
    out = {}
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray):  # a torch tensor: only bfloat16 gets here
            a = a.float().numpy() if a.dtype.is_floating_point else a.numpy()
        out[name] = a
    return out


def _decode_safetensors(
    body: bytes, as_: ArrayKind, device: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    header = _safetensors_header(body)
    meta_text = header.get("__metadata__", {}).get("meta")
    meta = json.loads(meta_text) if meta_text else {}
    has_bf16 = any(
        isinstance(v, Mapping) and v.get("dtype") == "BF16"
        for k, v in header.items()
        if k != "__metadata__"
    )
    if as_ == "torch" or has_bf16:
        import safetensors.torch

        tensors: dict[str, Any] = dict(safetensors.torch.load(body))
    else:
        import safetensors.numpy

        tensors = dict(safetensors.numpy.load(body))
    return _convert(tensors, as_, device), meta


def _json_array(spec: Mapping[str, Any], name: str) -> Any:
    """One tensor of a JSON bundle -> numpy (bfloat16 -> a torch tensor)."""
    dtype = str(spec.get("dtype", "float32"))
    shape = tuple(int(s) for s in spec.get("shape", ()))
    data = spec.get("data")
    if isinstance(data, str):  # ?encoding=base64: raw little-endian C-order bytes
        raw = _base64.b64decode(data)
        if dtype == "bfloat16":
            import torch

            return torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).reshape(shape)
        return np.frombuffer(raw, dtype=_numpy_dtype(dtype, name)).reshape(shape).copy()
    if dtype.startswith("int") or dtype in ("uint8", "bool"):
        return np.asarray(data, dtype=_numpy_dtype(dtype, name)).reshape(shape)
    # null (a masked -inf; JSON has no Infinity) becomes NaN under dtype=float, then -inf.
    a = np.asarray(data, dtype=np.float64).reshape(shape)
    a[np.isnan(a)] = -np.inf
    if dtype == "bfloat16":
        import torch

        return torch.from_numpy(a).to(torch.bfloat16)
    return a.astype(_numpy_dtype(dtype, name))


def _numpy_dtype(dtype: str, name: str) -> np.dtype[Any]:
    try:
        return _NUMPY_DTYPES[dtype]
    except KeyError:
        raise PosencClientError(f"tensor {name!r} has an unknown dtype {dtype!r}") from None


def _decode_raw(response: httpx.Response, path: str) -> dict[str, Any]:
    name = response.headers.get("X-Tensor-Name") or (_tensor_order(path) or ("tensor",))[0]
    shape_text = response.headers.get("X-Tensor-Shape", "")
    shape = tuple(int(s) for s in shape_text.split(",") if s.strip())
    dtype = response.headers.get("X-Tensor-Dtype", "float32")
    if dtype == "bfloat16":
        import torch

        return {
            name: torch.frombuffer(bytearray(response.content), dtype=torch.bfloat16).reshape(shape)
        }
    a = np.frombuffer(response.content, dtype=_numpy_dtype(dtype, name)).reshape(shape)
    return {name: a.copy()}


def _decode(
    response: httpx.Response, path: str, fmt: str, as_: ArrayKind, device: str | None
) -> TensorResult:
    meta: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    if fmt == "safetensors":
        tensors, meta = _decode_safetensors(response.content, as_, device)
    elif fmt == "json":
        body = response.json()
        meta = dict(body.get("meta") or {})
        tensors = _convert(
            {k: _json_array(v, k) for k, v in body.get("tensors", {}).items()}, as_, device
        )
    elif fmt == "npy":
        name = (_tensor_order(path) or ("tensor",))[0]
        a = np.load(io.BytesIO(response.content), allow_pickle=False)
        tensors = _convert({name: a}, as_, device)
    elif fmt == "raw":
        tensors = _convert(_decode_raw(response, path), as_, device)
    return TensorResult(
        tensors=_ordered(path, tensors),
        meta=meta,
        format=fmt,
        media_type=response.headers.get("content-type", ""),
        headers=response.headers,
        content=response.content,
    )


# --------------------------------------------------------------------------------------- requests


def _body(fields: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
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


def _query(body: Mapping[str, Any]) -> dict[str, str]:
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
class _Call:
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
        return _decode(response, self.path, self.fmt or "json", self.as_, self.device)


def _check_output(format: str, as_: str, device: str | None) -> None:
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


# --------------------------------------------------------------------------------------- retries

_Outcome = httpx.Response | httpx.TransportError  # what one attempt gives: an answer or an error


class _Policy(Protocol):
    """Decides, after each attempt, whether a call is over or is tried again.

    Policies hold all the retry logic and do no I/O, so each client's ``_send`` is only the
    transport call and the sleep, sync or async.
    """

    def settle(self, outcome: _Outcome) -> httpx.Response | float:
        """The response that ends the call, or the seconds to wait before the next attempt."""
        ...


@dataclass(frozen=True)
class _Config:
    """Retry settings shared by both clients (see :class:`PosencClient` for their meaning)."""

    base_url: str
    max_attempts: int
    backoff: float
    backoff_max: float
    retry_statuses: frozenset[int]

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): exponential."""
        return float(min(self.backoff * (2 ** (attempt - 1)), self.backoff_max))


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110: delay-seconds or an HTTP-date);
    None when absent or unreadable, 0 for a date in the past."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _Backoff:
    """The endpoints' policy: up to ``max_attempts`` attempts, exponential backoff between.

    Connection errors are retried, and so are the ``retry_statuses`` unless the call opts out
    (``healthz``, ``readyz``). A retried response's ``Retry-After`` (429 overload, 503) sets the
    wait when it is longer than the backoff, up to ``backoff_max``.
    """

    def __init__(self, cfg: _Config, call: _Call) -> None:
        self.cfg, self.call, self.attempt = cfg, call, 0

    def settle(self, outcome: _Outcome) -> httpx.Response | float:
        """The successful response, or the seconds to wait before the next attempt.

        Raises:
            PosencConnectionError: a connection error on the last attempt.
            PosencHTTPError: an error status that is not retried, or the last attempt's.
        """
        self.attempt += 1
        cfg, call, last = self.cfg, self.call, self.attempt == self.cfg.max_attempts
        if isinstance(outcome, httpx.TransportError):
            if last:
                raise PosencConnectionError(
                    f"{call.method} {cfg.base_url}{call.path} failed after {cfg.max_attempts} "
                    f"attempt(s): {type(outcome).__name__}: {outcome}",
                    attempts=cfg.max_attempts,
                ) from outcome
        elif last or not (call.retry_on_status and outcome.status_code in cfg.retry_statuses):
            _raise_for_status(outcome)
            return outcome
        else:  # the server's Retry-After (429, 503) over our backoff, within backoff_max
            asked = retry_after_seconds(outcome.headers.get("retry-after"))
            if asked is not None:
                return min(max(asked, cfg.delay(self.attempt)), cfg.backoff_max)
        return cfg.delay(self.attempt)


class _Poll:
    """``wait_ready``'s policy: every ``interval`` seconds until a 2xx, for ``timeout`` seconds."""

    def __init__(self, base_url: str, timeout: float, interval: float) -> None:
        self.base_url, self.timeout, self.interval = base_url, timeout, interval
        self.deadline = time.monotonic() + timeout

    def settle(self, outcome: _Outcome) -> httpx.Response | float:
        """The 2xx response, or ``interval`` while the deadline is ahead.

        Raises:
            PosencConnectionError: still unreachable, or not ready, at the deadline.
        """
        try:
            if isinstance(outcome, httpx.TransportError):
                raise outcome
            return outcome.raise_for_status()
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            if time.monotonic() >= self.deadline:
                raise PosencConnectionError(
                    f"{self.base_url}/readyz not ready after {self.timeout} s: {exc}", attempts=0
                ) from exc
        return self.interval


def _version() -> str:
    try:
        from posenc import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


# --------------------------------------------------------------------------------------- endpoints

T = TypeVar("T")  # a TensorResult, or an Awaitable of one
J = TypeVar("J")  # a JSON document, or an Awaitable of one
HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)


def kind_method(name: str) -> Any:
    """A client method for the registry's kind ``name`` (:data:`posenc.kinds.REGISTRY`): its
    fields as keyword arguments (signature and docstring from the kind's description), the
    output options of :meth:`_BaseClient.compute`; it calls :meth:`_BaseClient.compute`."""
    from posenc.kinds import REGISTRY

    kind = REGISTRY[name]
    options = ("format", "as_", "device", "method", "query", "extra")

    def call(self: Any, **kwargs: Any) -> Any:
        given = {k: v for k, v in kwargs.items() if k not in options}
        return self.compute(name, **{k: v for k, v in kwargs.items() if k in options}, **given)

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [inspect.Parameter(f.name, keyword, default=None) for f in kind.fields]
    parameters += [inspect.Parameter(o, keyword, default="POST" if o == "method" else None)
                   for o in options]  # fmt: skip
    call.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = name.replace("-", "_")
    lines = [f"``{'GET or POST' if kind.get else 'POST'} {kind.path}``: {kind.summary}.", "",
             kind.description, "", "Args:"]  # fmt: skip
    for f in kind.fields:
        default = (
            "" if f.default is None or f.required or f.sourced else f" (default {f.default!r})"
        )
        lines.append(f"    {f.name}: {f.description.rstrip('.')}{default}.")
    lines += ["    format, as_, device, method, query, extra: as for :meth:`compute`.", "",
              "Returns:", "    A :class:`TensorResult` with "
              + ", ".join(f"``{t.name}`` ({', '.join(t.axes)})" for t in kind.tensors) + "."]  # fmt: skip
    call.__doc__ = "\n".join(lines)
    return call


class _BaseClient(Generic[T, J, HttpT, TransportT]):
    """Everything the sync and the async client share: settings, requests, endpoints.

    Each endpoint method prepares a :class:`_Call`; ``_tensor`` and ``_json`` (the subclass's
    sync or async transport) send it and decode the answer. In :class:`AsyncPosencClient`
    every endpoint method returns an awaitable.

    Type parameters: ``T`` what a tensor endpoint returns, ``J`` what a JSON endpoint returns,
    ``HttpT`` the ``httpx`` client and ``TransportT`` its transport.
    """

    _http: HttpT

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout | None = 60.0,
        max_attempts: int = 3,
        backoff: float = 0.25,
        backoff_max: float = 8.0,
        retry_statuses: Sequence[int] = (429, 502, 503, 504),
        format: Format = "safetensors",
        as_: ArrayKind = "numpy",
        device: str | None = None,
        headers: Mapping[str, str] | None = None,
        transport: TransportT | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if backoff < 0 or backoff_max < 0:
            raise ValueError(f"backoff and backoff_max must be >= 0, got {backoff}, {backoff_max}")
        _check_output(format, as_, device)
        self._format, self._as, self._device = format, as_, device
        self._cfg = _Config(
            base_url.rstrip("/"), max_attempts, backoff, backoff_max, frozenset(retry_statuses)
        )
        sent = {"User-Agent": f"posenc-client/{_version()}", **(headers or {})}
        if api_key is not None:
            sent["Authorization"] = f"Bearer {api_key}"
        self._http = self._connect(
            base_url=self._cfg.base_url, headers=sent, timeout=timeout, transport=transport
        )

    @property
    def base_url(self) -> str:
        """The service's root URL."""
        return self._cfg.base_url

    def _connect(self, **options: Any) -> HttpT:  # pragma: no cover - overridden
        """The ``httpx`` client (connection pool) made with ``options``, that requests go through."""
        raise NotImplementedError

    def _tensor(self, call: _Call) -> T:  # pragma: no cover - overridden
        """Send ``call`` and decode its answer as a :class:`TensorResult`."""
        raise NotImplementedError

    def _json(self, call: _Call) -> J:  # pragma: no cover - overridden
        """Send ``call`` and return its answer's JSON."""
        raise NotImplementedError

    def _request(self, call: _Call) -> httpx.Request:
        """The ``httpx.Request`` of one attempt at ``call``."""
        if call.content is not None:
            return self._http.build_request(
                call.method,
                call.path,
                content=call.content,
                params=call.params,
                headers=call.headers,
            )
        return self._http.build_request(
            call.method, call.path, json=call.json_body, params=call.params, headers=call.headers
        )

    def _table(
        self,
        path: str,
        fields: Mapping[str, Any],
        extra: Mapping[str, Any] | None,
        format: Format | None,
        as_: ArrayKind | None,
        device: str | None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        binary: Sequence[str] = (),
    ) -> T:
        """Call a tensor endpoint: the endpoint methods' arguments, the client's defaults
        filling those left as ``None``; ``binary``: the kind's fields that may go as an npy or
        safetensors body when given as arrays."""
        fmt = format or self._format
        kind = as_ or self._as
        dev = device if device is not None else self._device
        _check_output(fmt, kind, dev)
        if method not in ("POST", "GET"):
            raise ValueError(f"method must be 'POST' or 'GET', got {method!r}")
        # numpy / torch token ids go as an npy or safetensors body, the other fields as query
        tokens = token_body(fields, binary) if method == "POST" else None
        body = _body(fields if tokens is None else tokens.fields, extra)
        params = _query(body) if method == "GET" or tokens is not None else {}
        params.update(_query(_body(query or {}, None)))
        headers = {"Accept": MEDIA_TYPES[fmt]}
        if tokens is not None:
            headers["Content-Type"] = tokens.content_type
        call = _Call(
            method=method,
            path=path,
            json_body=body if method == "POST" and tokens is None else None,
            params=params or None,
            content=None if tokens is None else tokens.content,
            headers=headers,
            fmt=fmt,
            as_=kind,
            device=None if dev is None else str(dev),
        )
        return self._tensor(call)

    def compute(
        self,
        kind: str,
        *,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> T:
        """Any kind of the library's registry (:data:`posenc.kinds.REGISTRY`) by name.

        Args:
            kind: the kind's name, e.g. a convention registered with :func:`posenc.kinds.register`.
            format: response format (the client's default, ``safetensors``, when None).
            as_: ``"numpy"`` or ``"torch"`` (the client's default when None).
            device: torch device of the tensors (``as_="torch"`` only), e.g. ``"cuda"``.
            method: ``"POST"`` (default) or ``"GET"`` (same bytes; cacheable by HTTP caches).
            query: extra URL query parameters, e.g. ``{"index": 2}`` (the panel of a png).
            extra: further body fields, sent as given, ``None`` as ``null`` (for fields newer
                than this client, or to send an explicit null that overrides a preset's value).
            **fields: the kind's request fields (``None`` values are not sent).

        Returns:
            A :class:`TensorResult` with the kind's tensors in its order.

        Raises:
            ValueError: an unknown kind, or a field the kind does not have (before any request).
        """
        from posenc.kinds import REGISTRY

        spec = REGISTRY.get(kind)
        if spec is None:
            raise ValueError(
                f"unknown kind {kind!r}; registered: {', '.join(REGISTRY) or '(none)'}"
            )
        unknown = sorted(set(fields) - set(spec.field_names))
        if unknown:
            raise ValueError(f"{kind} has no field(s) {unknown}; its fields: {spec.field_names}")
        return self._table(
            spec.path, fields, extra, format, as_, device, method, query, spec.binary_fields
        )

    # -- the registry's kinds: one method each, from its description (posenc.kinds) ----------
    # A 2-D numpy array or torch tensor of token ids (and of attention_mask / position_ids) is
    # sent as an application/x-npy or application/vnd.safetensors body, the other fields as
    # query parameters; lists are sent as JSON.

    sinusoidal = kind_method("sinusoidal")
    learned = kind_method("learned")
    rope = kind_method("rope")
    alibi = kind_method("alibi")
    relative = kind_method("relative")

    position_ids = kind_method("position_ids")
    mrope_position_ids = kind_method("mrope_position_ids")
    embed = kind_method("embed")

    # -- catalogue and operations ------------------------------------------------------------

    def models(self) -> J:
        """``GET /v1/models``: ``{"default": NAME, "models": [{name, vocab_size, d_model, ...}]}``."""
        return self._json(_Call("GET", "/v1/models"))

    def presets(self) -> J:
        """``GET /v1/presets``: ``{"presets": [{"name", "kind", "params", "source"}, ...]}``."""
        return self._json(_Call("GET", "/v1/presets"))

    def config_positions(self, config: Mapping[str, Any]) -> J:
        """``POST /v1/configs/positions``: what a model's ``config.json`` (a mapping, e.g.
        ``json.load(open("config.json"))``) means for positions: kind, head and rotary dims,
        layout, layer types, RoPE per layer type, softmax scale, warnings. For the tables of a
        config, pass ``config=`` to :meth:`rope`, :meth:`alibi`, :meth:`relative` or
        :meth:`learned`."""
        return self._json(
            _Call("POST", "/v1/configs/positions", json_body={"config": dict(config)})
        )

    def info(self) -> J:
        """``GET /v1/info``: version, torch version, device, CUDA availability, limits."""
        return self._json(_Call("GET", "/v1/info"))

    def healthz(self) -> J:
        """``GET /healthz``: the server's JSON (200 while the process runs)."""
        return self._json(_Call("GET", "/healthz", retry_on_status=False))

    def readyz(self) -> J:
        """``GET /readyz``: the server's JSON once models are loaded.

        Raises:
            ServiceUnavailable: 503 while the server is still loading.
        """
        return self._json(_Call("GET", "/readyz", retry_on_status=False))


# --------------------------------------------------------------------------------------- clients


class PosencClient(_BaseClient[TensorResult, Any, httpx.Client, httpx.BaseTransport]):
    """Synchronous client of the posenc service.

    Every compute endpoint of the service is deterministic (identical requests give
    byte-identical bodies, no state changes), so this client retries the POSTs as well as the
    GETs: on connection errors (refused, reset, timed out; any ``httpx.TransportError``) and on
    the statuses in ``retry_statuses``, waiting ``backoff * 2**(n-1)`` seconds (at most
    ``backoff_max``) after the n-th failed attempt, or the response's ``Retry-After`` when that is
    longer (still at most ``backoff_max``). ``healthz`` and ``readyz`` are retried on
    connection errors only: their status is the answer.

    Args:
        base_url: the service's root, default ``http://127.0.0.1:8000``.
        api_key: sent as ``Authorization: Bearer <api_key>`` (servers with ``POSENC_API_KEY``).
        timeout: seconds per request (connect, read, write, pool), or an ``httpx.Timeout``.
        max_attempts: attempts per call, >= 1 (1 means no retry).
        backoff: seconds before the first retry; doubled for each further one.
        backoff_max: the longest wait between attempts.
        retry_statuses: HTTP statuses that are retried like connection errors.
        format: default response format of the tensor endpoints.
        as_: default array kind, ``"numpy"`` or ``"torch"``.
        device: default torch device (with ``as_="torch"``).
        headers: extra headers sent with every request.
        transport: an ``httpx`` transport (tests; proxies; ``httpx.HTTPTransport(uds=...)``).

    Example:
        >>> with PosencClient(api_key="secret") as client:
        ...     r = client.alibi(num_heads=8, seq_len=16)
        ...     r.slopes          # array([0.5, 0.25, ..., 0.00390625], dtype=float32)
    """

    def _connect(self, **options: Any) -> httpx.Client:
        return httpx.Client(**options)

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _send(self, call: _Call, policy: _Policy | None = None) -> httpx.Response:
        """Send ``call`` until ``policy`` (default: the client's retries) settles it."""
        policy = policy or _Backoff(self._cfg, call)
        while True:
            try:
                outcome: _Outcome = self._http.send(self._request(call))
            except httpx.TransportError as exc:
                outcome = exc
            step = policy.settle(outcome)
            if isinstance(step, httpx.Response):
                return step
            self._sleep(step)

    def _tensor(self, call: _Call) -> TensorResult:
        return call.decode(self._send(call))

    def _json(self, call: _Call) -> Any:
        return self._send(call).json()

    def wait_ready(self, timeout: float = 30.0, interval: float = 0.1) -> Any:
        """Poll ``/readyz`` until it answers 200; return its JSON.

        Args:
            timeout: seconds to keep trying.
            interval: seconds between polls.

        Raises:
            PosencConnectionError: still unreachable, or not ready, after ``timeout``.
        """
        return self._send(_Call("GET", "/readyz"), _Poll(self.base_url, timeout, interval)).json()

    def save_table(
        self,
        kind: Literal["sinusoidal", "learned", "rope", "alibi", "relative"],
        path: str | Any,
        *,
        format: Literal["raw", "npy", "safetensors"] = "npy",
        method: Method = "POST",
        progress: Callable[[int, int | None], None] | None = None,
        chunk_size: int = 1 << 20,
        extra: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> SavedTable:
        """Write a table's body to ``path`` as it arrives, without holding it in memory.

        For tables over the server's ``POSENC_MAX_ELEMENTS``, which it streams in raw, npy and
        safetensors (up to ``POSENC_MAX_STREAM_ELEMENTS``). The body goes to ``PATH.part`` in
        chunks and is renamed to ``path`` once all of ``Content-Length`` has arrived, so a
        failed download never leaves a truncated file under the final name.

        Args:
            kind: ``"sinusoidal"``, ``"learned"``, ``"rope"``, ``"alibi"`` or ``"relative"``.
            path: the file to write (replaced if it exists).
            format: ``"npy"`` (default), ``"safetensors"`` or ``"raw"``.
            method: ``"POST"`` (default) or ``"GET"``.
            progress: called as ``progress(bytes_so_far, content_length)`` after each chunk.
            chunk_size: bytes per read.
            extra: further body fields sent as given (see :meth:`sinusoidal`).
            **fields: the endpoint's body fields (``seq_len=..., head_dim=...``); ``None``
                values are left out.

        Returns:
            :class:`SavedTable`: the path, the bytes written and the response headers.

        Raises:
            ValueError: an unknown ``kind`` or ``format``.
            PosencHTTPError: the server refused the request (e.g. 413 over the stream limit).
            PosencConnectionError: unreachable, or the body ended before ``Content-Length``.
        """
        from pathlib import Path

        from posenc.kinds import REGISTRY

        paths = {name: spec.path for name, spec in REGISTRY.items()}
        if kind not in paths:
            raise ValueError(f"kind must be one of {list(paths)}, got {kind!r}")
        if format not in ("raw", "npy", "safetensors"):
            raise ValueError(f"format must be 'raw', 'npy' or 'safetensors', got {format!r}")
        body = _body(fields, extra)
        call = _Call(
            method=method,
            path=paths[kind],
            json_body=body if method == "POST" else None,
            params=_query(body) if method == "GET" else None,
            headers={"Accept": MEDIA_TYPES[format]},
            fmt=format,
        )
        policy = _Backoff(self._cfg, call)
        while True:
            outcome: _Outcome
            try:
                response = self._http.send(self._request(call), stream=True)
            except httpx.TransportError as exc:
                outcome = exc
            else:
                if response.status_code >= 400:  # read the detail, free the connection
                    response.read()
                    response.close()
                outcome = response
            step = policy.settle(outcome)
            if isinstance(step, httpx.Response):
                break
            self._sleep(step)
        target = Path(path)
        partial = target.with_name(target.name + ".part")
        length_text = step.headers.get("content-length")
        length = int(length_text) if length_text is not None else None
        written = 0
        try:
            with partial.open("wb") as f:
                for chunk in step.iter_bytes(chunk_size):
                    f.write(chunk)
                    written += len(chunk)
                    if progress is not None:
                        progress(written, length)
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise PosencConnectionError(
                f"{call.method} {self.base_url}{call.path}: the body broke off after {written} "
                f"of {length if length is not None else '?'} bytes: {exc}",
                attempts=1,
            ) from exc
        finally:
            step.close()
        if length is not None and written != length:
            partial.unlink(missing_ok=True)
            raise PosencConnectionError(
                f"{call.method} {self.base_url}{call.path}: got {written} of {length} bytes",
                attempts=1,
            )
        partial.replace(target)
        return SavedTable(target, written, step.headers)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> PosencClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncPosencClient(
    _BaseClient[
        Awaitable[TensorResult], Awaitable[Any], httpx.AsyncClient, httpx.AsyncBaseTransport
    ]
):
    """Asynchronous client of the posenc service: :class:`PosencClient`'s methods, awaited.

    Takes the same arguments as :class:`PosencClient` (``transport`` an
    ``httpx.AsyncBaseTransport``) and retries the same way: the compute endpoints are
    deterministic, so POSTs are as safe to retry as GETs. Decoding large bodies runs in a worker
    thread so that the event loop stays free.

    Example:
        >>> async with AsyncPosencClient() as client:
        ...     r = await client.rope(preset="llama-2-7b", seq_len=4096)
    """

    def _connect(self, **options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(**options)

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _send(self, call: _Call, policy: _Policy | None = None) -> httpx.Response:
        """Send ``call`` until ``policy`` (default: the client's retries) settles it."""
        policy = policy or _Backoff(self._cfg, call)
        while True:
            try:
                outcome: _Outcome = await self._http.send(self._request(call))
            except httpx.TransportError as exc:
                outcome = exc
            step = policy.settle(outcome)
            if isinstance(step, httpx.Response):
                return step
            await self._sleep(step)

    async def _tensor(self, call: _Call) -> TensorResult:
        return await asyncio.to_thread(call.decode, await self._send(call))

    async def _json(self, call: _Call) -> Any:
        return (await self._send(call)).json()

    async def wait_ready(self, timeout: float = 30.0, interval: float = 0.1) -> Any:
        """Poll ``/readyz`` until it answers 200; return its JSON (see :meth:`PosencClient.wait_ready`)."""
        poll = _Poll(self.base_url, timeout, interval)
        return (await self._send(_Call("GET", "/readyz"), poll)).json()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPosencClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
