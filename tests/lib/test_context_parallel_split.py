"""posenc.context_parallel.split against torch 2.13's own load balancers and hand-worked cases.

torch's balancers (``torch.distributed.tensor.experimental._context_parallel._load_balancer``)
are in the installed torch; the tests call them directly (posenc's library never imports
them). PTRR's block mask is built as torch's own tests build it: ``create_block_mask`` of a
(per-document) causal ``mask_mod``.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from torch.distributed.tensor.experimental._context_parallel._load_balancer import (
    _HeadTailLoadBalancer,
    _PerDocumentHeadTailLoadBalancer,
    _PTRRLoadBalancer,
)
from torch.nn.attention.flex_attention import create_block_mask

from posenc.context_parallel import (
    block_times,
    check_split,
    document_positions,
    ptrr_groups,
    split_sequence,
)
from posenc.core.errors import InvalidArgument

CP_SIZES = (2, 4, 8)


def _torch(balancer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A balancer's rearrange and restore indices, batch row 0, int64."""
    rearrange = balancer._generate_indices(restore=False)  # type: ignore[attr-defined]
    restore = balancer._generate_indices(restore=True)  # type: ignore[attr-defined]
    return rearrange[0].long(), restore[0].long()


def _documents(lengths: list[int]) -> list[int]:
    cu = [0]
    for length in lengths:
        cu.append(cu[-1] + length)
    return cu


