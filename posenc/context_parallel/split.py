"""One sequence, or packed documents, split across context-parallel ranks.

Every scheme gives an ``order``: the ``T`` global token indices of the ranks' tokens,
concatenated in rank order, each rank holding ``T / cp`` of them. Rank ``r`` holds
``order[r·T/cp : (r+1)·T/cp]``, and ``restore`` (the inverse permutation) puts the ranks'
tokens, concatenated, back in the original order.

Schemes (``cp`` ranks, documents from ``cu_seqlens``):

- ``contiguous``: rank ``r`` holds tokens ``[r·T/cp, (r+1)·T/cp)``.
- ``head_tail``: ``2·cp`` equal chunks of the whole row; rank ``r`` holds chunks ``r`` and
  ``2·cp−1−r`` (Megatron-LM's and Transformer Engine's split; torch's
  ``_HeadTailLoadBalancer``).
- ``per_document_head_tail``: each document in ``2·cp`` chunks; rank ``r`` holds chunks ``r``
  and ``2·cp−1−r`` of every document, documents in order (Transformer Engine's THD split,
  ``get_batch_on_this_cp_rank`` with packed sequences in Megatron-LM).
- ``torch_per_document_head_tail``: torch's ``_PerDocumentHeadTailLoadBalancer`` order (document
  by document, in each the ranks' head and tail chunks in rank order), then cut in ``cp`` equal
  contiguous pieces as torch's context parallelism shards the rearranged row.
- ``ptrr``: torch's ``_PTRRLoadBalancer``: blocks of ``block_size`` tokens dealt to the ranks
  by processing time (the non-empty key blocks of each query block in the causal, or
  per-document causal, block mask), in snake order, largest first; each rank's blocks sorted.

Notation: ``T`` tokens, ``cp`` ranks, ``T_r = T / cp`` tokens a rank, ``N`` documents.
Reference: torch 2.13 ``torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py``;
posenc computes the same indices itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.tokens.position_ids import check_cu_seqlens

__all__ = [
    "SCHEMES",
    "ContextSplit",
    "RankShard",
    "Scheme",
    "block_times",
    "check_split",
    "document_positions",
    "ptrr_groups",
    "split_sequence",
]

Scheme = Literal[
    "contiguous", "head_tail", "per_document_head_tail", "torch_per_document_head_tail", "ptrr"
]
SCHEMES: tuple[str, ...] = get_args(Scheme)


@dataclass(frozen=True)
class RankShard:
    """What one rank holds.

    Attributes:
        rank: the rank, ``0 … cp−1``.
        indices: ``(T_r,)`` int64, the global token indices, in the rank's order.
        cu_seqlens: the rank's local document lengths, cumulative from 0: one entry per document
            the rank holds tokens of (its head and tail together), documents in order.
        max_seqlen: the longest of them.
    """

    rank: int
    indices: Tensor
    cu_seqlens: list[int]
    max_seqlen: int


@dataclass(frozen=True)
class ContextSplit:
    """A row split across ranks.

    Attributes:
        scheme: see :data:`Scheme`.
        cp_size: ``cp``.
        cu_seqlens: the global documents (``[0, T]`` for one sequence).
        order: ``(T,)`` int64, the ranks' tokens concatenated in rank order.
        restore: ``(T,)`` int64, ``order[restore] == arange(T)``.
        ranks: one :class:`RankShard` per rank.
    """

    scheme: str
    cp_size: int
    cu_seqlens: list[int]
    order: Tensor
    restore: Tensor
    ranks: tuple[RankShard, ...]


def _lengths(cu_seqlens: Sequence[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(cu_seqlens)]


def check_split(
    scheme: str, cp_size: int, cu_seqlens: Sequence[int], *, block_size: int = 128
) -> None:
    """That ``scheme`` can split these documents over ``cp_size`` ranks, from the numbers.

    Raises:
        InvalidArgument: an unknown scheme, or a length that does not divide, naming the
            multiple it needs (``T`` by ``cp`` for contiguous, by ``2·cp`` for head_tail, by
            ``block_size·cp`` for ptrr; each document by ``2·cp`` for the per-document schemes).
    """
    if scheme not in SCHEMES:
        raise InvalidArgument(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if cp_size < 1:
        raise InvalidArgument(f"cp_size must be >= 1, got {cp_size}", field="cp_size")
    total = cu_seqlens[-1]
    where = "seq_len" if len(cu_seqlens) == 2 else "cu_seqlens"
    multiple = {"contiguous": cp_size, "head_tail": 2 * cp_size, "ptrr": block_size * cp_size}
    if scheme in multiple and total % multiple[scheme]:
        how = {
            "contiguous": f"cp_size = {cp_size}",
            "head_tail": f"2·cp_size = {2 * cp_size}",
            "ptrr": f"block_size·cp_size = {block_size}·{cp_size} = {multiple['ptrr']} (its "
            "blocks are dealt out whole)",
        }[scheme]
        raise InvalidArgument(
            f"scheme {scheme} needs T to be a multiple of {how}; T is {total} (the next "
            f"multiple is {-(-total // multiple[scheme]) * multiple[scheme]})",
            field=where,
        )
    if scheme in ("per_document_head_tail", "torch_per_document_head_tail"):
        for i, length in enumerate(_lengths(cu_seqlens)):
            if length % (2 * cp_size):
                raise InvalidArgument(
                    f"scheme {scheme} cuts every document in 2·cp_size = {2 * cp_size} equal "
                    f"chunks; document {i} has {length} tokens, not a multiple of "
                    f"{2 * cp_size}",
                    field=where,
                )


def _documents(cu_seqlens: Sequence[int]) -> tuple[Tensor, Tensor]:
    """``(T,)`` each token's document and ``(T,)`` its document's first index, int64."""
    lengths = torch.tensor(_lengths(cu_seqlens), dtype=torch.int64)
    document = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    starts = torch.tensor(list(cu_seqlens[:-1]), dtype=torch.int64)
    return document, starts[document]


def document_positions(cu_seqlens: Sequence[int], *, reset: bool = True) -> Tensor:
    """``(T,)`` int64 position ids of a packed row: from 0 in each document (``reset``), or the
    row's own indices (``reset=False``: Megatron-LM without ``--reset-position-ids``)."""
    total = int(cu_seqlens[-1])
    if not reset:
        return torch.arange(total)
    _document, start = _documents(cu_seqlens)
    return torch.arange(total) - start


