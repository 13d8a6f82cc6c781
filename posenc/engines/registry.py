"""The registry of engines: :data:`ENGINES`, the only list of them.

:mod:`posenc.engines` registers the built-in engines, one line each; a test or a plugin
registers another with :func:`register_engine` (and takes it back with
:func:`unregister_engine`). Everything that names engines asks here at the time of the request:
the ``engine`` fields' allowed values (:func:`engine_names`), the engine a field names
(:func:`engine_named`, refusing an unknown one with the list), ``/v1/configs/check``'s
candidates (:func:`check_candidates`) and the 1.4 hooks (:func:`engine_hook`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from posenc.core.errors import InvalidArgument

if TYPE_CHECKING:  # the engine modules import the registry's users' layer: no runtime import
    from posenc.engines.base import Engine

#: Every engine by its name as the API spells it, in the order answers list them.
ENGINES: dict[str, Engine] = {}

#: The kind of the ``engine`` field a name is looked up for: text RoPE by default.
TEXT_ROPE = "rope"

Hook = Literal["apply", "shift"]
_HOOK_WORDS = {"apply": "rotates no queries or keys", "shift": "re-rotates no cached keys"}


def register_engine(engine: Engine) -> None:
    """Add ``engine`` (or replace the one of its name)."""
    ENGINES[engine.name] = engine


def unregister_engine(name: str) -> None:
    """Take the engine ``name`` out of the registry (tests: a toy engine)."""
    ENGINES.pop(name, None)


def engine_names(kind: str = TEXT_ROPE) -> tuple[str, ...]:
    """The names of the engines whose ``engine`` field on ``kind`` takes them, in order."""
    return tuple(name for name, engine in ENGINES.items() if kind in engine.kinds)


def engine_named(name: Any, *, kind: str = TEXT_ROPE, field: str = "engine") -> Engine:
    """The engine ``name`` of ``kind``'s engines.

    Raises:
        InvalidArgument: no such engine for ``kind`` (the message lists them).
    """
    engine = ENGINES.get(name) if isinstance(name, str) else None
    if engine is None or kind not in engine.kinds:
        raise InvalidArgument(
            f"{field} must be one of {', '.join(engine_names(kind))}, got {name!r}", field=field
        )
    return engine


def check_candidates() -> tuple[tuple[str, str], ...]:
    """``(engine, precision)`` of every table ``/v1/configs/check`` compares, in order."""
    return tuple(
        (name, precision)
        for name, engine in ENGINES.items()
        if TEXT_ROPE in engine.kinds
        for precision in engine.checked
    )


def engine_hook(name: Any, hook: Hook, *, field: str = "engine") -> Any:
    """The 1.4 hook ``hook`` (``apply`` or ``shift``) of the text-RoPE engine ``name``.

    Raises:
        InvalidArgument: an unknown engine, or one without the hook (the message names it and
            the engines that have it).
    """
    engine = engine_named(name, field=field)
    found = getattr(engine, hook)
    if found is None:
        having = [n for n in engine_names() if getattr(ENGINES[n], hook) is not None]
        raise InvalidArgument(
            f"engine {engine.name} {_HOOK_WORDS[hook]} ({hook} is not implemented for it); "
            f"engines with {hook}: {', '.join(having) or 'none yet'}",
            field=field,
        )
    return found


def refuse_rope_type(engine: Engine, rope_type: str, why: str, *, field: str = "engine") -> None:
    """Refuse a scaling type ``engine`` does not implement, naming both (a 422).

    Raises:
        InvalidArgument: always; the message names the engines that implement the type.
    """
    having = [n for n in engine_names() if ENGINES[n].implements(rope_type)]
    raise InvalidArgument(
        f"config rope_type {rope_type!r} is not implemented by engine {engine.name} ({why}); "
        f"engines that implement it: {', '.join(having) or 'none'}"
        + (f'; give engine: "{having[0]}" for its table' if having else ""),
        field=field,
    )


__all__ = [
    "ENGINES",
    "TEXT_ROPE",
    "Hook",
    "check_candidates",
    "engine_hook",
    "engine_named",
    "engine_names",
    "refuse_rope_type",
    "register_engine",
    "unregister_engine",
]
