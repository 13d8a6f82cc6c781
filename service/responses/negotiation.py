"""Content negotiation: the output format of a response, from ``?format=`` and ``Accept``
(RFC 9110 section 12.5.1), worked out once per request.

:func:`negotiate` is the rule: a format key from the query parameter, the ``Accept`` header and
what the endpoint can produce. :func:`negotiate_output` applies it once to a compute request's
output options (:class:`service.query.OutputOptions`); its result, a :class:`Negotiated`
representation or the :class:`~service.formats.NotAcceptable` refusal (406), is handed to
:func:`service.responses.respond.respond`, and read before that by a route that needs the format
early (a token route with text: whether its table may stream). Nothing negotiates it again.

A refusal is a value here, not raised: :func:`service.responses.paths.choose` raises it where the
format is first needed, so a request's errors keep their order (its plan's 422 first, and the
413 over ``max_elements`` before the 406 of a table that is not streamed).

The encoders of each format are in :mod:`service.formats`, apart from this.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import Request

from service.formats import FORMAT_MEDIA_TYPES, STREAM_FORMATS, NotAcceptable
from service.query import OutputOptions

__all__ = ["Negotiated", "Negotiation", "negotiate", "negotiate_output", "streams_in"]


@dataclass(frozen=True)
class Negotiated:
    """The representation a request gets.

    Attributes:
        fmt: the format key (a key of :data:`~service.formats.FORMAT_MEDIA_TYPES`).
        base64: JSON only: ``?encoding=base64`` (each tensor's ``data`` as base64 of its bytes).
        index: PNG only: the panel ``?index=`` draws (None: the grid of all of them).
    """

    fmt: str
    base64: bool = False
    index: int | None = None

    @property
    def media_type(self) -> str:
        """Its ``Content-Type``."""
        return FORMAT_MEDIA_TYPES[self.fmt]


# What negotiating a request gave: the representation, or the 406 to raise when it is needed.
Negotiation = Negotiated | NotAcceptable


def negotiate_output(request: Request, out: OutputOptions) -> Negotiation:
    """Negotiate a compute request once, from its ``Accept`` header and ``out`` (``?format=``,
    ``?encoding=``, ``?index=``): the :class:`Negotiated` representation, or the refusal
    (returned, not raised: see the module docstring)."""
    try:
        fmt = negotiate(request.headers.get("accept"), out.format)
    except NotAcceptable as refusal:
        return refusal
    base64 = fmt == "json" and out.encoding == "base64"
    return Negotiated(fmt, base64, out.index if fmt == "png" else None)


def streams_in(negotiation: Negotiation) -> bool:
    """Whether the negotiated format is one a table streams in past ``max_elements`` (raw, npy,
    safetensors); False for a refusal (raised later, as for any request)."""
    return isinstance(negotiation, Negotiated) and negotiation.fmt in STREAM_FORMATS


# RFC 9110 section 12.4.2 ``qvalue``, read leniently: any number of decimals, 0 to 1.
_QVALUE = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def _qvalue(value: str) -> float:
    """The weight of a ``q=`` parameter; 1 (the parameter ignored) when it is malformed.

    RFC 9110 leaves malformed weights to the recipient; a malformed parameter should not make
    an acceptable type unacceptable, so ``q=abc``, ``q=``, ``q=2``, ``q=-1``, ``q=nan`` and
    ``q=1e-3`` count as no ``q`` at all, the default weight 1.
    """
    text = value.strip().strip('"').strip()
    if _QVALUE.fullmatch(text) is None:
        return 1.0
    q = float(text)
    return q if q <= 1.0 else 1.0


def _parse_accept(accept: str) -> list[tuple[str, str, float]]:
    """``Accept`` -> [(type, subtype, q)]; malformed ranges are skipped, a malformed q-value
    counts as 1."""
    ranges: list[tuple[str, str, float]] = []
    for item in accept.split(","):
        parts = item.split(";")
        media = parts[0].strip().lower()
        if not media:
            continue
        if media == "*":  # some old clients send a bare "*"
            media = "*/*"
        kind, slash, sub = media.partition("/")
        if not slash or not kind or not sub or (kind == "*" and sub != "*"):
            continue
        q = 1.0
        for param in parts[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                q = _qvalue(value)
                break  # parameters after the weight are accept-ext, not media-type parameters
        ranges.append((kind, sub, q))
    return ranges


def negotiate(
    accept: str | None,
    format: str | None,
    available: Sequence[str] = tuple(FORMAT_MEDIA_TYPES),
) -> str:
    """Pick the output format of a response.

    Args:
        accept: the ``Accept`` header, or ``None``.
        format: the ``?format=`` query parameter (a key of :data:`FORMAT_MEDIA_TYPES`), or
            ``None``. It wins over ``Accept``.
        available: the format keys the endpoint can produce, in the server's preference order.

    Returns:
        A format key from ``available``. No ``Accept``, an empty one, or one without a single
        well-formed media range (RFC 9110 lets a server disregard it) gives the first available
        (``json``); a malformed ``q`` counts as 1. Each media type takes the q-value of the most specific range that matches it
        (``type/subtype`` over ``type/*`` over ``*/*``); ``q=0`` excludes; ties keep the order of
        ``available``.

    Raises:
        NotAcceptable: ``format`` is unknown or not available, or ``Accept`` matches nothing
            available; ``.available`` lists the media types that can be produced.
    """
    formats = [f for f in available if f in FORMAT_MEDIA_TYPES]
    if not formats:
        raise ValueError(f"available must name formats among {list(FORMAT_MEDIA_TYPES)}")
    media_types = [FORMAT_MEDIA_TYPES[f] for f in formats]

    if format is not None:
        key = format.strip().lower()
        if key in formats:
            return key
        raise NotAcceptable(
            f"format must be one of {', '.join(formats)} "
            f"(media types {', '.join(media_types)}); got {format!r}",
            media_types,
            field="format",
        )

    ranges = [] if accept is None else _parse_accept(accept)
    if not ranges:  # no header, an empty one (",,,"), or not one well-formed range: disregarded
        return formats[0]

    best: str | None = None
    best_q = 0.0
    for fmt, media in zip(formats, media_types, strict=True):
        kind, _, sub = media.partition("/")
        specificity, q = -1, 0.0
        for r_kind, r_sub, r_q in ranges:
            if r_kind == kind and r_sub == sub:
                s = 2
            elif r_kind == kind and r_sub == "*":
                s = 1
            elif r_kind == "*":
                s = 0
            else:
                continue
            if s > specificity or (s == specificity and r_q > q):
                specificity, q = s, r_q
        if q > best_q:  # strict: a tie keeps the earlier (server-preferred) format
            best, best_q = fmt, q
    if best is None:
        raise NotAcceptable(
            f"Accept {accept!r} matches none of the media types this endpoint produces: "
            f"{', '.join(media_types)} (or use ?format= with one of {', '.join(formats)})",
            media_types,
            field="Accept",
        )
    return best
