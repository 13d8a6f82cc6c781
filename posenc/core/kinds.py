"""The registry of endpoint kinds: each kind of computation described once, in the library.

A :class:`Kind` says everything the service, the client and the CLI need to serve one kind of
table, bias or token batch: its request fields (:class:`FieldSpec`: type, default, bounds,
description, example), its tensors in order, primary first (:class:`TensorSpec`, with their axes
in the seed notation), how their shapes follow from the request's numbers (so a size is known
before anything is allocated), how it computes, and what ``meta`` it reports. From a registered
kind:

- the service derives the request schema (body and GET query parameters, with the constraints
  as JSON Schema keywords and the example in ``/openapi.json``), the POST and GET routes, binary
  token bodies, the 413 check and the response bundle (``service/routes/registered.py``);
- the client has a method of the kind's name, its fields as keyword arguments
  (:func:`posenc.client.kind_method`), and :meth:`~posenc.client.PosencClient.compute`;
- the CLI offers ``posenc table KIND`` with one option per field.

Every compute endpoint is a kind. A convention module defines its :class:`Kind` (a constant
beside its maths), and :mod:`posenc.catalog` lists every built-in kind in one place and
registers them; this module is the data model and :data:`REGISTRY` only, and imports no
convention. Adding a convention is one library module (its maths and its kind) plus one line in
that list (or, from outside the library, one :func:`register` call)::

    TOY = Kind(
        name="toy", path="/v1/encodings/toy", tag="encodings", summary="...", description="...",
        fields=(FieldSpec("seq_len", "int", "T", minimum=1), ...),
        tensors=(TensorSpec("encoding", ("T", "D")),),
        shapes=lambda p: {"encoding": (p["seq_len"], p["d_model"])},
        compute=lambda p, ctx: {"encoding": toy_table(..., device=ctx.device, dtype=ctx.dtype)},
    )

The library validates fields itself (:func:`posenc.resolve.resolve_fields`: defaults, types,
bounds, choices, raising :class:`~posenc.core.errors.InvalidArgument` that names the field), so a kind
works the same from Python, the CLI and HTTP. A kind with :class:`Sources` also takes ``preset``
and ``config`` (a model's ``config.json``): :func:`posenc.resolve.resolve_fields` merges them in
the library, so every caller gets the same precedence (the caller's fields > the config or
preset > the field's default).
Notation: ``B`` batch, ``T`` positions, ``S`` keys, ``D`` model dimension, ``H`` heads, ``R``
rotary dimension.
"""

from __future__ import annotations

import dataclasses
import keyword
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

import torch

from posenc.core import slices
from posenc.core.errors import InvalidArgument, MissingField

__all__ = [
    "CONFIG_FIELD",
    "DTYPE_FIELD",
    "INT_BOUND",
    "REGISTRY",
    "REQUIRED",
    "Context",
    "FieldSpec",
    "FieldType",
    "JsonLayout",
    "Kind",
    "Sources",
    "TensorSpec",
    "batch_shape",
    "config_field",
    "derived",
    "elements",
    "preset_field",
    "register",
    "tensor_shape",
    "total_elements",
    "unregister",
]

FieldType = Literal[
    "int",
    "float",
    "bool",
    "str",
    "ints",
    "floats",
    "int_rows",
    "object",
    "struct",
    "strs",
    "tensor",
]
"""``int``, ``float``, ``bool``, ``str`` (with ``choices``: one of them), ``ints`` (a list of ints;
comma-separated in a GET query and on the command line; with ``rows``, also that many lists of
ints), ``floats`` (a list of numbers), ``int_rows`` (a list of lists of ints, ragged allowed: a
batch of token rows; or a ``(B, T)`` integer tensor, from a binary request body), ``object``
(any JSON object, e.g. a model's ``config.json``; JSON text in a GET query, a file or JSON text
on the command line), ``struct`` (an object of the fields ``members``; JSON text in a GET
query and on the command line), ``strs`` (texts: a string, one row, or a non-empty list of strings)
and ``tensor`` (a float tensor: nested JSON lists of numbers, read in the request's ``dtype``, or a
tensor of a safetensors request body in its own dtype; ``length`` gives its rank)."""


