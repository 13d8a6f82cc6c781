"""``POST /v1/rope/apply``: queries and keys rotated as the model applies RoPE
(:func:`posenc.rope_kinds.rotate.rotate`).

The body is JSON (``q`` and ``k`` as nested lists of ``(T, H, D)`` beside the fields, read in
``dtype``), or a safetensors file with tensors ``q`` and ``k`` in their own dtype whose header's
``__metadata__`` holds the JSON fields under ``request`` (as ``/v1/configs/check`` takes it), or
no vectors at all with ``seed`` and ``num_heads``. Every size is known before a value is read: a
JSON body's nesting is measured, a safetensors body's header read; ``T·H·D`` of the inputs and
of the outputs count toward ``POSENC_MAX_ELEMENTS`` (413). The answer goes through the one
response path (content negotiation, ETag, byte budget) as every table does.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from posenc.core import codec, slices
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.engines.rotation import apply_for
from posenc.rope_kinds.kind import ROPE
from posenc.rope_kinds.rotate import APPLY_ONLY, ROPE_APPLY, apply_meta, kind_fields
from service.errors import BadBody, is_json_media_type, media_type_refusal
from service.formats import Bundle
from service.json_body import parse_json
from service.query import read_output
from service.responses.negotiation import negotiate_output
from service.responses.plans import Plan
from service.responses.respond import respond
from service.responses.threads import one_thread_if
from service.routes.registered import request_model
from service.routes.tables import add_post_route
from service.state import ServiceState, read_state

router = APIRouter(prefix="/v1/rope", tags=["rope"])

JSON_TYPE = "application/json"
SAFETENSORS_TYPE = "application/vnd.safetensors"
VECTORS = ("q", "k")

#: The example of the OpenAPI document: Llama 3.1's rule on two seeded heads.
EXAMPLES = [
    {"preset": "llama-3.1-8b", "positions": [0, 1, 4096], "seed": 0, "num_heads": 2},
    {"head_dim": 4, "positions": [0, 1], "q": [[[1.0, 0.0, 1.0, 0.0]], [[1.0, 0.0, 1.0, 0.0]]]},
]


def _shape(rows: Any, name: str) -> tuple[int, int, int]:
    """``(T, H, D)`` of nested JSON lists, measured without reading a number; ragged or of
    another depth is a 422."""
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], list) or not rows[0]:
        raise InvalidArgument(f"{name} must be (T, H, D) nested lists of numbers", field=name)
    if not isinstance(rows[0][0], list):
        raise InvalidArgument(f"{name} must be (T, H, D) nested lists of numbers", field=name)
    t, h, d = len(rows), len(rows[0]), len(rows[0][0])
    for i, head_rows in enumerate(rows):
        if not isinstance(head_rows, list) or len(head_rows) != h:
            raise InvalidArgument(f"{name}[{i}] must hold {h} heads", field=name)
        for j, channels in enumerate(head_rows):
            if not isinstance(channels, list) or len(channels) != d:
                raise InvalidArgument(f"{name}[{i}][{j}] must hold {d} numbers", field=name)
    return t, h, d


def _json_tensor(rows: list[Any], dtype: torch.dtype, name: str) -> torch.Tensor:
    try:
        array = slices.nested_tensor(rows, torch.float64).numpy()  # in slices (issue 39)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must hold numbers only", field=name) from None
    if not np.isfinite(array).all():
        raise InvalidArgument(f"{name} must hold finite numbers", field=name)
    return torch.from_numpy(array).to(dtype)


def _safetensors_shapes(body: bytes) -> tuple[codec.SafetensorsHeader, dict[str, tuple[int, ...]]]:
    try:
        header = codec.read_safetensors_header(body)
    except codec.CodecError as exc:
        raise BadBody(f"the safetensors body cannot be read: {exc}") from None
    shapes = {}
    for name, info in header.entries.items():
        if name not in VECTORS:
            raise BadBody(f"the safetensors body holds {name!r}: only tensors q and k are read")
        shapes[name] = tuple(int(n) for n in info.get("shape", ()))
    if "q" not in shapes:
        raise BadBody("the safetensors body has no 'q' tensor (q, and optionally k)")
    return header, shapes


def _request_fields(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise BadBody("the body must be a JSON object of fields")
    known = {*ROPE.field_names, *APPLY_ONLY, *VECTORS}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InvalidArgument(
            f"unknown field(s) {unknown} for /v1/rope/apply; its fields are "
            f"{', '.join(sorted(known))}",
            field=unknown[0],
        )
    return raw


def _sizes(
    fields: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]], limit: int
) -> dict[str, Any]:
    """The resolved fields, sized: inputs and outputs counted before anything is read."""
    request = {k: v for k, v in fields.items() if k not in (*VECTORS, "engine", "precision")}
    engine = fields.get("engine") or "transformers"
    precision = fields.get("precision") or "exact"
    if shapes and "q" not in shapes:
        raise InvalidArgument("k needs q", field="q")
    params = kind_fields(request, shapes.get("q"), shapes.get("k"), engine=engine,
                         precision=precision)  # fmt: skip
    inputs = sum(int(np.prod(s)) for s in shapes.values())
    outputs = sum(int(np.prod(s)) for s in ROPE_APPLY.shapes(params).values())
    check_elements(inputs + outputs, what="q and k in and out", max_elements=limit)
    return params


async def _read(request: Request, state: ServiceState) -> tuple[dict[str, Any], dict[str, Any]]:
    """The resolved fields and the input tensors (none for seeded vectors)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    limit = state.settings.max_elements
    if content_type == SAFETENSORS_TYPE:
        declared = int(request.headers.get("content-length") or 0)
        if declared > 8 * limit + codec.MAX_SAFETENSORS_HEADER:
            check_elements(declared // 8, what="the safetensors body", max_elements=limit)
        body = await request.body()
        header, shapes = _safetensors_shapes(body)
        try:
            fields = json.loads((header.metadata or {}).get("request") or "{}")
        except json.JSONDecodeError as exc:
            raise BadBody(f"__metadata__.request is not JSON: {exc}") from None
        fields = _request_fields(fields)
        if any(n in fields for n in VECTORS):
            raise BadBody("q and k are the safetensors tensors, not request fields")
        params = _sizes(fields, shapes, limit)
        try:
            decoded, _meta = codec.decode_safetensors(body)
        except codec.CodecError as exc:
            raise BadBody(f"the safetensors body cannot be read: {exc}") from None
        with warnings.catch_warnings():  # read-only views of the body: only ever read
            warnings.simplefilter("ignore", UserWarning)
            tensors = {
                n: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
                for n, v in decoded.items()
            }
        return params, tensors
    if not is_json_media_type(content_type):
        raise media_type_refusal(content_type, [JSON_TYPE, SAFETENSORS_TYPE])
    try:  # off the event loop when large, in slices (service.json_body)
        raw = await parse_json(await request.body() or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadBody(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise BadBody("the body's JSON is nested too deeply to read") from None
    fields = _request_fields(raw)
    shapes = {n: _shape(fields[n], n) for n in VECTORS if fields.get(n) is not None}
    params = _sizes({k: v for k, v in fields.items() if k != "dtype"}, shapes, limit)
    dtype = resolve_dtype(fields.get("dtype"))
    tensors = {n: _json_tensor(fields[n], dtype, n) for n in shapes}
    return {**params, "dtype": str(dtype).removeprefix("torch.")}, tensors


def _digest(tensors: Mapping[str, torch.Tensor]) -> str | None:
    if not tensors:
        return None
    h = hashlib.blake2b(digest_size=16)
    for name, t in tensors.items():
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy()  # bfloat16 too, no copy
        h.update(raw.data)
    return h.hexdigest()


def _plan(params: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Plan:
    def compute() -> Bundle:
        """The rotation on one OpenMP thread: it is a loop of elementwise blocks, whose
        parallel regions cost more than they give (on 2 busy cores, 10x: 6 s against 0.6 s
        for a (4096, 32, 128) q and k)."""
        positions = slices.nested_tensor(params["positions"], torch.int64)
        with one_thread_if(True):
            if not tensors:
                out = ROPE_APPLY.compute(params, None)  # type: ignore[arg-type]  # seeded
            else:
                fn = apply_for(params)
                out = {n: fn(x, positions, params) for n, x in tensors.items()}
        return Bundle(out, apply_meta(params))

    key = {k: v for k, v in params.items() if k != "seed" or not tensors}
    return Plan(ROPE_APPLY, key, compute, None, _digest(tensors))


async def post_rope_apply(request: Request) -> Response:
    out = read_output(request)
    state = read_state(request)
    params, tensors = await _read(request, state)
    plan = await run_in_threadpool(_plan, params, tensors)
    return await respond(request, state, plan, negotiate_output(request, out))


def _openapi_body() -> dict[str, Any]:
    schema = request_model(ROPE).model_json_schema(ref_template="#/components/schemas/{model}")
    schema = json.loads(json.dumps(schema))
    props = schema.setdefault("properties", {})
    for name in ("dtype", "seq_len"):
        props.pop(name, None)
    tensor = {"type": "array", "items": {"type": "array", "items": {"type": "array",
              "items": {"type": "number"}}}}  # fmt: skip
    props.update(
        q={**tensor, "description": "(T, H, D) queries, D the model's head dimension"},
        k={**tensor, "description": "(T, H_kv, D) keys (optional)"},
        dtype={"type": "string", "enum": ["float32", "float16", "bfloat16", "float64"],
               "description": "dtype of the JSON q and k (and of the answer); default float32"},
        seq_len={"type": "integer", "minimum": 1, "description": "T: positions 0 … T−1"},
        offset={"type": "integer", "description": "added to every position (default 0)"},
        layer={"type": "integer", "minimum": 0, "description": "a layer index of config"},
        seed={"type": "integer", "minimum": 0, "description": "seeded q and k (no q given)"},
        num_heads={"type": "integer", "minimum": 1, "description": "H of the seeded q"},
        num_kv_heads={"type": "integer", "minimum": 1,
                      "description": "H_kv of the seeded k (default num_heads)"},
    )  # fmt: skip
    schema.pop("required", None)
    schema["title"] = "RopeApplyRequest"
    schema["examples"] = EXAMPLES
    return {
        "required": True,
        "description": "JSON, or a safetensors body with tensors q and k and the JSON fields "
        "in its header's __metadata__ under request.",
        "content": {
            JSON_TYPE: {"schema": schema, "examples": {f"e{i}": {"value": e}
                        for i, e in enumerate(EXAMPLES)}},
            SAFETENSORS_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }  # fmt: skip


add_post_route(
    router,
    "/apply",
    post_rope_apply,
    model_cls=request_model(ROPE),
    names=("q", "k"),
    summary=ROPE_APPLY.summary,
    description=ROPE_APPLY.description
    + " Body: JSON (q, k as nested lists, with dtype) or safetensors (tensors q and k, the "
    "fields in __metadata__.request), or seed with num_heads. meta: layout (neox or gptj), "
    "rotary_dim, attention_scaling, engine, precision. Channels past rotary_dim come back bit "
    "for bit; a D other than the head dimension is a 422 naming both.",
    request_body=_openapi_body(),
)

__all__ = ["router"]
