"""Request bodies of the token endpoints (``/v1/embed``, ``/v1/position-ids``): JSON, or token
ids as binary (``docs/api.md``, ``POST /v1/embed`` and ``POST /v1/position-ids``).

| Content-Type | body | other fields |
| --- | --- | --- |
| ``application/json`` | the request model as JSON | in the body |
| ``application/x-npy`` | one ``.npy`` array: ``input_ids`` (B, T), any integer dtype | query parameters |
| ``application/vnd.safetensors`` | tensors ``input_ids`` (B, T), optional ``attention_mask`` and (``/v1/embed``) ``position_ids``, same shape | query parameters |

A binary body is parsed from its header first: dtype, rank and shape are checked, and the data
length must be exactly what the header claims, before any data is read (a header that claims
2**40 elements is a 400 at once, without touching the rest). The ids then come straight from the
buffer (``numpy.frombuffer``, one cast to int64), with no Python work per row or per int; the
other fields, from the query string, go through the same pydantic model as the JSON body. A
malformed body is a 400, another media type a 415, each saying what is wrong and what is read.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from posenc.core import codec
from posenc.core.errors import InvalidArgument
from service import json_slices
from service.body_limit import binary_body_bytes
from service.errors import BadBody, is_json_media_type, media_type_refusal
from service.query import (
    Source,
    query_fields,
    read_output,
    revalidate,
    validation_error,
)
from service.responses.negotiation import negotiate_output, streams_in
from service.responses.plans import Plan, check_output
from service.responses.respond import respond
from service.routes.tables import add_post_route
from service.state import ServiceState, read_state

JSON_TYPE = "application/json"
NPY_TYPE = "application/x-npy"
SAFETENSORS_TYPE = "application/vnd.safetensors"
BODY_TYPES = [JSON_TYPE, NPY_TYPE, SAFETENSORS_TYPE]

INT64_MAX = 2**63 - 1
# The integer dtypes a safetensors body may give its tensors (bool for attention_mask only).
_SAFETENSORS_INT_DTYPES = {
    name: dtype for name, dtype in codec.SAFETENSORS_NUMPY_DTYPES.items() if dtype.kind in "biu"
}


@dataclass(frozen=True)
class TokenTensors:
    """The tensors of a binary body, each ``(B, T)`` int64 on the CPU.

    Attributes:
        input_ids: the token ids.
        attention_mask: 0/1 where given (else None).
        position_ids: explicit positions where given (else None).
        key: a digest of the values (not of the encoding: an int32 npy and an int64
            safetensors body of the same ids share it), standing in for the ids in the cache key.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None
    key: str

    @property
    def shape(self) -> tuple[int, int]:
        b, t = self.input_ids.shape
        return int(b), int(t)

    def fields(self) -> dict[str, torch.Tensor]:
        """The request fields these tensors give."""
        given = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
        }
        return {k: v for k, v in given.items() if v is not None}


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def _check_int_dtype(dtype: np.dtype, name: str, *, allow_bool: bool) -> None:
    if dtype.kind in "iu" or (allow_bool and dtype.kind == "b"):
        return
    allowed = "an integer dtype (int8 … int64, uint8 … uint64)"
    if allow_bool:
        allowed += " or bool"
    raise BadBody(f"{name} must have {allowed}, got dtype {dtype.name} ({dtype.str})")


