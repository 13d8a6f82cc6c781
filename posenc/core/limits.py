"""Size limits of the library: every public function that builds a table, a bias or a batch
computes its element count from its arguments (numbers only) and refuses a size above the limit
with :class:`~posenc.core.errors.TooLarge` before it allocates anything.

The default, :data:`MAX_ELEMENTS` = 2**31 elements (8 GiB of float32), is a guard against
absurd arguments (``head_dim=1_121_509_132``), not a tuning knob; each function takes
``max_elements`` to override it for one call, and ``posenc.core.limits.MAX_ELEMENTS`` may be set for
the process. The service applies its own, smaller ``POSENC_MAX_ELEMENTS`` before calling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posenc.core.errors import TooLarge

MAX_ELEMENTS = 2**31


def check_elements(
    requested: int, *, what: str, max_elements: int | None = None, field: str | None = None
) -> None:
    """Raise :class:`~posenc.core.errors.TooLarge` when ``requested`` elements exceed the limit.

    Args:
        requested: the element count the call would allocate, from its arguments alone.
        what: what would be that large, for the message (``"the sinusoidal table (T=.., D=..)"``).
        max_elements: the limit for this call; None means :data:`MAX_ELEMENTS`.
        field: the argument to blame, if one.
    """
    limit = MAX_ELEMENTS if max_elements is None else max_elements
    if requested > limit:
        raise TooLarge(
            f"{what} would have {requested} elements, over the limit of {limit} elements "
            "(max_elements); ask for less or pass a larger max_elements",
            limit=limit,
            requested=requested,
            field=field,
        )


def sequence_length(positions: Sequence[int] | Any | None, seq_len: object) -> int | None:
    """``T`` of a ``positions`` / ``seq_len`` pair without building anything: ``seq_len`` when
    it is an int, else ``len(positions)`` (``numel`` for a tensor); None when neither tells (the
    function's own validation then refuses the arguments)."""
    if isinstance(seq_len, int) and not isinstance(seq_len, bool):
        return seq_len
    if positions is None:
        return None
    numel = getattr(positions, "numel", None)
    if callable(numel):
        return int(numel())
    try:
        return len(positions)
    except TypeError:
        return None


__all__ = ["MAX_ELEMENTS", "check_elements", "sequence_length"]
