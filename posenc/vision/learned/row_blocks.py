"""The resized table and the resampling matrix, a block of token rows at a time.

A request past ``POSENC_MAX_ELEMENTS`` is streamed in row blocks; each block here computes only
its own rows, so a large grid never holds the whole ``(N, D)`` table:

- a rule whose per-axis weights are one-hot (NaViT buckets, SAM 3's tile, the fixed towers, and
  any resize at a grid where it is the identity) is a gather: token ``(y, x)`` reads table row
  ``prefix + iy[y]·s + ix[x]``, exact in any dtype and bit for bit the model's own gather;
- every other rule, with ``precision="exact"``, is separable: a block's tokens fall in at most
  three rectangles of the grid (a partial row of merge blocks, whole rows, a partial row), and a
  rectangle ``ys × xs`` is ``Wh[ys] · T · Ww[xs]ᵀ`` per channel, in float64, cast once. The sums
  run over the table's rows one at a time (a multiply then an add, never fused), skipping
  zero weights, so each element's arithmetic is the same in whatever block it falls: blocks
  and the whole table are the same bits. A grid at least ``s`` wide contracts the rows first
  (scratch ``(ky, s, D)``, at most the rectangle's own size); a narrower one contracts the
  columns once, ``(s, w, D)`` (at most the table's size), and keeps it for its blocks.
- ``precision="engine"`` of a rule whose model code computes each patch on its own
  (GLM-4V's ``grid_sample``, the gathered taps of PaddleOCR-VL, Kimi K2.5 and Inkling 2: the
  rule's ``engine_at``) runs that code on the block's patches alone, the same bits; the other
  mixing rules (``F.interpolate``, NaFlex's one matmul, RADIO's square) run the model's kernel
  on the whole grid, so they are computed whole and the kind does not stream them past the
  element limit.

Tokens are the grids' in order, each grid's kept prefix rows then its ``h·w`` patches in the
tower's order (row-major, or ``m × m`` merge blocks: block row, block column, row in block,
column in block).

Notation used for tensor shapes: ``N`` tokens, ``P`` table rows, ``D`` width, ``s`` native side,
``h``/``w`` a grid's rows and columns, ``m`` merge side, ``ky``/``nx`` a rectangle's rows and
columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from posenc.core.blocks import TableBlocks
from posenc.vision.learned.spec import VisionLearnedSpec, axes, check_table

__all__ = ["axis_weight_elements", "engine_streams", "pos_embed_blocks", "resample_blocks"]

Precision = Literal["exact", "engine"]


def axis_weight_elements(spec: VisionLearnedSpec) -> int:
    """Elements of the per-axis weights and their identity input (``s²``) held at once, from
    the numbers alone: ``Σ (h + w)·s + s²`` (RADIO's square: ``max(h, w)`` each)."""
    s = spec.side
    total = 0
    for h, w in spec.grids:
        total += (2 * max(h, w) if spec.tower.rule.axis_pair is not None else h + w) * s
    return total + s * s


def _one_hot_ids(weights: Tensor) -> Tensor | None:
    """``(n,)`` int64 column of each row's single weight 1.0, or None if a row mixes columns."""
    ones = weights == 1.0
    if bool((ones.sum(1) == 1).all()) and bool(((weights == 0) | ones).all()):
        return ones.to(torch.int64).argmax(1)
    return None


@dataclass
class _Grid:
    """One grid's tokens ``[start, start + kept + h·w)`` and its per-axis weights."""

    start: int
    h: int
    w: int
    wh: Tensor  # (h, s) float64
    ww: Tensor  # (w, s) float64
    ids: tuple[Tensor, Tensor] | None  # per-axis table rows where both axes are one-hot
    columns: Tensor | None = field(default=None, repr=False)  # (s, w, D) once contracted


def _grids(spec: VisionLearnedSpec) -> list[_Grid]:
    out, start = [], 0
    for h, w in spec.grids:
        wh, ww = axes(spec, h, w)
        iy, ix = _one_hot_ids(wh), _one_hot_ids(ww)
        ids = (iy, ix) if iy is not None and ix is not None else None
        out.append(_Grid(start, h, w, wh, ww, ids))
        start += spec.kept + h * w
    return out


def _token_yx(spec: VisionLearnedSpec, g: _Grid, first: int, stop: int) -> tuple[Tensor, Tensor]:
    """``(y, x)`` ``(stop-first,)`` each of patch tokens ``first … stop-1`` of grid ``g``."""
    m = spec.merge
    t = torch.arange(first, stop, dtype=torch.int64)
    block_row = torch.div(t, m * g.w, rounding_mode="floor")
    within = t - block_row * (m * g.w)
    block_col = torch.div(within, m * m, rounding_mode="floor")
    inner = within - block_col * (m * m)
    iy = torch.div(inner, m, rounding_mode="floor")
    return block_row * m + iy, block_col * m + (inner - iy * m)


def _rectangles(m: int, w: int, first: int, stop: int) -> list[tuple[int, int, int, int, int]]:
    """Patch tokens ``first … stop-1`` as rectangles ``(row0, row1, col0, col1, token0)`` of
    merge-block rows and columns (``m`` patches each), ``token0`` the rectangle's first token:
    at most a partial block row, whole block rows, a partial block row."""
    per_row, per_block = m * w, m * m
    blocks = w // m
    out = []
    r0, r_last = first // per_row, (stop - 1) // per_row
    b0 = (first - r0 * per_row) // per_block
    b_last = (stop - 1 - r_last * per_row) // per_block
    if r0 == r_last:
        return [(r0, r0 + 1, b0, b_last + 1, r0 * per_row + b0 * per_block)]
    whole_from = r0
    if b0 > 0:
        out.append((r0, r0 + 1, b0, blocks, r0 * per_row + b0 * per_block))
        whole_from = r0 + 1
    whole_to = r_last if b_last + 1 < blocks else r_last + 1
    if whole_to > whole_from:
        out.append((whole_from, whole_to, 0, blocks, whole_from * per_row))
    if whole_to == r_last:
        out.append((r_last, r_last + 1, 0, b_last + 1, r_last * per_row))
    return out


def _contract(weights: Tensor, values: Tensor) -> Tensor:
    """``Σ_i weights[:, i] · values[i]`` ``(n, *values.shape[1:])`` float64, one row ``i`` at a
    time (a multiply then an add), zero weights skipped: the same bits for a row in any ``n``."""
    out = torch.zeros((weights.shape[0], *values.shape[1:]), dtype=torch.float64)
    expand = (slice(None),) + (None,) * (values.dim() - 1)
    for i in torch.nonzero((weights != 0).any(0)).flatten().tolist():
        out.add_(weights[:, i][expand] * values[i])
    return out


def _rectangle(grid: Tensor, g: _Grid, ys: slice, xs: slice) -> Tensor:
    """``(ky, nx, D)`` float64: ``Wh[ys] · T · Ww[xs]ᵀ`` per channel (``grid`` ``(s, s, D)``).

    Rows first costs ``h·s·s·D`` multiply-adds over the grid's blocks; the columns once costs
    ``w·s·s·D`` and keeps ``(s, w, D)``: the columns first only where that is fewer and the kept
    columns are smaller than the table (the choice is the grid's, so every block of a grid has
    the same bits)."""
    s = grid.shape[0]
    if g.w >= s or g.h <= g.w:  # rows first: (ky, s, D), then the columns
        rows = _contract(g.wh[ys], grid)  # (ky, s, D)
        return _contract(g.ww[xs], rows.transpose(0, 1)).transpose(0, 1)  # (ky, nx, D)
    if g.columns is None:  # narrow: the columns once, (s, w, D), kept for this grid's blocks
        g.columns = _contract(g.ww, grid.transpose(0, 1)).transpose(0, 1)
    return _contract(g.wh[ys], g.columns[:, xs])  # (ky, nx, D)


def _mixed_patches(
    spec: VisionLearnedSpec, grid: Tensor, g: _Grid, first: int, stop: int
) -> Tensor:
    """``(stop-first, D)`` float64 rows of patch tokens ``first … stop-1`` of grid ``g``."""
    m, d = spec.merge, grid.shape[-1]
    parts = []
    for r0, r1, c0, c1, token0 in _rectangles(m, g.w, first, stop):
        rect = _rectangle(grid, g, slice(r0 * m, r1 * m), slice(c0 * m, c1 * m))  # (ky, nx, D)
        rect = rect.reshape(r1 - r0, m, c1 - c0, m, d).permute(0, 2, 1, 3, 4).reshape(-1, d)
        lo = max(first, token0) - token0
        parts.append(rect[lo : lo + min(stop, token0 + rect.shape[0]) - max(first, token0)])
    return torch.cat(parts)


def _patches(
    spec: VisionLearnedSpec, source: Tensor, grid: Tensor, g: _Grid, first: int, stop: int
) -> Tensor:
    """Rows of patch tokens ``first … stop-1`` of grid ``g``: gathered from ``source`` where
    both axes are one-hot, else mixed in float64."""
    if g.ids is not None:
        y, x = _token_yx(spec, g, first, stop)
        return source[spec.prefix + g.ids[0][y] * spec.side + g.ids[1][x]]
    return _mixed_patches(spec, grid, g, first, stop)


def _fill_tokens(
    spec: VisionLearnedSpec,
    grids: list[_Grid],
    rows_of: Callable[[_Grid, int, int], Tensor],
    prefix_of: Callable[[int, int], Tensor],
    start: int,
    stop: int,
    out: Tensor,
) -> None:
    """Write tokens ``start … stop-1`` into ``out``: per grid, its prefix rows (``prefix_of``)
    then its patch rows (``rows_of(grid, first, stop)``, patch token numbers), each cast once."""
    k = spec.kept
    for g in grids:
        end = g.start + k + g.h * g.w
        lo, hi = max(start, g.start), min(stop, end)
        if lo >= hi:
            continue
        if lo < g.start + k:  # prefix rows
            top = min(hi, g.start + k)
            out[lo - start : top - start].copy_(prefix_of(lo - g.start, top - g.start))
            lo = top
        if lo < hi:
            first, last = lo - g.start - k, hi - g.start - k
            out[lo - start : hi - start].copy_(rows_of(g, first, last))


def pos_embed_blocks(
    spec: VisionLearnedSpec,
    table: Tensor | Callable[[], Tensor],
    precision: Precision = "exact",
    dtype: torch.dtype = torch.float32,
    engine_whole: Callable[[], Tensor] | None = None,
) -> TableBlocks:
    """``pos_embed`` ``(N, D)`` in ``dtype`` as row blocks (see the module doc).

    Args:
        spec: the tower and its grids.
        table: ``(P, D)`` (checked), or a function that makes it, called at the first fill
            (so that making the blocks computes nothing).
        precision: ``exact`` or ``engine``.
        dtype: the blocks' dtype (one cast of the float64 rows for ``exact``).
        engine_whole: the whole ``(N, D)`` engine table, called at most once, for
            ``precision="engine"`` of a rule that mixes rows (:func:`engine_streams`).
    """
    if isinstance(table, Tensor):
        check_table(spec, table)
    engine = precision == "engine"
    gathers = _gather_rule(spec)
    made: list[tuple[list[_Grid], Tensor, Tensor]] = []
    whole: list[Tensor] = []

    def state() -> tuple[list[_Grid], Tensor, Tensor]:
        if not made:
            held = table if isinstance(table, Tensor) else table()
            check_table(spec, held)
            source = held if engine else held.to(torch.float64)
            patches = source[spec.prefix :].reshape(spec.side, spec.side, spec.width)  # (s, s, D)
            made.append((_grids(spec), source, patches))
        return made[0]

    def rows_of(g: _Grid, first: int, stop: int) -> Tensor:
        _, source, patches = state()
        at = spec.tower.rule.engine_at
        if engine and not gathers and at is not None:  # the model's code, patch by patch
            y, x = _token_yx(spec, g, first, stop)
            return at(spec.tower, source[spec.prefix :], spec.side, g.h, g.w, y, x)
        if engine and not gathers:  # the model's kernels, on the whole grid
            if engine_whole is None:
                raise ValueError("precision engine of a rule that mixes rows needs the whole")
            if not whole:
                whole.append(engine_whole())
            begin = g.start + spec.kept
            return whole[0][begin + first : begin + stop]
        return _patches(spec, source, patches, g, first, stop)

    def fill(start: int, stop: int, out: Tensor) -> None:
        grids, source, _ = state()
        _fill_tokens(spec, grids, rows_of, lambda a, b: source[a:b], start, stop, out)

    return TableBlocks("pos_embed", (spec.tokens, spec.width), dtype, fill)


def _gather_rule(spec: VisionLearnedSpec) -> bool:
    """The model's own rule is a gather (NaViT buckets, tile, fixed): its engine is a gather."""
    rule = spec.tower.rule
    return rule.position_ids is not None or rule.name == "fixed"


def engine_streams(spec: VisionLearnedSpec) -> bool:
    """``precision="engine"`` can be computed a block of rows at a time: a gathering rule, or
    one whose model code computes each patch on its own (``engine_at``)."""
    return _gather_rule(spec) or spec.tower.rule.engine_at is not None


def resample_blocks(spec: VisionLearnedSpec, dtype: torch.dtype = torch.float64) -> TableBlocks:
    """The resampling matrix ``(N, P)`` as row blocks: token ``(y, x)``'s row is
    ``Wh[y] ⊗ Ww[x]`` over the patch columns (an outer product, elementwise), a prefix token's
    is one-hot on its own row. The axis weights are made at the first fill."""
    p, s = spec.prefix, spec.side
    made: list[list[_Grid]] = []

    def rows_of(g: _Grid, first: int, stop: int) -> Tensor:
        y, x = _token_yx(spec, g, first, stop)
        out = torch.zeros(stop - first, spec.table_rows, dtype=torch.float64)
        out[:, p:] = (g.wh[y][:, :, None] * g.ww[x][:, None, :]).reshape(-1, s * s)
        return out

    def prefix_of(a: int, b: int) -> Tensor:
        out = torch.zeros(b - a, spec.table_rows, dtype=torch.float64)
        out[torch.arange(b - a), torch.arange(a, b)] = 1.0
        return out

    def fill(start: int, stop: int, out: Tensor) -> None:
        if not made:
            made.append(_grids(spec))
        _fill_tokens(spec, made[0], rows_of, prefix_of, start, stop, out)

    return TableBlocks("resample", (spec.tokens, spec.table_rows), dtype, fill)
