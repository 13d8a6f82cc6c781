"""The one response path: :func:`respond` serves a :class:`~service.responses.plans.Plan` whole, streamed
or kept.

- **streamed** (:mod:`service.responses.streaming`): a table over ``max_elements`` with ``plan.stream``,
  in raw, npy or safetensors, computed block by block as it is sent;
- **kept** (:func:`service.responses.streaming.respond_kept`): every binary cache miss of a table,
  sent as its blocks are filled (one block: computed, then sent whole) and then put in the
  cache whole;
- **whole** (:func:`service.responses.plans.finish`): everything else, computed and encoded under the
  in-flight byte budget (in the thread pool, or on the event loop when small:
  :func:`~service.responses.threads.computes_on_loop`),
  then cached.
"""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from service.admission.budget import REQUEST_OVERHEAD, HeldResponse, estimate_bytes
from service.observability import timing
from service.query import OutputOptions
from service.responses.plans import Plan, finish, json_ints, prepare
from service.responses.replay import REPLAY_SCOPE_KEY
from service.responses.streaming import keeps, respond_kept, respond_streamed
from service.responses.threads import computes_on_loop
from service.state import ServiceState

__all__ = ["respond"]


async def respond(
    request: Request, state: ServiceState, plan: Plan, out: OutputOptions
) -> Response:
    """Serve ``plan`` as the negotiated representation, with only a cache miss (compute and
    encode) in the thread pool: a repeated request is answered on the event loop without a thread hop. A 200 whose body is
    in the cache is marked for :class:`service.responses.replay.ReplayMiddleware`, which answers the
    same request next time without running the route at all. A table over ``max_elements``
    with ``plan.stream`` is streamed (:mod:`service.responses.streaming`)."""
    if plan.stream is not None and plan.elements > state.settings.max_elements:
        return respond_streamed(request, state, plan, out)
    prepared = prepare(request, state, plan, out)
    if prepared.response is not None:
        if prepared.response.status_code == 200:  # a body-cache hit
            request.scope[REPLAY_SCOPE_KEY] = prepared.body_key
        return prepared.response
    if keeps(request, state, plan, prepared.fmt):  # sent as computed, then kept
        kept = await respond_kept(request, state, plan, prepared)
        if kept is not None:
            return kept
    # A miss allocates: take its estimated peak bytes from the in-flight budget first (429 when
    # none frees up in time), keep only the body's once encoded, release after the last byte.
    budget = state.budget
    nbytes = estimate_bytes(
        plan.elements,
        prepared.fmt,
        base64=prepared.base64,
        dtype=plan.params.get("dtype", ""),
        work_bytes_per_element=plan.work_bytes_per_element,
        json_ints=json_ints(plan.params),
    )
    queued = time.perf_counter()
    await budget.acquire(nbytes)
    since = time.monotonic()
    prepared.queue_s = time.perf_counter() - queued
    try:
        if computes_on_loop(plan.elements, state.device):
            response = finish(state, plan, prepared)
        else:
            response = await run_in_threadpool(finish, state, plan, prepared)
        nbytes = budget.shrink(nbytes, len(response.body) + REQUEST_OVERHEAD)
    except BaseException:
        budget.release(nbytes, held_s=time.monotonic() - since)
        raise
    for phase in timing.PHASES:
        timing.add(request.scope, phase, getattr(prepared, f"{phase}_s"))
    if prepared.body_key in state.cache:  # the body fitted the cache: replayable
        request.scope[REPLAY_SCOPE_KEY] = prepared.body_key
    return HeldResponse(response, budget, nbytes, since)
