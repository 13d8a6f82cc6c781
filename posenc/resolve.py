"""Resolving a kind's request: its preset or config merged, its fields checked, its tensors computed.

This is the layer above the conventions, the config reader, the presets and the models: a
:class:`~posenc.core.kinds.Kind` (the data model, :mod:`posenc.core.kinds`) only describes its fields;
:func:`resolve_fields` merges what a preset or a ``config.json`` gives (:mod:`posenc.readers.sources`),
checks types and bounds, runs the kind's cross-checks and fills in what a named model gives
(:mod:`posenc.readers.models`), and :func:`compute` makes the tensors after a size check that allocates
nothing. The service, the client's local paths and the CLI all resolve through here, so every
caller gets the same precedence (the caller's fields > the config or preset > the field's
default) and the same errors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from posenc.core import kinds
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument, MissingField, TooLarge, UnknownName
from posenc.core.kinds import Context, Kind, Params, Tensors, elements
from posenc.facts.config_keys import config_key_hint
from posenc.readers.models import DEFAULT_MODEL_NAME, default_model
from posenc.readers.sources import merge_sources

__all__ = ["builtin_models", "compute", "context", "resolve_fields"]


def builtin_models(name: str | None) -> Any:
    """The library's model lookup: the built-in default model only (:mod:`posenc.readers.models`)."""
    if name not in (None, DEFAULT_MODEL_NAME):
        raise UnknownName(
            f"unknown model {name!r}; the library knows {DEFAULT_MODEL_NAME!r} only (a service "
            "loads others with POSENC_MODELS)",
            field="model",
            name=name,
            known=[DEFAULT_MODEL_NAME],
        )
    return _default_model()


@functools.cache
def _default_model() -> Any:
    return default_model()


def resolve_fields(
    kind: Kind, given: Params, *, models: Callable[[str | None], Any] | None = None
) -> dict[str, Any]:
    """The kind's fields with a preset or config merged, defaults filled in, types and bounds
    checked, cross-checks run and what a named model gives filled in.

    Args:
        kind: a registered (or any) kind.
        given: the caller's fields. ``None`` is no value: the field's default, except that it
            overrides a preset's or config's value (a JSON ``null`` sent on purpose); leave a
            field out to take the preset's.
        models: the model lookup of a kind with ``complete`` (:class:`Context`); None: the
            library's built-in default model only.

    Returns:
        Every field by name, in the kind's order, then what a config adds for ``meta``
        (``config_model_type``...). ``config`` itself is None once merged.

    Raises:
        InvalidArgument: an unknown field (the message lists the known ones), a value of the
            wrong type or out of bounds (``field`` names it), a preset or config that does not
            fit; MissingField: a required field given by nobody.
        UnknownName: an unknown preset or model.
    """
    unknown = sorted(set(given) - set(kind.field_names))
    if unknown:
        hints = [h for h in (config_key_hint(u, kind.field_names) for u in unknown) if h]
        raise InvalidArgument(
            f"unknown field(s) {unknown} for {kind.name}; its fields are "
            f"{', '.join(kind.field_names)}" + "".join(f"; {h}" for h in hints),
            field=unknown[0],
        )
    info: dict[str, Any] = {}
    if kind.sources is not None:
        given, info = merge_sources(kind, given)
    params: dict[str, Any] = {}
    for spec in kind.fields:
        value = given.get(spec.name)
        if value is None:
            if spec.required:
                hint = " (or a preset or config that gives it)" if spec.sourced else ""
                raise MissingField(
                    f"{spec.name} is required: give {spec.name}{hint} ({spec.description})",
                    field=spec.name,
                )
            params[spec.name] = spec.default
            continue
        params[spec.name] = kinds.coerce(spec, value)
    if kind.check is not None:
        kind.check(params)
    params.update(info)
    if kind.complete is not None:
        params = kind.complete(params, models or builtin_models)
    return params


def context(
    params: Params,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    models: Callable[[str | None], Any] | None = None,
    allocator: Callable[[tuple[int, ...], torch.dtype], torch.Tensor | None] | None = None,
) -> Context:
    """The :class:`Context` of a computation: CPU, ``params["dtype"]``, the built-in model and
    new output tensors unless given."""
    return Context(
        device=torch.device("cpu") if device is None else torch.device(device),
        dtype=dtype or resolve_dtype(params.get("dtype")),
        models=models or builtin_models,
        allocator=allocator,
    )


def compute(
    kind: Kind,
    params: Params,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    max_elements: int | None = None,
    models: Callable[[str | None], Any] | None = None,
    allocator: Callable[[tuple[int, ...], torch.dtype], torch.Tensor | None] | None = None,
) -> Tensors:
    """The kind's tensors, in its order, after a size check that allocates nothing.

    Args:
        kind: the kind.
        params: fields as :func:`resolve_fields` returns them.
        device: where the tensors go (CPU when None).
        dtype: the float tensors' dtype (integer tensors stay int64); None: ``params["dtype"]``
            (float32 when the kind has no such field).
        max_elements: refuse a bundle larger than this with ``TooLarge`` before computing.
        models: the model lookup (:class:`Context`); None: the built-in default model only.
        allocator: where big CPU outputs may be written (:class:`Context`); None: new tensors.

    Returns:
        The tensors by name, primary first; each of the shape ``kind.shapes`` promised.

    Raises:
        TooLarge: over ``max_elements``.
        ValueError: the compute returned other tensors or shapes than ``kind.shapes`` says (a
            bug in the kind, not the caller's fault).
    """
    shapes = kind.shapes(params)
    total = elements(shapes)
    if max_elements is not None and total > max_elements:
        raise TooLarge(
            f"{kind.name} would have {total} elements, over the limit of {max_elements}",
            limit=max_elements,
            requested=total,
        )
    if max_elements is not None:
        for what, count in (kind.allocations(params) if kind.allocations else {}).items():
            if count > max_elements:
                raise TooLarge(
                    f"{what} would make {count} elements, over the limit of {max_elements}",
                    limit=max_elements,
                    requested=count,
                    field=what,
                )
    ctx = context(params, device=device, dtype=dtype, models=models, allocator=allocator)
    tensors = kind.compute(params, ctx)
    names = list(shapes)
    if list(tensors) != names:
        raise ValueError(f"kind {kind.name!r} computed {list(tensors)}, declared {names}")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(shapes[name]):
            raise ValueError(
                f"kind {kind.name!r}: {name} has shape {tuple(tensor.shape)}, declared {shapes[name]}"
            )
    return tensors
