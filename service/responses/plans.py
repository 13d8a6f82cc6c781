"""Plans: a validated request as a :class:`Plan` (its kind and its parameters), and the one
place an output is refused as too large (:func:`check_output`, and the checks of a plan that
call it).

A compute route only builds a :class:`Plan` (the kind, the resolved parameters and a closure
that calls posenc) and hands it, with its negotiated format
(:func:`service.responses.negotiation.negotiate_output`), to
:func:`service.responses.respond.respond`, which

1. refuses a plan larger than ``max_elements`` with 413 (nothing is allocated yet), unless it
   is a table with row blocks, streamed up to ``max_stream_elements`` (:func:`check_plan`);
2. raises the negotiation's refusal, if any (406 lists what the endpoint can give);
3. derives the ETag from a canonical key of the request and answers a matching
   ``If-None-Match`` with 304 (GET) or 412 (other methods), without computing;
4. serves the encoded body from the cache, or, on a miss, looks for the computed tensors and
   estimates the bytes the miss takes from the in-flight budget;

steps 1-4 and the path in :func:`service.responses.paths.choose`, and then serves that path.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import torch

from posenc.core import kinds, slices
from posenc.core.errors import TooLarge
from service.admission.budget import json_ints
from service.config import Settings
from service.formats import STREAM_FORMATS, Bundle

__all__ = [
    "KEY_SLICE",
    "Plan",
    "check_output",
    "check_plan",
    "check_row",
    "check_size",
    "json_ints",
    "sliced_dumps",
]


@dataclass
class Plan:
    """A validated request, ready to run: its kind and its parameters, and how to compute them.

    What the response path needs to know of the request (its route, tensor names, sizes, model,
    whether its tensors are cached, its widest row, its compute's working bytes) is read from
    the kind and the parameters (the properties below), never copied.

    Attributes:
        kind: the registered kind (:mod:`posenc.core.kinds`).
        params: the fields resolved by the library (preset or config merged, tensors of a
            binary body included).
        compute: builds the bundle; called only on a cache miss.
        stream: tables only: the bundle as row blocks (a
            :class:`service.responses.bodies.StreamBundle`), for a table sent as it is
            computed (kept) or over ``max_elements`` (streamed); None where the kind has no row
            blocks for these parameters.
        tensors_key: a binary body's tensors by their digest (part of the cache key), if any.
    """

    kind: kinds.Kind
    params: dict[str, Any]
    compute: Callable[[], Bundle]
    stream: Callable[[], Any] | None = None
    tensors_key: str | None = None
    # worked out once, from the numbers alone, when the plan is made (nothing is allocated):
    # each output tensor's shape, their elements together (checked against max_elements), and
    # the integers of the JSON lists the request holds (service.admission.budget.json_ints)
    shapes: kinds.Shapes = field(init=False)
    names: tuple[str, ...] = field(init=False)
    elements: int = field(init=False)
    allocations: Mapping[str, int] = field(init=False)
    row_elements: int = field(init=False)
    json_ints: int = field(init=False)

    def __post_init__(self) -> None:
        kind, params = self.kind, self.params
        self.shapes = kind.shapes(params)
        self.names = tuple(self.shapes)  # primary first
        self.elements = kinds.elements(self.shapes)
        # other element counts the compute allocates (e.g. a bias table), checked too
        self.allocations = kind.allocations(params) if kind.allocations is not None else {}
        # the widest row of a streamed table's tensors (their last dimension: d_model,
        # rotary_dim, key_len): a stream computes at least one row at a time
        widest = kind.row_elements
        self.row_elements = widest(params) if widest is not None and self.stream else 0
        self.json_ints = json_ints(self.params)

    @property
    def route(self) -> str:
        """The route template (``/v1/encodings/sinusoidal``): part of the cache key."""
        return self.kind.path

    @property
    def key(self) -> dict[str, Any]:
        """The parameters as a cache key (JSON-able): a binary body's tensors by their digest.
        A config merged by the kind's sources is None here (what was read of it stands in); a
        kind that reads its config itself keeps it, whole: two configs give two tables."""
        key = {k: v for k, v in self.params.items() if not isinstance(v, torch.Tensor)}
        if self.tensors_key is not None:
            key["tensors"] = self.tensors_key
        return key

    @property
    def model(self) -> str | None:
        """The model the output depends on (its fingerprint joins the key), if any."""
        field_name = self.kind.model_field
        return self.params.get(field_name) if field_name is not None else None


def check_output(
    requested: int,
    limit: int,
    what: str = "the output",
    *,
    names: Sequence[str] = (),
    field: str | None = None,
    over: str = "the limit",
    setting: str = "POSENC_MAX_ELEMENTS",
    advice: str = "",
    message: str | None = None,
) -> None:
    """The one place the service refuses an output as too large: TooLarge (413) when
    ``requested`` elements exceed ``limit``, before anything is allocated.

    The message reads ``{what} would have {requested} elements ({names}), over {over} of
    {limit} elements ({setting}){advice}``; ``message`` replaces it where the numbers are not
    elements of the output (a body's declared bytes, a text's characters)."""
    if requested <= limit:
        return
    if message is None:
        listed = f" ({' + '.join(names)})" if names else ""
        message = (
            f"{what} would have {requested} elements{listed}, over {over} of {limit} elements "
            f"({setting}){advice}"
        )
    raise TooLarge(message, limit=limit, requested=requested, field=field)


def check_size(plan: Plan, limit: int) -> None:
    """TooLarge (413) when the output, or anything computed on the way, exceeds ``limit``."""
    check_output(
        plan.elements,
        limit,
        names=plan.names or ("all tensors",),
        advice="; ask for fewer positions, heads or a smaller batch",
    )
    for what, count in plan.allocations.items():
        check_output(count, limit, what, field=what)


def check_row(name: str, row_elements: int, limit: int) -> None:
    """TooLarge (413) for a table whose one row (its last dimension) is wider than ``limit``
    elements: a block holds at least one row, computed in float64, so such a row would take
    the memory streaming is meant to bound (``d_model`` 2**30 with ``seq_len`` 1, say)."""
    check_output(
        row_elements,
        limit,
        f"one row of {name}",
        advice=" for a row of a streamed table; streaming splits tables by rows (positions), "
        "so ask for a smaller d_model, head_dim or key_len",
    )


def check_plan(plan: Plan, settings: Settings, fmt: str | None, *, streams: bool) -> None:
    """Every size check of a plan, before anything is allocated: TooLarge (413) over
    ``max_elements``; for a table streamed past it (``streams``), a format that does not
    stream, over ``max_stream_elements``, an allocation over it, or a row over ``max_elements``.
    """
    if not streams:
        check_size(plan, settings.max_elements)
        return
    names = plan.names or ("all tensors",)
    if fmt not in STREAM_FORMATS:
        check_output(
            plan.elements,
            settings.max_elements,
            names=names,
            field="format",
            advice=f" for {fmt}; raw, npy and safetensors stream tables up to "
            f"{settings.max_stream_elements} elements (POSENC_MAX_STREAM_ELEMENTS): ask for "
            "?format=raw, npy or safetensors, or fewer positions",
        )
    check_output(
        plan.elements,
        settings.max_stream_elements,
        names=names,
        over="the streaming limit",
        setting="POSENC_MAX_STREAM_ELEMENTS",
        advice="; ask for fewer positions, heads or a shorter key length",
    )
    for what, count in plan.allocations.items():
        check_output(count, settings.max_stream_elements, what, field=what)
    # before the stream is built: building it may make a row's worth of frequencies
    check_row(
        plan.names[0] if plan.names else "the table", plan.row_elements, settings.max_elements
    )


#: The most numbers of a cache key one ``orjson.dumps`` call writes (about 4 ms).
KEY_SLICE = 1 << 16


def _list_pieces(value: Any, option: int, out: list[bytes]) -> None:
    """``orjson.dumps(value, option=option)`` appended to ``out`` in pieces: a list of more
    than :data:`KEY_SLICE` numbers (counted down its first items) in runs of items holding at
    most that many, an item larger than that one level down."""
    if not isinstance(value, list) or math.prod(slices.first_shape(value)) <= KEY_SLICE:
        out.append(orjson.dumps(value, option=option))
        return
    out.append(b"[")
    if not isinstance(value[0], list | tuple):  # numbers (first_shape read one level)
        for lo in range(0, len(value), KEY_SLICE):
            out.append(
                (b"," if lo else b"")
                + orjson.dumps(value[lo : lo + KEY_SLICE], option=option)[1:-1]
            )
            time.sleep(0)
        out.append(b"]")
        return
    run: list[Any] = []
    size, first = 0, True

    def flush() -> None:
        nonlocal run, size, first
        if run:
            if not first:
                out.append(b",")
            out.append(orjson.dumps(run, option=option)[1:-1])
            first, run, size = False, [], 0
            time.sleep(0)  # the GIL to the event loop

    for item in value:
        n = math.prod(slices.first_shape(item)) if isinstance(item, list) else 1
        if n > KEY_SLICE:
            flush()
            if not first:
                out.append(b",")
            _list_pieces(item, option, out)
            first = False
            continue
        if size + n > KEY_SLICE:
            flush()
        run.append(item)
        size += n
    flush()
    out.append(b"]")


def _held(value: Any, lists: dict[bytes, list[Any]], nonce: str) -> Any:
    """``value`` with each large list inside its dicts replaced by a placeholder string (the
    lists by their placeholders' JSON text in ``lists``)."""
    if isinstance(value, dict):
        return {k: _held(v, lists, nonce) for k, v in value.items()}
    if isinstance(value, list) and value and math.prod(slices.first_shape(value)) > KEY_SLICE:
        token = f"\x00posenc-list-{nonce}-{len(lists)}\x00"
        lists[orjson.dumps(token)] = value
        return token
    return value


def sliced_dumps(value: Any, option: int = 0) -> bytes:
    """``orjson.dumps(value, option=option)``, the large lists inside its dicts written at most
    :data:`KEY_SLICE` numbers a call (a cache key of millions of token ids was one call of
    50 ms): the same bytes."""
    lists: dict[bytes, list[Any]] = {}
    skeleton = orjson.dumps(_held(value, lists, secrets.token_hex(16)), option=option)
    if not lists:
        return skeleton
    pieces: list[bytes] = []
    at = 0
    for where, token in sorted((skeleton.index(token), token) for token in lists):
        pieces.append(skeleton[at:where])
        _list_pieces(lists[token], option, pieces)
        at = where + len(token)
    pieces.append(skeleton[at:])
    return b"".join(pieces)
