"""``POST /v1/configs/check``: is my RoPE table right? (:func:`posenc.check.check_table`).

The body is JSON (``cos`` and ``sin`` as lists of rows beside the fields), or a safetensors file
with tensors ``cos`` and ``sin`` whose header's ``__metadata__`` holds the JSON fields under
``request``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from posenc import codec
from posenc.check import MISTAKE_NAMES, MISTAKES, candidates, check_table
from posenc.errors import InvalidArgument
from posenc.limits import check_elements
from service.errors import BadBody, is_json_media_type, media_type_refusal
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

    config: dict[str, Any] | None = Field(None, description="a model's config.json")
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
    cos: list[list[float]] | None = Field(
        None, description="your cos table, (T, R) or (T, R/2); JSON numbers are read as float32"
    )
    sin: list[list[float]] | None = Field(None, description="your sin table, same shape")


class Match(BaseModel):
    engine: str
    precision: str
    max_abs_diff: float
    first_position: int | None
    bit_exact: bool


class Diagnosis(BaseModel):
    mistake: str = Field(..., description=f"one of {', '.join(MISTAKE_NAMES)}")
    explains: bool
    max_abs_diff: float


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


def _read(body: bytes, content_type: str) -> tuple[CheckRequest, Any, Any]:
    if content_type == SAFETENSORS_TYPE:
        try:
            tensors, metadata = codec.decode_safetensors(body)
        except codec.CodecError as exc:
            raise BadBody(f"the safetensors body cannot be read: {exc}") from None
        missing = [n for n in ("cos", "sin") if n not in tensors]
        if missing:
            raise BadBody(f"the safetensors body has no {missing[0]!r} tensor (cos and sin)")
        try:
            fields = json.loads((metadata or {}).get("request") or "{}")
        except json.JSONDecodeError as exc:
            raise BadBody(f"__metadata__.request is not JSON: {exc}") from None
        req = _request(fields, "body")
        if req.cos is not None or req.sin is not None:
            raise BadBody("cos and sin are the safetensors tensors, not request fields")
        cos, sin = (_array(tensors[n]) for n in ("cos", "sin"))
        return req, cos, sin
    if not is_json_media_type(content_type):
        raise media_type_refusal(content_type, ["application/json", SAFETENSORS_TYPE])
    try:
        raw = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadBody(f"the body is not JSON: {exc}") from None
    req = _request(raw, "body")
    if req.cos is None or req.sin is None:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "cos" if req.cos is None else "sin"),
                    "msg": "cos and sin are required (JSON rows, or tensors of a safetensors body)",
                    "type": "missing",
                }
            ]
        )
    # JSON numbers are read as float32, the dtype models hold their tables in (the shortest
    # decimal of a float32 rounds back to it); a safetensors body keeps its own dtype
    return req, _rows(req.cos, "cos"), _rows(req.sin, "sin")


def _rows(rows: list[list[float]], name: str) -> Any:
    """JSON rows as a float32 ``(T, W)`` array; ragged rows are a 422."""
    widths = {len(r) for r in rows}
    if len(widths) > 1:
        raise InvalidArgument(
            f"{name} rows must all have the same length, got lengths {sorted(widths)[:4]}",
            field=name,
        )
    return np.asarray(rows, dtype=np.float32)


@router.post(
    "/check",
    response_model=CheckAnswer,
    summary="Is my RoPE table right? Which engine it equals, which mistake made it",
    description=(
        "Send your own cos and sin (JSON rows, or a safetensors body with tensors cos and sin "
        "and the JSON fields in its header's __metadata__ under request) with config or preset "
        "and positions or seq_len; (T, R) in either layout, or (T, R/2). `matches` compares it "
        "with each engine and precision ("
        + ", ".join(f"{e}/{p}" for e, p in candidates())
        + "), closest first; `diagnosis` names the known mistakes that reproduce it within "
        "1e-6, from a fixed vocabulary: " + ", ".join(MISTAKE_NAMES) + "."
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
    req, cos, sin = _read(body, content_type)
    work = (len(candidates()) + len(MISTAKES) + 2) * 2 * int(np.size(cos))
    check_elements(work, what="the tables compared", max_elements=state.settings.max_elements)
    fields = req.model_dump(exclude={"cos", "sin"}, exclude_none=True)
    return await run_in_threadpool(check_table, fields, cos, sin)


config_check.posenc_model = CheckRequest  # type: ignore[attr-defined]  # 422 hints


__all__ = ["CheckAnswer", "CheckRequest", "router"]
