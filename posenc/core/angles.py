"""Sines and cosines of ``p·w`` for tables of positions, by angle addition, in float64.

Every table of this library whose values are ``sin`` and ``cos`` of ``position × frequency``
(sinusoidal encodings, RoPE) takes them from :func:`sin_cos_rows`: about 3x cheaper than a sine
and a cosine per element, within a few float64 ulps of ``sin(fl(p·w))`` and ``cos(fl(p·w))``,
and the same for an element whatever rows are computed with it (a table whole, in row blocks,
or from explicit positions). The caller decides where the values go (``emit``).

Notation: ``D/2`` frequencies, ``p = q·64 + r`` a position split into a group and a remainder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["Emit", "sin_cos_rows", "split_tables"]

# float64 angles per chunk of sin_cos_rows on the CPU: at most 768 KiB in each of its five
# buffers, so their passes stay in cache and the buffers come from the heap, under the service's
# 1 MiB mmap threshold (service.admission.budget), without page faults (2 MiB buffers: 2-3x slower)
_CHUNK_ANGLES = 96 * 1024
# positions split as p = q·_SPLIT + r: sines and cosines are taken of q·_SPLIT·w and r·w only
_SPLIT = 64
# angles p·w at or above this are computed directly (see sin_cos_rows)
_SUM_LIMIT = float(2**26)

#: ``emit(rows, sin, cos)``: where :func:`sin_cos_rows` hands each chunk of rows.
Emit = Callable[[slice, Tensor, Tensor], None]


def split_tables(freqs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``b = r·w``, ``sin b`` and ``cos b`` for ``r = 0 … 63``: each ``(64, D/2)`` float64."""
    r = torch.arange(_SPLIT, dtype=torch.float64, device=freqs.device)
    b = r[:, None] * freqs[None, :]  # (64, D/2)
    return b, torch.sin(b), torch.cos(b)


def _angle_sum(
    a: Tensor,
    a1: Tensor,
    b: Tensor,
    sa: Tensor,
    ca: Tensor,
    sb: Tensor,
    cb: Tensor,
    out: Sequence[Tensor],
) -> tuple[Tensor, Tensor]:
    """``sin a`` and ``cos a`` from ``a ≈ a1 + b`` and the sines and cosines of ``a1`` and ``b``.

    ``a = fl(p·w)`` is the float64 angle of the direct formula, ``a1 = fl(q·64·w)`` and
    ``b = fl(r·w)`` with ``p = q·64 + r``. The remainder ``e = (a − a1) − b`` is computed
    exactly (Sterbenz: ``a1 ≤ a ≤ 2·a1`` for ``q ≥ 1``, and ``a = b`` for ``q = 0``) and is a few
    ulps of ``a``, so ``sin a = sin(a1 + b) + e·cos(a1 + b)`` and ``cos a = cos(a1 + b) −
    e·sin(a1 + b)`` up to ``e²`` (below 2.3e-16 under ``_SUM_LIMIT``). Every step is one
    correctly rounded mul, add or sub (no fused multiply-add), so an element's result does not
    depend on the tensor it is part of. ``a`` is overwritten with ``e``; the arguments
    broadcast to ``out``'s four same-shaped float64 buffers. Returns ``(out[0], out[1])``.
    """
    sin, cos, u, v = out
    e = a.sub_(a1).sub_(b)  # exact
    torch.mul(sa, cb, out=sin)
    sin.add_(torch.mul(ca, sb, out=u))  # sin(a1 + b)
    torch.mul(ca, cb, out=cos)
    cos.sub_(torch.mul(sa, sb, out=u))  # cos(a1 + b)
    torch.mul(e, cos, out=u)
    torch.mul(e, sin, out=v)
    return sin.add_(u), cos.sub_(v)


