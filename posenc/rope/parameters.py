"""How a scaling type declares its parameters: once, on its parameter class.

Each field of a type's frozen parameter class (:mod:`posenc.rope.linear` ...) is made with
:func:`parameter`, which records its description, its wire type and its bounds in the field's
metadata; a field without a default is required. :mod:`posenc.rope.scaling` reads them back
(:func:`parameters_of`) for the validation every type's parameters get, and the rope kind
(:mod:`posenc.rope_kinds.kind`) for the HTTP ``scaling`` schema, so a parameter is written once, in
its type's module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

#: ``float`` (finite), ``int``, ``bool``, or ``floats`` (a list of finite numbers).
WireType = Literal["float", "int", "bool", "floats"]
_KEY = "posenc.rope.parameter"


@dataclass(frozen=True)
class ScalingParameter:
    """One parameter of a scaling type.

    Attributes:
        name: transformers' name in ``rope_parameters``.
        type: its wire type (:data:`WireType`).
        description: what it does, for the HTTP schema.
        required: whether the type needs it (the field has no default).
        bounds: JSON Schema bounds (``exclusive_minimum``, ``minimum``, ``maximum``); for
            ``floats``, of each element. The library checks finiteness and the lower bound of
            every parameter given; a type's ``validate`` checks the rest.
    """

    name: str
    type: WireType
    description: str
    required: bool
    bounds: Mapping[str, float]


def parameter(
    description: str, *, type: WireType = "float", required: bool = False, **bounds: float
) -> Any:
    """A parameter-class field: ``factor: float = parameter("...", exclusive_minimum=0,
    required=True)``; optional ones default to None."""
    meta = {_KEY: (description, type, MappingProxyType(dict(bounds)))}
    if required:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=None, metadata=meta)


def parameters_of(cls: type) -> tuple[ScalingParameter, ...]:
    """The declared parameters of a parameter class, in field order.

    Raises:
        TypeError: a field not made with :func:`parameter`.
    """
    out = []
    for f in dataclasses.fields(cls):
        if _KEY not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with parameter()")
        description, wire, bounds = f.metadata[_KEY]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(ScalingParameter(f.name, wire, description, required, bounds))
    return tuple(out)


__all__ = ["ScalingParameter", "WireType", "parameter", "parameters_of"]
