"""Routes derived from the library's registry of kinds (:mod:`posenc.core.kinds`).

For every registered kind this module makes the request model (pydantic, from the kind's field
specs, with the bounds as JSON Schema keywords and the kind's example), a plan that resolves the
fields, sizes the bundle from the numbers and computes it, and the POST (and GET) routes through
:func:`service.routes.tables.add_compute_routes`, like the hand-written endpoints. Nothing here is
specific to one kind: registering a kind in the library is all it takes to serve it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from functools import partial
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    create_model,
    model_validator,
)
from pydantic.config import JsonDict

from posenc import resolve
from posenc.core import kinds as registry
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument, MissingField
from posenc.tokens.tokenizer import NoTokenizer, element_limit
from service.formats import Bundle
from service.query import QueryShape, Source, missing
from service.responses.bodies import StreamBundle
from service.responses.buffers import BODY_BUFFERS
from service.responses.plans import Plan
from service.routes.tables import add_compute_routes
from service.routes.tensor_bodies import BodyTensors, add_tensor_route
from service.routes.token_bodies import TokenTensors, add_token_route
from service.sliced_validation import SLICED_DICT, SLICED_TEXT, sliced_rows, sliced_unless
from service.state import ServiceState

#: The order of the kinds' tags in the API reference; within a tag, by path.
TAG_ORDER = ("encodings", "biases", "tokens")


def _not_bool(value: Any) -> Any:
    """JSON ``true`` is not the number 1."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def _bounds(spec: registry.FieldSpec) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    if spec.minimum is not None:
        bounds["ge"] = spec.minimum
    if spec.exclusive_minimum is not None:
        bounds["gt"] = spec.exclusive_minimum
    if spec.multiple_of is not None:
        bounds["multiple_of"] = spec.multiple_of
    if spec.type in ("int", "ints", "int_rows"):
        bounds["le"] = spec.maximum if spec.maximum is not None else registry.INT_BOUND
    elif spec.maximum is not None:
        bounds["le"] = spec.maximum
    return bounds


def _sized(item: Any, spec: registry.FieldSpec) -> Any:
    """A list of ``item``: not empty, and of exactly ``spec.length`` items when it says so."""
    if spec.length is not None:
        return Annotated[list[item], Field(min_length=spec.length, max_length=spec.length)]
    return Annotated[list[item], Field(min_length=1)]


def _annotation(spec: registry.FieldSpec) -> Any:
    """The pydantic type of one field spec, its bounds inside (so they reach the JSON schema)."""
    # the bounds before the validator: pydantic then writes them as JSON Schema keywords
    if spec.type == "int_rows":
        # Token batches hold thousands of ints: strict ints (no bool, no "5", no 5.0) are
        # checked in pydantic's core, without a Python call per int (32x512 ids: 1 ms, not 10)
        strict = Annotated[int, Strict(), Field(**_bounds(spec))]
        row = list[strict] if spec.length is None else _sized(strict, spec)
        # validated in slices when large (service.sliced_validation): the GIL free between
        sliced = sliced_rows(row if spec.length is None else None)
        return Annotated[list[row], Field(min_length=1), sliced]  # type: ignore[valid-type]
    if spec.type in ("int", "ints"):
        number: Any = Annotated[int, Field(**_bounds(spec)), BeforeValidator(_not_bool)]
        if spec.type == "int":
            return number
        declared = _sized(number, spec)
        if spec.rows is not None:
            rows = Annotated[
                list[Annotated[list[number], Field(min_length=1)]],
                Field(min_length=spec.rows, max_length=spec.max_rows or spec.rows),
            ]
            declared = declared | rows
        if spec.length is not None:
            return declared
        # a large list without a boolean: validated with no Python call per item
        return Annotated[declared, sliced_unless(Annotated[int, Field(**_bounds(spec))], bool)]
    if spec.type in ("float", "floats"):
        number = Annotated[
            float, Field(allow_inf_nan=False, **_bounds(spec)), BeforeValidator(_not_bool)
        ]
        if spec.type == "float":
            return number
        if spec.length is not None:
            return _sized(number, spec)
        plain = Annotated[float, Field(allow_inf_nan=False, **_bounds(spec))]
        return Annotated[_sized(number, spec), sliced_unless(plain, bool)]
    if spec.type == "bool":
        return bool
    if spec.type == "tensor":  # nested lists of numbers, spec.length deep
        item: Any = Annotated[float, Field(allow_inf_nan=False), BeforeValidator(_not_bool)]
        for _ in range(spec.length or 1):
            item = Annotated[list[item], Field(min_length=1)]
        return item
    if spec.type == "object":
        return Annotated[dict[str, Any], SLICED_DICT]
    if spec.type == "strs":  # one string is one row
        return Annotated[str | Annotated[list[str], Field(min_length=1)], SLICED_TEXT]
    if spec.type == "struct":
        return _struct_model(spec)
    if spec.allowed is not None:
        return Literal[spec.allowed]
    return str


