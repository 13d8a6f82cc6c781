"""Where a request's time went: queue, compute, encode and send, per request.

A miss passes through four phases: it waits for room in the in-flight byte budget (``queue``),
computes its tensors (``compute``), encodes them (``encode``) and sends the body (``send``, from
the response's first message to its last). The response code records the first three in the
request's ASGI scope as they happen (:func:`add`); the access log
(:class:`service.observability.request_id.RequestIdMiddleware`) measures ``send`` itself and writes
all four with the record (``queue_ms``, ``compute_ms``, ``encode_ms``, ``send_ms``).

``Server-Timing`` (:func:`server_timing`) carries what is known when the headers go: all of
``queue``, ``compute`` and ``encode`` for a response computed whole; only ``queue`` for one sent
as it is computed (kept or streamed), whose compute is not over yet (ASGI servers send no HTTP
trailers to put it in later). The access log has the whole split for every request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import Scope

__all__ = ["PHASES", "SCOPE_KEY", "add", "phases", "server_timing"]

SCOPE_KEY = "posenc.timing"
#: The phases recorded in the scope (``send`` is the access log's own measure).
PHASES = ("queue", "compute", "encode")


def add(scope: Scope, phase: str, seconds: float) -> None:
    """Add ``seconds`` to ``phase`` of the request whose scope this is (blocks of a streamed body
    add up)."""
    timing: dict[str, float] = scope.setdefault(SCOPE_KEY, {})
    timing[phase] = timing.get(phase, 0.0) + seconds


def phases(scope: Scope) -> dict[str, float]:
    """Seconds per phase recorded so far for this request (empty for a hit or an error)."""
    recorded: dict[str, float] = scope.get(SCOPE_KEY, {})
    return recorded


def server_timing(cache: str, **seconds: float | None) -> str:
    """A ``Server-Timing`` value: each given phase (``queue``, ``compute``, ``encode``) as
    ``name;dur=<ms>``, in that order, then ``cache;desc="<cache>"`` (hit, miss, stream)."""
    parts = [
        f"{name};dur={value * 1000:.3f}"
        for name in PHASES
        if (value := seconds.get(name)) is not None
    ]
    return ", ".join([*parts, f'cache;desc="{cache}"'])
