"""What vLLM's ``get_rope`` builds, as posenc holds it (:mod:`posenc.rope.vllm_cache`), worked by
hand from vLLM's rotary classes: ``_compute_inv_freq``'s ``base^(−2i/R)``, ``yarn_get_mscale``,
the positions of each of ``DualChunkRotaryEmbedding``'s five caches (``chunk_size`` 8,
``local_size`` 2: ``L = 6``), and a cache row's positions through :class:`VllmRope`."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.rope.vllm_cache import (
    DUAL_CHUNK_CACHES,
    VllmRope,
    base_inv_freq,
    dual_chunk_positions,
    yarn_get_mscale,
)

ROWS = torch.arange(8)


def test_base_inv_freq_hand_worked() -> None:
    """``R = 4``, base 100: ``100^0 = 1`` and ``100^(−2/4) = 0.1``."""
    got = base_inv_freq(4, 100.0)
    assert got.dtype == torch.float64 and got.tolist() == pytest.approx([1.0, 0.1], rel=1e-15)


def test_yarn_mscale() -> None:
    assert yarn_get_mscale(1.0) == yarn_get_mscale(0.5) == 1.0
    assert yarn_get_mscale(40.0) == pytest.approx(0.1 * math.log(40.0) + 1, rel=1e-15)
    assert yarn_get_mscale(4.0, 0.707) == pytest.approx(0.0707 * math.log(4.0) + 1, rel=1e-15)


@pytest.mark.parametrize(
    ("cache", "positions"),
    [
        ("q", [0, 1, 2, 3, 4, 5, 6, 7]),  # the rows themselves
        ("qc", [6, 7, 8, 8, 8, 8, 8, 8]),  # r + 6, at most the chunk (8)
        ("k", [0, 1, 2, 3, 4, 5, 0, 1]),  # r mod 6
        ("qc_no_clamp", [6, 7, 8, 9, 10, 11, 12, 13]),
        ("q_inter", [8, 9, 10, 11, 12, 13, 14, 15]),  # r + the chunk
    ],
)
def test_dual_chunk_positions_of_each_cache(cache: str, positions: list[int]) -> None:
    assert dual_chunk_positions(ROWS, cache, 8, 2).tolist() == positions
    rope = VllmRope("dual_chunk", base_inv_freq(4, 100.0), 1.0, 8, dual_chunk=(8, 2, cache))
    assert rope.angle_positions(ROWS).tolist() == positions


def test_a_plain_cache_holds_its_rows_and_a_bad_cache_name_is_refused() -> None:
    plain = VllmRope("default", base_inv_freq(4, 100.0), 1.0, 8)
    assert torch.equal(plain.angle_positions(ROWS), ROWS)
    with pytest.raises(InvalidArgument) as err:
        dual_chunk_positions(ROWS, "kv", 8, 2)
    assert err.value.field == "dual_chunk_cache"
    assert (
        str(err.value)
        == f"dual_chunk_cache must be one of {', '.join(DUAL_CHUNK_CACHES)}, got 'kv'"
    )
