"""Learned (absolute) position tables, as GPT-2 and BERT use them, made reproducible by a seed.

A freshly initialised ``nn.Embedding(P, D)`` draws its weight from ``N(0, 1)``
(``torch.nn.init.normal_``). :func:`seeded_normal` draws the same numbers, bit for bit, as
``torch.manual_seed(seed); nn.Embedding(rows, cols).weight`` but from a private
``torch.Generator`` on the CPU, so it never touches the global RNG (thread-safe in the server).

Notation used for tensor shapes: ``P`` table positions, ``D`` model dimension.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._validate import check_int_at_least, device_or_cpu
from posenc.errors import InvalidArgument
from posenc.limits import check_elements

_SEED_MIN = -(2**63)
_SEED_MAX = 2**64 - 1


def seeded_normal(
    rows: int, cols: int, *, seed: int = 0, max_elements: int | None = None
) -> Tensor:
    """A ``N(0, 1)`` table equal to ``torch.manual_seed(seed); nn.Embedding(rows, cols).weight``.

    Args:
        rows: number of rows (``P`` or ``V``), >= 1.
        cols: number of columns (``D``), >= 1.
        seed: as ``torch.manual_seed`` takes it, in ``[-2**63, 2**64)``.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(rows, cols)`` float32 CPU tensor, without grad.

    Raises:
        InvalidArgument: ``rows`` or ``cols`` < 1, or ``seed`` out of range.
    """
    check_int_at_least("rows", rows, 1)
    check_int_at_least("cols", cols, 1)
    check_elements(rows * cols, what=f"the table ({rows}, {cols})", max_elements=max_elements)
    if isinstance(seed, bool) or not isinstance(seed, int) or not _SEED_MIN <= seed <= _SEED_MAX:
        raise InvalidArgument(
            f"seed must be an int in [{_SEED_MIN}, {_SEED_MAX}], got {seed!r}", field="seed"
        )
    generator = torch.Generator(device="cpu").manual_seed(seed)
    # nn.Embedding.reset_parameters -> init.normal_(weight) -> weight.normal_(0, 1)
    return torch.empty(rows, cols, dtype=torch.float32).normal_(0.0, 1.0, generator=generator)


def learned_table(
    num_positions: int,
    d_model: int,
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
) -> Tensor:
    """A seeded learned position table, as a freshly initialised ``nn.Embedding(P, D)``.

    Radford et al., 2019 (GPT-2, ``wpe``) and Devlin et al., 2019 (BERT,
    ``position_embeddings``) learn this table; untrained, it is
    ``torch.manual_seed(seed); nn.Embedding(num_positions, d_model).weight``.

    Args:
        num_positions: ``P``, >= 1.
        d_model: ``D``, >= 1.
        seed: the seed given to ``torch.manual_seed``.
        device: where the table goes; ``None`` means the CPU. Drawn on the CPU either way.
        dtype: the output dtype (drawn in float32, cast once).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(P, D)`` tensor of ``dtype``.
    """
    check_int_at_least("num_positions", num_positions, 1)
    check_int_at_least("d_model", d_model, 1)
    table = seeded_normal(num_positions, d_model, seed=seed, max_elements=max_elements)
    dev = device_or_cpu(device)
    return table.to(device=dev, dtype=dtype)
