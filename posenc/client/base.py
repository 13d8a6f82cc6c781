"""What the sync and async clients share: one method per kind of the registry
(:func:`kind_method`), the catalogue and operations, and the building of requests."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import httpx

from posenc import __version__
from posenc.client.calls import (
    DEFAULT_BASE_URL,
    MEDIA_TYPES,
    Call,
    Format,
    Method,
    check_output,
    query_params,
    request_body,
)
from posenc.client.methods import KindMethods
from posenc.client.request_bodies import tensor_body, token_body
from posenc.client.results import ArrayKind
from posenc.client.retry import RetryConfig
from posenc.core import codec
from posenc.core.kinds import REGISTRY


def _version() -> str:
    return __version__


# --------------------------------------------------------------------------------------- endpoints

T = TypeVar("T")  # a TensorResult, or an Awaitable of one
J = TypeVar("J")  # a JSON document, or an Awaitable of one
HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)


def _tensor_fields(path: str) -> tuple[str, ...]:
    """The ``tensor`` fields of the registered kind at ``path`` (none for another path)."""
    for spec in REGISTRY.values():
        if spec.path == path:
            return tuple(f.name for f in spec.fields if f.type == "tensor")
    return ()


def kind_method(name: str) -> Any:
    """A client method for the registry's kind ``name`` (:data:`posenc.core.kinds.REGISTRY`): its
    fields as keyword arguments (signature and docstring from the kind's description), the
    output options of :meth:`BaseClient.compute`; it calls :meth:`BaseClient.compute`."""
    kind = REGISTRY[name]
    options = ("format", "as_", "device", "method", "query", "extra")

    field_of = {f.arg_name: f.name for f in kind.fields}  # ``output`` sends ``as``

    def call(self: Any, **kwargs: Any) -> Any:
        given = {field_of.get(k, k): v for k, v in kwargs.items() if k not in options}
        return self.compute(name, **{k: v for k, v in kwargs.items() if k in options}, **given)

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [inspect.Parameter(f.arg_name, keyword, default=None) for f in kind.fields]
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
        lines.append(f"    {f.arg_name}: {f.description.rstrip('.')}{default}.")
    lines += ["    format, as_, device, method, query, extra: as for :meth:`compute`.", "",
              "Returns:", "    A :class:`TensorResult` with "
              + ", ".join(f"``{t.name}`` ({', '.join(t.axes)})" for t in kind.tensors) + "."]  # fmt: skip
    call.__doc__ = "\n".join(lines)
    return call


class BaseClient(KindMethods[T], Generic[T, J, HttpT, TransportT]):
    """Everything the sync and the async client share: settings, requests, endpoints.

    Each endpoint method prepares a :class:`Call`; ``_tensor`` and ``_json`` (the subclass's
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
        check_output(format, as_, device)
        self._format, self._as, self._device = format, as_, device
        self._cfg = RetryConfig(
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

    def _tensor(self, call: Call) -> T:  # pragma: no cover - overridden
        """Send ``call`` and decode its answer as a :class:`TensorResult`."""
        raise NotImplementedError

    def _json(self, call: Call) -> J:  # pragma: no cover - overridden
        """Send ``call`` and return its answer's JSON."""
        raise NotImplementedError

    def _request(self, call: Call) -> httpx.Request:
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
        check_output(fmt, kind, dev)
        if method not in ("POST", "GET"):
            raise ValueError(f"method must be 'POST' or 'GET', got {method!r}")
        # numpy / torch token ids go as an npy or safetensors body, the other fields as query
        tokens = token_body(fields, binary) if method == "POST" else None
        body = request_body(fields if tokens is None else tokens.fields, extra)
        params = query_params(body) if method == "GET" or tokens is not None else {}
        params.update(query_params(request_body(query or {}, None)))
        # float tensors (a kind's tensor fields) keep their dtype: a safetensors body
        held = tokens
        if held is None and method == "POST":
            held = tensor_body(fields, _tensor_fields(path), body)
        headers = {"Accept": MEDIA_TYPES[fmt]}
        if held is not None:
            headers["Content-Type"] = held.content_type
        call = Call(
            method=method,
            path=path,
            json_body=body if method == "POST" and held is None else None,
            params=params or None,
            content=None if held is None else held.content,
            headers=headers,
            fmt=fmt,
            as_=kind,
            device=None if dev is None else str(dev),
        )
        return self._tensor(call)

    def compute(
        self,
        kind: str,
        /,
        *,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> T:
        """Any kind of the library's registry (:data:`posenc.core.kinds.REGISTRY`) by name.

        Args:
            kind: the kind's name, e.g. a convention registered with :func:`posenc.core.kinds.register`.
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

    # -- the registry's kinds: one method each, from its description (posenc.core.kinds) ----------
    # A 2-D numpy array or torch tensor of token ids (and of attention_mask / position_ids) is
    # sent as an application/x-npy or application/vnd.safetensors body, the other fields as
    # query parameters; lists are sent as JSON.

    # The registry's built-in kinds are typed methods of KindMethods (posenc/client/methods.py,
    # generated from the registry); a kind registered at run time is reached by __getattr__.

    def __getattr__(self, name: str) -> Any:
        kind = next((k for k in REGISTRY if k.replace("-", "_") == name), None)
        if kind is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return kind_method(kind).__get__(self, type(self))

    # -- RoPE applied to vectors (POST /v1/rope/apply) ----------------------------------------

    def rope_apply(
        self,
        q: Any = None,
        k: Any = None,
        *,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        **fields: Any,
    ) -> T:
        """``POST /v1/rope/apply``: ``q`` (T, H, D) and ``k`` (T, H_kv, D) rotated as the model
        applies RoPE (tensors ``q`` and ``k`` of the answer, ``meta``: layout, rotary_dim,
        attention_scaling, engine, precision).

        Args:
            q, k: numpy arrays or torch tensors, sent as a safetensors body in their own dtype
                (the fields in its ``__metadata__`` under ``request``); None with ``seed`` and
                ``num_heads`` in ``fields`` for the seeded vectors.
            fields: the endpoint's fields (``config`` or ``preset``, ``positions`` or
                ``seq_len``, ``offset``, ``engine``, ``precision`` ...).
        """
        fmt = format or self._format
        kind = as_ or self._as
        dev = device if device is not None else self._device
        check_output(fmt, kind, dev)
        body = request_body(fields, None)
        headers = {"Accept": MEDIA_TYPES[fmt]}
        content = None
        if q is not None:
            arrays = {"q": q} if k is None else {"q": q, "k": k}
            tensors = {
                n: v.detach().cpu() if hasattr(v, "detach") else v for n, v in arrays.items()
            }
            content = codec.encode_safetensors(tensors, {"request": json.dumps(body)})
            headers["Content-Type"] = "application/vnd.safetensors"
        call = Call(
            method="POST",
            path="/v1/rope/apply",
            json_body=body if content is None else None,
            content=content,
            headers=headers,
            fmt=fmt,
            as_=kind,
            device=None if dev is None else str(dev),
        )
        return self._tensor(call)

    # -- text: a model's tokenizer -----------------------------------------------------------
    # (embed and position_ids take ``text=[...]`` in place of ``input_ids``: a field of theirs)

    def tokenize(
        self,
        text: str | Sequence[str],
        *,
        model: str | None = None,
        add_special_tokens: bool | None = None,
    ) -> J:
        """``POST /v1/tokenize``: ``{"input_ids", "tokens", "offsets"}``, one row per text (a
        string is one row), as ``tokenizers``' ``encode_batch`` gives them.

        Args:
            text: a string or a list of strings.
            model: a name from :meth:`models` whose ``tokenizer`` is true (default: the
                service's default model, which has one).
            add_special_tokens: add the tokenizer's special tokens (the server's default: true).
        """
        texts = text if isinstance(text, str) else list(text)
        fields = {"text": texts, "model": model, "add_special_tokens": add_special_tokens}
        return self._json(Call("POST", "/v1/tokenize", json_body=request_body(fields, None)))

    def detokenize(
        self,
        input_ids: Any,
        *,
        model: str | None = None,
        skip_special_tokens: bool | None = None,
    ) -> J:
        """``POST /v1/detokenize``: ``{"text": [...]}``, one string per row of ``input_ids``
        (lists of ints, ragged allowed, or a 2-D array), as ``decode_batch`` gives them.

        Raises:
            ValidationError: an id outside the tokenizer's vocabulary (the detail names
                ``input_ids[ROW][COL]``).
        """
        fields = {
            "input_ids": input_ids,
            "model": model,
            "skip_special_tokens": skip_special_tokens,
        }
        return self._json(Call("POST", "/v1/detokenize", json_body=request_body(fields, None)))

    # -- catalogue and operations ------------------------------------------------------------

    def models(self) -> J:
        """``GET /v1/models``: ``{"default": NAME, "models": [{name, vocab_size, d_model, ...}]}``."""
        return self._json(Call("GET", "/v1/models"))

    def presets(self) -> J:
        """``GET /v1/presets``: ``{"presets": [{"name", "kind", "params", "source"}, ...]}``."""
        return self._json(Call("GET", "/v1/presets"))

    def config_positions(self, config: Mapping[str, Any]) -> J:
        """``POST /v1/configs/positions``: what a model's ``config.json`` (a mapping, e.g.
        ``json.load(open("config.json"))``) means for positions: kind, head and rotary dims,
        layout, layer types, RoPE per layer type, softmax scale, warnings. For the tables of a
        config, pass ``config=`` to :meth:`rope`, :meth:`alibi`, :meth:`relative` or
        :meth:`learned`."""
        return self._json(Call("POST", "/v1/configs/positions", json_body={"config": dict(config)}))

    def info(self) -> J:
        """``GET /v1/info``: version, torch version, device, CUDA availability, limits."""
        return self._json(Call("GET", "/v1/info"))

    def healthz(self) -> J:
        """``GET /healthz``: the server's JSON (200 while the process runs)."""
        return self._json(Call("GET", "/healthz", retry_on_status=False))

    def readyz(self) -> J:
        """``GET /readyz``: the server's JSON once models are loaded.

        Raises:
            ServiceUnavailable: 503 while the server is still loading.
        """
        return self._json(Call("GET", "/readyz", retry_on_status=False))
