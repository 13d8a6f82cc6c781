"""embed_tokens(allocator=): embed_tokens writes into the buffer the allocator gives (when no ``out`` is given, on the CPU, without a final cast), with the same values as a
fresh output, and takes a fresh one when the allocator declines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from posenc.embedding import embed_tokens


@pytest.fixture
def calls() -> Iterator[tuple[list[tuple[tuple[int, ...], torch.dtype]], Any]]:
    seen: list[tuple[tuple[int, ...], torch.dtype]] = []
    buffers: list[torch.Tensor] = []

    def allocate(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        seen.append((shape, dtype))
        if shape[0] == 1:
            return None  # declined: a fresh output
        buf = torch.full(shape, float("nan"), dtype=dtype)  # stale contents must not show
        buffers.append(buf)
        return buf

    yield seen, allocate


def test_the_output_is_the_allocators_buffer_with_the_fresh_values(calls) -> None:
    calls, allocate = calls
    gen = torch.Generator().manual_seed(0)
    wte, wpe = torch.randn(50, 8, generator=gen), torch.randn(16, 8, generator=gen)
    ids = torch.randint(0, 50, (3, 5), generator=gen)
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0], [0, 1, 1, 1, 1]])
    got = embed_tokens(
        ids,
        token_table=wte,
        position_table=wpe,
        attention_mask=mask,
        scale=True,
        allocator=allocate,
    )
    assert calls == [((3, 5, 8), torch.float32)]
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    expected = (wte[ids] * 8**0.5 + wpe[pos]) * mask[..., None]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    # declined (one row), or a cast at the end (float64 tables to float32): fresh outputs
    one = embed_tokens(ids[:1], token_table=wte, position_table=wpe, allocator=allocate)
    torch.testing.assert_close(one, wte[ids[:1]] + wpe[:5][None], rtol=0, atol=0)
    embed_tokens(
        ids,
        token_table=wte.double(),
        position_table=wpe.double(),
        dtype=torch.float32,
        allocator=allocate,
    )
    assert len(calls) == 2  # the float64 -> float32 call did not ask
