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
from service.responses.plans import Plan, Prepared
from service.responses.replay import REPLAY_SCOPE_KEY
from service.state import ServiceState

__all__ = ["finish"]


def finish(request: Request, state: ServiceState, plan: Plan, prepared: Prepared) -> Response:
    """Compute (or take the cached tensors), encode, cache the tensors and the body: the
    thread-pool part (or the event loop's, for a small miss). Records the queue, compute and
    encode seconds (``Server-Timing``, the access log), and marks the request replayable
    (:class:`~service.responses.replay.ReplayMiddleware`) when its body fitted the cache."""
    compute_s = 0.0
    bundle = prepared.bundle
    if bundle is None:
        t0 = time.perf_counter()
        with tracing.span("posenc.compute", **{"posenc.route": plan.kind.path}):
            bundle = plan.compute()
            if state.device.type == "cuda":
                torch.cuda.synchronize(state.device)
        compute_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with tracing.span("posenc.encode", **{"posenc.format": prepared.fmt}):
        encoded = encode_bundle(bundle, prepared.fmt, base64=prepared.base64, index=prepared.index)
    encode_s = time.perf_counter() - t0
    tensor_bytes = bundle.nbytes if prepared.bundle is None and plan.kind.cache_tensors else None
    seconds = {"queue": prepared.queue_s, "compute": compute_s, "encode": encode_s}
    response = http_response(
        encoded, prepared.fmt, plan.kind.path, plan.names, prepared.headers, "miss", **seconds
    )
    prepared.compute_s, prepared.encode_s = compute_s, encode_s
    for phase, value in seconds.items():
        timing.add(request.scope, phase, value)
    cache = state.cache
    if tensor_bytes is not None:
        cache.put(("tensors", prepared.table_text), bundle, tensor_bytes)
    cache.put(prepared.body_key, encoded, len(encoded.body))
    if prepared.body_key in cache:  # the body fitted the cache: replayable
        request.scope[REPLAY_SCOPE_KEY] = prepared.body_key
    return response
