"""The paths of a response, and the one place a request's path is chosen (:func:`choose`).

:func:`choose` works out, from the request's numbers alone (nothing is computed), one immutable
value, which :func:`service.responses.respond.respond` dispatches on:

- :class:`Hit`: the answer is ready: 304 or 412 for a matching ``If-None-Match``, or a body
  from the cache (200);
- :class:`Streamed`: a table over ``max_elements`` with row blocks, in raw, npy or
  safetensors, computed block by block as it is sent
  (:func:`service.responses.streaming.streamed_response`);
- :class:`Kept`: a binary cache miss of a table or a token batch, sent as its blocks are filled
  and then put in the cache whole (:func:`service.responses.streaming.kept_response`);
- :class:`Whole`: everything else, computed and encoded, then cached
  (:func:`service.responses.whole.finish`).

Each carries what its path needs and nothing else; nothing changes it after :func:`choose`
(the seconds a miss queues are an argument of its path's function).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import orjson
from fastapi import Request
from fastapi.responses import Response

import posenc
from service.admission.budget import estimate_bytes
from service.formats import STREAM_FORMATS, Bundle, NotAcceptable, http_response
from service.responses.bodies import Body, kept_body, streamed_body
from service.responses.negotiation import Negotiated, Negotiation
from service.responses.plans import Plan, check_plan, sliced_dumps
from service.state import ServiceState

__all__ = ["KEEP_MIN_BYTES", "BodyKey", "Chosen", "Hit", "Kept", "Streamed", "Whole", "choose"]

# A cache miss whose raw, npy or safetensors body has at least this many bytes is sent as its
# row blocks are computed, then kept (Kept): every one, whatever its size, so that a binary miss
# has one path (tests raise it to compare with the whole path's answer).
KEEP_MIN_BYTES = 0

# A body-cache key: ("body", the canonical text of the request's representation).
BodyKey = tuple[str, str]


@dataclass(frozen=True)
class Hit:
    """A request answered without computing.

    Attributes:
        response: the 304, the 412, or the cached body (200).
        replay_key: a cached body's key (:class:`~service.responses.replay.ReplayMiddleware`
            answers the same request next time without running the route); None for 304/412.
    """

    response: Response
    replay_key: BodyKey | None = None


@dataclass(frozen=True)
class Whole:
    """A miss computed (or its cached tensors taken), encoded and cached, then sent whole.

    Attributes:
        fmt: the negotiated format.
        base64: JSON only: each tensor's ``data`` as base64 of its bytes.
        index: PNG only: the panel to draw (None: the grid of all of them).
        headers: ETag, Vary and (GET) Cache-Control.
        table_key: the tensors' cache key (the canonical text of the table's key).
        body_key: the body's cache key.
        tensors: the computed tensors, found in the cache (another format computed them); None
            to compute.
        nbytes: what it takes from the in-flight budget: the estimated peak of compute + encode.
    """

    fmt: str
    base64: bool
    index: int | None
    headers: Mapping[str, str]
    table_key: str
    body_key: BodyKey
    tensors: Bundle | None
    nbytes: int


@dataclass(frozen=True)
class Kept:
    """A binary miss sent as its row blocks are computed, then kept in the body cache.

    Attributes:
        fmt: raw, npy or safetensors.
        headers: ETag, Vary and (GET) Cache-Control.
        body_key: the body's cache key.
        body: its row blocks (:func:`~service.responses.bodies.kept_body`).
        nbytes: what it takes from the in-flight budget: the estimated peak, as for Whole.
    """

    fmt: str
    headers: Mapping[str, str]
    body_key: BodyKey
    body: Body
    nbytes: int


@dataclass(frozen=True)
class Streamed:
    """A table over ``max_elements`` sent as its row blocks are computed; never cached.

    Attributes:
        fmt: raw, npy or safetensors.
        headers: ETag, Vary and (GET) Cache-Control.
        body: its row blocks (:func:`~service.responses.bodies.streamed_body`).
        nbytes: what it takes from the in-flight budget: the blocks it holds at once
            (:meth:`~service.responses.bodies.Body.held_bytes`).
    """

    fmt: str
    headers: Mapping[str, str]
    body: Body
    nbytes: int


Chosen = Hit | Whole | Kept | Streamed


def choose(request: Request, state: ServiceState, plan: Plan, negotiation: Negotiation) -> Chosen:
    """The one place a request's path is chosen, from its numbers (nothing is computed yet):

    1. a plan with row blocks over ``max_elements`` is streamed (406 where negotiation refused,
       then 413 where its format does not stream or it is over ``max_stream_elements``); any
       other plan is refused over ``max_elements`` (413), then where negotiation refused (406)
       (:func:`~service.responses.plans.check_plan`);
    2. the ETag is derived from a canonical key of the request (route, params after the preset
       or config merge, format, encoding, index, model fingerprint, device, version); a matching
       ``If-None-Match`` (304 / 412) or a body in the cache is a :class:`Hit`;
    3. a miss is :class:`Streamed`, :class:`Kept` (see :func:`_keeps`) or :class:`Whole`, with
       the bytes it takes from the in-flight budget.

    Its own helpers are called first, the other modules' after them, each once where it can be:
    the walk of ``tests/service/test_response_path.py`` counts every return to a file.
    """
    settings = state.settings
    streams = plan.stream is not None and plan.elements > settings.max_elements
    keeps = not streams and _keeps(request, state, plan, negotiation)
    table_key = _table_key(state, plan)
    if isinstance(negotiation, NotAcceptable):  # 406, after the 413 of a plan not streamed
        if not streams:
            check_plan(plan, settings, None, streams=False)
        raise negotiation
    fmt = negotiation.fmt
    check_plan(plan, settings, fmt, streams=streams)
    representation = {"format": fmt, "base64": negotiation.base64, "index": negotiation.index}
    body_text = orjson.dumps({"table": table_key, **representation}, option=_CANONICAL).decode()
    body_key = ("body", body_text)
    etag = f'"{hashlib.blake2b(body_text.encode(), digest_size=16).hexdigest()}"'
    headers = {"ETag": etag, "Vary": "Accept"}
    if request.method == "GET":
        scope = "private" if settings.api_key else "public"
        # a model's table changes with its file: make caches revalidate (a cheap 304)
        headers["Cache-Control"] = f"{scope}, no-cache" if plan.model else f"{scope}, max-age=86400"
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and _etag_matches(if_none_match, etag):
        return _revalidated(request, headers)
    cache, metrics = state.cache, state.metrics
    cached = cache.get(body_key)
    metrics.record_cache("body", cached is not None)
    if cached is not None:
        route, names = plan.kind.path, plan.names
        hit = http_response(cached, fmt, route, names, headers, "hit", compute=0.0, encode=0.0)
        return Hit(hit, body_key)
    frozen = MappingProxyType(headers)
    if streams:  # streamed bodies are never in the cache
        blocks = streamed_body(plan, fmt, settings.max_elements)
        return Streamed(fmt, frozen, blocks, blocks.held_bytes())
    tensors = None
    if plan.kind.cache_tensors:  # another format of it may have computed them
        tensors = cache.get(("tensors", table_key))
        metrics.record_cache("tensors", tensors is not None)
    nbytes = estimate_bytes(  # the estimated peak of compute + encode (+ the body)
        plan.elements,
        fmt,
        base64=negotiation.base64,
        dtype=plan.params.get("dtype") or "",
        work_bytes_per_element=plan.kind.work_bytes_per_element,
        json_ints=plan.json_ints,
    )
    kept = kept_body(plan, fmt) if keeps and tensors is None else None
    if kept is not None and kept.length >= KEEP_MIN_BYTES:
        return Kept(fmt, frozen, body_key, kept, nbytes)
    base64, index = negotiation.base64, negotiation.index
    return Whole(fmt, base64, index, frozen, table_key, body_key, tensors, nbytes)


_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _table_key(state: ServiceState, plan: Plan) -> str:
    """The canonical text of what the table depends on: route, params, model fingerprint,
    device, version (the tensors' cache key, and the body's with the representation)."""
    key = {
        "route": plan.kind.path,
        "params": plan.key,
        "model": state.fingerprints.get(plan.model) if plan.model else None,
        "device": str(state.device),
        "version": posenc.__version__,
    }
    return sliced_dumps(key, _CANONICAL).decode()  # a body's lists: in slices (issue 39)


def _keeps(request: Request, state: ServiceState, plan: Plan, negotiation: Negotiation) -> bool:
    """Whether a miss of ``plan`` is kept (sent as its row blocks are computed, then cached)
    rather than whole, when its tensors are not in the cache (encoding those costs less than
    computing): a table or a token batch with row blocks, asked as raw, npy or safetensors, up
    to ``max_elements``, of at least :data:`KEEP_MIN_BYTES` (any size), on a little-endian
    machine, computed on the CPU, and not npy of bfloat16 (the whole path's 406:
    :func:`~service.responses.bodies.kept_body` gives None)."""
    return (
        plan.stream is not None
        and isinstance(negotiation, Negotiated)
        and negotiation.fmt in STREAM_FORMATS
        and request.method in ("GET", "POST")
        and plan.elements * 8 >= KEEP_MIN_BYTES  # an upper bound of the bytes: 8 per element
        and plan.elements <= state.settings.max_elements
        and sys.byteorder == "little"
        and state.device.type == "cpu"  # not measured on a GPU: there the whole path stays
    )


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 If-None-Match: ``*`` or a list of entity tags, compared weakly."""
    value = if_none_match.strip()
    if value == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == bare for tag in value.split(","))


def _revalidated(request: Request, headers: dict[str, str]) -> Hit:
    """A matching ``If-None-Match``: 304 for GET and HEAD, 412 for other methods."""
    if request.method in ("GET", "HEAD"):
        return Hit(Response(status_code=304, headers=headers))
    detail = {"detail": "If-None-Match: the current representation matches " + headers["ETag"]}
    content = orjson.dumps(detail, option=_CANONICAL).decode()
    return Hit(Response(content, status_code=412, media_type="application/json", headers=headers))
