"""pydantic validation of large lists and objects in slices, the GIL free between slices.

pydantic validates a field of plain types (strict ints, strings, ``dict[str, Any]``) in its Rust
core, one call that holds the GIL to the end: 0.2 s for 8 M token ids, 0.8 s for an object of
1.5 M keys (16 MiB bodies, 2 cores). The validators here wrap such a field's type
(``WrapValidator``: the JSON Schema, hence ``/openapi.json``, stays the type's own) and, when the
value is large, call pydantic on at most :data:`SLICE_ITEMS` items at a time and join the parts.
Between calls Python runs, so another thread (the event loop) gets the GIL. The errors are
pydantic's own, their locations moved to the whole value's indexes: the same list of errors as
one call gives.

Only types whose slices validate as the whole does are sliced: lists without a maximum length
(a slice of a list that is too long is not), objects whose keys are checked one by one, and the
``str | list[str]`` union (a list is never a string, so its ``str`` error is one).
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import InitErrorDetails

#: The most list items (or object keys, or ints of a batch of rows) one pydantic call validates.
SLICE_ITEMS = 1 << 15

Handler = ValidatorFunctionWrapHandler


def _moved(exc: ValidationError, shift: int = 0, row: int | None = None) -> list[InitErrorDetails]:
    """``exc``'s errors, the index leading their location moved by ``shift`` (when it is an
    index), and ``row`` put before it (the errors of one row validated alone)."""
    moved: list[InitErrorDetails] = []
    for error in exc.errors(include_url=False):
        loc = list(error["loc"])
        if shift and loc and isinstance(loc[0], int):
            loc[0] += shift
        if row is not None:
            loc.insert(0, row)
        item: dict[str, Any] = {"type": error["type"], "loc": tuple(loc), "input": error["input"]}
        if "ctx" in error:
            item["ctx"] = error["ctx"]
        moved.append(item)  # type: ignore[arg-type]
    return moved


def _raise(errors: list[InitErrorDetails]) -> None:
    if errors:
        raise ValidationError.from_exception_data("sliced", errors)


def _items(value: list[Any], handler: Callable[[Any], Any]) -> list[Any]:
    """A flat list validated ``SLICE_ITEMS`` items at a time."""
    out: list[Any] = []
    errors: list[InitErrorDetails] = []
    for lo in range(0, len(value), SLICE_ITEMS):
        try:
            out.extend(handler(value[lo : lo + SLICE_ITEMS]))
        except ValidationError as exc:
            errors += _moved(exc, lo)
        time.sleep(0)  # the GIL to whoever waits for it
    _raise(errors)
    return out


def sliced_list(value: Any, handler: Handler) -> Any:
    """Wrap-validator of a list of scalars (no maximum length)."""
    if not isinstance(value, list) or len(value) <= SLICE_ITEMS:
        return handler(value)
    return _items(value, handler)


def sliced_dict(value: Any, handler: Handler) -> Any:
    """Wrap-validator of ``dict[str, Any]``: ``SLICE_ITEMS`` keys at a time."""
    if not isinstance(value, dict) or len(value) <= SLICE_ITEMS:
        return handler(value)
    out: dict[str, Any] = {}
    errors: list[InitErrorDetails] = []
    items = iter(value.items())
    while chunk := dict(itertools.islice(items, SLICE_ITEMS)):
        try:
            out.update(handler(chunk))
        except ValidationError as exc:
            errors += _moved(exc)
        time.sleep(0)
    _raise(errors)
    return out


def sliced_text(value: Any, handler: Handler) -> Any:
    """Wrap-validator of ``str | list[str]``: a long list in slices, the union's ``str`` error
    (a list is not a string) given once, for the whole list."""
    if not isinstance(value, list) or len(value) <= SLICE_ITEMS:
        return handler(value)
    out: list[Any] = []
    errors: list[InitErrorDetails] = []
    not_a_string: list[InitErrorDetails] = []
    for lo in range(0, len(value), SLICE_ITEMS):
        try:
            out.extend(handler(value[lo : lo + SLICE_ITEMS]))
        except ValidationError as exc:
            for error in _moved(exc):
                loc = error["loc"]
                if len(loc) >= 2 and isinstance(loc[1], int):  # ("list[str]", i, ...)
                    errors.append({**error, "loc": (loc[0], loc[1] + lo, *loc[2:])})
                elif not not_a_string:
                    not_a_string.append({**error, "input": value})
        time.sleep(0)
    _raise(not_a_string + errors if errors else [])
    return out


def sliced_unless(item_type: Any, refused: type) -> WrapValidator:
    """Wrap-validator of a field whose large value is a list of scalars, each checked by a
    Python validator that refuses only items of type ``refused`` (``bool``: JSON ``true`` is not
    the number 1): a large list with none is validated by ``item_type``'s core schema, without
    a Python call per item, ``SLICE_ITEMS`` items a call. Only a list that passes is taken so
    (the same value); anything else, and every error, is the field's own validation."""
    adapter: TypeAdapter[Any] = TypeAdapter(list[item_type])

    def validate(value: Any, handler: Handler) -> Any:
        if not isinstance(value, list) or len(value) <= SLICE_ITEMS:
            return handler(value)
        for lo in range(0, len(value), SLICE_ITEMS):
            types = set(map(type, value[lo : lo + SLICE_ITEMS]))
            if refused in types or list in types or dict in types:
                return handler(value)
            time.sleep(0)
        try:
            return _items(value, adapter.validate_python)
        except ValidationError:  # the errors as the field reports them (its locations)
            return handler(value)

    return WrapValidator(validate)