def _head_tail_keys(offset: Tensor, length: Tensor, cp: int) -> tuple[Tensor, Tensor]:
    """Each token's rank and half (0 head, 1 tail) when its span of ``length`` tokens (it sits
    at ``offset`` in it) is cut in ``2·cp`` chunks: chunk ``c`` goes to rank ``c`` (head) or
    ``2·cp−1−c`` (tail)."""
    chunk = torch.div(offset * (2 * cp), length, rounding_mode="floor")
    tail = (chunk >= cp).to(torch.int64)
    rank = torch.where(tail.bool(), 2 * cp - 1 - chunk, chunk)
    return rank, tail


def block_times(cu_seqlens: Sequence[int], block_size: int) -> list[int]:
    """Each query block's non-empty key blocks in the causal mask of these documents: what
    torch's ``_PTRRLoadBalancer`` reads off a ``BlockMask`` (``kv_num_blocks +
    full_kv_num_blocks``). Query block ``i`` sees keys from its first token's document start
    to its own end: ``i − ⌊start / block_size⌋ + 1`` blocks."""
    total = int(cu_seqlens[-1])
    _document, start = _documents(cu_seqlens)
    first = start[torch.arange(0, total, block_size)]  # (T / block_size,)
    blocks = torch.arange(first.numel())
    return (blocks - torch.div(first, block_size, rounding_mode="floor") + 1).tolist()


