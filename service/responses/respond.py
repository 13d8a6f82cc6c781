"""The one response path: :func:`respond` serves a :class:`~service.responses.plans.Plan` as the
path :func:`service.responses.paths.choose` gave it, dispatching on the value's class:

- :class:`~service.responses.paths.Hit`: the ready answer (304, 412, or a body from the cache);
- :class:`~service.responses.paths.Streamed`
  (:func:`service.responses.streaming.streamed_response`): a table over ``max_elements`` with
  row blocks, in raw, npy or safetensors, computed block by block as it is sent;
- :class:`~service.responses.paths.Kept` (:func:`service.responses.streaming.kept_response`):
  every binary cache miss of a table or a token batch, sent as its blocks are filled (one
  block: computed, then sent whole) and then put in the cache whole;
- :class:`~service.responses.paths.Whole` (:func:`service.responses.whole.finish`): everything
  else, computed and encoded (in the thread pool, or on the event loop when small:
  :func:`~service.responses.threads.computes_on_loop`), then cached.

Each of the three misses is priced in CPU-seconds from its numbers first
(:mod:`service.admission.cost`: a 413 over ``POSENC_MAX_REQUEST_CPU_SECONDS``, else its cost
taken from the CPU budget, 429 when none frees up in time, given back once computed, or once
sent for a stream). Each takes its bytes from the in-flight budget through the one
``async with budget.reserve(n)`` below (429 when none frees up in time), shrinks them once its
compute's scratch is gone, and hands what is left to the response, which gives it back after
its last byte (:class:`~service.admission.budget.HeldResponse`). The seconds it waited for the
two budgets go to its path's function as ``queue_s``.
"""

from __future__ import annotations

from typing import assert_never

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from service.admission.budget import HeldResponse
from service.admission.cost import cost_message, estimate_cost
from service.full_collections import BODY_BYTES
from service.responses.negotiation import Negotiation
from service.responses.paths import Hit, Kept, Streamed, Whole, choose
from service.responses.plans import Plan, check_output
from service.responses.replay import REPLAY_SCOPE_KEY
from service.responses.streaming import kept_response, streamed_response
from service.responses.threads import LOOP_BODY_BYTES, computes_on_loop, one_thread_if
from service.responses.whole import finish
from service.state import ServiceState

__all__ = ["respond"]


async def respond(
    request: Request, state: ServiceState, plan: Plan, negotiation: Negotiation
) -> Response:
    """Serve ``plan`` as ``negotiation`` chose
    (:func:`~service.responses.negotiation.negotiate_output`, once per request), with only a
    cache miss (compute and encode) off the event loop: a repeated request is answered without
    a thread hop. A 200 whose body is in the cache is marked for
    :class:`service.responses.replay.ReplayMiddleware`, which answers the same request next
    time without running the route at all. The path of a request whose body is over
    :data:`~service.responses.threads.LOOP_BODY_BYTES` is chosen on a worker thread: its cache
    key holds the body's lists (issue 39)."""
    if request.scope.get(BODY_BYTES, 0) > LOOP_BODY_BYTES:  # its cache key: a large text
        chosen = await run_in_threadpool(choose, request, state, plan, negotiation)
    else:
        chosen = choose(request, state, plan, negotiation)
    if isinstance(chosen, Hit):  # 304, 412, or a body-cache hit
        if chosen.replay_key is not None:
            request.scope[REPLAY_SCOPE_KEY] = chosen.replay_key
        return chosen.response
    cost = estimate_cost(
        plan.elements,
        plan.params,
        chosen.fmt,
        base64=isinstance(chosen, Whole) and chosen.base64,
        streamed=isinstance(chosen, Streamed),
        json_ints=plan.json_ints,
    )
    limit_s = state.settings.max_request_cpu_seconds
    check_output(  # 413 naming the cost, in CPU-milliseconds
        cost.millis, int(limit_s * 1000), field="cost", message=cost_message(cost, limit_s)
    )
    async with (
        state.cpu_budget.reserve(cost.millis) as cpu,
        state.budget.reserve(chosen.nbytes) as held,
    ):
        queue_s = cpu.waited + held.waited
        match chosen:
            case Streamed():
                response = streamed_response(request, plan, chosen, queue_s, held)
            case Kept():
                response = await kept_response(request, state, plan, chosen, queue_s, held)
            case Whole() if computes_on_loop(
                plan.elements, state.device, request.scope.get(BODY_BYTES, 0)
            ):
                with one_thread_if(True):  # small: on the loop, one thread
                    response = finish(request, state, plan, chosen, queue_s)
            case Whole():
                response = await run_in_threadpool(finish, request, state, plan, chosen, queue_s)
            case _:
                assert_never(chosen)
        sending = held.until_sent(response)
        if isinstance(chosen, Whole):  # computed and encoded: its CPU is spent
            return sending
        cpu.handed = True  # streamed and kept compute as they send: the cost stays held
        return HeldResponse(sending, cpu)
