"""Domain errors of posenc.

Library code raises these (never ``assert``); the service maps them to HTTP status codes in one
place (``service/errors.py``). Every message states the numbers involved, e.g.
``d_model must be even, got 7``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PosencError(ValueError):
    """Base class of every error posenc raises on bad input.

    Attributes:
        field: name of the offending argument (the request field in the service), or ``None``.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidArgument(PosencError):
    """An argument is out of its allowed range or inconsistent with another one (HTTP 422)."""


class MissingField(InvalidArgument):
    """A required field was given by neither the caller nor a preset or config (HTTP 422)."""


class TokenOutOfRange(InvalidArgument):
    """A token id lies outside ``[0, vocab_size)``; ``field`` is ``input_ids[ROW][COL]``."""


class TooLarge(PosencError):
    """The output would exceed a size limit (HTTP 413). Raised before anything is allocated.

    Attributes:
        limit: the limit, in elements.
        requested: the number of elements asked for.
    """

    def __init__(
        self, message: str, *, limit: int, requested: int, field: str | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.limit = limit
        self.requested = requested


class DeviceUnavailable(PosencError):
    """A device was asked for that this machine does not have (e.g. ``cuda`` without a GPU)."""


def closest_name(name: object, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (difflib ratio >= 0.6, case-insensitive), or None.

    >>> closest_name("llama-3.1-8", ["llama-2-7b", "llama-3.1-8b"])
    'llama-3.1-8b'
    """
    if not isinstance(name, str):
        return None
    names = list(known)
    # a ratio of 0.6 needs the lengths within a factor of 7/3: a name longer than that of the
    # longest known one is close to none, and is not compared (its cost would grow with it)
    if not names or 3 * len(name) > 7 * max(len(n) for n in names):
        return None
    by_lower = {n.lower(): n for n in names}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


class UnknownName(PosencError):
    """A model or preset name that is not known (HTTP 404 or 422 depending on where it appears).

    Given ``name`` and ``known``, the message gains ``did you mean 'X'?`` for the closest known
    name (:func:`closest_name`), and ``suggestion`` holds it (None when nothing is close).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        name: object = None,
        known: Iterable[str] = (),
    ) -> None:
        self.suggestion = closest_name(name, known)
        if self.suggestion is not None:
            message = f"{message}; did you mean {self.suggestion!r}?"
        super().__init__(message, field=field)
