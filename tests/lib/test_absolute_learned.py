"""Seeded learned tables equal ``torch.manual_seed(seed); nn.Embedding(rows, cols).weight``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posenc import InvalidArgument, learned_table, seeded_normal


def embedding_weight(rows: int, cols: int, seed: int) -> torch.Tensor:
    """The reference: what a freshly built nn.Embedding holds after torch.manual_seed(seed)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Embedding(rows, cols).weight.detach().clone()


@pytest.mark.parametrize(
    ("rows", "cols", "seed"),
    [
        (1, 1, 0),  # a single draw
        (3, 5, 7),  # fewer than 16 values: torch's scalar normal_ path
        (16, 1, 0),  # exactly 16: the vectorised path
        (17, 3, 1),  # vectorised with a tail
        (2048, 512, 1),  # the default model's position table
        (40, 12, 2**63 + 5),  # seeds above int64, as torch.manual_seed takes them
        (40, 12, -3),  # negative seeds, as torch.manual_seed takes them
    ],
)
def test_seeded_normal_is_bit_identical_to_nn_embedding(rows, cols, seed):
    ours = seeded_normal(rows, cols, seed=seed)
    reference = embedding_weight(rows, cols, seed)
    assert ours.dtype == torch.float32
    assert ours.device.type == "cpu"
    assert ours.shape == (rows, cols)
    assert torch.equal(ours, reference)


def test_different_seeds_give_different_tables():
    assert not torch.equal(seeded_normal(8, 8, seed=0), seeded_normal(8, 8, seed=1))


def test_global_rng_is_left_alone():
    state = torch.get_rng_state()
    seeded_normal(64, 64, seed=123)
    learned_table(32, 16, seed=5)
    assert torch.equal(torch.get_rng_state(), state)


def test_learned_table_is_the_seeded_table_cast_once():
    reference = embedding_weight(100, 24, 3)
    assert torch.equal(learned_table(100, 24, seed=3), reference)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        table = learned_table(100, 24, seed=3, dtype=dtype)
        assert table.dtype == dtype
        assert torch.equal(table, reference.to(dtype))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: seeded_normal(0, 4, seed=0), "rows must be an int >= 1, got 0"),
        (lambda: seeded_normal(4, -1, seed=0), "cols must be an int >= 1, got -1"),
        (lambda: seeded_normal(4, 4, seed=2**64), f"seed must be an int in .*got {2**64}"),
        (lambda: learned_table(0, 8), "num_positions must be an int >= 1, got 0"),
        (lambda: learned_table(8, 0), "d_model must be an int >= 1, got 0"),
    ],
)
def test_bad_arguments_say_what_was_given(call, message):
    with pytest.raises(InvalidArgument, match=message):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_table_is_the_cpu_draw_moved():
    table = learned_table(64, 32, seed=9, device="cuda")
    assert table.device.type == "cuda"
    assert torch.equal(table.cpu(), embedding_weight(64, 32, 9))
