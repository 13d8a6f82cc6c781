"""The registry of endpoint kinds: each kind of table described once, in the library.

A :class:`Kind` says everything the service, the client and the CLI need to serve one kind of
table: its request fields (:class:`FieldSpec`: type, default, bounds, description, example), its
tensors in order, primary first (:class:`TensorSpec`, with their axes in the seed notation), how
their shapes follow from the request's numbers (so a size is known before anything is
allocated), how it computes, and what ``meta`` it reports. From a registered kind:

- the service derives the request schema (body and GET query parameters, with the constraints
  as JSON Schema keywords and the example in ``/openapi.json``), the POST and GET routes, the 413
  check and the response bundle (``service/routes/registered.py``);
- the client calls it with :meth:`posenc.client.PosencClient.compute`;
- the CLI offers ``posenc table KIND`` with one option per field.

Adding a convention is one library module (its maths) plus one :func:`register` call here, or in
the module itself::

    register(Kind(
        name="toy", path="/v1/encodings/toy", tag="encodings", summary="...", description="...",
        fields=(FieldSpec("seq_len", "int", "T", minimum=1), ...),
        tensors=(TensorSpec("encoding", ("T", "D")),),
        shapes=lambda p: {"encoding": (p["seq_len"], p["d_model"])},
        compute=lambda p, device, dtype: {"encoding": toy_table(...)},
    ))

The library validates fields itself (:func:`resolve_fields`: defaults, types, bounds, choices,
raising :class:`~posenc.errors.InvalidArgument` that names the field), so a kind works the same
from Python, the CLI and HTTP. Notation: ``B`` batch, ``T`` positions, ``S`` keys, ``D`` model
dimension, ``H`` heads, ``R`` rotary dimension.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

import torch

from posenc.device import resolve_dtype
from posenc.errors import InvalidArgument, TooLarge

__all__ = [
    "DTYPE_FIELD",
    "REGISTRY",
    "REQUIRED",
    "FieldSpec",
    "FieldType",
    "Kind",
    "TensorSpec",
    "compute",
    "register",
    "resolve_fields",
    "total_elements",
    "unregister",
]

FieldType = Literal["int", "float", "bool", "str", "ints"]
"""``int``, ``float``, ``bool``, ``str`` (with ``choices``: one of them), ``ints`` (a list of ints;
comma-separated in a GET query and on the command line)."""


class _Required:
    """The default of a field the caller must give."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()

_INT_BOUND = 2**53  # every int field stays exact in float64 and in JSON readers


@dataclass(frozen=True)
class FieldSpec:
    """One request field of a kind.

    Attributes:
        name: the field's name in bodies, query strings and keyword arguments.
        type: see :data:`FieldType`.
        description: one line for the API reference, ``--help`` and docstrings.
        default: the value when the caller omits it; :data:`REQUIRED` when it must be given;
            ``None`` for an optional field without a value.
        minimum: smallest allowed value (numbers; each element for ``ints``).
        maximum: largest allowed value (ints default to ``2**53``).
        exclusive_minimum: the value must be greater than this (floats).
        multiple_of: ints must be a multiple of this (e.g. 2 for an even dimension).
        choices: the allowed values of a ``str`` field.
        example: a value that works, for the OpenAPI example and the docs.
    """

    name: str
    type: FieldType
    description: str
    default: Any = REQUIRED
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    multiple_of: int | None = None
    choices: tuple[str, ...] | None = None
    example: Any = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


