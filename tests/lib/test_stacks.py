"""Each training or serving stack's default context-parallel split
(:mod:`posenc.context_parallel.stacks`): every scheme a record names is one the splitter runs,
the dual-chunk ("head-tail") split the stacks share gives rank ``r`` chunks ``r`` and
``2·cp − 1 − r`` (Megatron-LM's ``get_batch_on_this_cp_rank``), worked by hand, Megatron-LM
#5243's example holds as its note says, and ``/v1/configs/positions`` lists the records in
order under the endpoint that splits a row."""

from __future__ import annotations

from posenc.context_parallel.split import split_sequence
from posenc.context_parallel.stacks import STACKS, context_parallel_schemes
from posenc.core.kinds import REGISTRY


def test_every_named_scheme_is_one_the_splitter_runs() -> None:
    for stack in STACKS:
        if stack.scheme is not None:
            assert split_sequence(stack.scheme, 2, seq_len=8).scheme == stack.scheme, stack.stack
        if stack.packed_scheme is not None:
            packed = split_sequence(stack.packed_scheme, 2, cu_seqlens=[0, 4, 8])
            assert packed.scheme == stack.packed_scheme, stack.stack
    assert len({s.stack for s in STACKS}) == len(STACKS)


def test_head_tail_gives_rank_r_chunks_r_and_2cp_minus_1_minus_r() -> None:
    """``T = 8`` on ``cp = 2``: four chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks
    1 and 2."""
    split = split_sequence("head_tail", 2, seq_len=8)
    assert [r.indices.tolist() for r in split.ranks] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    assert split.restore[split.order].tolist() == list(range(8))


def test_megatrons_note_rank_0_of_two_documents() -> None:
    """Megatron-LM #5243: rank 0 of ``cu_seqlens [0, 4, 8]`` on 2 ranks holds positions
    ``[0, 3, 4, 7]`` (each document split head-tail on its own)."""
    megatron = next(s for s in STACKS if s.stack == "megatron-lm")
    assert "[0, 3, 4, 7]" in megatron.note and megatron.reset_positions is False
    split = split_sequence(megatron.packed_scheme or "", 2, cu_seqlens=[0, 4, 8])
    assert split.ranks[0].indices.tolist() == [0, 3, 4, 7]
    assert split.ranks[0].cu_seqlens == [0, 2, 4]


def test_the_positions_answer_lists_every_stack_under_the_endpoint() -> None:
    answer = context_parallel_schemes()
    assert answer["endpoint"] == REGISTRY["context_parallel"].path
    assert [s["stack"] for s in answer["stacks"]] == [s.stack for s in STACKS]
    vllm = next(s for s in answer["stacks"] if s["stack"] == "vllm")
    assert vllm["scheme"] is None and vllm["packed_scheme"] is None  # it splits no queries
    assert set(answer["stacks"][0]) == {
        "stack", "scheme", "packed_scheme", "reset_positions", "source", "note",
    }  # fmt: skip
