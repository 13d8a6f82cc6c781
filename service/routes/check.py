"""``POST /v1/configs/check``: is my RoPE table right? (:func:`posenc.explain.check.check_table`).

The body is JSON (``cos`` and ``sin`` as lists of rows beside the fields), or a safetensors file
with tensors ``cos`` and ``sin`` whose header's ``__metadata__`` holds the JSON fields under
``request``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import numpy as np
import torch
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from posenc.core import codec, slices
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.explain.check import (
    MISTAKE_NAMES,
    MISTAKES,
    ROTATION_MISTAKE_NAMES,
    candidates,
    check_rotation,
    check_table,
)
from service import json_slices
from service.errors import BadBody, is_json_media_type, media_type_refusal, unparsable_body
from service.json_body import INLINE_BYTES
from service.sliced_validation import SLICED_DICT, sliced_rows
from service.state import State
from service.statuses import Does, declared_responses

router = APIRouter(prefix="/v1/configs", tags=["configs"])

SAFETENSORS_TYPE = "application/vnd.safetensors"


class CheckRequest(BaseModel):
    """Body of ``POST /v1/configs/check`` (``cos``/``sin`` in a safetensors body instead)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "head_dim": 4,
                    "positions": [0, 1],
                    "cos": [[1.0] * 4, [0.5403023, 0.99995, 0.5403023, 0.99995]],
                    "sin": [[0.0] * 4, [0.84147096, 0.00999983, 0.84147096, 0.00999983]],
                }
            ]
        },
    )

    config: Annotated[dict[str, Any], SLICED_DICT] | None = Field(
        None, description="a model's config.json"
    )
    preset: str | None = Field(None, description="a preset name (instead of config)")
    positions: list[int] | list[list[int]] | None = Field(
        None, description="the table's positions (or M-RoPE's three rows)"
    )
    seq_len: int | None = Field(None, ge=1, description="positions 0 … T−1")
    layer_type: str | None = Field(None, description="the layer type, for per-type configs")
    max_model_len: int | None = Field(
        None, ge=1, description="vLLM's --max-model-len and llama.cpp's context size"
    )
    head_dim: int | None = Field(None, description="as /v1/encodings/rope")
    rotary_dim: int | None = Field(None, description="as /v1/encodings/rope")
    base: float | None = Field(None, description="as /v1/encodings/rope")
    layout: str | None = Field(None, description="as /v1/encodings/rope")
    scaling: dict[str, Any] | None = Field(None, description="as /v1/encodings/rope")
    cos: Annotated[list[list[float]], sliced_rows(list[float])] | None = Field(
        None, description="your cos table, (T, R) or (T, R/2); JSON numbers are read as float32"
    )
    sin: Annotated[list[list[float]], sliced_rows(list[float])] | None = Field(
        None, description="your sin table, same shape"
    )
    q_in: list[list[list[float]]] | None = Field(
        None, description="your queries before rotation, (T, H, D), instead of cos and sin"
    )
    q_out: list[list[list[float]]] | None = Field(
        None, description="your queries after rotation, (T, H, D), in the engine's channel order"
    )
    k_in: list[list[list[float]]] | None = Field(None, description="your keys before, (T, H_kv, D)")
    k_out: list[list[list[float]]] | None = Field(None, description="your keys after")
    offset: int | None = Field(None, description="added to every position, as /v1/rope/apply")
    layer: int | None = Field(None, ge=0, description="a layer index of config")


class Match(BaseModel):
    engine: str
    precision: str
    max_abs_diff: float
    first_position: int | None
    bit_exact: bool


class Diagnosis(BaseModel):
    mistake: str = Field(
        ..., description=f"one of {', '.join((*MISTAKE_NAMES, *ROTATION_MISTAKE_NAMES))}"
    )
    explains: bool
    max_abs_diff: float
    offset: int | None = Field(None, description="positions_offset: the offset found")


class CheckAnswer(BaseModel):
    matches: list[Match]
    diagnosis: list[Diagnosis]
    meta: dict[str, Any]