def _definitions(specs: tuple[registry.FieldSpec, ...]) -> dict[str, Any]:
    """pydantic field definitions: required, optional (None) or with the schema's default."""
    definitions: dict[str, Any] = {}
    for spec in specs:
        annotation = _annotation(spec)
        if spec.schema_required:
            definitions[spec.name] = (annotation, Field(..., description=spec.description))
        elif spec.schema_default is None:
            definitions[spec.name] = (annotation | None, Field(None, description=spec.description))
        else:
            definitions[spec.name] = (
                annotation,
                Field(spec.schema_default, description=spec.description),
            )
    return definitions


def _with_aliases(aliases: tuple[tuple[str, str], ...]) -> Callable[..., Any]:
    """A before-validator taking each alias as its member's name (``rope_type`` → ``type``)."""

    def resolve(cls: type[BaseModel], data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, member in aliases:
            if alias in data:
                value = data.pop(alias)
                if member in data and data[member] != value:
                    raise ValueError(
                        f"{member} {data[member]!r} and {alias} {value!r} disagree; give one of them"
                    )
                data[member] = value
        return data

    return resolve


def _struct_model(spec: registry.FieldSpec) -> type[BaseModel]:
    """The pydantic model of a ``struct`` field: its members, unknown keys refused."""
    name = spec.schema_name or "".join(w.capitalize() for w in spec.name.split("_")) + "Request"
    examples = [spec.example] if spec.example is not None else None
    validators = {}
    if spec.aliases:
        validators["aliases"] = model_validator(mode="before")(
            classmethod(_with_aliases(spec.aliases))  # type: ignore[arg-type]
        )
    return create_model(
        name,
        __config__=ConfigDict(extra="forbid", json_schema_extra={"examples": examples or []}),
        __doc__=spec.description,
        __validators__=cast(dict[str, Callable[..., Any]], validators),
        **_definitions(spec.members),
    )


#: each kind's request model by kind name, with the kind and the registry choices it was built
#: from: an app (and every worker, test or reload that builds one) reuses the models instead of
#: building its ~20 pydantic classes again, half of what building an app took
_REQUEST_MODELS: dict[str, tuple[registry.Kind, tuple[Any, ...], type[BaseModel]]] = {}


def _choices_now(specs: tuple[registry.FieldSpec, ...]) -> tuple[Any, ...]:
    """The values of the fields whose choices a registry gives (``choices_from``), now."""
    return tuple(
        (spec.name, spec.allowed if spec.choices_from is not None else _choices_now(spec.members))
        for spec in specs
        if spec.choices_from is not None or spec.members
    )


def request_model(kind: registry.Kind) -> type[BaseModel]:
    """The request body model of ``kind``: one field per spec, unknown fields refused (422).
    Built once per kind object and registry choices (an engine registered later builds it
    again); a class is immutable once built, so apps share it."""
    choices = _choices_now(kind.fields)
    held = _REQUEST_MODELS.get(kind.name)
    if held is None or held[0] is not kind or held[1] != choices:
        held = _REQUEST_MODELS[kind.name] = (kind, choices, _built_request_model(kind))
    return held[2]


def _built_request_model(kind: registry.Kind) -> type[BaseModel]:
    name = "".join(part.capitalize() for part in kind.name.replace("-", "_").split("_"))
    axes = ", ".join(f"``{t.name}`` ({', '.join(t.axes)})" for t in kind.tensors)

    def cross_check(self: BaseModel) -> BaseModel:
        """The kind's own cross-field check, as a pydantic error (FastAPI's 422 list)."""
        if kind.check is not None:
            try:
                kind.check(_fields(self, type(self).model_fields))
            except InvalidArgument as exc:
                raise ValueError(exc.message) from None
        return self

    return create_model(
        f"{name}Request",
        __config__=ConfigDict(
            extra="forbid", json_schema_extra=cast(JsonDict, {"examples": kind.request_examples()})
        ),
        __doc__=f"``POST {kind.path}``: tensors {axes}.",
        __validators__=cast(  # pydantic's stubs type the values as plain callables
            dict[str, Callable[..., Any]],
            {"cross_check": model_validator(mode="after")(cross_check)},
        ),
        **_definitions(kind.fields),
    )


def query_shape(kind: registry.Kind) -> QueryShape:
    """How the GET of ``kind`` writes its list and object fields in the query string."""
    lists, objects = {}, {}
    for spec in kind.fields:
        if spec.type == "ints":
            number = "[0-9]+" if spec.minimum is not None and spec.minimum >= 0 else "-?[0-9]+"
            count = f"{{{spec.length - 1}}}" if spec.length is not None else "*"
            example = ",".join(str(v) for v in spec.example) if spec.example else "0,1,2"
            lists[spec.name] = {
                "type": "string",
                "pattern": f"^{number}(,{number}){count}$",
                "description": f"comma-separated integers, e.g. {example}",
            }
        elif spec.type in ("object", "struct", "floats", "int_rows"):
            what = {"floats": "list", "int_rows": "list of lists"}.get(spec.type, "object")
            objects[spec.name] = {"type": "string", "description": f"JSON text of the {what}"}
    return QueryShape(lists=lists, json=objects)


def _stream_bundle(
    blocks: Callable[[Any, registry.Context], dict[str, Any]],
    params: Any,
    ctx: registry.Context,
    meta: Callable[[], dict[str, Any]],
) -> StreamBundle:
    return StreamBundle(blocks(params, ctx), meta())


def _fields(req: BaseModel, names: Iterable[str]) -> dict[str, Any]:
    """The named fields of a request: lists as pydantic holds them (a batch of token ids is not
    copied), nested objects as dicts."""
    return {
        name: value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value
        for name in names
        for value in (getattr(req, name),)
    }


def _sent(req: BaseModel) -> dict[str, Any]:
    """The fields the client sent, an explicit null included (it overrides a preset's value)."""
    return _fields(req, req.model_fields_set)


def _resolve(
    kind: registry.Kind, given: dict[str, Any], state: ServiceState, source: Source
) -> dict[str, Any]:
    """The request's fields resolved by the library (preset or config merged, the named model's
    sizes filled in); a required field that nobody gave is FastAPI's 422 under ``source``."""
    try:
        return resolve.resolve_fields(kind, given, models=state.model)
    except MissingField as exc:
        raise missing(source, exc.field or "", f"Field required: {exc.message}") from None
    except NoTokenizer as exc:  # say which models do read text
        raise NoTokenizer(
            exc.model, with_tokenizer=state.text_models(), reason=exc.reason
        ) from None


def _plan_for(kind: registry.Kind) -> Any:
    def plan(
        req: BaseModel,
        state: ServiceState,
        source: Source,
        tensors: TokenTensors | BodyTensors | None = None,
        *,
        may_stream: bool = False,
    ) -> Plan:
        """The request's plan; ``may_stream``: its format is one a kind with row blocks streams
        past ``max_elements`` (raw, npy, safetensors), so text is tokenized up to the streaming
        limit rather than stopped at ``max_elements``."""
        given = _sent(req)
        if tensors is not None:  # a binary body: its tensors, not the model's stand-in ids
            given.update(tensors.fields())
        settings = state.settings
        # text: stop tokenizing past the largest answer it could have (streamed, for a kind
        # with row blocks asked in a format that streams: /v1/embed as raw, npy, safetensors)
        limit = settings.max_elements
        if kind.blocks is not None and may_stream:
            limit = max(limit, settings.max_stream_elements)
        with element_limit(limit):
            params = _resolve(kind, given, state, source)
        dtype = resolve_dtype(params.get("dtype"))
        ctx = registry.Context(device=state.device, dtype=dtype, models=state.model)
        meta = functools.cache(partial(kind.make_meta, params))  # once the size is accepted

        def compute() -> Bundle:
            out = resolve.compute(
                kind,
                params,
                device=state.device,
                dtype=dtype,
                models=state.model,
                allocator=BODY_BUFFERS.tensor,  # big outputs into reused buffers
            )
            return Bundle(out, meta(), kind.json_layout)

        stream = None
        if kind.blocks is not None and kind.streamable(params):  # for a table over max_elements
            stream = partial(_stream_bundle, kind.blocks, params, ctx, meta)

        return Plan(kind, params, compute, stream, tensors.key if tensors is not None else None)

    return plan


def registered_kind_routers() -> list[APIRouter]:
    """One router per kind of :data:`posenc.core.kinds.REGISTRY`: POST, and GET where the kind asks."""
    routers = []
    tags = {tag: i for i, tag in enumerate(TAG_ORDER)}
    in_order = sorted(registry.REGISTRY.values(), key=lambda k: (tags.get(k.tag, 99), k.path))
    for kind in in_order:
        router = APIRouter(tags=[kind.tag])
        axes = ", ".join(f"`{t.name}` ({', '.join(t.axes)})" for t in kind.tensors)
        description = f"{kind.description} Tensors: {axes}."
        names = tuple(t.name for t in kind.tensors)
        tensor_fields = tuple(f.name for f in kind.fields if f.type == "tensor")
        if tensor_fields:  # a JSON body, or the tensors as a safetensors body
            add_tensor_route(
                router, kind.path, request_model(kind), _plan_for(kind), names=names,
                tensors=tensor_fields, summary=kind.summary,
                description=description + "\n\nThe tensor field(s) " + ", ".join(tensor_fields)
                + " may also come as an `application/vnd.safetensors` body, the other fields "
                "as JSON text in its `__metadata__` under `request`.",
            )  # fmt: skip
        elif kind.binary_fields:  # a JSON body, or the ids as an npy or safetensors body
            fields = ", ".join(kind.binary_fields)
            description += (
                f"\n\nThe token ids may also be sent as `application/x-npy` "
                f"({kind.binary_fields[0]}) or `application/vnd.safetensors` ({fields}), with "
                "the other fields as query parameters."
            )
            add_token_route(
                router, kind.path, request_model(kind), _plan_for(kind), names=names,
                summary=kind.summary, description=description, tensors=kind.binary_fields,
            )  # fmt: skip
        else:
            add_compute_routes(
                router, kind.path, request_model(kind), _plan_for(kind), names=names,
                summary=kind.summary, description=description, get=kind.get,
                query=query_shape(kind),
            )  # fmt: skip
        routers.append(router)
    return routers
