"""Plans: a validated request as a :class:`Plan` (its kind and its parameters), the one place
an output is refused as too large (:func:`check_output`), and the cheap first half of every
response (:func:`prepare`): sizes, format, ETag, cache.

A compute route only builds a :class:`Plan` (the kind, the resolved parameters and a closure
that calls posenc) and hands it to :func:`service.responses.respond.respond`, which in order

1. refuses a plan larger than ``max_elements`` with 413 (nothing is allocated yet), unless it
   is a table with row blocks, streamed up to ``max_stream_elements`` (:func:`check_plan`);
2. negotiates the format (406 lists what the endpoint can give);
3. derives the ETag from a canonical key of the request (route, params after the preset or
   config merge, format, encoding, index, model fingerprint, device, version) and answers a
   matching ``If-None-Match`` with 304 (GET) or 412 (other methods), without computing;
4. serves the encoded body from the cache, or, on a miss, looks for the computed tensors and
   estimates the bytes the miss takes from the in-flight budget;
5. chooses the path (:func:`service.responses.respond.choose`) and serves it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import torch
from fastapi import Request
from fastapi.responses import Response

import posenc
from posenc.core import kinds
from posenc.core.errors import TooLarge
from service.admission.budget import json_ints
from service.config import Settings
from service.formats import STREAM_FORMATS, Bundle, http_response, negotiate
from service.query import OutputOptions
from service.state import ServiceState

__all__ = [
    "Plan",
    "Prepared",
    "check_output",
    "check_plan",
    "check_row",
    "check_size",
    "json_ints",
    "prepare",
]


@dataclass
class Plan:
    """A validated request, ready to run: its kind and its parameters, and how to compute them.

    What the response path needs to know of the request (its route, tensor names, sizes, model,
    whether its tensors are cached, its widest row, its compute's working bytes) is read from
    the kind and the parameters (the properties below), never copied.

    Attributes:
        kind: the registered kind (:mod:`posenc.core.kinds`).
        params: the fields resolved by the library (preset or config merged, tensors of a
            binary body included).
        compute: builds the bundle; called only on a cache miss.
        stream: tables only: the bundle as row blocks (a
            :class:`service.responses.streaming.StreamBundle`), for a table sent as it is
            computed (kept) or over ``max_elements`` (streamed); None where the kind has no row
            blocks for these parameters.
        tensors_key: a binary body's tensors by their digest (part of the cache key), if any.
    """

    kind: kinds.Kind
    params: dict[str, Any]
    compute: Callable[[], Bundle]
    stream: Callable[[], Any] | None = None
    tensors_key: str | None = None
    # worked out once, from the numbers alone, when the plan is made (nothing is allocated):
    # each output tensor's shape, their elements together (checked against max_elements), and
    # the integers of the JSON lists the request holds (service.admission.budget.json_ints)
    shapes: kinds.Shapes = field(init=False)
    names: tuple[str, ...] = field(init=False)
    elements: int = field(init=False)
    allocations: Mapping[str, int] = field(init=False)
    row_elements: int = field(init=False)
    json_ints: int = field(init=False)

    def __post_init__(self) -> None:
        kind, params = self.kind, self.params
        self.shapes = kind.shapes(params)
        self.names = tuple(self.shapes)  # primary first
        self.elements = kinds.elements(self.shapes)
        # other element counts the compute allocates (e.g. a bias table), checked too
        self.allocations = kind.allocations(params) if kind.allocations is not None else {}
        # the widest row of a streamed table's tensors (their last dimension: d_model,
        # rotary_dim, key_len): a stream computes at least one row at a time
        widest = kind.row_elements
        self.row_elements = widest(params) if widest is not None and self.stream else 0
        self.json_ints = json_ints(self.params)

    @property
    def route(self) -> str:
        """The route template (``/v1/encodings/sinusoidal``): part of the cache key."""
        return self.kind.path

    @property
    def key(self) -> dict[str, Any]:
        """The parameters as a cache key (JSON-able): a binary body's tensors by their digest.
        A config merged by the kind's sources is None here (what was read of it stands in); a
        kind that reads its config itself keeps it, whole: two configs give two tables."""
        key = {k: v for k, v in self.params.items() if not isinstance(v, torch.Tensor)}
        if self.tensors_key is not None:
            key["tensors"] = self.tensors_key
        return key

    @property
    def model(self) -> str | None:
        """The model the output depends on (its fingerprint joins the key), if any."""
        field_name = self.kind.model_field
        return self.params.get(field_name) if field_name is not None else None


def check_output(
    requested: int,
    limit: int,
    what: str = "the output",
    *,
    names: Sequence[str] = (),
    field: str | None = None,
    over: str = "the limit",
    setting: str = "POSENC_MAX_ELEMENTS",
    advice: str = "",
    message: str | None = None,
) -> None:
    """The one place the service refuses an output as too large: TooLarge (413) when
    ``requested`` elements exceed ``limit``, before anything is allocated.

    The message reads ``{what} would have {requested} elements ({names}), over {over} of
    {limit} elements ({setting}){advice}``; ``message`` replaces it where the numbers are not
    elements of the output (a body's declared bytes, a text's characters)."""
    if requested <= limit:
        return
    if message is None:
        listed = f" ({' + '.join(names)})" if names else ""
        message = (
            f"{what} would have {requested} elements{listed}, over {over} of {limit} elements "
            f"({setting}){advice}"
        )
    raise TooLarge(message, limit=limit, requested=requested, field=field)


def check_size(plan: Plan, limit: int) -> None:
    """TooLarge (413) when the output, or anything computed on the way, exceeds ``limit``."""
    check_output(
        plan.elements,
        limit,
        names=plan.names or ("all tensors",),
        advice="; ask for fewer positions, heads or a smaller batch",
    )
    for what, count in plan.allocations.items():
        check_output(count, limit, what, field=what)


def check_row(name: str, row_elements: int, limit: int) -> None:
    """TooLarge (413) for a table whose one row (its last dimension) is wider than ``limit``
    elements: a block holds at least one row, computed in float64, so such a row would take
    the memory streaming is meant to bound (``d_model`` 2**30 with ``seq_len`` 1, say)."""
    check_output(
        row_elements,
        limit,
        f"one row of {name}",
        advice=" for a row of a streamed table; streaming splits tables by rows (positions), "
        "so ask for a smaller d_model, head_dim or key_len",
    )


def check_plan(plan: Plan, settings: Settings, fmt: str | None, *, streams: bool) -> None:
    """Every size check of a plan, before anything is allocated: TooLarge (413) over
    ``max_elements``; for a table streamed past it (``streams``), a format that does not
    stream, over ``max_stream_elements``, an allocation over it, or a row over ``max_elements``.
    """
    if not streams:
        check_size(plan, settings.max_elements)
        return
    names = plan.names or ("all tensors",)
    if fmt not in STREAM_FORMATS:
        check_output(
            plan.elements,
            settings.max_elements,
            names=names,
            field="format",
            advice=f" for {fmt}; raw, npy and safetensors stream tables up to "
            f"{settings.max_stream_elements} elements (POSENC_MAX_STREAM_ELEMENTS): ask for "
            "?format=raw, npy or safetensors, or fewer positions",
        )
    check_output(
        plan.elements,
        settings.max_stream_elements,
        names=names,
        over="the streaming limit",
        setting="POSENC_MAX_STREAM_ELEMENTS",
        advice="; ask for fewer positions, heads or a shorter key length",
    )
    for what, count in plan.allocations.items():
        check_output(count, settings.max_stream_elements, what, field=what)
    # before the stream is built: building it may make a row's worth of frequencies
    check_row(
        plan.names[0] if plan.names else "the table", plan.row_elements, settings.max_elements
    )


def _canonical(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 If-None-Match: ``*`` or a list of entity tags, compared weakly."""
    value = if_none_match.strip()
    if value == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == bare for tag in value.split(","))


