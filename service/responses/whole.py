"""The whole path: a cache miss computed (or its cached tensors taken), encoded and cached, then
sent as one body.

Everything that is not streamed or kept (:mod:`service.responses.streaming`) goes this way: JSON
and PNG, token batches, a table whose tensors another format already computed, and every miss
on a GPU. :func:`service.responses.respond.respond` runs :func:`finish` on the event loop for a
small miss (:func:`~service.responses.threads.computes_on_loop`: the hop to a pool thread
would cost as much), on one OpenMP thread, and in the thread pool otherwise.
"""

from __future__ import annotations

import time

import torch
from fastapi import Request
from fastapi.responses import Response

from service.formats import encode_bundle, http_response
from service.observability import timing, tracing
from service.responses.paths import Whole
from service.responses.plans import Plan
from service.responses.replay import REPLAY_SCOPE_KEY
from service.state import ServiceState

__all__ = ["finish"]


def finish(
    request: Request, state: ServiceState, plan: Plan, whole: Whole, queue_s: float
) -> Response:
    """Compute (or take the cached tensors), encode, cache the tensors and the body: the
    thread-pool part (or the event loop's, for a small miss). Records the queue (``queue_s``,
    waited for the budgets), compute and encode seconds (``Server-Timing``, the access log), and
    marks the request replayable (:class:`~service.responses.replay.ReplayMiddleware`) when its
    body fitted the cache."""
    compute_s = 0.0
    bundle = whole.tensors
    if bundle is None:
        t0 = time.perf_counter()
        with tracing.span("posenc.compute", **{"posenc.route": plan.kind.path}):
            bundle = plan.compute()
            if state.device.type == "cuda":
                torch.cuda.synchronize(state.device)
        compute_s = time.perf_counter() - t0
    fmt = whole.fmt
    t0 = time.perf_counter()
    with tracing.span("posenc.encode", **{"posenc.format": fmt}):
        encoded = encode_bundle(bundle, fmt, base64=whole.base64, index=whole.index)
    encode_s = time.perf_counter() - t0
    tensor_bytes = bundle.nbytes if whole.tensors is None and plan.kind.cache_tensors else None
    seconds = {"queue": queue_s, "compute": compute_s, "encode": encode_s}
    response = http_response(
        encoded, fmt, plan.kind.path, plan.names, whole.headers, "miss", **seconds
    )
    for phase, value in seconds.items():
        timing.add(request.scope, phase, value)
    cache = state.cache
    if tensor_bytes is not None:
        cache.put(("tensors", whole.table_key), bundle, tensor_bytes)
    cache.put(whole.body_key, encoded, len(encoded.body))
    if whole.body_key in cache:  # the body fitted the cache: replayable
        request.scope[REPLAY_SCOPE_KEY] = whole.body_key
    return response
