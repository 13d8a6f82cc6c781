"""Request bodies of the kinds with ``tensor`` fields (``POST /v1/rope/shift``'s ``k``): JSON, or
a safetensors file, as ``POST /v1/configs/check`` takes its tables.

| Content-Type | body | other fields |
| --- | --- | --- |
| ``application/json`` | the request model as JSON; tensors as nested lists, read in ``dtype`` | in the body |
| ``application/vnd.safetensors`` | the tensor fields as tensors, in their own dtype | JSON text in the header's ``__metadata__`` under ``request`` |

A safetensors body is checked from its header before any data is read (``posenc.core.codec``); its
tensors stand in the cache key by the body's digest. A malformed body is a 400, another media
type a 415.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from posenc.core import codec
from service import json_slices
from service.errors import BadBody, is_json_media_type, media_type_refusal, unparsable_body
from service.json_body import INLINE_BYTES
from service.query import read_output
from service.responses.negotiation import negotiate_output
from service.responses.respond import respond
from service.routes.tables import add_post_route
from service.state import read_state

JSON_TYPE = "application/json"
SAFETENSORS_TYPE = "application/vnd.safetensors"


@dataclass(frozen=True)
class BodyTensors:
    """The tensors of a safetensors body, by field name, and the body's digest (their cache
    key)."""

    tensors: dict[str, torch.Tensor]
    key: str

    def fields(self) -> dict[str, torch.Tensor]:
        """The request fields these tensors give."""
        return dict(self.tensors)


def _validated(model_cls: type[BaseModel], raw: Any) -> BaseModel:
    try:
        return model_cls.model_validate(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def _tensor(value: Any) -> torch.Tensor:
    return (
        value if isinstance(value, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(value))
    )


def read_tensor_body(
    body: bytes, content_type: str, model_cls: type[BaseModel], names: Sequence[str]
) -> tuple[BaseModel, BodyTensors | None]:
    """The request model and, for a safetensors body, its tensors (only ``names``)."""
    if content_type == SAFETENSORS_TYPE:
        try:
            tensors, metadata = codec.decode_safetensors(body)
        except codec.CodecError as exc:
            raise BadBody(f"the safetensors body cannot be read: {exc}") from None
        unknown = sorted(set(tensors) - set(names))
        if unknown:
            raise BadBody(
                f"the safetensors body has tensor(s) {unknown}; this endpoint reads "
                f"{', '.join(names)}"
            )
        try:
            fields = json.loads((metadata or {}).get("request") or "{}")
        except json.JSONDecodeError as exc:
            raise BadBody(f"__metadata__.request is not JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise BadBody("__metadata__.request must be a JSON object of the request's fields")
        both = sorted(set(fields) & set(tensors))
        if both:
            raise BadBody(f"{both[0]} is a tensor of the safetensors body and a request field")
        req = _validated(model_cls, fields)
        digest = hashlib.blake2b(body, digest_size=16).hexdigest()
        return req, BodyTensors({n: _tensor(v) for n, v in tensors.items()}, digest)
    if not is_json_media_type(content_type):
        raise media_type_refusal(content_type, [JSON_TYPE, SAFETENSORS_TYPE])
    try:  # in slices, the GIL free between them (service.json_slices)
        raw = json_slices.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadBody(f"the body is not JSON: {exc}") from None
    except RecursionError as exc:
        raise unparsable_body(exc) from None
    return _validated(model_cls, raw), None


def add_tensor_route(
    router: APIRouter,
    path: str,
    model_cls: type[BaseModel],
    plan: Callable[..., Any],
    *,
    names: Sequence[str],
    tensors: Sequence[str],
    summary: str,
    description: str,
) -> None:
    """Register ``POST path`` reading a JSON or safetensors body (``tensors``: its tensor
    fields) and computing ``plan(request, state, "body", body_tensors)``."""

    async def post_handler(request: Request) -> Response:
        out = read_output(request)
        state = read_state(request)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        body = await request.body()
        if len(body) <= INLINE_BYTES:
            req, held = read_tensor_body(body, content_type, model_cls, tensors)
            made = plan(req, state, "body", held)
        else:  # parsed and validated on a worker thread, in slices (service.json_body), and
            # planned there too: its tensors are made from the lists
            req, held = await run_in_threadpool(
                read_tensor_body, body, content_type, model_cls, tensors
            )
            made = await run_in_threadpool(plan, req, state, "body", held)
        return await respond(request, state, made, negotiate_output(request, out))

    body = {
        "required": True,
        "description": (
            f"JSON ({JSON_TYPE}; tensors as nested lists read in dtype), or {SAFETENSORS_TYPE} "
            f"with the tensor(s) {', '.join(tensors)} in their own dtype and the other fields as "
            "JSON text in the header's __metadata__ under request. A malformed body is a 400, "
            "another media type a 415."
        ),
        "content": {
            JSON_TYPE: {
                "schema": model_cls.model_json_schema(ref_template="#/components/schemas/{model}")
            },
            SAFETENSORS_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }
    add_post_route(
        router, path, post_handler, model_cls=model_cls, names=names, summary=summary,
        description=description, request_body=body,
    )  # fmt: skip


__all__ = ["BodyTensors", "add_tensor_route", "read_tensor_body"]
