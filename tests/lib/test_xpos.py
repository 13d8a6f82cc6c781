"""xPos query/key scales against closed forms written from Sun et al. 2023 and
rotary-embedding-torch 0.9.1's published ``get_scale`` (not a dependency: the formula is written
out here independently) and a hand-worked case.

rotary-embedding-torch: ``scale = (arange(0, dim, 2) + 0.4 dim) / (1.4 dim)``; ``power = (t −
len(t) // 2) / xpos_scale_base``; ``scale ** power`` repeated ``'n d -> n (d r)', r = 2``; queries
times it, keys times its inverse (``rotate_queries_and_keys``). A one-off comparison with the
package itself (float64 positions) agreed to 2e-7, the float32 rounding of its ζ.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import kinds
from posenc.errors import InvalidArgument
from posenc.xpos import xpos_scales, xpos_zeta

KIND = kinds.REGISTRY["xpos"]


def test_hand_worked_dim4_n4_base2() -> None:
    """ζ = (0 + 1.6)/5.6 = 2/7 and (2 + 1.6)/5.6 = 9/14; powers (t − 2)/2 = −1, −½, 0, ½."""
    q, k = xpos_scales(4, 4, scale_base=2.0, dtype=torch.float64)
    z0, z1 = 2 / 7, 9 / 14
    want = torch.tensor(
        [[z0**p, z0**p, z1**p, z1**p] for p in (-1.0, -0.5, 0.0, 0.5)], dtype=torch.float64
    )
    assert_close(q, want, rtol=1e-15, atol=0)
    assert_close(k, 1 / want, rtol=1e-15, atol=0)
    assert q[2].eq(1).all()  # the centre N // 2 is unscaled


def closed_form(n: int, dim: int, base: float) -> torch.Tensor:
    rows = []
    for t in range(n):
        row = []
        for i in range(dim // 2):
            zeta = (2 * i + 0.4 * dim) / (1.4 * dim)
            row += [zeta ** ((t - n // 2) / base)] * 2
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize(("n", "dim", "base"), [(1, 2, 512.0), (9, 8, 3.0), (300, 64, 512.0)])
def test_closed_form(n: int, dim: int, base: float) -> None:
    q, k = xpos_scales(n, dim, scale_base=base, dtype=torch.float64)
    want = closed_form(n, dim, base)
    assert_close(q, want, rtol=1e-13, atol=0)
    assert_close(q * k, torch.ones_like(q), rtol=1e-15, atol=0)


def test_product_depends_on_distance_only() -> None:
    """q_t · k_s carries ζ^((t − s)/base): the same for every pair at one distance."""
    q, k = xpos_scales(2**12, 16, scale_base=512.0, dtype=torch.float64)
    for d in (0, 1, 100, 4000):
        products = q[d:] * k[: q.shape[0] - d]
        want = xpos_zeta(16).repeat_interleave(2) ** (d / 512.0)
        assert_close(products, want.expand_as(products), rtol=1e-12, atol=0)


def test_large_positions_in_float64() -> None:
    """At t = 2^20 − 1 the slowest pair of R = 4 (ζ = 9/14) is ζ^1024 ≈ 1e-196: representable
    in float64 and computed to 1e-12 relative."""
    q, k = xpos_scales(2**20, 4, scale_base=512.0, dtype=torch.float64)
    power = (2**20 - 1 - 2**19) / 512.0
    want = (9 / 14) ** power
    assert 0 < want < 1e-150
    assert math.isclose(q[-1, 2].item(), want, rel_tol=1e-12)
    assert math.isclose(k[-1, 3].item(), 1 / want, rel_tol=1e-12)


def test_kind_and_refusals() -> None:
    got = kinds.compute(KIND, kinds.resolve_fields(KIND, {"seq_len": 5, "dim": 4}))
    assert_close(got["query_scale"], closed_form(5, 4, 512.0).float())
    for fields, where in [
        ({"seq_len": 3, "dim": 5}, "dim"),
        ({"seq_len": 3, "dim": 4, "scale_base": 0}, "scale_base"),
    ]:
        with pytest.raises(InvalidArgument) as err:
            kinds.compute(KIND, kinds.resolve_fields(KIND, fields))
        assert err.value.field == where