def sin_cos_rows(
    freqs: Tensor,
    n: int,
    emit: Emit,
    *,
    first: int = 0,
    positions: Tensor | None = None,
    split: tuple[Tensor, Tensor, Tensor] | None = None,
) -> None:
    """``sin`` and ``cos`` of the float64 angles ``fl(p·w_i)`` of ``n`` rows, a chunk at a time.

    The rows are the positions ``positions``, or ``first, first+1, …``. Sines and cosines are
    taken by angle addition: with ``p = q·64 + r``, only of ``q·64·w`` (one row per 64
    positions) and of ``r·w`` (64 rows), then combined by :func:`_angle_sum`, which corrects for
    the rounding of ``fl(p·w)``. That is about 3x cheaper than a sine and a cosine per element
    and within a few float64 ulps of them. Positions with ``p·max|w| ≥ 2**26``, where the
    correction would be too coarse, take ``sin`` and ``cos`` of ``fl(p·w)`` directly. An
    element's arithmetic depends on ``p`` and ``w_i`` alone, so a table gives the same values
    whole, in any row blocks, and from explicit positions or ``first``.

    Args:
        freqs: ``(D/2,)`` float64 frequencies ``w`` (any finite values; zeros give angle 0).
        n: the number of rows.
        emit: called as ``emit(rows, sin, cos)`` for consecutive, disjoint ``rows`` slices that
            cover ``[0, n)``, with ``sin`` and ``cos`` ``(len(rows), D/2)`` float64 views of
            scratch buffers: the callee writes them where they belong (it may change them in
            place; they are overwritten after it returns).
        first: the first of consecutive positions (when ``positions`` is None).
        positions: ``(n,)`` float64 integer positions ``>= 0``, in any order.
        split: :func:`split_tables` of ``freqs``, for a caller that writes many blocks.
    """
    dev = freqs.device
    half = freqs.numel()
    if n == 0 or half == 0:
        return
    top = float(freqs.abs().max()) if half else 0.0
    # from this position on: sin and cos of fl(p·w) directly (all of them when every w is 0)
    direct_from = math.ceil(_SUM_LIMIT / top) if top > 0 else 0
    b, sb, cb = split_tables(freqs) if split is None else split  # (64, D/2) each
    max_groups = max(1, _CHUNK_ANGLES // (_SPLIT * half)) if dev.type == "cpu" else n
    chunk = max_groups * _SPLIT
    # enough for a chunk: of rows, or of whole groups (up to 2·63 rows more than asked)
    size = min(chunk, n if positions is not None else n + 2 * _SPLIT) * half
    buffers = [torch.empty(size, dtype=torch.float64, device=dev) for _ in range(5)]

    def direct(rows: slice, pos: Tensor) -> None:
        m = pos.numel()
        a = torch.mul(pos[:, None], freqs[None, :], out=buffers[0][: m * half].view(m, half))
        sin = torch.sin(a, out=buffers[1][: m * half].view(m, half))
        emit(rows, sin, torch.cos(a, out=buffers[2][: m * half].view(m, half)))

    if positions is not None:
        _explicit_rows(freqs, positions, emit, chunk, (b, sb, cb), direct_from, buffers)
        return

    cut = min(n, max(0, direct_from - first))  # rows [cut, n) are computed directly
    if cut:
        # whole groups of 64 positions q·64 … q·64+63 covering rows [0, cut): a group's first
        # or last rows outside them are computed too (fewer, larger tensor operations)
        q0, q1 = first // _SPLIT, (first + cut - 1) // _SPLIT + 1
        heads = torch.arange(q0, q1, dtype=torch.float64, device=dev) * _SPLIT  # (G,)
        a1 = heads[:, None] * freqs[None, :]  # (G, D/2)
        sa, ca = torch.sin(a1)[:, None], torch.cos(a1)[:, None]  # (G, 1, D/2)
        for g in range(0, q1 - q0, max_groups):
            k = min(max_groups, q1 - q0 - g)
            p0, p1 = (q0 + g) * _SPLIT, (q0 + g + k) * _SPLIT  # the grid's positions
            views = [buf[: k * _SPLIT * half].view(k, _SPLIT, half) for buf in buffers]
            grid = torch.arange(p0, p1, dtype=torch.float64, device=dev).view(k, _SPLIT, 1)
            a = torch.mul(grid, freqs, out=views[0])  # (K, 64, D/2)
            sl = slice(g, g + k)
            sin, cos = _angle_sum(a, a1[sl, None], b, sa[sl], ca[sl], sb, cb, views[1:])
            lo, hi = max(p0, first), min(p1, first + cut)
            rows = slice(lo - p0, hi - p0)
            emit(slice(lo - first, hi - first), sin.view(-1, half)[rows], cos.view(-1, half)[rows])
    for start in range(cut, n, chunk):
        stop = min(n, start + chunk)
        pos = torch.arange(first + start, first + stop, dtype=torch.float64, device=dev)
        direct(slice(start, stop), pos)


def _explicit_rows(
    freqs: Tensor,
    positions: Tensor,
    emit: Emit,
    chunk: int,
    split: tuple[Tensor, Tensor, Tensor],
    direct_from: int,
    buffers: Sequence[Tensor],
) -> None:
    """:func:`sin_cos_rows` at explicit ``positions`` ``(n,)``, ``chunk`` rows at a time in
    ``buffers`` (five flat float64 scratch tensors); positions from ``direct_from`` on take
    ``sin`` and ``cos`` of ``fl(p·w)`` directly."""
    half = freqs.numel()
    b, sb, cb = split
    n = positions.numel()
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        m = stop - start
        pos = positions[start:stop]  # (M,)
        views = [buf[: m * half].view(m, half) for buf in buffers]
        quot = torch.div(pos, _SPLIT, rounding_mode="floor")  # (M,)
        rem = (pos - quot * _SPLIT).to(torch.int64)  # (M,) 0 … 63
        heads, inverse = torch.unique_consecutive(quot, return_inverse=True)
        a1 = (heads * _SPLIT)[:, None] * freqs[None, :]  # (G, D/2)
        a = torch.mul(pos[:, None], freqs[None, :], out=views[0])  # (M, D/2)
        sin, cos = _angle_sum(
            a,
            a1[inverse],
            b[rem],
            torch.sin(a1)[inverse],
            torch.cos(a1)[inverse],
            sb[rem],
            cb[rem],
            views[1:],
        )
        big = pos >= direct_from
        if bool(big.any()):
            where = big.nonzero().squeeze(1)
            a = pos[where][:, None] * freqs[None, :]
            sin[where], cos[where] = torch.sin(a), torch.cos(a)
        emit(slice(start, stop), sin, cos)