def _check_shape(shape: Any, name: str) -> tuple[int, int]:
    if not isinstance(shape, tuple | list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise BadBody(f"{name}: the shape must be a list of ints >= 0, got {shape!r}")
    if len(shape) != 2:
        raise BadBody(
            f"{name} must be 2-D (B, T), got {len(shape)}-D shape {tuple(shape)}"
            + ("; send one sequence as shape (1, T)" if len(shape) == 1 else "")
        )
    if shape[0] < 1:
        raise BadBody(f"{name} must have at least 1 row, got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _as_int64(array: np.ndarray, name: str) -> torch.Tensor:
    """One cast to a fresh, writable, C-ordered int64 array, then zero-copy into torch."""
    if array.dtype == np.uint64 and array.size and int(array.max()) > INT64_MAX:
        row, col = (int(i) for i in np.argwhere(array > INT64_MAX)[0])
        raise InvalidArgument(
            f"{name}[{row}][{col}] = {int(array[row, col])} is above the int64 range",
            field=f"{name}[{row}][{col}]",
        )
    return torch.from_numpy(array.astype(np.int64, order="C"))  # always a writable copy


def parse_npy(body: bytes) -> dict[str, torch.Tensor]:
    """``input_ids`` from a ``.npy`` file (format versions 1.0, 2.0, 3.0), read by the codec.

    Raises:
        BadBody: not an npy file, a header that cannot be read, a dtype that is not an integer
            type, a shape that is not (B, T), or data shorter or longer than the header claims.
    """
    name = "input_ids"
    try:
        header = codec.read_npy_header(body, name)
        _check_int_dtype(header.dtype, name, allow_bool=False)
        shape = _check_shape(header.shape, name)
        array = codec.npy_array(body, header, shape, name)
    except codec.CodecError as exc:
        raise BadBody(str(exc)) from None
    return {name: _as_int64(array, name)}


def parse_safetensors(body: bytes, accepted: Sequence[str]) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file: ``input_ids`` and optionally the other ``accepted``.

    Raises:
        BadBody: a header that cannot be read, an unknown tensor name, a dtype that is not an
            integer type (bool too for ``attention_mask``), a shape that is not (B, T), offsets
            that do not match the shape or lie outside the body, shapes that differ.
    """
    try:
        header = codec.read_safetensors_header(body)
    except codec.CodecError as exc:
        raise BadBody(str(exc)) from None
    unknown = [k for k in header.entries if k not in accepted]
    if unknown:
        raise BadBody(
            f"unknown tensor {unknown[0]!r} in the safetensors body; this endpoint reads "
            f"{', '.join(accepted)}"
        )
    if "input_ids" not in header.entries:
        raise BadBody(
            "the safetensors body has no input_ids tensor "
            f"(it has {', '.join(header.entries) or 'none'})"
        )
    out: dict[str, torch.Tensor] = {}
    shapes: dict[str, tuple[int, int]] = {}
    for name in accepted:  # the kind's binary fields, in its order (input_ids first)
        if name not in header.entries:
            continue
        info = header.entries[name]
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise BadBody(f"{name}: the safetensors entry needs dtype, shape and data_offsets")
        dtype = (
            _SAFETENSORS_INT_DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        )
        if dtype is None:
            allowed = [
                d for d in _SAFETENSORS_INT_DTYPES if d != "BOOL" or name == "attention_mask"
            ]
            raise BadBody(f"{name} must have dtype {', '.join(allowed)}, got {info['dtype']!r}")
        _check_int_dtype(dtype, name, allow_bool=name == "attention_mask")
        b, t = _check_shape(info["shape"], name)
        try:
            array = codec.safetensors_array(body, header, name, dtype, (b, t))
        except codec.CodecError as exc:
            raise BadBody(str(exc)) from None
        out[name] = _as_int64(array, name)
        shapes[name] = (b, t)
    for name, shape in shapes.items():
        if shape != shapes["input_ids"]:
            raise BadBody(
                f"{name} has shape {shape} but input_ids has {shapes['input_ids']}: they must match"
            )
    return out


def _check_declared_length(request: Request) -> None:
    """413 before reading a binary body whose ``Content-Length`` cannot fit the output limit.

    Every output has at least 2 elements per token (mask and positions), so a body can usefully
    hold at most ``max_elements / 2`` tokens, each at most 8 bytes in each of 3 tensors.
    """
    declared = request.headers.get("content-length", "")
    if not declared.isdigit():
        return
    limit = read_state(request).settings.max_elements
    most = binary_body_bytes(limit)
    # the body's tokens make at least one output element per 12 bytes past the headers (24
    # bytes a token at most, 2 elements a token): over the limit exactly when it is over `most`
    check_output(
        -(-(int(declared) - codec.MAX_SAFETENSORS_HEADER - 8) // 12),
        limit,
        field="body",
        message=f"the body declares {declared} bytes (Content-Length); a binary body can hold "
        f"at most {limit // 2} tokens within the output limit of {limit} elements "
        f"(POSENC_MAX_ELEMENTS), at most {most} bytes",
    )


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(tensors):
        t = tensors.get(name)
        if t is not None:
            h.update(f"{name}:{tuple(t.shape)}:".encode())
            h.update(t.numpy().tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Reading a request
# ---------------------------------------------------------------------------------------------


def media_type(content_type: str | None) -> str | None:
    """``application/x-npy; foo=1`` -> ``application/x-npy`` (lower case), None when absent."""
    if not content_type:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


async def read_token_request(
    request: Request, model_cls: type[BaseModel], names: Sequence[str]
) -> tuple[Any, TokenTensors | None]:
    """The validated request model and, for a binary body, its tensors.

    A JSON body is validated whole by ``model_cls`` (pydantic's own JSON parser). A binary body
    gives the tensors; every other field comes from the query string and is validated by the
    same model (its ``input_ids`` stand-in is never used).

    Raises:
        BadBody: 400 for a body that cannot be read, 415 for another media type.
        RequestValidationError: 422 for an invalid field.
    """
    content_type = request.headers.get("content-type")
    kind = media_type(content_type)
    if kind in (NPY_TYPE, SAFETENSORS_TYPE):
        _check_declared_length(request)
    raw = await request.body()  # at most POSENC_MAX_BODY_BYTES (service.body_limit)
    # parsing and validating up to the body limit is CPU work: on a worker thread
    return await run_in_threadpool(parse_token_request, request, model_cls, names, raw)


def parse_token_request(
    request: Request, model_cls: type[BaseModel], names: Sequence[str], raw: bytes
) -> tuple[Any, TokenTensors | None]:
    """:func:`read_token_request`'s work on the body it read (blocking: a worker thread's)."""
    content_type = request.headers.get("content-type")
    kind = media_type(content_type)
    accepted = [n for n in names if n in model_cls.model_fields]
    if kind is None and not raw:
        raise validation_error(
            "body",
            [
                {
                    "type": "missing",
                    "loc": (),
                    "msg": f"a body is required: JSON ({JSON_TYPE}), or token ids as "
                    f"{NPY_TYPE} or {SAFETENSORS_TYPE}",
                }
            ],
        )
    if kind is not None and is_json_media_type(content_type):
        try:  # in slices, the GIL free between them (service.json_slices)
            fields = json_slices.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            error = {"type": "json_invalid", "loc": (), "msg": f"Invalid JSON: {why}"}
            raise validation_error("body", [error]) from None
        try:
            return model_cls.model_validate(fields), None
        except ValidationError as exc:
            raise validation_error("body", exc.errors(include_url=False)) from None
    if kind == NPY_TYPE:
        tensors = parse_npy(raw)
    elif kind == SAFETENSORS_TYPE:
        tensors = parse_safetensors(raw, accepted)
    else:
        raise media_type_refusal(content_type, BODY_TYPES)

    fields = query_fields(request)
    in_query = [n for n in names if n in fields]
    if in_query:
        raise validation_error(
            "query",
            [
                {
                    "type": "value_error",
                    "loc": (in_query[0],),
                    "msg": f"{in_query[0]} is a tensor: send it in the {SAFETENSORS_TYPE} body, "
                    "not in the query",
                }
            ],
        )
    # The model validates the query fields; the ids stand in as one token (never used).
    req = revalidate(model_cls, {**fields, "input_ids": [[0]]}, "query")
    return req, TokenTensors(
        input_ids=tensors["input_ids"],
        attention_mask=tensors.get("attention_mask"),
        position_ids=tensors.get("position_ids"),
        key=_digest(tensors),
    )


# ---------------------------------------------------------------------------------------------
# Registering a token endpoint
# ---------------------------------------------------------------------------------------------


class TokenPlanFn(Protocol):
    """A kind's plan as the token routes call it (``may_stream``: the format streams)."""

    def __call__(
        self,
        req: Any,
        state: ServiceState,
        source: Source,
        tensors: TokenTensors | None = None,
        *,
        may_stream: bool = False,
    ) -> Plan: ...


def request_body_openapi(model_cls: type[BaseModel], *, tensors: Sequence[str]) -> dict[str, Any]:
    """The ``requestBody`` of a token endpoint: the JSON model (inline), npy and safetensors."""
    schema = model_cls.model_json_schema(ref_template="#/components/schemas/{model}")
    binary = {"type": "string", "format": "binary"}
    others = ", ".join(tensors[1:])
    return {
        "required": True,
        "description": (
            f"JSON ({JSON_TYPE}), or the token ids as binary with every other field as a query "
            f"parameter: {NPY_TYPE} (input_ids, an integer array of shape (B, T)) or "
            f"{SAFETENSORS_TYPE} (tensors input_ids and optionally {others}, integer, (B, T)). "
            "A malformed binary body is a 400, another media type a 415."
        ),
        "content": {
            JSON_TYPE: {"schema": schema},
            NPY_TYPE: {"schema": binary},
            SAFETENSORS_TYPE: {"schema": binary},
        },
    }


def add_token_route(
    router: APIRouter,
    path: str,
    model_cls: type[BaseModel],
    plan: TokenPlanFn,
    *,
    names: Sequence[str],
    summary: str,
    description: str,
    tensors: Sequence[str],
) -> None:
    """Register ``POST path`` reading a JSON or binary body (:func:`read_token_request`) whose
    binary form may carry ``tensors`` (the first alone in npy)."""
    accepted = [n for n in tensors if n in model_cls.model_fields]

    async def post_handler(request: Request) -> Response:
        negotiation = negotiate_output(request, read_output(request))  # once: respond reads it
        state = read_state(request)
        req, given = await read_token_request(request, model_cls, accepted)
        # planning (tokenizing, checking ids against the vocabulary) is work: never on the
        # event loop. Text is tokenized only up to what its table's format allows: raw, npy and
        # safetensors stream past max_elements (a 406 is raised later, as for any request).
        streams = getattr(req, "text", None) is not None and streams_in(negotiation)
        made = await run_in_threadpool(
            functools.partial(plan, req, state, "body", given, may_stream=streams)
        )
        return await respond(request, state, made, negotiation)

    body = request_body_openapi(model_cls, tensors=accepted)
    add_post_route(
        router, path, post_handler, model_cls=model_cls, names=names, summary=summary,
        description=description, request_body=body,
    )  # fmt: skip


__all__ = [
    "BODY_TYPES",
    "TokenTensors",
    "add_token_route",
    "parse_npy",
    "parse_safetensors",
    "read_token_request",
]