def _request(raw: Any, where: str) -> CheckRequest:
    try:
        return CheckRequest.model_validate(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": (where, *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def _array(value: Any) -> Any:
    """A decoded tensor as a NumPy array (bfloat16 widened to float32)."""
    return np.asarray(value.float()) if hasattr(value, "float") else np.asarray(value)


TABLES = ("cos", "sin")
VECTORS = ("q_in", "q_out", "k_in", "k_out")


def _read(body: bytes, content_type: str) -> tuple[CheckRequest, dict[str, Any]]:
    """The fields and the caller's arrays: ``cos`` and ``sin``, or ``q_in``/``q_out`` (and
    ``k_in``/``k_out``)."""
    if content_type == SAFETENSORS_TYPE:
        try:
            tensors, metadata = codec.decode_safetensors(body)
        except codec.CodecError as exc:
            raise BadBody(f"the safetensors body cannot be read: {exc}") from None
        names = TABLES if "cos" in tensors or "q_in" not in tensors else VECTORS
        needed = names if names == TABLES else ("q_in", "q_out")
        missing = [n for n in needed if n not in tensors]
        if missing:
            raise BadBody(
                f"the safetensors body has no {missing[0]!r} tensor (cos and sin, or q_in and "
                "q_out with optionally k_in and k_out)"
            )
        try:
            fields = json.loads((metadata or {}).get("request") or "{}")
        except json.JSONDecodeError as exc:
            raise BadBody(f"__metadata__.request is not JSON: {exc}") from None
        req = _request(fields, "body")
        if any(getattr(req, n) is not None for n in (*TABLES, *VECTORS)):
            raise BadBody("the arrays are the safetensors tensors, not request fields")
        return req, {n: _array(tensors[n]) for n in names if n in tensors}
    if not is_json_media_type(content_type):
        raise media_type_refusal(content_type, ["application/json", SAFETENSORS_TYPE])
    try:  # in slices, the GIL free between them (service.json_slices)
        raw = json_slices.loads(body or b"null")
    except RecursionError as exc:
        raise unparsable_body(exc) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadBody(f"the body is not JSON: {exc}") from None
    req = _request(raw, "body")
    if req.q_in is not None or req.q_out is not None:
        # JSON numbers are read as float32, as the tables are
        return req, {n: _cube(getattr(req, n), n) for n in VECTORS if getattr(req, n) is not None}
    if req.cos is None or req.sin is None:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "cos" if req.cos is None else "sin"),
                    "msg": "cos and sin (or q_in and q_out) are required (JSON rows, or tensors "
                    "of a safetensors body)",
                    "type": "missing",
                }
            ]
        )
    # JSON numbers are read as float32, the dtype models hold their tables in (the shortest
    # decimal of a float32 rounds back to it); a safetensors body keeps its own dtype
    return req, {"cos": _rows(req.cos, "cos"), "sin": _rows(req.sin, "sin")}


def _cube(rows: list[list[list[float]]], name: str) -> Any:
    """JSON ``(T, H, D)`` lists as float32; ragged is a 422."""
    try:
        return slices.nested_tensor(rows, torch.float32).numpy()  # in slices (issue 39)
    except (TypeError, ValueError):
        raise InvalidArgument(
            f"{name} must be (T, H, D) lists of equal lengths", field=name
        ) from None


def _rows(rows: list[list[float]], name: str) -> Any:
    """JSON rows as a float32 ``(T, W)`` array; ragged rows are a 422."""
    widths = {len(r) for r in rows}
    if len(widths) > 1:
        raise InvalidArgument(
            f"{name} rows must all have the same length, got lengths {sorted(widths)[:4]}",
            field=name,
        )
    return slices.nested_tensor(rows, torch.float32).numpy()


@router.post(
    "/check",
    response_model=CheckAnswer,
    summary="Is my RoPE table right? Which engine it equals, which mistake made it",
    description=(
        "Send your own cos and sin (JSON rows, or a safetensors body with tensors cos and sin "
        "and the JSON fields in its header's __metadata__ under request) with config or preset "
        "and positions or seq_len; (T, R) in either layout, or (T, R/2). Or send q_in and "
        "q_out (and k_in, k_out), (T, H, D), in place of cos and sin: your vectors before and "
        "after your rotation. `matches` compares it with each engine and precision ("
        + ", ".join(f"{e}/{p}" for e, p in candidates())
        + "), closest first; `diagnosis` names the known mistakes that reproduce it within "
        "1e-6, from a fixed vocabulary: "
        + ", ".join((*MISTAKE_NAMES, *ROTATION_MISTAKE_NAMES))
        + " (the last seven for rotations; positions_offset gives the offset found)."
    ),
    responses=declared_responses(
        "POST",
        "/v1/configs/check",
        Does(
            body=True,
            validates="an unreadable field or table",
            output_limit="more values compared than POSENC_MAX_ELEMENTS",
            state=True,
        ),
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": CheckRequest.model_json_schema()},
                SAFETENSORS_TYPE: {"schema": {"type": "string", "format": "binary"}},
            },
        }
    },
)
async def config_check(request: Request, state: State) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if len(body) <= INLINE_BYTES:
        req, arrays = _read(body, content_type)
    else:  # parsed and validated on a worker thread, in slices (service.json_body)
        req, arrays = await run_in_threadpool(_read, body, content_type)
    fields = req.model_dump(exclude={*TABLES, *VECTORS}, exclude_none=True)
    if "cos" in arrays:
        work = (len(candidates()) + len(MISTAKES) + 2) * 2 * int(np.size(arrays["cos"]))
        check_elements(work, what="the tables compared", max_elements=state.settings.max_elements)
        fields = {k: v for k, v in fields.items() if k not in ("offset", "layer")}
        return await run_in_threadpool(check_table, fields, arrays["cos"], arrays["sin"])
    if ("q_in" in arrays) != ("q_out" in arrays):
        raise InvalidArgument("give q_in with q_out", field="q_out")
    rotations = len(candidates()) + len(MISTAKES) + len(ROTATION_MISTAKE_NAMES) + 2
    work = rotations * sum(int(np.size(a)) for a in arrays.values())
    check_elements(work, what="the rotations compared", max_elements=state.settings.max_elements)
    return await run_in_threadpool(
        check_rotation,
        fields,
        arrays["q_in"],
        arrays["q_out"],
        arrays.get("k_in"),
        arrays.get("k_out"),
    )


config_check.posenc_model = CheckRequest  # type: ignore[attr-defined]  # 422 hints


__all__ = ["CheckAnswer", "CheckRequest", "router"]
