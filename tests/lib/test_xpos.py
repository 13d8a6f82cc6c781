"""xPos query/key scales against closed forms written from Sun et al. 2023, a hand-worked case,
and the package itself: rotary-embedding-torch (a test-only dependency in the lock, never the
service's), whose ``get_scale`` the last test calls.

rotary-embedding-torch: ``scale = (arange(0, dim, 2) + 0.4 dim) / (1.4 dim)``; ``power = (t −
len(t) // 2) / xpos_scale_base``; ``scale ** power`` repeated ``'n d -> n (d r)', r = 2``; queries
times it, keys times its inverse (``rotate_queries_and_keys``). Its ζ is float32, so the two agree
to |power| times float32's rounding.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import resolve
from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.rope.xpos import xpos_scales, xpos_zeta
from tests.references import xpos_scale

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


@pytest.mark.parametrize(("n", "dim", "base"), [(1, 2, 512.0), (9, 8, 3.0), (300, 64, 512.0)])
def test_closed_form(n: int, dim: int, base: float) -> None:
    q, k = xpos_scales(n, dim, scale_base=base, dtype=torch.float64)
    want = xpos_scale(n, dim, base)
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
    """N = 2^19, t = N − 1: powers ±(2^18 − 1)/512 ≈ ±512, so ζ_0 = 2/7 gives about 1e∓278,
    still finite in float64, and computed to 1e-12 relative. (At N = 2^20 the inverse, 1e557,
    is beyond float64: refused, below.)"""
    n = 2**19
    q, k = xpos_scales(n, 4, scale_base=512.0, dtype=torch.float64)
    power = (n - 1 - n // 2) / 512.0
    for col, zeta in ((0, 2 / 7), (2, 9 / 14)):
        want = zeta**power
        assert math.isclose(q[-1, col].item(), want, rel_tol=1e-12)
        assert math.isclose(k[-1, col].item(), 1 / want, rel_tol=1e-12)
    assert q[-1, 0].item() < 1e-270
    with pytest.raises(InvalidArgument, match="float64"):
        xpos_scales(2**20, 4, scale_base=512.0, dtype=torch.float64)


def test_kind_and_refusals() -> None:
    got = resolve.compute(KIND, resolve.resolve_fields(KIND, {"seq_len": 5, "dim": 4}))
    assert_close(got["query_scale"], xpos_scale(5, 4, 512.0).float())
    for fields, where in [
        ({"seq_len": 3, "dim": 5}, "dim"),
        ({"seq_len": 3, "dim": 4, "scale_base": 0}, "scale_base"),
    ]:
        with pytest.raises(InvalidArgument) as err:
            resolve.compute(KIND, resolve.resolve_fields(KIND, fields))
        assert err.value.field == where


def test_overflow_is_refused_with_the_numbers() -> None:
    with pytest.raises(InvalidArgument, match="10\\^") as err:
        xpos_scales(100000, 4, scale_base=1.0)  # ζ_0^±50000 overflows float32
    assert err.value.field == "seq_len"
    q, _ = xpos_scales(200, 4, scale_base=1.0, dtype=torch.float64)  # 0.2857^±100: fine
    assert torch.isfinite(q).all()


@pytest.mark.parametrize(
    ("n", "dim", "base"), [(300, 64, 512.0), (4096, 32, 256.0), (8191, 128, 512.0)]
)
def test_equals_rotary_embedding_torch(n: int, dim: int, base: float) -> None:
    """The reference the scales are named after: rotary-embedding-torch's own ``get_scale`` (a
    test-only dependency, locked), on float64 positions 0 … N−1 as ``rotate_queries_and_keys``
    passes them. Its ζ is a float32 buffer, so the two differ by |power| times ζ's float32
    rounding (below 1e-6 relative here); its keys take ``scale ** -1``."""
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    module = rotary_embedding_torch.RotaryEmbedding(dim, use_xpos=True, xpos_scale_base=base)
    theirs = module.get_scale(torch.arange(n, dtype=torch.float64))  # (N, dim) float64
    q, k = xpos_scales(n, dim, scale_base=base, dtype=torch.float64)
    assert theirs.shape == q.shape == (n, dim)
    power = (n - 1 - n // 2) / base
    rtol = max(1e-7, abs(power) * 2**-23)
    assert_close(q, theirs, rtol=rtol, atol=0)
    assert_close(k, theirs**-1, rtol=rtol, atol=0)
    # and ζ itself, which it computes in float32 arithmetic: within one float32 ulp of ours
    assert_close(xpos_zeta(dim), module.scale.double(), rtol=2**-23, atol=0)
