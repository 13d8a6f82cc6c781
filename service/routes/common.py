"""What every route shares: the service state, preset merging, GET query parsing, and
``respond()``, which turns a validated request into a negotiated, cached, ETagged response.

A compute route only builds a :class:`Plan` (the normalised params, the output element count
and a closure that calls posenc) and hands it to :func:`respond`, which in order

1. refuses a plan larger than ``max_elements`` with 413 (nothing is allocated yet);
2. negotiates the format (406 lists what the endpoint can give);
3. derives the ETag from a canonical key of the request (route, params after the preset
   merge, format, encoding, index, model fingerprint, device, version) and answers a matching
   ``If-None-Match`` with 304 (GET) or 412 (other methods), without computing;
4. serves the encoded body from the cache, or the tensors from the cache, or computes them;
5. encodes, caches the body, and sets ``Vary``, ``ETag``, ``Server-Timing``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

import orjson
import torch
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, Field, ValidationError

import posenc
from posenc.errors import TooLarge, UnknownName
from posenc.models import EmbeddingModel
from service import tracing
from service.admission import REQUEST_OVERHEAD, ByteBudget, HeldResponse, estimate_bytes
from service.cache import ByteLRU
from service.config import Settings
from service.errors import NotReady
from service.formats import FORMAT_MEDIA_TYPES, Bundle, Encoded, encode_bundle, negotiate
from service.metrics import Metrics
from service.replay import REPLAY_SCOPE_KEY

Source = Literal["body", "query"]
M = TypeVar("M", bound=BaseModel)

# Query parameters that choose the representation, on every compute endpoint (GET and POST).
OUTPUT_PARAMS = ("format", "encoding", "index")
# GET fields given as comma-separated integers.
LIST_QUERY_FIELDS = ("positions", "mrope_section")


# ---------------------------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------------------------


@dataclass
class ServiceState:
    """What the lifespan builds and every request reads (``app.state.posenc``)."""

    settings: Settings
    device: torch.device
    metrics: Metrics
    cache: ByteLRU
    models: dict[str, EmbeddingModel] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    default_model: str = ""
    ready: bool = False
    _budget: ByteBudget | None = field(default=None, repr=False)

    @property
    def budget(self) -> ByteBudget:
        """The in-flight byte budget (:mod:`service.admission`), built from the settings on
        first use (on the event loop), shared by every request of this app."""
        if self._budget is None:
            self._budget = ByteBudget(
                self.settings.max_inflight_bytes,
                self.settings.queue_timeout,
                metrics=self.metrics,
            )
        return self._budget

    def model(self, name: str | None, *, field_name: str = "model") -> EmbeddingModel:
        """The named model (the default for ``None``); UnknownName (422) lists the loaded ones."""
        key = self.default_model if name is None else name
        try:
            return self.models[key]
        except KeyError:
            raise UnknownName(
                f"unknown model {name!r}; loaded models: {', '.join(self.models) or '(none)'}",
                field=field_name,
                name=name,
                known=self.models,
            ) from None


def read_state(request: Request) -> ServiceState:
    """The ready service state; NotReady (503) while the lifespan is still loading models."""
    state: ServiceState | None = getattr(request.app.state, "posenc", None)
    if state is None or not state.ready:
        raise NotReady("the service is starting: models are still loading")
    return state


async def get_state(request: Request) -> ServiceState:
    return read_state(request)


State = Annotated[ServiceState, Depends(get_state)]


# ---------------------------------------------------------------------------------------------
# Output options (query parameters of every compute endpoint)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputOptions:
    format: str | None
    encoding: str | None
    index: int | None


class _OutputQuery(BaseModel):
    format: str | None = None
    encoding: Literal["float", "base64"] | None = None
    index: int | None = Field(default=None, ge=0, le=2**31 - 1)  # (JSON keys hold 64 bits)


_NO_OUTPUT_OPTIONS = OutputOptions(format=None, encoding=None, index=None)


def read_output(request: Request) -> OutputOptions:
    """The output options from the query string; a bad value is FastAPI's 422 under ``query``.

    Compute routes read these here rather than through a FastAPI dependency: solving
    dependencies is most of the framework's per-request cost on a cache hit.
    """
    params = request.query_params
    given = {k: params[k] for k in OUTPUT_PARAMS if k in params}
    if not given:
        return _NO_OUTPUT_OPTIONS
    q = revalidate(_OutputQuery, given, "query")
    return OutputOptions(format=q.format, encoding=q.encoding, index=q.index)


# How read_output's parameters appear in the OpenAPI document of every compute operation.
OUTPUT_OPENAPI_PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "format",
        "in": "query",
        "required": False,
        "description": "output format; wins over Accept: json, safetensors, npy, raw or png "
        "(anything else is a 406 listing what is available)",
        "schema": {"type": "string", "enum": list(FORMAT_MEDIA_TYPES)},
    },
    {
        "name": "encoding",
        "in": "query",
        "required": False,
        "description": "JSON only: base64 gives each tensor's data as base64 of its raw bytes",
        "schema": {"type": "string", "enum": ["float", "base64"]},
    },
    {
        "name": "index",
        "in": "query",
        "required": False,
        "description": "png only: the leading index of a 3-D tensor to draw",
        "schema": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
    },
]


# ---------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------


def validation_error(source: Source, errors: Sequence[Mapping[str, Any]]) -> RequestValidationError:
    """A RequestValidationError (FastAPI's 422 list) with locations under ``source``."""
    items = []
    for e in errors:
        item = dict(e)
        item["loc"] = (source, *tuple(e.get("loc", ())))
        item.pop("url", None)
        items.append(item)
    return RequestValidationError(items)


def missing(source: Source, name: str, message: str) -> RequestValidationError:
    return validation_error(source, [{"type": "missing", "loc": (name,), "msg": message}])


def revalidate(model_cls: type[M], data: Mapping[str, Any], source: Source) -> M:
    """Validate ``data`` as ``model_cls``; pydantic errors become FastAPI's 422 under ``source``."""
    try:
        return model_cls.model_validate(dict(data))
    except ValidationError as exc:
        raise validation_error(source, exc.errors(include_url=False)) from None


def merge_preset(req: M, kind: str, source: Source) -> tuple[M, dict[str, Any]]:
    """Apply ``req.preset``: its params are defaults that the fields the client sent override.

    Returns the merged request (validated again) and the preset's params (empty without one).
    Raises UnknownName (422) for an unknown preset or one of another kind.
    """
    name = getattr(req, "preset", None)
    if name is None:
        return req, {}
    from posenc.presets import PRESETS, get_preset

    preset = get_preset(name)
    if preset.kind != kind:
        same_kind = sorted(n for n, p in PRESETS.items() if p.kind == kind)
        raise UnknownName(
            f"preset {name!r} is a {preset.kind} preset; this endpoint takes {kind} presets: "
            f"{', '.join(same_kind)}",
            field="preset",
        )
    fields = type(req).model_fields
    defaults = {k: v for k, v in preset.params.items() if k in fields}
    sent = req.model_dump(include=req.model_fields_set)
    merged = revalidate(type(req), {**defaults, **sent}, source)
    return merged, dict(preset.params)


# ---------------------------------------------------------------------------------------------
# GET: the same fields as query parameters
# ---------------------------------------------------------------------------------------------


def query_fields(request: Request, model_cls: type[BaseModel]) -> dict[str, Any]:
    """The query string as a request dict: ``positions`` comma-separated, ``scaling`` JSON text,
    other fields as their text (pydantic converts it); the output options are left out."""
    data: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    params = request.query_params
    for key in dict.fromkeys(params.keys()):
        if key in OUTPUT_PARAMS:
            continue
        values = params.getlist(key)
        if key in LIST_QUERY_FIELDS:
            text = ",".join(values)
            try:
                data[key] = [int(v) for v in text.split(",")]
            except ValueError:
                errors.append(
                    {
                        "type": "int_parsing",
                        "loc": (key,),
                        "msg": f"{key} must be comma-separated integers, e.g. 0,1,2; got {text!r}",
                        "input": text,
                    }
                )
            continue
        if len(values) > 1:
            errors.append(
                {
                    "type": "value_error",
                    "loc": (key,),
                    "msg": f"{key} is given {len(values)} times; give it once",
                    "input": values,
                }
            )
            continue
        value = values[0]
        if key in ("scaling", "config"):  # JSON text
            try:
                data[key] = json.loads(value)
            except ValueError as exc:
                errors.append(
                    {
                        "type": "json_invalid",
                        "loc": (key,),
                        "msg": f"{key} must be JSON text (an object or null): {exc}",
                        "input": value,
                    }
                )
            continue
        data[key] = value
    if errors:
        raise validation_error("query", errors)
    return data


def parse_query(request: Request, model_cls: type[M]) -> M:
    return revalidate(model_cls, query_fields(request, model_cls), "query")


def query_openapi(model_cls: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting the fields of ``model_cls`` as GET query parameters."""
    schema = model_cls.model_json_schema(ref_template="#/components/schemas/{model}")
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    examples = (schema.get("examples") or [{}])[0]
    parameters = []
    for name, prop in props.items():
        prop = dict(prop)
        description = prop.pop("description", None)
        prop.pop("title", None)
        if name == "mrope_section":
            param_schema: dict[str, Any] = {
                "type": "string",
                "pattern": r"^[0-9]+,[0-9]+,[0-9]+$",
                "description": "three comma-separated ints, e.g. 16,24,24",
            }
        elif name == "positions":
            param_schema = {
                "type": "string",
                "pattern": r"^[0-9]+(,[0-9]+)*$",
                "description": "comma-separated positions, e.g. 0,1,2,4096",
            }
        elif name == "config":
            param_schema = {
                "type": "string",
                "description": "JSON text of the model's config.json object",
            }
        elif name == "scaling":
            param_schema = {
                "type": "string",
                "description": 'JSON text of the scaling object or null, e.g. {"type":"linear","factor":2}',
            }
        else:
            param_schema = prop
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": param_schema,
        }
        if description:
            parameter["description"] = description
        if name in examples:
            value = examples[name]
            if isinstance(value, list):
                value = ",".join(str(v) for v in value)
            elif isinstance(value, dict):
                value = json.dumps(value, separators=(",", ":"))
            parameter["example"] = value
        parameters.append(parameter)
    return {"parameters": parameters}


# ---------------------------------------------------------------------------------------------
# Responding
# ---------------------------------------------------------------------------------------------


@dataclass
class Plan:
    """A validated request, ready to run.

    Attributes:
        route: the route template (``/v1/encodings/sinusoidal``): part of the cache key.
        params: the normalised request after the preset merge (JSON-able): the rest of the key.
        elements: elements of all output tensors together (checked against ``max_elements``).
        compute: builds the bundle; called only on a cache miss.
        names: the tensor names, primary first (for the 413 message).
        allocations: other element counts the compute allocates (e.g. a bias table), each
            checked against ``max_elements`` too.
        model: the model the output depends on (its fingerprint joins the key), if any.
        cache_tensors: keep the computed bundle in the cache (tables: yes; token batches: no).
    """

    route: str
    params: dict[str, Any]
    elements: int
    compute: Callable[[], Bundle]
    names: Sequence[str] = ()
    allocations: Mapping[str, int] = field(default_factory=dict)
    model: str | None = None
    cache_tensors: bool = True
    # tables only: the bundle as row blocks (a service.streaming.StreamBundle), used when the
    # output is over max_elements and asked as raw, npy or safetensors
    stream: Callable[[], Any] | None = None
    # the widest row of the tables (their last dimension: d_model, rotary_dim, key_len): a
    # stream computes at least one row at a time, so a row over max_elements is not streamed
    row_elements: int = 0


def check_size(plan: Plan, limit: int) -> None:
    """TooLarge (413) when the output, or anything computed on the way, exceeds ``limit``."""
    if plan.elements > limit:
        raise TooLarge(
            f"the output would have {plan.elements} elements "
            f"({' + '.join(plan.names) or 'all tensors'}), over the limit of {limit} elements "
            "(POSENC_MAX_ELEMENTS); ask for fewer positions, heads or a smaller batch",
            limit=limit,
            requested=plan.elements,
            field=None,
        )
    for what, count in plan.allocations.items():
        if count > limit:
            raise TooLarge(
                f"{what} would have {count} elements, over the limit of {limit} elements "
                "(POSENC_MAX_ELEMENTS)",
                limit=limit,
                requested=count,
                field=what,
            )


def _canonical(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 If-None-Match: ``*`` or a list of entity tags, compared weakly."""
    value = if_none_match.strip()
    if value == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == bare for tag in value.split(","))


def _timing(compute_s: float, encode_s: float, cache: str) -> str:
    return (
        f"compute;dur={compute_s * 1000:.3f}, encode;dur={encode_s * 1000:.3f}, "
        f'cache;desc="{cache}"'
    )


@dataclass
class Prepared:
    """What :func:`prepare` worked out: a finished response (304, 412, cache hit), or what
    :func:`finish` needs to compute and encode."""

    response: Response | None
    fmt: str = "json"
    base64: bool = False
    index: int | None = None
    table_text: str = ""
    body_key: tuple[str, str] = ("body", "")
    headers: dict[str, str] = field(default_factory=dict)


def prepare(
    request: Request,
    state: ServiceState,
    plan: Plan,
    out: OutputOptions,
    *,
    limit: int | None = None,
) -> Prepared:
    """The cheap steps 1–4 of the module docstring (no tensor is made here): safe on the event
    loop. Raises TooLarge (413) over ``limit`` (default ``max_elements``) or NotAcceptable (406)."""
    check_size(plan, state.settings.max_elements if limit is None else limit)
    fmt = negotiate(request.headers.get("accept"), out.format)
    base64 = fmt == "json" and out.encoding == "base64"
    index = out.index if fmt == "png" else None

    table_key = {
        "route": plan.route,
        "params": plan.params,
        "model": state.fingerprints.get(plan.model) if plan.model else None,
        "device": str(state.device),
        "version": posenc.__version__,
    }
    table_text = _canonical(table_key)
    body_text = _canonical({"table": table_text, "format": fmt, "base64": base64, "index": index})
    digest = hashlib.blake2b(body_text.encode(), digest_size=16).hexdigest()
    etag = f'"{digest}"'

    headers = {"ETag": etag, "Vary": "Accept"}
    if request.method == "GET":
        scope = "private" if state.settings.api_key else "public"
        # a model's table changes with its file: make caches revalidate (a cheap 304)
        headers["Cache-Control"] = f"{scope}, no-cache" if plan.model else f"{scope}, max-age=86400"

    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and _etag_matches(if_none_match, etag):
        if request.method in ("GET", "HEAD"):
            return Prepared(Response(status_code=304, headers=headers))
        detail = {"detail": "If-None-Match: the current representation matches " + etag}
        return Prepared(
            Response(
                content=_canonical(detail),
                status_code=412,
                media_type="application/json",
                headers=headers,
            )
        )

    body_key = ("body", body_text)
    cached = state.cache.get(body_key)
    state.metrics.record_cache("body", cached is not None)
    if cached is not None:
        headers["Server-Timing"] = _timing(0.0, 0.0, "hit")
        return Prepared(_response(cached, fmt, plan, headers), fmt, body_key=body_key)
    return Prepared(None, fmt, base64, index, table_text, body_key, headers)


def finish(state: ServiceState, plan: Plan, prepared: Prepared) -> Response:
    """Compute (or take the cached tensors), encode, cache the body: the thread-pool part."""
    cache, metrics = state.cache, state.metrics
    compute_s = 0.0
    bundle = None
    tensor_key = ("tensors", prepared.table_text)
    if plan.cache_tensors:
        bundle = cache.get(tensor_key)
        metrics.record_cache("tensors", bundle is not None)
    if bundle is None:
        t0 = time.perf_counter()
        with tracing.span("posenc.compute", **{"posenc.route": plan.route}):
            bundle = plan.compute()
            if state.device.type == "cuda":
                torch.cuda.synchronize(state.device)
        compute_s = time.perf_counter() - t0
        if plan.cache_tensors:
            cache.put(tensor_key, bundle, bundle.nbytes)
    t0 = time.perf_counter()
    with tracing.span("posenc.encode", **{"posenc.format": prepared.fmt}):
        encoded = encode_bundle(bundle, prepared.fmt, base64=prepared.base64, index=prepared.index)
    encode_s = time.perf_counter() - t0
    cache.put(prepared.body_key, encoded, len(encoded.body))
    headers = {**prepared.headers, "Server-Timing": _timing(compute_s, encode_s, "miss")}
    return _response(encoded, prepared.fmt, plan, headers)


def _response(encoded: Encoded, fmt: str, plan: Plan, headers: dict[str, str]) -> Response:
    headers = {**headers, **encoded.headers}
    if fmt != "json":
        suffix = {"safetensors": "safetensors", "npy": "npy", "raw": "bin", "png": "png"}[fmt]
        stem = plan.route.rstrip("/").rsplit("/", 1)[-1]
        if fmt != "safetensors" and plan.names:
            stem = f"{stem}-{plan.names[0]}"
        headers["Content-Disposition"] = f'inline; filename="{stem}.{suffix}"'
    return Response(content=encoded.body, media_type=encoded.media_type, headers=headers)


def respond(request: Request, state: ServiceState, plan: Plan, out: OutputOptions) -> Response:
    """Serve ``plan`` as the negotiated representation, all in the calling thread."""
    prepared = prepare(request, state, plan, out)
    return prepared.response if prepared.response is not None else finish(state, plan, prepared)


async def respond_async(
    request: Request, state: ServiceState, plan: Plan, out: OutputOptions
) -> Response:
    """As :func:`respond`, with only a cache miss (compute and encode) in the thread pool: a
    repeated request is answered on the event loop without a thread hop. A 200 whose body is
    in the cache is marked for :class:`service.replay.ReplayMiddleware`, which answers the
    same request next time without running the route at all. A table over ``max_elements``
    with ``plan.stream`` is streamed (:mod:`service.streaming`)."""
    if plan.stream is not None and plan.elements > state.settings.max_elements:
        from service.streaming import respond_streamed

        return respond_streamed(request, state, plan, out)
    prepared = prepare(request, state, plan, out)
    if prepared.response is not None:
        if prepared.response.status_code == 200:  # a body-cache hit
            request.scope[REPLAY_SCOPE_KEY] = prepared.body_key
        return prepared.response
    # A miss allocates: take its estimated peak bytes from the in-flight budget first (429 when
    # none frees up in time), keep only the body's once encoded, release after the last byte.
    budget = state.budget
    nbytes = estimate_bytes(
        plan.elements, prepared.fmt, base64=prepared.base64, dtype=plan.params.get("dtype", "")
    )
    await budget.acquire(nbytes)
    since = time.monotonic()
    try:
        response = await run_in_threadpool(finish, state, plan, prepared)
        nbytes = budget.shrink(nbytes, len(response.body) + REQUEST_OVERHEAD)
    except BaseException:
        budget.release(nbytes, held_s=time.monotonic() - since)
        raise
    if prepared.body_key in state.cache:  # the body fitted the cache: replayable
        request.scope[REPLAY_SCOPE_KEY] = prepared.body_key
    return HeldResponse(response, budget, nbytes, since)


def fields_dump(model: BaseModel, *, exclude: set[str] | None = None) -> dict[str, Any]:
    """JSON-able dump of a request for the cache key and meta."""
    return model.model_dump(mode="json", exclude=exclude)
