"""Plans: a validated request as a :class:`Plan`, and the whole path that turns one into a
negotiated, cached, ETagged response (:func:`prepare`, then :func:`finish` in the thread pool).

A compute route only builds a :class:`Plan` (the normalised params, the output element count
and a closure that calls posenc) and hands it to :func:`service.responses.respond.respond`, which in order

1. refuses a plan larger than ``max_elements`` with 413 (nothing is allocated yet), or hands a
   table over it to :mod:`service.responses.streaming`;
2. negotiates the format (406 lists what the endpoint can give);
3. derives the ETag from a canonical key of the request (route, params after the preset or
   config merge, format, encoding, index, model fingerprint, device, version) and answers a
   matching ``If-None-Match`` with 304 (GET) or 412 (other methods), without computing;
4. serves the encoded body from the cache; on a miss takes the response's estimated bytes from
   the in-flight budget (:mod:`service.admission.budget`: 429 when none frees up in time), then
   computes (or takes the cached tensors) and encodes in the thread pool;
5. caches the body, and sets ``Vary``, ``ETag``, ``Server-Timing``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import torch
from fastapi import Request
from fastapi.responses import Response

import posenc
from posenc import kinds
from posenc.errors import TooLarge
from service.observability import tracing
from service.observability.timing import server_timing
from service.query import OutputOptions
from service.responses.formats import Bundle, Encoded, encode_bundle, negotiate
from service.responses.threads import ONE_THREAD_ELEMENTS, one_thread_if
from service.state import ServiceState


@dataclass
class Plan:
    """A validated request, ready to run.

    Attributes:
        route: the route template (``/v1/encodings/sinusoidal``): part of the cache key.
        params: the normalised request after the preset merge (JSON-able): the rest of the key.
        elements: elements of all output tensors together (checked against ``max_elements``).
        compute: builds the bundle; called only on a cache miss.
        names: the tensor names, primary first (for the 413 message).
        allocations: other element counts the compute allocates (e.g. a bias table), each
            checked against ``max_elements`` too.
        model: the model the output depends on (its fingerprint joins the key), if any.
        cache_tensors: keep the computed bundle in the cache (tables: yes; token batches: no).
    """

    route: str
    params: dict[str, Any]
    elements: int
    compute: Callable[[], Bundle]
    names: Sequence[str] = ()
    allocations: Mapping[str, int] = field(default_factory=dict)
    model: str | None = None
    cache_tensors: bool = True
    # tables only: the bundle as row blocks (a service.responses.streaming.StreamBundle), used when the
    # output is over max_elements and asked as raw, npy or safetensors
    stream: Callable[[], Any] | None = None
    # the widest row of the tables (their last dimension: d_model, rotary_dim, key_len): a
    # stream computes at least one row at a time, so a row over max_elements is not streamed
    row_elements: int = 0
    # peak bytes per output element the compute holds beyond its outputs (the kind's own figure)
    work_bytes_per_element: int = 0


def json_ints(params: Mapping[str, Any]) -> int:
    """The integers of the lists a JSON body gave (token rows ``input_ids``,
    ``attention_mask``, ``position_ids``; a table's ``positions``): what the request holds as
    Python lists while it computes."""
    total = 0
    for name in kinds.int_list_fields():  # binary bodies leave them out of the params
        rows = params.get(name)
        if isinstance(rows, list):
            total += sum(len(row) if isinstance(row, list) else 1 for row in rows)
    return total


def check_size(plan: Plan, limit: int) -> None:
    """TooLarge (413) when the output, or anything computed on the way, exceeds ``limit``."""
    if plan.elements > limit:
        raise TooLarge(
            f"the output would have {plan.elements} elements "
            f"({' + '.join(plan.names) or 'all tensors'}), over the limit of {limit} elements "
            "(POSENC_MAX_ELEMENTS); ask for fewer positions, heads or a smaller batch",
            limit=limit,
            requested=plan.elements,
            field=None,
        )
    for what, count in plan.allocations.items():
        if count > limit:
            raise TooLarge(
                f"{what} would have {count} elements, over the limit of {limit} elements "
                "(POSENC_MAX_ELEMENTS)",
                limit=limit,
                requested=count,
                field=what,
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
    """What :func:`prepare` worked out: a finished response (304, 412, cache hit), or what
    :func:`finish` needs to compute and encode."""

    response: Response | None
    fmt: str = "json"
    base64: bool = False
    index: int | None = None
    table_text: str = ""
    body_key: tuple[str, str] = ("body", "")
    headers: dict[str, str] = field(default_factory=dict)
    # seconds of the miss, for Server-Timing and the access log (service.observability.timing)
    queue_s: float = 0.0
    compute_s: float = 0.0
    encode_s: float = 0.0


def prepare(
    request: Request,
    state: ServiceState,
    plan: Plan,
    out: OutputOptions,
    *,
    limit: int | None = None,
) -> Prepared:
    """The cheap steps 1–4 of the module docstring (no tensor is made here): safe on the event
    loop. Raises TooLarge (413) over ``limit`` (default ``max_elements``) or NotAcceptable (406)."""
    check_size(plan, state.settings.max_elements if limit is None else limit)
    fmt = negotiate(request.headers.get("accept"), out.format)
    base64 = fmt == "json" and out.encoding == "base64"
    index = out.index if fmt == "png" else None

    table_key = {
        "route": plan.route,
        "params": plan.params,
        "model": state.fingerprints.get(plan.model) if plan.model else None,
        "device": str(state.device),
        "version": posenc.__version__,
    }
    table_text = _canonical(table_key)
    body_text = _canonical({"table": table_text, "format": fmt, "base64": base64, "index": index})
    digest = hashlib.blake2b(body_text.encode(), digest_size=16).hexdigest()
    etag = f'"{digest}"'

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
    cached = state.cache.get(body_key)
    state.metrics.record_cache("body", cached is not None)
    if cached is not None:
        headers["Server-Timing"] = server_timing("hit", compute=0.0, encode=0.0)
        return Prepared(_response(cached, fmt, plan, headers), fmt, body_key=body_key)
    return Prepared(None, fmt, base64, index, table_text, body_key, headers)


def finish(state: ServiceState, plan: Plan, prepared: Prepared) -> Response:
    """Compute (or take the cached tensors), encode, cache the body: the thread-pool part (or the
    event loop's, for a small miss). Sets ``prepared.compute_s`` and ``encode_s``."""
    cache, metrics = state.cache, state.metrics
    compute_s = 0.0
    bundle = None
    tensor_key = ("tensors", prepared.table_text)
    if plan.cache_tensors:
        bundle = cache.get(tensor_key)
        metrics.record_cache("tensors", bundle is not None)
    if bundle is None:
        t0 = time.perf_counter()
        with (
            tracing.span("posenc.compute", **{"posenc.route": plan.route}),
            one_thread_if(plan.elements <= ONE_THREAD_ELEMENTS and state.device.type == "cpu"),
        ):
            bundle = plan.compute()
            if state.device.type == "cuda":
                torch.cuda.synchronize(state.device)
        compute_s = time.perf_counter() - t0
        if plan.cache_tensors:
            cache.put(tensor_key, bundle, bundle.nbytes)
    t0 = time.perf_counter()
    with tracing.span("posenc.encode", **{"posenc.format": prepared.fmt}):
        encoded = encode_bundle(bundle, prepared.fmt, base64=prepared.base64, index=prepared.index)
    encode_s = time.perf_counter() - t0
    cache.put(prepared.body_key, encoded, len(encoded.body))
    prepared.compute_s, prepared.encode_s = compute_s, encode_s
    timing = server_timing("miss", queue=prepared.queue_s, compute=compute_s, encode=encode_s)
    headers = {**prepared.headers, "Server-Timing": timing}
    return _response(encoded, prepared.fmt, plan, headers)


def _response(encoded: Encoded, fmt: str, plan: Plan, headers: dict[str, str]) -> Response:
    headers = {**headers, **encoded.headers}
    if fmt != "json":
        suffix = {"safetensors": "safetensors", "npy": "npy", "raw": "bin", "png": "png"}[fmt]
        stem = plan.route.rstrip("/").rsplit("/", 1)[-1]
        if fmt != "safetensors" and plan.names:
            stem = f"{stem}-{plan.names[0]}"
        headers["Content-Disposition"] = f'inline; filename="{stem}.{suffix}"'
    return Response(content=encoded.body, media_type=encoded.media_type, headers=headers)
