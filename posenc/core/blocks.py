"""Tables computed in row blocks: the generic engine every convention's table is filled with.

A table too large to hold (a million RoPE positions, an ALiBi bias of long sequences) can still
be written out if it is computed in row blocks as it is sent. Each convention module describes
its tables as :class:`TableBlocks` (:func:`posenc.absolute.sinusoidal.sinusoidal_blocks`,
:func:`posenc.rope.rope_blocks`, :func:`posenc.relative_schemes.alibi.alibi_bias_blocks`,
:func:`posenc.relative_schemes.relative.relative_buckets_blocks`, :func:`posenc.absolute.learned.learned_blocks`...): a
name, a shape and a dtype, and a ``fill(start, stop, out)`` that writes rows ``start … stop-1``
into a preallocated ``out``. The rows of a table of shape ``(A, …, Z)`` are its ``A·…`` rows of
``Z`` elements in C order, so an ``(H, T, S)`` bias has ``H·T`` rows of ``S``. This module holds
what they share and imports no convention: :class:`TableBlocks` (row ranges, the whole table
filled from its blocks), :func:`write_pair`,
:func:`query_key_rel` for biases, and :func:`tensor_blocks` for a tensor already in memory.

Blocks are exactly the bytes of the whole table: each fill does the arithmetic of the whole-table
function on its rows, element by element, in float64 until the one cast into ``out``. There is no
Python loop over rows: a block is a few tensor operations.

The seeded learned table is the exception to random access: its rows come from one random
stream, so it must be filled in order from row 0 (``sequential``), in blocks whose element count
is a multiple of 16 except the last, which holds at least 16 (torch's ``normal_`` transforms
uniform draws in groups of 16 and redraws the last 16 of a tensor whose size is not a multiple
of 16). :meth:`TableBlocks.ranges` keeps to that.

Notation used for tensor shapes: ``T`` sequence (query) length, ``S`` key length, ``D`` model
dimension, ``R`` rotary dimension, ``H`` heads, ``N`` rows of a block.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.core.validate import check_int

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "Fill",
    "TableBlocks",
    "query_key_rel",
    "row_ranges",
    "tensor_blocks",
    "write_pair",
]

# The output bytes of one block by default: large enough that a block is a few big tensor
# operations, small enough that its float64 scratch (up to 4x for float32 tables) stays small.
DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024

# A fill writes rows [start, stop) into out, a C-contiguous (stop - start, row_elements) tensor
# of the table's dtype on the table's device.
Fill = Callable[[int, int, Tensor], None]


def row_ranges(
    rows: int, block_rows: int, *, multiple: int = 1, min_last: int = 1
) -> list[tuple[int, int]]:
    """Split ``rows`` into consecutive ``(start, stop)`` blocks of about ``block_rows`` rows.

    Every block but the last has a multiple of ``multiple`` rows (at least ``multiple``); a last
    block shorter than ``min_last`` rows joins the one before it.

    Raises:
        InvalidArgument: ``rows < 0`` or ``block_rows``, ``multiple`` or ``min_last`` < 1.
    """
    check_int("rows", rows, 0)
    check_int("block_rows", block_rows, 1)
    check_int("multiple", multiple, 1)
    check_int("min_last", min_last, 1)
    step = max(multiple, block_rows // multiple * multiple)
    ranges = [(start, min(start + step, rows)) for start in range(0, rows, step)]
    if len(ranges) > 1 and ranges[-1][1] - ranges[-1][0] < min_last:
        (first, _), (_, last) = ranges[-2], ranges[-1]
        ranges[-2:] = [(first, last)]
    return ranges


@dataclass
class TableBlocks:
    """One table, computable a block of rows at a time.

    Attributes:
        name: the tensor's name in its bundle (``encoding``, ``cos``, ``bias`` …).
        shape: the whole table's shape.
        dtype: its dtype.
        fill_rows: writes rows ``[start, stop)`` into ``out`` ``(stop-start, row_elements)``.
        device: where the fill computes (blocks are handed out on the CPU).
        row_multiple: blocks other than the last must hold a multiple of this many rows.
        min_last_rows: the last block must hold at least this many rows (or all of them).
        sequential: the fill must be called on consecutive ranges from row 0, once each.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    fill_rows: Fill
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    row_multiple: int = 1
    min_last_rows: int = 1
    sequential: bool = False
    _next_row: int = field(default=0, repr=False)

    @property
    def row_elements(self) -> int:
        """Elements of one row: the last dimension (1 for a 0-d tensor)."""
        return int(self.shape[-1]) if self.shape else 1

    @property
    def rows(self) -> int:
        """Rows: the product of all dimensions but the last (1 for a 1-D tensor)."""
        return math.prod(self.shape[:-1]) if self.shape else 1

    @property
    def numel(self) -> int:
        return self.rows * self.row_elements

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def nbytes(self) -> int:
        """Bytes of the whole table."""
        return self.numel * self.element_size

    def ranges(self, max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> list[tuple[int, int]]:
        """The row blocks of at most about ``max_block_bytes`` output bytes each."""
        row_bytes = max(1, self.row_elements * self.element_size)
        return row_ranges(
            self.rows,
            max(1, max_block_bytes // row_bytes),
            multiple=self.row_multiple,
            min_last=self.min_last_rows,
        )

    def fill(self, start: int, stop: int, out: Tensor | None = None) -> Tensor:
        """Rows ``[start, stop)`` as a CPU ``(stop-start, row_elements)`` tensor (``out`` if given).

        Raises:
            InvalidArgument: a range outside the table, an ``out`` of the wrong shape or dtype,
                or, for a sequential table, a range that does not follow the previous one.
        """
        n = stop - start
        if not 0 <= start <= stop <= self.rows:
            raise InvalidArgument(
                f"rows [{start}, {stop}) are not within the table's {self.rows} rows",
                field="rows",
            )
        if self.sequential and start != self._next_row:
            raise InvalidArgument(
                f"{self.name} must be filled in order: next row is {self._next_row}, got {start}",
                field="rows",
            )
        want = (n, self.row_elements)
        if out is None:
            out = torch.empty(want, dtype=self.dtype)
        elif tuple(out.shape) != want or out.dtype != self.dtype or not out.is_contiguous():
            raise InvalidArgument(
                f"out must be a contiguous {want} {self.dtype} tensor, got "
                f"{tuple(out.shape)} {out.dtype}",
                field="out",
            )
        if n:
            if self.device.type == "cpu":
                self.fill_rows(start, stop, out)
            else:
                staged = torch.empty(want, dtype=self.dtype, device=self.device)
                self.fill_rows(start, stop, staged)
                out.copy_(staged)
        self._next_row = stop
        return out

    def blocks(self, max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[Tensor]:
        """Each block in order, as a fresh CPU ``(N, row_elements)`` tensor."""
        for start, stop in self.ranges(max_block_bytes):
            yield self.fill(start, stop)

    def whole(self, max_block_bytes: int | None = None) -> Tensor:
        """The whole table, shaped :attr:`shape`, in one new tensor on :attr:`device`: what
        each convention's whole-table function returns (``sinusoidal_table`` is
        ``sinusoidal_blocks(...).whole()``), so a table and its row blocks are one formula.

        Args:
            max_block_bytes: ``None`` computes all rows at once; a size fills the table block
                by block, so the float64 scratch stays that small (in cache, and reused)
                whatever the table's size (on the CPU; a device fills all rows at once).
        """
        self._next_row = 0
        if self.device.type != "cpu":  # filled where it is computed, not staged on the CPU
            out = torch.empty(self.rows, self.row_elements, dtype=self.dtype, device=self.device)
            if self.rows:
                self.fill_rows(0, self.rows, out)
            self._next_row = self.rows
            return out.reshape(self.shape)
        if max_block_bytes is None:
            return self.fill(0, self.rows).reshape(self.shape)
        out = torch.empty(self.rows, self.row_elements, dtype=self.dtype)
        for start, stop in self.ranges(max_block_bytes):
            self.fill(start, stop, out[start:stop])
        return out.reshape(self.shape)


def write_pair(out: Tensor, first: Tensor, second: Tensor, interleaved: bool) -> None:
    """``out (..., 2K)`` = ``[first | second]`` or ``first, second`` interleaved, cast once."""
    k = first.shape[-1]
    if interleaved:
        pairs = out.view(*out.shape[:-1], k, 2)  # (..., K, 2)
        pairs[..., 0].copy_(first)
        pairs[..., 1].copy_(second)
    else:
        out[..., :k].copy_(first)
        out[..., k:].copy_(second)


def tensor_blocks(name: str, tensor: Tensor) -> TableBlocks:
    """A tensor already in memory (``inv_freq``, ``slopes``, a model's table) as blocks."""
    rows = tensor.detach().reshape(-1, tensor.shape[-1] if tensor.dim() else 1)

    def fill(start: int, stop: int, out: Tensor) -> None:
        out.copy_(rows[start:stop])

    return TableBlocks(name, tuple(tensor.shape), tensor.dtype, fill, tensor.device)


def query_key_rel(
    rows: Tensor, seq_len: int, key_len: int, key_pos: Tensor
) -> tuple[Tensor, Tensor]:
    """For flat rows ``h·T + i`` ``(N,)``: the head ``h`` ``(N,)`` and ``j − (i + S − T)`` ``(N, S)``."""
    head = torch.div(rows, seq_len, rounding_mode="floor")  # (N,)
    query_pos = rows - head * seq_len + (key_len - seq_len)  # (N,) i + S - T
    return head, key_pos[None, :] - query_pos[:, None]  # (N, S) int64