def _block_mask(cu: list[int], block_size: int) -> object:
    """torch's BlockMask of the per-document causal mask, as torch's tests make one."""
    lengths = torch.tensor([b - a for a, b in itertools.pairwise(cu)])
    document = torch.repeat_interleave(torch.arange(len(lengths)), lengths)

    def mask_mod(
        b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> torch.Tensor:
        return (k <= q) & (document[q] == document[k])

    total = cu[-1]
    return create_block_mask(
        mask_mod, B=1, H=1, Q_LEN=total, KV_LEN=total, device="cpu", BLOCK_SIZE=block_size
    )


def _check_shards(split: object, order: torch.Tensor) -> None:
    """Each rank holds its contiguous piece of ``order``; ``restore`` inverts ``order``."""
    ranks = split.ranks  # type: ignore[attr-defined]
    per_rank = order.numel() // len(ranks)
    for shard in ranks:
        piece = order[shard.rank * per_rank : (shard.rank + 1) * per_rank]
        torch.testing.assert_close(shard.indices, piece, rtol=0, atol=0)
    glued = torch.cat([shard.indices for shard in ranks])
    torch.testing.assert_close(glued[split.restore], torch.arange(order.numel()), rtol=0, atol=0)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------- torch's own


@pytest.mark.parametrize("cp", CP_SIZES)
@pytest.mark.parametrize("length", [16, 48, 1024, 2048, 4096])
def test_head_tail_equals_torch(cp: int, length: int) -> None:
    split = split_sequence("head_tail", cp, seq_len=length)
    rearrange, restore = _torch(_HeadTailLoadBalancer(length, cp, "cpu"))
    torch.testing.assert_close(split.order, rearrange, rtol=0, atol=0)
    torch.testing.assert_close(split.restore, restore, rtol=0, atol=0)
    _check_shards(split, rearrange)


@pytest.mark.parametrize("cp", CP_SIZES)
@pytest.mark.parametrize("seed", range(4))
def test_torch_per_document_head_tail_equals_torch(cp: int, seed: int) -> None:
    """Random documents (multiples of 2·cp) of up to 4,096 tokens together."""
    rng = random.Random(seed * 100 + cp)
    lengths = [2 * cp * rng.randint(1, 4096 // (2 * cp * 6)) for _ in range(rng.randint(1, 6))]
    cu = _documents(lengths)
    split = split_sequence("torch_per_document_head_tail", cp, cu_seqlens=cu)
    rearrange, restore = _torch(_PerDocumentHeadTailLoadBalancer([lengths], cp, "cpu"))
    torch.testing.assert_close(split.order, rearrange, rtol=0, atol=0)
    torch.testing.assert_close(split.restore, restore, rtol=0, atol=0)
    _check_shards(split, rearrange)


@pytest.mark.parametrize("cp", CP_SIZES)
def test_one_document_per_document_schemes_agree_with_torch(cp: int) -> None:
    """With one document, Transformer Engine's per-document split is torch's, and head_tail."""
    rearrange, restore = _torch(_PerDocumentHeadTailLoadBalancer([[4096]], cp, "cpu"))
    for scheme in ("per_document_head_tail", "torch_per_document_head_tail", "head_tail"):
        split = split_sequence(scheme, cp, cu_seqlens=[0, 4096])
        torch.testing.assert_close(split.order, rearrange, rtol=0, atol=0)
        torch.testing.assert_close(split.restore, restore, rtol=0, atol=0)


# documents of 4,096 tokens together (blocks of 128: 32 blocks), and the same of 1,024 (blocks
# of 16), with documents that end inside blocks
PTRR_LAYOUTS = [
    ([4096], 128),
    ([1000, 2000, 1096], 128),
    ([128, 640, 77, 3251], 128),
    ([300, 200, 524], 16),
]


@pytest.mark.parametrize(("lengths", "block_size"), PTRR_LAYOUTS)
def test_ptrr_equals_torch(lengths: list[int], block_size: int) -> None:
    cu = _documents(lengths)
    mask = _block_mask(cu, block_size)
    seen = mask.kv_num_blocks + mask.full_kv_num_blocks  # type: ignore[attr-defined]
    assert block_times(cu, block_size) == seen.view(-1).tolist()
    for cp in CP_SIZES:
        split = split_sequence("ptrr", cp, cu_seqlens=cu, block_size=block_size)
        rearrange, restore = _torch(_PTRRLoadBalancer(mask, cp))  # type: ignore[arg-type]
        torch.testing.assert_close(split.order, rearrange, rtol=0, atol=0)
        torch.testing.assert_close(split.restore, restore, rtol=0, atol=0)
        _check_shards(split, rearrange)


@pytest.mark.parametrize("seed", range(6))
def test_ptrr_groups_equal_torch_scheduling(seed: int) -> None:
    """Random processing times with many ties: torch's stable descending sort keeps them."""
    rng = random.Random(seed)
    groups = rng.choice(CP_SIZES)
    times = [rng.randint(1, 6) for _ in range(groups * rng.randint(1, 9))]
    expected = _PTRRLoadBalancer.ptrr_scheduling(torch.tensor(times), groups)
    assert ptrr_groups(times, groups) == expected.tolist()


# ------------------------------------------------------------------------------- by hand


def test_megatron_5243_two_documents_on_two_ranks() -> None:
    """Megatron-LM #5243: cu_seqlens [0, 4, 8] on 2 ranks. Each document in 4 chunks of 1;
    rank 0 holds chunks 0 and 3 of each: tokens [0, 3, 4, 7]; its positions restart at each
    document ([0, 3, 0, 3]) or continue ([0, 3, 4, 7], Megatron-LM without
    --reset-position-ids), never [0, 3, 0, 3] for continuing positions."""
    split = split_sequence("per_document_head_tail", 2, cu_seqlens=[0, 4, 8])
    assert [s.indices.tolist() for s in split.ranks] == [[0, 3, 4, 7], [1, 2, 5, 6]]
    assert [s.cu_seqlens for s in split.ranks] == [[0, 2, 4], [0, 2, 4]]  # cu_seqlens // cp
    assert [s.max_seqlen for s in split.ranks] == [2, 2]
    assert split.restore.tolist() == [0, 4, 5, 1, 2, 6, 7, 3]
    reset = document_positions([0, 4, 8])
    kept = document_positions([0, 4, 8], reset=False)
    assert reset[split.ranks[0].indices].tolist() == [0, 3, 0, 3]
    assert kept[split.ranks[0].indices].tolist() == [0, 3, 4, 7]


def test_megatron_5243_is_not_naive_division() -> None:
    """A fork that divides cu_seqlens by the ranks and splits contiguously gives rank 0 the
    first document whole: not what Transformer Engine's THD split holds."""
    naive = split_sequence("contiguous", 2, cu_seqlens=[0, 4, 8])
    assert naive.ranks[0].indices.tolist() == [0, 1, 2, 3]
    assert naive.ranks[0].cu_seqlens == [0, 4]


def test_head_tail_by_hand() -> None:
    """8 tokens: on 2 ranks chunks of 2, rank 0 holds chunks 0 and 3; on 4 ranks chunks of 1,
    which is the [0, 7, 1, 6, 2, 5, 3, 4] of torch's docstring (which says 2 devices)."""
    split = split_sequence("head_tail", 2, seq_len=8)
    assert [s.indices.tolist() for s in split.ranks] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    assert split.ranks[0].cu_seqlens == [0, 4]
    assert split_sequence("head_tail", 4, seq_len=8).order.tolist() == [0, 7, 1, 6, 2, 5, 3, 4]


def test_head_tail_of_packed_documents_counts_each_document_once() -> None:
    """Documents [0, 6, 12, 16] on 2 ranks (chunks of 4): rank 0 holds 0-3 and 12-15 (two
    documents), rank 1 holds 4-7 and 8-11 (documents 0 and 1: head and tail together)."""
    split = split_sequence("head_tail", 2, cu_seqlens=[0, 6, 12, 16])
    assert [s.indices.tolist() for s in split.ranks] == [
        [0, 1, 2, 3, 12, 13, 14, 15],
        [4, 5, 6, 7, 8, 9, 10, 11],
    ]
    assert [s.cu_seqlens for s in split.ranks] == [[0, 4, 8], [0, 2, 8]]
    assert [s.max_seqlen for s in split.ranks] == [4, 6]


def test_torch_per_document_differs_from_transformer_engine() -> None:
    """Two documents of 4 on 2 ranks: torch shards its rearranged row in halves, so rank 0
    holds the first document whole; Transformer Engine gives each rank a head and tail of
    both."""
    torch_split = split_sequence("torch_per_document_head_tail", 2, cu_seqlens=[0, 4, 8])
    te_split = split_sequence("per_document_head_tail", 2, cu_seqlens=[0, 4, 8])
    assert torch_split.ranks[0].indices.tolist() == [0, 3, 1, 2]
    assert torch_split.ranks[0].cu_seqlens == [0, 4]
    assert te_split.ranks[0].indices.tolist() == [0, 3, 4, 7]


def test_ptrr_by_hand() -> None:
    """torch's docstring: documents of 4, 8 and 4 blocks (block size 1) on 2 ranks rearrange
    as [2, 3, 5, 6, 8, 11, 12, 13, 0, 1, 4, 7, 9, 10, 14, 15]."""
    split = split_sequence("ptrr", 2, cu_seqlens=[0, 4, 12, 16], block_size=1)
    assert block_times([0, 4, 12, 16], 1) == [1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4]
    assert split.order.tolist() == [2, 3, 5, 6, 8, 11, 12, 13, 0, 1, 4, 7, 9, 10, 14, 15]


def test_contiguous_by_hand() -> None:
    split = split_sequence("contiguous", 3, seq_len=6)
    assert [s.indices.tolist() for s in split.ranks] == [[0, 1], [2, 3], [4, 5]]
    assert split.restore.tolist() == list(range(6))


# ------------------------------------------------------------------------------- the 422s


@pytest.mark.parametrize(
    ("scheme", "cu", "needed"),
    [
        ("contiguous", [0, 10], "multiple of cp_size = 4"),
        ("head_tail", [0, 12], "multiple of 2·cp_size = 8"),
        ("ptrr", [0, 256], "block_size·cp_size = 128·4 = 512"),
        ("per_document_head_tail", [0, 8, 20], "document 1 has 12 tokens, not a multiple of 8"),
        ("torch_per_document_head_tail", [0, 4, 12], "document 0 has 4 tokens"),
    ],
)
def test_a_length_that_does_not_divide_names_the_multiple(
    scheme: str, cu: list[int], needed: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_split(scheme, 4, cu)
    assert needed in caught.value.message
    assert caught.value.field == ("seq_len" if len(cu) == 2 else "cu_seqlens")


def test_a_length_that_does_not_divide_says_the_next_multiple() -> None:
    with pytest.raises(InvalidArgument, match="the next multiple is 16"):
        split_sequence("head_tail", 4, seq_len=10)
