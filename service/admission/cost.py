"""Admission by CPU cost: a request's CPU-seconds, estimated from its numbers before it runs,
next to its bytes (:mod:`service.admission.budget`).

Bytes bound memory; they do not bound time. A small answer can cost much CPU (``precision:
"engine"`` once cost 18.9 s for a 100-byte request), and eight streams of a few GiB each were
all admitted at once, each a thousand CPU-seconds. So every request that computes is priced
before anything is allocated (:func:`estimate_cost`):

    seconds = elements x (compute + encode) + json_ints x JSON_INT + OVERHEAD

with ``compute`` the nanoseconds per output element of the kind's compute, by precision and
engine (``EXACT_NS``, or the engine's ``Engine.compute_ns``), ``encode`` those of the format
(``ENCODE_NS``; a streamed table is always binary), and ``json_ints`` the integers a JSON token batch holds. The figures are the
largest measured per element over rope (exact and each engine's precision), sinusoidal,
learned, ALiBi and relative tables of 2 M elements on the 2-core machine posenc is measured on
(``docs/sizing.md``), with about 50 % added: an estimate must not undercount on a loaded host.

Then:

- a request over ``POSENC_MAX_REQUEST_CPU_SECONDS`` is a 413 that names its cost and what it is
  made of (:func:`cost_message`), before it takes anything;
- otherwise it takes its cost, in CPU-milliseconds, from a :class:`CpuBudget` of
  ``POSENC_MAX_INFLIGHT_CPU_SECONDS``: the same FIFO-fair semaphore as the byte budget, so a
  request that does not fit waits ``POSENC_QUEUE_TIMEOUT``, then gets a 429 with
  ``Retry-After`` (:class:`CpuOverloaded`); one larger than the whole budget is admitted alone.
  A whole answer gives its cost back once it is computed and encoded, a streamed or kept one
  once its last byte has been sent (it computes as it sends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc.engines import ENGINES
from service.admission.budget import ByteBudget, Overloaded

__all__ = [
    "ENCODE_NS",
    "EXACT_NS",
    "CpuBudget",
    "CpuCost",
    "CpuOverloaded",
    "cost_message",
    "estimate_cost",
]

#: Nanoseconds of compute per output element of an exact table (measured, docs/sizing.md:
#: 14-18 ns, about 50 % added); an engine's own arithmetic is its ``Engine.compute_ns``.
EXACT_NS = 30.0
#: Nanoseconds per output element to encode, by format (JSON text of float32: 20-45 ns).
ENCODE_NS: dict[str, float] = {
    "json": 70.0,
    "json-base64": 15.0,
    "png": 40.0,
    "binary": 5.0,
}
#: Nanoseconds per integer of a JSON token batch (parsed, validated, copied).
JSON_INT_NS = 400.0
#: Seconds every request costs besides its elements (routing, planning, headers).
OVERHEAD_S = 0.001

_BINARY_FORMATS = frozenset({"safetensors", "npy", "raw"})


@dataclass(frozen=True)
class CpuCost:
    """A request's estimated CPU cost and what it is made of.

    Attributes:
        seconds: the estimate, in CPU-seconds.
        elements: output elements (all tensors).
        precision: ``exact`` or ``engine``.
        engine: the engine whose arithmetic runs (or None).
        fmt: the format it is encoded in (``binary`` for raw, npy, safetensors).
        streamed: whether it is computed as it is sent.
    """

    seconds: float
    elements: int
    precision: str
    engine: str | None
    fmt: str
    streamed: bool

    @property
    def millis(self) -> int:
        """The cost in whole CPU-milliseconds (at least 1): the budget's unit."""
        return max(1, int(self.seconds * 1000 + 0.5))

    def describe(self) -> str:
        how = "streamed" if self.streamed else "whole"
        engine = f", engine {self.engine}" if self.engine else ""
        return f"{self.elements} elements, precision {self.precision}{engine}, {self.fmt}, {how}"


def estimate_cost(
    elements: int,
    params: dict[str, Any],
    fmt: str,
    *,
    base64: bool = False,
    streamed: bool = False,
    json_ints: int = 0,
) -> CpuCost:
    """The CPU-seconds a request costs, from its numbers alone (see the module docstring).

    Args:
        elements: output elements of all tensors (``Plan.elements``).
        params: the resolved fields (``precision`` and ``engine`` are read).
        fmt: the negotiated format.
        base64: JSON with base64 data.
        streamed: computed as it is sent (past ``max_elements``).
        json_ints: integers of a JSON token batch.
    """
    precision = str(params.get("precision") or "exact")
    engine = params.get("engine") if isinstance(params.get("engine"), str) else None
    compute = (
        ENGINES[engine].compute_ns if precision == "engine" and engine in ENGINES else EXACT_NS
    )
    kind = "binary" if fmt in _BINARY_FORMATS else fmt
    if kind == "json" and base64:
        kind = "json-base64"
    encode = ENCODE_NS.get(kind, ENCODE_NS["json"])
    seconds = (
        max(0, elements) * (compute + encode) * 1e-9
        + max(0, json_ints) * JSON_INT_NS * 1e-9
        + OVERHEAD_S
    )
    return CpuCost(seconds, elements, precision, engine, kind, streamed)


def cost_message(cost: CpuCost, limit_seconds: float) -> str:
    """The words of the 413 of a request estimated over ``POSENC_MAX_REQUEST_CPU_SECONDS``
    (raised by ``service.responses.plans.check_output``, in CPU-milliseconds)."""
    return (
        f"this request would cost about {cost.seconds:.1f} CPU-seconds ({cost.describe()}), "
        f"over the limit of {limit_seconds:g} CPU-seconds a request "
        "(POSENC_MAX_REQUEST_CPU_SECONDS); ask for fewer positions or dimensions, a binary "
        "format, or precision exact"
    )


class CpuOverloaded(Overloaded):
    """The CPU budget had no room within the queue timeout (HTTP 429); amounts in CPU-ms."""

    @property
    def detail(self) -> str:
        return (
            f"overloaded: this request would cost about {self.requested / 1000:.1f} CPU-seconds "
            f"and {self.in_flight / 1000:.1f} are in flight, over "
            f"POSENC_MAX_INFLIGHT_CPU_SECONDS={self.limit / 1000:g}; waited {self.waited:.2f} s "
            f"(POSENC_QUEUE_TIMEOUT) with {self.queued} other request(s) queued; retry after "
            f"{self.retry_after} s"
        )


class CpuBudget(ByteBudget):
    """:class:`ByteBudget`'s FIFO-fair semaphore counting CPU-milliseconds in flight."""

    refusal = CpuOverloaded