DTYPE_FIELD = FieldSpec(
    "dtype",
    "str",
    "dtype of the float tensors (integer tensors are always int64); bfloat16 cannot be npy",
    default="float32",
    choices=("float32", "float16", "bfloat16", "float64"),
)
"""Added to every kind that has a float tensor and declares no ``dtype`` of its own."""


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a kind's bundle.

    Attributes:
        name: its name in every format (JSON key, safetensors name, ``X-Tensor-Name``).
        axes: one letter or word per dimension in the seed notation, e.g. ``("T", "D")``.
        integer: ``int64`` whatever ``dtype`` the request asks for (ids, buckets).
    """

    name: str
    axes: tuple[str, ...]
    integer: bool = False


Params = Mapping[str, Any]
Shapes = dict[str, tuple[int, ...]]
Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Kind:
    """One endpoint kind: a table computed from its request fields alone.

    Attributes:
        name: the kind's name (``posenc table NAME``, ``client.compute(NAME)``, ``meta.kind``).
        path: its HTTP path, e.g. ``/v1/encodings/sinusoidal``.
        tag: the OpenAPI tag that groups it (``encodings``, ``biases``...).
        summary: a few words (OpenAPI summary, CLI help).
        description: what it computes, with the paper or reference implementation.
        fields: the request fields, in the order they are documented.
        tensors: the bundle's tensors, primary first (npy, raw and png send the primary one).
        shapes: the tensors' shapes from the resolved fields, numbers only (nothing allocated).
        compute: the tensors from the resolved fields, on ``device``; float tensors in ``dtype``.
        check: cross-field checks on the resolved fields (raise ``InvalidArgument``), or None.
        meta: the JSON-able ``meta`` of a response, from the resolved fields; by default the
            fields themselves with ``kind``.
        get: also serve ``GET path`` with the fields as query parameters.
        blocks: the tensors as :class:`posenc.blocks.TableBlocks` (computable a block of rows at
            a time, the same bytes as ``compute``), for tables beyond memory: the service
            streams them and the CLI fills them with a progress bar. None: computed whole.
        row_elements: the widest row of the tables (their last dimension), from the fields: a
            block holds at least one row, so a service refuses to stream a wider one than its
            limit. Needed with ``blocks``.
    """

    name: str
    path: str
    tag: str
    summary: str
    description: str
    fields: tuple[FieldSpec, ...]
    tensors: tuple[TensorSpec, ...]
    shapes: Callable[[Params], Shapes]
    compute: Callable[[Params, torch.device, torch.dtype], Tensors]
    check: Callable[[Params], None] | None = None
    meta: Callable[[Params], dict[str, Any]] | None = None
    get: bool = True
    blocks: Callable[[Params, torch.device, torch.dtype], dict[str, Any]] | None = None
    row_elements: Callable[[Params], int] | None = None
    field_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        if any(not t.integer for t in self.tensors) and all(f.name != "dtype" for f in self.fields):
            object.__setattr__(self, "fields", (*self.fields, DTYPE_FIELD))
        names = tuple(f.name for f in self.fields)
        if len(set(names)) != len(names):
            raise ValueError(f"kind {self.name!r} names a field twice: {names}")
        if not self.tensors:
            raise ValueError(f"kind {self.name!r} has no tensors")
        if (self.blocks is None) != (self.row_elements is None):
            raise ValueError(f"kind {self.name!r}: give blocks and row_elements together")
        object.__setattr__(self, "field_names", names)

    def field(self, name: str) -> FieldSpec:
        return self.fields[self.field_names.index(name)]

    def make_meta(self, params: Params) -> dict[str, Any]:
        if self.meta is not None:
            return self.meta(params)
        return {"kind": self.name, **params}


_registry: dict[str, Kind] = {}
REGISTRY: Mapping[str, Kind] = MappingProxyType(_registry)
"""The registered kinds by name (read-only; :func:`register` adds one)."""


def register(kind: Kind) -> Kind:
    """Add ``kind`` to :data:`REGISTRY`; a second kind of the same name or path is an error."""
    for other in _registry.values():
        if other.name == kind.name or other.path == kind.path:
            raise ValueError(f"kind {kind.name!r} at {kind.path} is already registered")
    _registry[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a kind (tests register their own and take them out again)."""
    _registry.pop(name, None)


# ---------------------------------------------------------------------------------------------
# Validation from the field specs (the library's own; the service adds pydantic's on top)
# ---------------------------------------------------------------------------------------------


def _check_number(spec: FieldSpec, value: Any, where: str) -> None:
    if spec.minimum is not None and value < spec.minimum:
        raise InvalidArgument(f"{where} must be >= {spec.minimum:g}, got {value}", field=where)
    maximum = spec.maximum if spec.maximum is not None else _INT_BOUND
    if value > maximum:
        raise InvalidArgument(f"{where} must be <= {maximum:g}, got {value}", field=where)
    if spec.exclusive_minimum is not None and not value > spec.exclusive_minimum:
        raise InvalidArgument(
            f"{where} must be > {spec.exclusive_minimum:g}, got {value}", field=where
        )
    if spec.multiple_of is not None and value % spec.multiple_of:
        what = "even" if spec.multiple_of == 2 else f"a multiple of {spec.multiple_of}"
        raise InvalidArgument(f"{where} must be {what}, got {value}", field=where)


