"""Routes derived from the library's registry of kinds (:mod:`posenc.kinds`).

For every registered kind this module makes the request model (pydantic, from the kind's field
specs, with the bounds as JSON Schema keywords and the kind's example), a plan that resolves the
fields, sizes the bundle from the numbers and computes it, and the POST (and GET) routes through
:func:`service.routes.tables.add_compute_routes`, like the hand-written endpoints. Nothing here is
specific to one kind: registering a kind in the library is all it takes to serve it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal, cast

import torch
from fastapi import APIRouter
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, model_validator

from posenc import kinds as registry
from posenc.device import resolve_dtype
from posenc.errors import InvalidArgument
from service.formats import Bundle
from service.query import Source
from service.responding import Plan
from service.routes.tables import add_compute_routes
from service.state import ServiceState
from service.streaming import StreamBundle


def _not_bool(value: Any) -> Any:
    """JSON ``true`` is not the number 1."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def _annotation(spec: registry.FieldSpec) -> Any:
    """The pydantic type of one field spec, its bounds inside (so they reach the JSON schema)."""
    bounds: dict[str, Any] = {}
    if spec.minimum is not None:
        bounds["ge"] = spec.minimum
    if spec.exclusive_minimum is not None:
        bounds["gt"] = spec.exclusive_minimum
    if spec.multiple_of is not None:
        bounds["multiple_of"] = spec.multiple_of
    if spec.type in ("int", "ints"):
        bounds["le"] = spec.maximum if spec.maximum is not None else 2**53
        # the bounds before the validator: pydantic then writes them as JSON Schema keywords
        number: Any = Annotated[int, Field(**bounds), BeforeValidator(_not_bool)]
        return number if spec.type == "int" else Annotated[list[number], Field(min_length=1)]
    if spec.type == "float":
        if spec.maximum is not None:
            bounds["le"] = spec.maximum
        return Annotated[float, Field(allow_inf_nan=False, **bounds), BeforeValidator(_not_bool)]
    if spec.type == "bool":
        return bool
    if spec.choices is not None:
        return Literal[spec.choices]
    return str


def request_model(kind: registry.Kind) -> type[BaseModel]:
    """The request body model of ``kind``: one field per spec, unknown fields refused (422)."""
    definitions: dict[str, Any] = {}
    for spec in kind.fields:
        annotation = _annotation(spec)
        if spec.required:
            definitions[spec.name] = (annotation, Field(..., description=spec.description))
        elif spec.default is None:
            definitions[spec.name] = (annotation | None, Field(None, description=spec.description))
        else:
            definitions[spec.name] = (
                annotation,
                Field(spec.default, description=spec.description),
            )
    example = {s.name: s.example for s in kind.fields if s.example is not None}
    name = "".join(part.capitalize() for part in kind.name.replace("-", "_").split("_"))
    axes = ", ".join(f"``{t.name}`` ({', '.join(t.axes)})" for t in kind.tensors)

    def cross_check(self: BaseModel) -> BaseModel:
        """The kind's own cross-field check, as a pydantic error (FastAPI's 422 list)."""
        if kind.check is not None:
            try:
                kind.check(self.model_dump())
            except InvalidArgument as exc:
                raise ValueError(exc.message) from None
        return self

    return create_model(
        f"{name}Request",
        __config__=ConfigDict(extra="forbid", json_schema_extra={"examples": [example]}),
        __doc__=f"``POST {kind.path}``: tensors {axes}.",
        __validators__=cast(  # pydantic's stubs type the values as plain callables
            dict[str, Callable[..., Any]],
            {"cross_check": model_validator(mode="after")(cross_check)},
        ),
        **definitions,
    )


def _stream_bundle(
    blocks: Callable[[Any, torch.device, torch.dtype], dict[str, Any]],
    params: Any,
    device: torch.device,
    dtype: torch.dtype,
    meta: dict[str, Any],
) -> StreamBundle:
    return StreamBundle(blocks(params, device, dtype), meta)


def _plan_for(kind: registry.Kind) -> Any:
    names = tuple(t.name for t in kind.tensors)

    def plan(req: BaseModel, state: ServiceState, source: Source) -> Plan:
        params = registry.resolve_fields(kind, req.model_dump(exclude_none=True))
        dtype = resolve_dtype(params.get("dtype"))
        meta = kind.make_meta(params)

        def compute() -> Bundle:
            tensors = registry.compute(kind, params, device=state.device, dtype=dtype)
            return Bundle(tensors, meta)

        stream = None
        if kind.blocks is not None:  # row blocks, for a table over max_elements
            stream = partial(_stream_bundle, kind.blocks, params, state.device, dtype, meta)

        return Plan(
            route=kind.path,
            params=dict(params),
            elements=registry.total_elements(kind, params),  # from the numbers alone
            compute=compute,
            names=names,
            stream=stream,
            row_elements=kind.row_elements(params) if kind.row_elements is not None else 0,
        )

    return plan


def registered_kind_routers() -> list[APIRouter]:
    """One router per kind of :data:`posenc.kinds.REGISTRY`: POST, and GET where the kind asks."""
    routers = []
    for kind in registry.REGISTRY.values():
        router = APIRouter(tags=[kind.tag])
        axes = ", ".join(f"`{t.name}` ({', '.join(t.axes)})" for t in kind.tensors)
        add_compute_routes(
            router,
            kind.path,
            request_model(kind),
            _plan_for(kind),
            names=tuple(t.name for t in kind.tensors),
            summary=kind.summary,
            description=f"{kind.description} Tensors: {axes}.",
            get=kind.get,
        )
        routers.append(router)
    return routers