class _Required:
    """The default of a field the caller must give."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()

INT_BOUND = 2**53
"""The default ``maximum`` of every int field: exact in float64 and in JSON readers (positions
included: their angles are formed in float64)."""


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
        choices_from: instead of ``choices``, where they are asked at the time of use (a
            registry's names: the ``engine`` fields); read both through :attr:`allowed`.
        example: a value that works, for the OpenAPI example and the docs.
        sourced: a preset or a config may give it: the request schema has no default for it
            (a generated client would send the default and override the preset), and
            ``default`` (or REQUIRED) applies after the merge (:func:`posenc.resolve.resolve_fields`).
        rows: ``ints`` only: also accepted as exactly this many equal-length lists of ints
            (M-RoPE's ``(3, T)`` positions), or up to ``max_rows`` of them.
        max_rows: with ``rows``: the most lists accepted (XD-RoPE's ``(4, T)``); default
            ``rows``.
        length: lists only: exactly this many items (``int_rows``: in each row).
        members: ``struct`` only: its fields (their defaults are None: absent members are
            left out of the value).
        aliases: ``struct`` only: ``(other name, member)`` pairs, e.g. ``rope_type`` for
            ``type``.
        schema_name: ``struct`` only: its name in the OpenAPI document.
        python_name: the keyword argument's name in Python (the client's methods) where the
            field's own name is a Python keyword (``as``); None: the field's name.
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
    sourced: bool = False
    rows: int | None = None
    max_rows: int | None = None
    length: int | None = None
    members: tuple[FieldSpec, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    schema_name: str | None = None
    python_name: str | None = None
    choices_from: Callable[[], tuple[str, ...]] | None = None

    @property
    def allowed(self) -> tuple[str, ...] | None:
        """The allowed values of a ``str`` field now (``choices_from``'s, else ``choices``)."""
        return self.choices_from() if self.choices_from is not None else self.choices

    @property
    def arg_name(self) -> str:
        """Its keyword argument's name in Python: ``python_name``, else its name."""
        return self.python_name or self.name

    @property
    def required(self) -> bool:
        """The caller must give it (after the merge of a preset or config, when ``sourced``)."""
        return self.default is REQUIRED

    @property
    def schema_required(self) -> bool:
        """The request schema requires it (a sourced field may come from a preset instead)."""
        return self.required and not self.sourced

    @property
    def schema_default(self) -> Any:
        """Its default in the request schema: None when a preset or config may give it."""
        return None if self.sourced or self.required else self.default


DTYPE_FIELD = FieldSpec(
    "dtype",
    "str",
    "dtype of the float tensors (integer tensors are always int64); bfloat16 cannot be npy",
    default="float32",
    choices=("float32", "float16", "bfloat16", "float64"),
)
"""Added to every kind that has a float tensor and declares no ``dtype`` of its own."""

CONFIG_FIELD = FieldSpec(
    "config",
    "object",
    "a model's Hugging Face config.json object, pasted as published (a multimodal file whole): "
    "read as transformers 5 reads it; its values are defaults the other fields override. Not "
    "together with preset. See POST /v1/configs/positions for what it means.",
    default=None,
)
"""The ``config`` field of a kind with :class:`Sources` (added when the kind declares none)."""


def config_field(what_it_gives: str) -> FieldSpec:
    """:data:`CONFIG_FIELD` with a sentence on what the config gives this kind."""
    return dataclasses.replace(
        CONFIG_FIELD, description=f"{CONFIG_FIELD.description} {what_it_gives}"
    )


def preset_field(positions: str) -> FieldSpec:
    """The ``preset`` field of a kind whose presets are of kind ``positions``."""
    return FieldSpec(
        "preset",
        "str",
        "name of a preset from GET /v1/presets; its params are defaults the other fields "
        f"override (kind {positions})",
        default=None,
    )


@dataclass(frozen=True)
class Sources:
    """How a kind takes a preset or a model's ``config.json`` (:mod:`posenc.readers.sources`).

    Attributes:
        positions: the kind of positions its presets and configs must be (``rope``, ``alibi``,
            ``relative``, ``learned``); another is an error that names the right endpoint.
        from_config: ``(ModelPositions, given fields) -> (fields, info)``: the fields a read
            config gives, and what ``meta`` should say about it besides its
            ``config_model_type`` (RoPE: the ``rope_type`` of the chosen layer type). None: the
            ``ModelPositions`` attribute named ``positions`` (``alibi``, ``relative``,
            ``learned``) holds the fields.
        follow: ``(given fields, preset or config fields) -> fields``: adjust the preset's
            values to what the caller overrode (RoPE: the rotated fraction follows a new
            ``head_dim``), or None.
    """

    positions: str
    from_config: Callable[[Any, Params], tuple[dict[str, Any], dict[str, Any]]] | None = None
    follow: Callable[[Params, dict[str, Any]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Context:
    """Where a kind computes: its device, the dtype of float tensors, and the loaded models.

    Attributes:
        device: where the tensors go.
        dtype: the float tensors' dtype (integer tensors stay int64).
        models: ``name -> EmbeddingModel`` (None: the default model); the library's own lookup
            knows the built-in default model only, the service's every model it loaded.
        allocator: ``(shape, dtype) -> tensor or None``: where a big CPU output may be written
            (a server's reused buffers, :data:`posenc.embedding.OutputAllocator`); None: new
            tensors.
    """

    device: torch.device
    dtype: torch.dtype
    models: Callable[[str | None], Any]
    allocator: Callable[[tuple[int, ...], torch.dtype], torch.Tensor | None] | None = None


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
JsonLayout = Callable[
    [Mapping[str, torch.Tensor], Mapping[str, Any], Mapping[str, Any]], dict[str, Any]
]
"""``(tensors, JSON entries by name, meta) -> the JSON body`` (:attr:`Kind.json_layout`)."""


@dataclass(frozen=True)
class Kind:
    """One endpoint kind: tensors computed from its request fields alone.

    Attributes:
        name: the kind's name (``posenc table NAME``, ``client.compute(NAME)``, ``meta.kind``).
        path: its HTTP path, e.g. ``/v1/encodings/sinusoidal``.
        tag: the OpenAPI tag that groups it (``encodings``, ``biases``...).
        summary: a few words (OpenAPI summary, CLI help).
        description: what it computes, with the paper or reference implementation.
        fields: the request fields, in the order they are documented.
        tensors: the bundle's tensors, primary first (npy, raw and png send the primary one).
        shapes: the tensors' shapes from the resolved fields, numbers only (nothing allocated);
            a tensor left out is not computed for these fields (e.g. a bias without heads).
        compute: the tensors from the resolved fields, in ``ctx`` (:class:`Context`).
        check: cross-field checks (raise ``InvalidArgument``), or None. It runs on the caller's
            fields before a preset or config is merged (fields not given are None there) and
            again on the resolved fields.
        meta: the JSON-able ``meta`` of a response, from the resolved fields; by default the
            fields themselves with ``kind``. Called only once the size is known to be
            acceptable, so it may compute small things (R/2 frequencies).
        get: also serve ``GET path`` with the fields as query parameters.
        blocks: ``(fields, ctx) -> {name: posenc.core.blocks.TableBlocks}`` (computable a block of
            rows at a time, the same bytes as ``compute``), for tables beyond memory: the service
            streams them and the CLI fills them with a progress bar. None: computed whole.
        streams: ``fields -> bool``: whether ``blocks`` serves these fields (numbers only), or
            None for always (RoPE streams 1-D positions, not M-RoPE's three rows).
        row_elements: the widest row of the tables (their last dimension), from the fields: a
            block holds at least one row, so a service refuses to stream a wider one than its
            limit. Needed with ``blocks``.
        sources: takes ``preset`` and ``config`` (:class:`Sources`), or None.
        complete: ``(fields, models) -> fields``: fill in what the named model gives (its
            table's size) once the fields are resolved, or None.
        allocations: ``fields -> {field: elements}``: what the compute allocates besides its
            outputs (a bias table of ``num_heads`` columns), each checked against a limit.
        model_field: the field that names a loaded model the output depends on (its fingerprint
            keys a service's cache), or None.
        examples: request bodies for the API reference; by default one of the fields' examples.
        binary_fields: ``int_rows`` fields that may also come as a binary request body (npy:
            the first alone; safetensors: any of them), the other fields then in the query.
        cache_tensors: a service may keep the outputs in its cache (tables: yes; token batches,
            rarely asked twice: no).
        work_bytes_per_element: peak bytes per output element its compute holds beyond the
            outputs (intermediates), measured, for a server's byte budget; 0: none to speak of.
        json_layout: ``(tensors, entries, meta) -> body``: the JSON answer's layout, from the
            tensors, their JSON entries (``{"shape", "dtype", "data"}``) and ``meta``; None:
            ``{"tensors": entries, "meta": meta}`` (the context-parallel kind adds its
            ``ranks`` and ``restore`` at the top level).
    """

    name: str
    path: str
    tag: str
    summary: str
    description: str
    fields: tuple[FieldSpec, ...]
    tensors: tuple[TensorSpec, ...]
    shapes: Callable[[Params], Shapes]
    compute: Callable[[Params, Context], Tensors]
    check: Callable[[Params], None] | None = None
    meta: Callable[[Params], dict[str, Any]] | None = None
    get: bool = True
    blocks: Callable[[Params, Context], dict[str, Any]] | None = None
    streams: Callable[[Params], bool] | None = None
    row_elements: Callable[[Params], int] | None = None
    sources: Sources | None = None
    complete: Callable[[dict[str, Any], Callable[[str | None], Any]], dict[str, Any]] | None = None
    allocations: Callable[[Params], dict[str, int]] | None = None
    model_field: str | None = None
    examples: tuple[dict[str, Any], ...] | None = None
    binary_fields: tuple[str, ...] = ()
    cache_tensors: bool = True
    work_bytes_per_element: int = 0
    json_layout: JsonLayout | None = None
    field_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        fields = self.fields
        names = {f.name for f in fields}
        if self.sources is not None:
            if "preset" not in names:
                fields = (*fields, preset_field(self.sources.positions))
            if "config" not in names:
                fields = (*fields, CONFIG_FIELD)
        if any(not t.integer for t in self.tensors) and "dtype" not in names:
            fields = (*fields, DTYPE_FIELD)
        object.__setattr__(self, "fields", fields)
        names_in_order = tuple(f.name for f in fields)
        if len(set(names_in_order)) != len(names_in_order):
            raise ValueError(f"kind {self.name!r} names a field twice: {names_in_order}")
        if not self.tensors:
            raise ValueError(f"kind {self.name!r} has no tensors")
        for f in fields:
            if not f.arg_name.isidentifier() or keyword.iskeyword(f.arg_name):
                raise ValueError(
                    f"kind {self.name!r}: field {f.name!r} needs a python_name (a Python "
                    "identifier for its keyword argument)"
                )
        if (self.blocks is None) != (self.row_elements is None):
            raise ValueError(f"kind {self.name!r}: give blocks and row_elements together")
        for name in self.binary_fields:
            if name not in names_in_order or fields[names_in_order.index(name)].type != "int_rows":
                raise ValueError(
                    f"kind {self.name!r}: binary field {name!r} is not an int_rows field"
                )
        object.__setattr__(self, "field_names", names_in_order)

    def field(self, name: str) -> FieldSpec:
        return self.fields[self.field_names.index(name)]

    def streamable(self, params: Params) -> bool:
        """``blocks`` can compute these fields a block of rows at a time."""
        return self.blocks is not None and (self.streams is None or self.streams(params))

    def make_meta(self, params: Params) -> dict[str, Any]:
        if self.meta is not None:
            return self.meta(params)
        return {"kind": self.name, **params}

    def request_examples(self) -> list[dict[str, Any]]:
        """Request bodies that work, for the API reference."""
        if self.examples is not None:
            return [dict(e) for e in self.examples]
        return [{s.name: s.example for s in self.fields if s.example is not None}]


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
    maximum = spec.maximum if spec.maximum is not None else INT_BOUND
    if value > maximum:
        raise InvalidArgument(f"{where} must be <= {maximum:g}, got {value}", field=where)
    if spec.exclusive_minimum is not None and not value > spec.exclusive_minimum:
        raise InvalidArgument(
            f"{where} must be > {spec.exclusive_minimum:g}, got {value}", field=where
        )
    if spec.multiple_of is not None and value % spec.multiple_of:
        what = "even" if spec.multiple_of == 2 else f"a multiple of {spec.multiple_of}"
        raise InvalidArgument(f"{where} must be {what}, got {value}", field=where)


def _check_length(spec: FieldSpec, items: list[Any], where: str) -> None:
    if not items:
        raise InvalidArgument(f"{where} must not be empty", field=where)
    if spec.length is not None and len(items) != spec.length:
        raise InvalidArgument(
            f"{where} must have {spec.length} items, got {len(items)}", field=where
        )


def _is_list(value: Any) -> bool:
    return not isinstance(value, str | bytes | Mapping) and hasattr(value, "__iter__")


def _int_item(spec: FieldSpec, item: Any, where: str) -> int:
    if isinstance(item, bool) or not isinstance(item, int):
        raise InvalidArgument(f"{where} must be an integer, got {item!r}", field=where)
    _check_number(spec, item, where)
    return int(item)


def _ints(spec: FieldSpec, value: Any, where: str) -> list[int]:
    if not _is_list(value):
        raise InvalidArgument(f"{where} must be a list of integers, got {value!r}", field=where)
    items = value if isinstance(value, list) else list(value)
    _check_length(spec, items, where)
    if spec.exclusive_minimum is None and spec.multiple_of is None and _fast_int_row(spec, items):
        return items  # plain ints within the bounds: checked in C loops, returned as given
    return [_int_item(spec, item, f"{where}[{i}]") for i, item in enumerate(items)]


def _tensor_rows(spec: FieldSpec, value: torch.Tensor, where: str) -> torch.Tensor:
    """An ``int_rows`` value given as a ``(B, T)`` integer tensor (a binary request body)."""
    if value.dim() != 2 or value.is_floating_point() or value.is_complex():
        raise InvalidArgument(
            f"{where} must be a 2-D integer tensor (B, T), got {value.dim()}-D {value.dtype}",
            field=where,
        )
    if value.shape[0] < 1:
        raise InvalidArgument(f"{where} must have at least one row", field=where)
    if spec.length is not None and value.shape[1] != spec.length:
        raise InvalidArgument(
            f"each row of {where} must have {spec.length} items, got {value.shape[1]}", field=where
        )
    if value.numel() and value.dtype != torch.bool:
        low, high = int(value.min()), int(value.max())
        for bad in (low, high):
            _check_number(spec, bad, where)
    return value


def _fast_int_row(spec: FieldSpec, row: Any) -> bool:
    """A list of plain ints within the bounds, checked in C loops (no Python call per int)."""
    if not isinstance(row, list):
        return False
    if spec.length is not None and len(row) != spec.length:
        return False
    if not row:
        return True
    if slices.item_types(row) != {int}:  # bool is not int here; map and set loop in C
        return False
    low = spec.minimum if spec.minimum is not None else -math.inf
    high = spec.maximum if spec.maximum is not None else INT_BOUND
    return bool(low <= slices.smallest(row) and slices.largest(row) <= high)


def _int_rows(spec: FieldSpec, value: Any, where: str) -> Any:
    """Rows of ints: ``rows`` equal-length rows (``ints`` with ``rows``), or a batch of rows
    (``int_rows``: ragged, empty rows allowed, or a ``(B, T)`` integer tensor). Valid lists are
    returned as given (a batch of thousands of ids is checked without a Python call per id)."""
    if spec.type == "int_rows":
        if isinstance(value, torch.Tensor):
            return _tensor_rows(spec, value, where)
        if isinstance(value, list) and value and all(_fast_int_row(spec, r) for r in value):
            return value
    if not _is_list(value):
        raise InvalidArgument(f"{where} must be a list of lists of integers", field=where)
    rows = list(value)
    most = spec.max_rows or spec.rows
    if spec.type == "ints" and not (spec.rows or 0) <= len(rows) <= (most or 0):
        counts = f"{spec.rows}" if most == spec.rows else f"{spec.rows} to {most}"
        raise InvalidArgument(
            f"{where} must be a list of ints, or {counts} lists of ints, got {len(rows)} lists",
            field=where,
        )
    if not rows:
        raise InvalidArgument(f"{where} must not be empty", field=where)
    out = []
    for r, row in enumerate(rows):
        if not _is_list(row):
            raise InvalidArgument(
                f"{where}[{r}] must be a list of integers, got {row!r}", field=f"{where}[{r}]"
            )
        items = list(row)
        if spec.type == "ints" and not items:
            raise InvalidArgument(f"{where}[{r}] must not be empty", field=f"{where}[{r}]")
        if spec.type == "int_rows" and spec.length is not None and len(items) != spec.length:
            raise InvalidArgument(
                f"{where}[{r}] must have {spec.length} items, got {len(items)}",
                field=f"{where}[{r}]",
            )
        out.append([_int_item(spec, x, f"{where}[{r}][{i}]") for i, x in enumerate(items)])
    if spec.type == "ints":
        lengths = sorted({len(row) for row in out})
        if len(lengths) != 1:
            raise InvalidArgument(
                f"the {len(out)} rows of {where} must have the same length, got {lengths}",
                field=where,
            )
    return out


def _float(spec: FieldSpec, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{where} must be a number, got {value!r}", field=where)
    number = float(value)
    if not math.isfinite(number):
        raise InvalidArgument(f"{where} must be finite, got {value!r}", field=where)
    _check_number(spec, number, where)
    return number


def _struct(spec: FieldSpec, value: Any, where: str) -> dict[str, Any]:
    """A ``struct`` value: its members coerced, aliases resolved, absent members left out."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{where} must be an object, got {value!r}", field=where)
    data = dict(value)
    for alias, target in spec.aliases:
        if alias in data:
            other = data.pop(alias)
            if target in data and data[target] != other:
                raise InvalidArgument(
                    f"{where}: {target} {data[target]!r} and {alias} {other!r} disagree; give "
                    "one of them",
                    field=f"{where}.{target}",
                )
            data[target] = other
    names = [m.name for m in spec.members]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise InvalidArgument(
            f"{where} has unknown field(s) {unknown}; its fields are {', '.join(names)}",
            field=f"{where}.{unknown[0]}",
        )
    out: dict[str, Any] = {}
    for member in spec.members:
        item = data.get(member.name)
        if item is None:
            if member.required:
                raise MissingField(
                    f"{where}.{member.name} is required ({member.description})",
                    field=f"{where}.{member.name}",
                )
            continue
        out[member.name] = coerce(member, item, f"{where}.{member.name}")
    return out


def _tensor(spec: FieldSpec, value: Any, where: str) -> Any:
    """A ``tensor`` value: a float ``torch.Tensor`` (a binary body's) as given, or nested lists
    of finite numbers of rank ``spec.length``, checked and returned as given (JSON-able, so a
    service keys its cache on the values)."""
    if isinstance(value, torch.Tensor):
        tensor = value
    else:
        if not _is_list(value):
            raise InvalidArgument(f"{where} must be nested lists of numbers", field=where)
        try:  # in slices: one torch.tensor over millions of numbers holds the GIL
            tensor = slices.nested_tensor(value, torch.float64, name=where)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InvalidArgument(
                f"{where} must be nested lists of numbers of equal lengths: {exc}", field=where
            ) from None
    if not tensor.is_floating_point():
        raise InvalidArgument(f"{where} must hold floats, got {tensor.dtype}", field=where)
    if spec.length is not None and tensor.dim() != spec.length:
        raise InvalidArgument(
            f"{where} must have {spec.length} dimensions, got shape {tuple(tensor.shape)}",
            field=where,
        )
    if tensor.numel() == 0:
        raise InvalidArgument(f"{where} must not be empty", field=where)
    if not bool(torch.isfinite(tensor).all()):
        raise InvalidArgument(f"{where} must hold finite numbers", field=where)
    return value


def tensor_shape(value: Any) -> tuple[int, ...]:
    """The shape of a ``tensor`` field's value (a tensor, or nested lists), from the numbers."""
    if isinstance(value, torch.Tensor):
        return tuple(int(n) for n in value.shape)
    shape = []
    while _is_list(value):
        items = value if isinstance(value, list | tuple) else list(value)  # not copied
        shape.append(len(items))
        if not items:
            break
        value = items[0]
    return tuple(shape)


def coerce(spec: FieldSpec, value: Any, where: str | None = None) -> Any:
    """``value`` as the field's type, or InvalidArgument naming the field."""
    name = where or spec.name
    if spec.type == "tensor":
        return _tensor(spec, value, name)
    if spec.type == "bool":
        if not isinstance(value, bool):
            raise InvalidArgument(f"{name} must be true or false, got {value!r}", field=name)
        return value
    if spec.type == "str":
        if not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a string, got {value!r}", field=name)
        allowed = spec.allowed
        if allowed is not None and value not in allowed:
            raise InvalidArgument(
                f"{name} must be one of {', '.join(allowed)}, got {value!r}", field=name
            )
        return value
    if spec.type == "ints":
        if spec.rows is not None and _is_list(value):
            items = list(value)
            if items and _is_list(items[0]):
                return _int_rows(spec, items, name)
        return _ints(spec, value, name)
    if spec.type == "int_rows":
        return _int_rows(spec, value, name)
    if spec.type == "floats":
        if not _is_list(value):
            raise InvalidArgument(f"{name} must be a list of numbers, got {value!r}", field=name)
        items = list(value)
        _check_length(spec, items, name)
        return [_float(spec, item, f"{name}[{i}]") for i, item in enumerate(items)]
    if spec.type == "object":
        if not isinstance(value, Mapping):
            raise InvalidArgument(f"{name} must be a JSON object, got {value!r}", field=name)
        return dict(value)
    if spec.type == "struct":
        return _struct(spec, value, name)
    if spec.type == "strs":
        if isinstance(value, str):  # one text is one row
            value = [value]
        if not _is_list(value) or not list(value):
            raise InvalidArgument(f"{name} must be a non-empty list of strings", field=name)
        texts = list(value)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidArgument(
                    f"{name}[{i}] must be a string, got {text!r}", field=f"{name}[{i}]"
                )
        return texts
    if spec.type == "float":
        return _float(spec, value, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number, got {value!r}", field=name)
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidArgument(f"{name} must be an integer, got {value!r}", field=name)
        value = int(value)
    _check_number(spec, value, name)
    return value


def batch_shape(rows: Any) -> tuple[int, int]:
    """``(B, T)`` of an ``int_rows`` value: rows and the longest row's length (0 when every row
    is empty), or a tensor's shape; from the numbers alone."""
    if isinstance(rows, torch.Tensor):
        return int(rows.shape[0]), int(rows.shape[1])
    return len(rows), max((len(row) for row in rows), default=0)


def derived(kind: Kind, params: Params) -> dict[str, Any]:
    """What :func:`posenc.resolve.resolve_fields` added to the fields (a config's ``config_model_type``, what
    ``complete`` filled in), for ``meta``."""
    return {k: v for k, v in params.items() if k not in kind.field_names}


def int_list_fields() -> frozenset[str]:
    """The names of the registered kinds' fields that hold lists of ints (``ints``,
    ``int_rows``): what a JSON body carries as Python lists."""
    return frozenset(
        f.name for k in REGISTRY.values() for f in k.fields if f.type in ("ints", "int_rows")
    )


def elements(shapes: Shapes) -> int:
    """Elements of all these tensors together."""
    return sum(math.prod(shape) for shape in shapes.values())


def total_elements(kind: Kind, params: Params) -> int:
    """Elements of all the kind's tensors together, from the numbers alone."""
    return elements(kind.shapes(params))