def sliced_rows(row_type: Any = None) -> WrapValidator:
    """Wrap-validator of a list of rows (``list[list[int]]``...): runs of at most
    ``SLICE_ITEMS`` rows holding about ``SLICE_ITEMS`` items in one call each, and a longer row by itself, in slices when
    ``row_type`` (the row's type, with no maximum length) is given."""
    row_adapter: TypeAdapter[Any] | None = None if row_type is None else TypeAdapter(row_type)

    def validate(value: Any, handler: Handler) -> Any:
        if not isinstance(value, list):
            return handler(value)
        try:
            sizes = list(itertools.accumulate(map(len, value)))
        except TypeError:  # a row that is not a list: pydantic says which, whole
            return handler(value)
        if not sizes or (sizes[-1] <= SLICE_ITEMS and len(value) <= SLICE_ITEMS):
            return handler(value)
        out: list[Any] = []
        errors: list[InitErrorDetails] = []
        lo = 0
        while lo < len(value):
            done = sizes[lo - 1] if lo else 0
            hi = max(lo + 1, bisect.bisect_right(sizes, done + SLICE_ITEMS, lo))
            hi = min(hi, lo + SLICE_ITEMS)  # and at most SLICE_ITEMS rows (empty ones too)
            row = value[lo]
            if (
                hi == lo + 1
                and row_adapter is not None
                and isinstance(row, list)
                and len(row) > SLICE_ITEMS
            ):
                try:
                    out.append(_items(row, row_adapter.validate_python))  # one long row
                except ValidationError as exc:
                    errors += _moved(exc, row=lo)
            else:
                try:
                    out.extend(handler(value[lo:hi]))
                except ValidationError as exc:
                    errors += _moved(exc, lo)
            time.sleep(0)
            lo = hi
        _raise(errors)
        return out

    return WrapValidator(validate)


SLICED_LIST = WrapValidator(sliced_list)
SLICED_DICT = WrapValidator(sliced_dict)
SLICED_TEXT = WrapValidator(sliced_text)

__all__ = [
    "SLICED_DICT",
    "SLICED_LIST",
    "SLICED_TEXT",
    "SLICE_ITEMS",
    "sliced_rows",
    "sliced_unless",
]