def _coerce(spec: FieldSpec, value: Any) -> Any:
    """``value`` as the field's type, or InvalidArgument naming the field."""
    name = spec.name
    if spec.type == "bool":
        if not isinstance(value, bool):
            raise InvalidArgument(f"{name} must be true or false, got {value!r}", field=name)
        return value
    if spec.type == "str":
        if not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a string, got {value!r}", field=name)
        if spec.choices is not None and value not in spec.choices:
            raise InvalidArgument(
                f"{name} must be one of {', '.join(spec.choices)}, got {value!r}", field=name
            )
        return value
    if spec.type == "ints":
        if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
            raise InvalidArgument(f"{name} must be a list of integers, got {value!r}", field=name)
        items = list(value)
        if not items:
            raise InvalidArgument(f"{name} must not be empty", field=name)
        out = []
        for i, item in enumerate(items):
            if isinstance(item, bool) or not isinstance(item, int):
                raise InvalidArgument(
                    f"{name}[{i}] must be an integer, got {item!r}", field=f"{name}[{i}]"
                )
            _check_number(spec, item, f"{name}[{i}]")
            out.append(int(item))
        return out
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number, got {value!r}", field=name)
    if spec.type == "int":
        if isinstance(value, float):
            if not value.is_integer():
                raise InvalidArgument(f"{name} must be an integer, got {value!r}", field=name)
            value = int(value)
    else:
        value = float(value)
        if not math.isfinite(value):
            raise InvalidArgument(f"{name} must be finite, got {value!r}", field=name)
    _check_number(spec, value, name)
    return value


def resolve_fields(kind: Kind, given: Params) -> dict[str, Any]:
    """The kind's fields with defaults filled in, types and bounds checked, cross-checks run.

    Args:
        kind: a registered (or any) kind.
        given: the caller's fields; ``None`` values count as not given.

    Returns:
        Every field by name, in the kind's order.

    Raises:
        InvalidArgument: an unknown field (the message lists the known ones), a missing required
            one, or a value of the wrong type or out of bounds (``field`` names it).
    """
    unknown = sorted(set(given) - set(kind.field_names))
    if unknown:
        raise InvalidArgument(
            f"unknown field(s) {unknown} for {kind.name}; its fields are "
            f"{', '.join(kind.field_names)}",
            field=unknown[0],
        )
    params: dict[str, Any] = {}
    for spec in kind.fields:
        value = given.get(spec.name)
        if value is None:
            if spec.required:
                raise InvalidArgument(
                    f"{spec.name} is required ({spec.description})", field=spec.name
                )
            params[spec.name] = spec.default
            continue
        params[spec.name] = _coerce(spec, value)
    if kind.check is not None:
        kind.check(params)
    return params


def total_elements(kind: Kind, params: Params) -> int:
    """Elements of all the kind's tensors together, from the numbers alone."""
    return sum(math.prod(shape) for shape in kind.shapes(params).values())


def compute(
    kind: Kind,
    params: Params,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    max_elements: int | None = None,
) -> Tensors:
    """The kind's tensors, in its order, after a size check that allocates nothing.

    Args:
        kind: the kind.
        params: fields as :func:`resolve_fields` returns them.
        device: where the tensors go (CPU when None).
        dtype: the float tensors' dtype (integer tensors stay int64); None: ``params["dtype"]``
            (float32 when the kind has no such field).
        max_elements: refuse a bundle larger than this with ``TooLarge`` before computing.

    Returns:
        The tensors by name, primary first; each of the shape ``kind.shapes`` promised.

    Raises:
        TooLarge: over ``max_elements``.
        ValueError: the compute returned other tensors or shapes than the kind declares (a bug in
            the kind, not the caller's fault).
    """
    shapes = kind.shapes(params)
    elements = sum(math.prod(s) for s in shapes.values())
    if max_elements is not None and elements > max_elements:
        raise TooLarge(
            f"{kind.name} would have {elements} elements, over the limit of {max_elements}",
            limit=max_elements,
            requested=elements,
        )
    dev = torch.device("cpu") if device is None else torch.device(device)
    tensors = kind.compute(params, dev, dtype or resolve_dtype(params.get("dtype")))
    names = [t.name for t in kind.tensors]
    if list(tensors) != names:
        raise ValueError(f"kind {kind.name!r} computed {list(tensors)}, declared {names}")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(shapes[name]):
            raise ValueError(
                f"kind {kind.name!r}: {name} has shape {tuple(tensor.shape)}, declared {shapes[name]}"
            )
    return tensors
