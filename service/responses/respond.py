"""The one response path: :func:`respond` serves a :class:`~service.responses.plans.Plan` whole,
kept or streamed, the choice made once, in :func:`choose`.

- **streamed** (:func:`service.responses.streaming.streamed_response`): a table over
  ``max_elements`` with row blocks, in raw, npy or safetensors, computed block by block as it
  is sent;
- **kept** (:func:`service.responses.streaming.kept_response`): every binary cache miss of a
  table or a token batch, sent as its blocks are filled (one block: computed, then sent whole) and then put in
  the cache whole;
- **whole** (:func:`service.responses.whole.finish`): everything else, computed and encoded (in
  the thread pool, or on the event loop when small:
  :func:`~service.responses.threads.computes_on_loop`), then cached.

Each of the three is priced in CPU-seconds from its numbers first
(:mod:`service.admission.cost`: a 413 over ``POSENC_MAX_REQUEST_CPU_SECONDS``, else its cost
taken from the CPU budget, 429 when none frees up in time, given back once computed, or once
sent for a stream). Each takes its bytes from the in-flight budget through the one
``async with budget.reserve(n)`` below (429 when none frees up in time), shrinks them once its
compute's scratch is gone, and hands what is left to the response, which gives it back after
its last byte (:class:`~service.admission.budget.HeldResponse`).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from service.admission.budget import HeldResponse, estimate_bytes
from service.admission.cost import cost_message, estimate_cost
from service.query import OutputOptions
from service.responses.plans import Plan, Prepared, check_output, prepare
from service.responses.replay import REPLAY_SCOPE_KEY
from service.responses.streaming import (
    kept_body,
    kept_response,
    streamed_body,
    streamed_response,
)
from service.responses.threads import computes_on_loop, one_thread_if
from service.responses.whole import finish
from service.state import ServiceState

__all__ = ["choose", "respond"]


async def respond(
    request: Request, state: ServiceState, plan: Plan, out: OutputOptions
) -> Response:
    """Serve ``plan`` as the negotiated representation, with only a cache miss (compute and
    encode) off the event loop: a repeated request is answered without a thread hop. A 200
    whose body is in the cache is marked for
    :class:`service.responses.replay.ReplayMiddleware`, which answers the same request next
    time without running the route at all."""
    prepared = choose(request, state, plan, out)
    if prepared.response is not None:  # 304, 412, or a body-cache hit
        return prepared.response
    cost = estimate_cost(
        plan.elements,
        plan.params,
        prepared.fmt,
        base64=prepared.base64,
        streamed=prepared.path == "streamed",
        json_ints=plan.json_ints,
    )
    limit_s = state.settings.max_request_cpu_seconds
    check_output(  # 413 naming the cost, in CPU-milliseconds
        cost.millis, int(limit_s * 1000), field="cost", message=cost_message(cost, limit_s)
    )
    async with (
        state.cpu_budget.reserve(cost.millis) as cpu,
        state.budget.reserve(prepared.nbytes) as held,
    ):
        prepared.queue_s = cpu.waited + held.waited
        if prepared.path == "streamed":
            response = streamed_response(request, plan, prepared, held)
        elif prepared.path == "kept":
            response = await kept_response(request, state, plan, prepared, held)
        elif computes_on_loop(plan.elements, state.device):  # small: on the loop, one thread
            with one_thread_if(True):
                response = finish(request, state, plan, prepared)
        else:
            response = await run_in_threadpool(finish, request, state, plan, prepared)
        sending = held.until_sent(response)
        if prepared.path == "whole":  # computed and encoded: its CPU is spent
            return sending
        cpu.handed = True  # streamed and kept compute as they send: the cost stays held
        return HeldResponse(sending, cpu)


def choose(request: Request, state: ServiceState, plan: Plan, out: OutputOptions) -> Prepared:
    """The one place a request's path is chosen, from its numbers (nothing is computed yet):

    1. a plan with row blocks over ``max_elements`` is streamed (413 where its format does not
       stream or it is over ``max_stream_elements``); any other plan is refused over
       ``max_elements`` (413);
    2. the format is negotiated (406), and a matching ``If-None-Match`` (304 / 412) or a body
       in the cache answers without computing (``prepared.response``,
       :func:`~service.responses.plans.prepare`);
    3. a miss is ``streamed``, ``kept`` (:func:`~service.responses.streaming.kept_body`) or
       ``whole``, with the bytes it takes from the in-flight budget (``prepared.nbytes``: the
       estimated peak, or for a stream the blocks it holds at once).
    """
    streams = plan.stream is not None and plan.elements > state.settings.max_elements
    prepared = prepare(request, state, plan, out, streams=streams)
    if prepared.response is not None:
        if prepared.response.status_code == 200:  # a body-cache hit: replayable
            request.scope[REPLAY_SCOPE_KEY] = prepared.body_key
        return prepared
    if streams:  # streamed bodies are never in the cache
        prepared.path = "streamed"
        prepared.body = streamed_body(plan, prepared.fmt, state.settings.max_elements)
        prepared.nbytes = prepared.body.held_bytes()
        return prepared
    if (body := kept_body(request, state, plan, prepared)) is not None:
        prepared.path, prepared.body = "kept", body
    prepared.nbytes = estimate_bytes(  # the estimated peak of compute + encode (+ the body)
        plan.elements,
        prepared.fmt,
        base64=prepared.base64,
        dtype=plan.params.get("dtype") or "",
        work_bytes_per_element=plan.kind.work_bytes_per_element,
        json_ints=plan.json_ints,
    )
    return prepared