@dataclass
class Prepared:
    """What :func:`prepare` worked out: a finished response (304, 412, cache hit), or what a
    miss needs: its format, keys and headers, the cached tensors if any, and the path
    :func:`service.responses.respond.choose` gave it."""

    response: Response | None
    fmt: str = "json"
    base64: bool = False
    index: int | None = None
    table_text: str = ""
    body_key: tuple[str, str] = ("body", "")
    headers: dict[str, str] = field(default_factory=dict)
    # the computed tensors, found in the cache (the whole path encodes them)
    bundle: Bundle | None = None
    # "whole", "kept" or "streamed"; the bytes it takes from the in-flight budget; kept and
    # streamed: the body's row blocks (a service.responses.streaming.Body)
    path: str = "whole"
    nbytes: int = 0
    body: Any = None
    # seconds of the miss, for Server-Timing and the access log (service.observability.timing)
    queue_s: float = 0.0
    compute_s: float = 0.0
    encode_s: float = 0.0


def prepare(
    request: Request, state: ServiceState, plan: Plan, out: OutputOptions, *, streams: bool
) -> Prepared:
    """Steps 1-4 of the module docstring, for a plan that is (``streams``) or is not streamed
    past ``max_elements``: no tensor is made here, safe on the event loop.

    Raises:
        TooLarge: (413) see :func:`check_plan`; a streamed plan's format is negotiated first.
        NotAcceptable: (406) no acceptable format.
    """
    accept = request.headers.get("accept")
    table_key = {
        "route": plan.kind.path,
        "params": plan.key,
        "model": state.fingerprints.get(plan.model) if plan.model else None,
        "device": str(state.device),
        "version": posenc.__version__,
    }
    table_text = _canonical(table_key)
    fmt = negotiate(accept, out.format) if streams else None
    check_plan(plan, state.settings, fmt, streams=streams)
    fmt = fmt or negotiate(accept, out.format)
    base64 = fmt == "json" and out.encoding == "base64"
    index = out.index if fmt == "png" else None
    body_text = _canonical({"table": table_text, "format": fmt, "base64": base64, "index": index})
    etag = f'"{hashlib.blake2b(body_text.encode(), digest_size=16).hexdigest()}"'

    headers = {"ETag": etag, "Vary": "Accept"}
    if request.method == "GET":
        scope = "private" if state.settings.api_key else "public"
        # a model's table changes with its file: make caches revalidate (a cheap 304)
        headers["Cache-Control"] = f"{scope}, no-cache" if plan.model else f"{scope}, max-age=86400"

    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and _etag_matches(if_none_match, etag):
        if request.method in ("GET", "HEAD"):
            return Prepared(Response(status_code=304, headers=headers))
        detail = {"detail": "If-None-Match: the current representation matches " + etag}
        return Prepared(
            Response(
                content=_canonical(detail),
                status_code=412,
                media_type="application/json",
                headers=headers,
            )
        )

    body_key = ("body", body_text)
    cache, metrics = state.cache, state.metrics
    cached = cache.get(body_key)
    metrics.record_cache("body", cached is not None)
    if cached is not None:
        hit = http_response(
            cached, fmt, plan.kind.path, plan.names, headers, "hit", compute=0.0, encode=0.0
        )
        return Prepared(hit, fmt, body_key=body_key)
    bundle = None
    if plan.kind.cache_tensors and not streams:  # another format of it may have computed them
        bundle = cache.get(("tensors", table_text))
        metrics.record_cache("tensors", bundle is not None)
    return Prepared(None, fmt, base64, index, table_text, body_key, headers, bundle)