def ptrr_groups(times: Sequence[int], groups: int) -> list[list[int]]:
    """Processing-time round robin: tasks by time, largest first (ties in their order), dealt
    to ``groups`` groups in snake order (left to right, then right to left); each group's
    tasks sorted. ``len(times)`` must divide by ``groups``."""
    ranked = sorted(range(len(times)), key=lambda i: -times[i])  # stable
    dealt: list[list[int]] = [[] for _ in range(groups)]
    for row in range(len(times) // groups):
        tasks = ranked[row * groups : (row + 1) * groups]
        for group, task in enumerate(tasks if row % 2 == 0 else tasks[::-1]):
            dealt[group].append(task)
    return [sorted(group) for group in dealt]


def _order(scheme: str, cp: int, cu_seqlens: Sequence[int], block_size: int) -> Tensor:
    """``(T,)`` the ranks' tokens concatenated in rank order (see the module's schemes)."""
    total = int(cu_seqlens[-1])
    tokens = torch.arange(total)
    if scheme == "contiguous":
        return tokens
    if scheme == "ptrr":
        groups = ptrr_groups(block_times(cu_seqlens, block_size), cp)
        blocks = torch.tensor([b for group in groups for b in group], dtype=torch.int64)
        return (blocks[:, None] * block_size + torch.arange(block_size)[None, :]).reshape(-1)
    if scheme == "head_tail":
        rank, tail = _head_tail_keys(tokens, torch.tensor(total), cp)
        key = 2 * rank + tail
    else:
        document, start = _documents(cu_seqlens)
        lengths = torch.tensor(_lengths(cu_seqlens), dtype=torch.int64)[document]
        rank, tail = _head_tail_keys(tokens - start, lengths, cp)
        documents = len(cu_seqlens) - 1
        if scheme == "per_document_head_tail":  # rank by rank, documents in order
            key = rank * (2 * documents) + 2 * document + tail
        else:  # torch: document by document, ranks in order
            key = document * (2 * cp) + 2 * rank + tail
    return torch.argsort(key, stable=True)  # tokens ascend within each chunk


def _shard(rank: int, indices: Tensor, document: Tensor, documents: int) -> RankShard:
    counts = torch.bincount(document[indices], minlength=documents)
    held = counts[counts > 0]
    cu = [0, *torch.cumsum(held, 0).tolist()]
    return RankShard(rank, indices, cu, int(held.max()))


def split_sequence(
    scheme: str,
    cp_size: int,
    *,
    seq_len: int | None = None,
    cu_seqlens: Sequence[int] | None = None,
    block_size: int = 128,
) -> ContextSplit:
    """Split one sequence (``seq_len``) or packed documents (``cu_seqlens``) across ``cp_size``
    ranks by ``scheme``.

    Args:
        scheme: see :data:`Scheme`.
        cp_size: the ranks, ``cp``.
        seq_len: ``T`` of one sequence (a single document).
        cu_seqlens: packed documents, ``0 < … < T`` (flash-attn's varlen boundaries).
        block_size: ``ptrr``'s block (torch's ``BlockMask`` ``BLOCK_SIZE``).

    Returns:
        The :class:`ContextSplit`: ``order``, ``restore`` and each rank's indices and local
        ``cu_seqlens``.

    Raises:
        InvalidArgument: neither or both of seq_len and cu_seqlens, bad boundaries, or a length
            that does not divide (:func:`check_split`).
    """
    if (seq_len is None) == (cu_seqlens is None):
        raise InvalidArgument("give seq_len or cu_seqlens (one of them)", field="seq_len")
    cu = [0, int(seq_len)] if seq_len is not None else list(cu_seqlens or ())
    if cu_seqlens is not None:
        cu = check_cu_seqlens(cu, cu[-1] if cu else 0)
    check_split(scheme, cp_size, cu, block_size=block_size)
    order = _order(scheme, cp_size, cu, block_size)
    restore = torch.empty_like(order)
    restore[order] = torch.arange(order.numel())
    document, _start = _documents(cu)
    per_rank = order.numel() // cp_size
    ranks = tuple(
        _shard(r, order[r * per_rank : (r + 1) * per_rank], document, len(cu) - 1)
        for r in range(cp_size)
    )
    return ContextSplit(scheme, cp_size, cu, order, restore, ranks)
