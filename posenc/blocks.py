"""Tables computed in row blocks: every table posenc serves, a block of rows at a time.

A table too large to hold (a million RoPE positions, an ALiBi bias of long sequences) can still
be written out if it is computed in row blocks as it is sent. Each ``*_blocks`` function here
describes one table as a :class:`TableBlocks`: its name, shape and dtype, and a ``fill(start,
stop, out)`` that writes rows ``start … stop-1`` into a preallocated ``out``. The rows of a
table of shape ``(A, …, Z)`` are its ``A·…`` rows of ``Z`` elements in C order, so an
``(H, T, S)`` bias has ``H·T`` rows of ``S``.

Blocks are exactly the bytes of the whole table: each fill does the arithmetic of the whole-table
function (:func:`~posenc.sinusoidal.sinusoidal_table`, :func:`~posenc.rope.rope_cos_sin`,
:func:`~posenc.alibi.alibi_bias`, :func:`~posenc.relative.relative_buckets`,
:func:`~posenc.relative.relative_bias`, :func:`~posenc.learned.learned_table`) on its rows,
element by element, in float64 until the one cast into ``out``. There is no Python loop over
rows: a block is a few tensor operations. Angles are formed once per block and serve both sin and
cos (sinusoidal), or both halves of the rotary layout (RoPE); scratch buffers are reused from
block to block.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posenc._validate import (
    check_choice,
    check_int,
    check_int_at_least,
    check_lengths,
    device_or_cpu,
)
from posenc.alibi import ALIBI_MODES, AlibiMode, _check_max_bias, _slopes64
from posenc.device import resolve_dtype
from posenc.errors import InvalidArgument
from posenc.learned import seeded_normal
from posenc.relative import (
    T5_BUCKETINGS,
    Bucketing,
    _check_log_buckets,
    clipped_bucket,
    num_relative_buckets,
    relative_bias_table,
    relative_position_bucket,
)
from posenc.rope import ROPE_LAYOUTS, RopeLayout, RopeScaling, rope_inv_freq
from posenc.rope import _positions_tensor as _rope_positions
from posenc.sinusoidal import SinusoidalLayout, _split_tables, sinusoidal_frequencies, write_rows
from posenc.sinusoidal import _positions_tensor as _sinusoidal_positions

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "TableBlocks",
    "alibi_bias_blocks",
    "learned_blocks",
    "relative_bias_blocks",
    "relative_buckets_blocks",
    "rope_blocks",
    "row_ranges",
    "sinusoidal_blocks",
    "tensor_blocks",
]

# The output bytes of one block by default: large enough that a block is a few big tensor
# operations, small enough that its float64 scratch (up to 4x for float32 tables) stays small.
DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024
# float64 angles per piece of a RoPE block on the CPU: the scratch of a piece (512 KiB a buffer)
# comes from the heap and is reused, where a whole 8 MiB block's scratch was fresh memory
# faulted in for every table (as fast per angle: the cosines, not the memory, set the pace)
_ROPE_PIECE_ANGLES = 1 << 16

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
        """The whole table, shaped :attr:`shape`, in one new tensor.

        Args:
            max_block_bytes: ``None`` computes all rows at once; a size fills the table block
                by block, so the float64 scratch stays that small (in cache, and reused)
                whatever the table's size.
        """
        self._next_row = 0
        if self.device.type != "cpu" or max_block_bytes is None:
            return self.fill(0, self.rows).reshape(self.shape)
        out = torch.empty(self.rows, self.row_elements, dtype=self.dtype)
        for start, stop in self.ranges(max_block_bytes):
            self.fill(start, stop, out[start:stop])
        return out.reshape(self.shape)


class _Scratch:
    """float64 work buffers reused from block to block (grown to the largest block)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._buffers: dict[str, Tensor] = {}

    def get(self, key: str, shape: tuple[int, int], dtype: torch.dtype = torch.float64) -> Tensor:
        numel = shape[0] * shape[1]
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel or buf.dtype != dtype:
            buf = torch.empty(numel, dtype=dtype, device=self.device)
            self._buffers[key] = buf
        return buf[:numel].view(shape)


def _write_pair(out: Tensor, first: Tensor, second: Tensor, interleaved: bool) -> None:
    """``out (N, 2K)`` = ``[first | second]`` or ``first, second`` interleaved, cast once."""
    k = first.shape[-1]
    if interleaved:
        pairs = out.view(out.shape[0], k, 2)  # (N, K, 2)
        pairs[..., 0].copy_(first)
        pairs[..., 1].copy_(second)
    else:
        out[:, :k].copy_(first)
        out[:, k:].copy_(second)


# ---------------------------------------------------------------------------------------------
# Encodings
# ---------------------------------------------------------------------------------------------


def sinusoidal_blocks(
    positions: Sequence[int] | Tensor | None = None,
    *,
    seq_len: int | None = None,
    d_model: int,
    base: float = 10000.0,
    layout: SinusoidalLayout = "interleaved",
    offset: int = 0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    name: str = "encoding",
) -> TableBlocks:
    """:func:`~posenc.sinusoidal.sinusoidal_table` ``(T, D)`` in row blocks, the same bytes.

    Per block: :func:`~posenc.sinusoidal.write_rows`, the arithmetic of the whole table (sin
    and cos of the float64 angles by angle addition, cast once into their columns of ``out``).
    Explicit ``positions`` are held as a ``(T,)`` tensor; ``seq_len`` positions are made per
    block. Arguments and errors as :func:`~posenc.sinusoidal.sinusoidal_table`.
    """
    freqs = sinusoidal_frequencies(d_model, base, layout)  # (D/2,) float64, validates
    dtype = resolve_dtype(dtype)
    dev = device_or_cpu(device)
    interleaved = layout == "interleaved"
    if seq_len is not None and positions is None:
        _sinusoidal_positions(None, seq_len, offset)  # validates seq_len and offset
        held: Tensor | None = None
        total = seq_len
    else:
        held = _sinusoidal_positions(positions, seq_len, offset).to(dev, torch.float64)  # (T,)
        total = held.numel()
    freqs = freqs.to(dev)
    split = _split_tables(freqs)  # sin, cos of r·w for r < 64: once for all the blocks

    def fill(start: int, stop: int, out: Tensor) -> None:
        if held is None:
            write_rows(out, freqs, interleaved, first=offset + start, split=split)
        else:
            write_rows(out, freqs, interleaved, positions=held[start:stop], split=split)

    return TableBlocks(name, (total, d_model), dtype, fill, dev)


def rope_blocks(
    positions: Sequence[int] | Tensor | None = None,
    *,
    seq_len: int | None = None,
    rotary_dim: int,
    base: float = 10000.0,
    layout: RopeLayout = "half",
    scaling: RopeScaling | None = None,
    which: str = "cos",
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> TableBlocks:
    """The ``cos`` or ``sin`` table ``(T, R)`` of :func:`~posenc.rope.rope_cos_sin` in row blocks.

    Per block: angles ``θ = p·inv_freq`` ``(N, R/2)`` in float64 once, their cos (or sin) times
    the attention scaling, written into both halves (``half``) or both slots of each pair
    (``interleaved``) of ``out``, cast once. ``inv_freq`` and the scaling come from
    :func:`~posenc.rope.rope_inv_freq` with ``seq_len = max(positions) + 1``, as the whole
    table's do.

    Args:
        which: ``"cos"`` or ``"sin"``; the other arguments as :func:`~posenc.rope.rope_cos_sin`.

    Raises:
        InvalidArgument: as :func:`~posenc.rope.rope_cos_sin`; ``which`` not cos or sin.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_choice("which", which, ("cos", "sin"))
    dtype = resolve_dtype(dtype)
    dev = device_or_cpu(device)
    if seq_len is not None and positions is None:
        check_int_at_least("seq_len", seq_len, 1, noun="an integer")
        held: Tensor | None = None
        total = length = int(seq_len)
    else:
        held = _rope_positions(positions, seq_len)  # (T,) int64
        total, length = held.numel(), int(held.max()) + 1
        held = held.to(dev, torch.float64)
    inv_freq, attention_scaling = rope_inv_freq(rotary_dim, base, scaling, seq_len=length)
    inv_freq = inv_freq.to(device=dev, dtype=torch.float64)  # (R/2,)
    func = torch.cos if which == "cos" else torch.sin
    scratch = _Scratch(dev)
    half = rotary_dim // 2

    def fill_part(start: int, stop: int, out: Tensor) -> None:
        n = stop - start
        if held is None:
            pos = torch.arange(start, stop, dtype=torch.float64, device=dev)  # (N,)
        else:
            pos = held[start:stop]
        angles = torch.mul(pos[:, None], inv_freq[None, :], out=scratch.get("angles", (n, half)))
        values = func(angles, out=scratch.get("values", (n, half)))  # (N, R/2)
        if attention_scaling != 1.0:  # x * 1.0 is x: skip the pass
            values.mul_(attention_scaling)
        _write_pair(out, values, values, layout == "interleaved")

    def fill(start: int, stop: int, out: Tensor) -> None:
        step = stop - start if dev.type != "cpu" else max(1, _ROPE_PIECE_ANGLES // half)
        for first in range(start, stop, step):
            last = min(stop, first + step)
            fill_part(first, last, out[first - start : last - start])

    return TableBlocks(which, (total, rotary_dim), dtype, fill, dev)


def learned_blocks(
    seq_len: int,
    d_model: int,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    name: str = "encoding",
) -> TableBlocks:
    """:func:`~posenc.learned.learned_table` ``(T, D)`` in row blocks, in order (``sequential``).

    One generator seeded once draws the blocks one after another, as ``normal_`` draws the whole
    table; block sizes keep to its groups of 16 (see the module docstring).
    """
    check_int("seq_len", seq_len, 1)
    check_int("d_model", d_model, 1)
    dtype = resolve_dtype(dtype)
    seeded_normal(1, 1, seed=seed)  # validates the seed
    state: dict[str, Any] = {}

    def fill(start: int, stop: int, out: Tensor) -> None:
        if start == 0:
            state["generator"] = torch.Generator(device="cpu").manual_seed(seed)
        target = out if dtype == torch.float32 else torch.empty(out.shape, dtype=torch.float32)
        target.normal_(0.0, 1.0, generator=state["generator"])
        if target is not out:
            out.copy_(target)

    return TableBlocks(
        name,
        (seq_len, d_model),
        dtype,
        fill,
        row_multiple=16 // math.gcd(d_model, 16),
        min_last_rows=-(-16 // d_model),
        sequential=True,
    )


def tensor_blocks(name: str, tensor: Tensor) -> TableBlocks:
    """A tensor already in memory (``inv_freq``, ``slopes``, a model's table) as blocks."""
    rows = tensor.detach().reshape(-1, tensor.shape[-1] if tensor.dim() else 1)

    def fill(start: int, stop: int, out: Tensor) -> None:
        out.copy_(rows[start:stop])

    return TableBlocks(name, tuple(tensor.shape), tensor.dtype, fill, tensor.device)


# ---------------------------------------------------------------------------------------------
# Biases
# ---------------------------------------------------------------------------------------------


def _query_key_rel(
    rows: Tensor, seq_len: int, key_len: int, key_pos: Tensor
) -> tuple[Tensor, Tensor]:
    """For flat rows ``h·T + i`` ``(N,)``: the head ``h`` ``(N,)`` and ``j − (i + S − T)`` ``(N, S)``."""
    head = torch.div(rows, seq_len, rounding_mode="floor")  # (N,)
    query_pos = rows - head * seq_len + (key_len - seq_len)  # (N,) i + S - T
    return head, key_pos[None, :] - query_pos[:, None]  # (N, S) int64


def alibi_bias_blocks(
    num_heads: int,
    seq_len: int,
    key_len: int | None = None,
    *,
    mode: AlibiMode = "causal",
    max_bias: float = 8.0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> TableBlocks:
    """:func:`~posenc.alibi.alibi_bias` ``(H, T, S)`` in blocks of its ``H·T`` rows.

    Row ``h·T + i`` is ``-m_h·(i' − j)`` (−inf above the diagonal in causal mode), the same
    float64 products as the whole table, cast once.
    """
    num_heads = check_int("num_heads", num_heads, 1)
    seq_len, key_len = check_lengths(seq_len, key_len)
    check_choice("mode", mode, ALIBI_MODES)
    max_bias = _check_max_bias(max_bias)
    dtype = resolve_dtype(dtype)
    dev = device_or_cpu(device)
    slopes = _slopes64(num_heads, max_bias).to(dev)  # (H,) float64
    key_pos = torch.arange(key_len, device=dev)  # (S,) int64
    causal = mode == "causal"

    def fill(start: int, stop: int, out: Tensor) -> None:
        rows = torch.arange(start, stop, device=dev)  # (N,)
        head, rel = _query_key_rel(rows, seq_len, key_len, key_pos)  # (N,), (N, S)
        dist = rel if causal else -rel.abs()  # (N, S)
        bias = slopes[head][:, None] * dist.to(torch.float64)  # (N, S)
        if causal:
            bias.masked_fill_(rel > 0, float("-inf"))
        out.copy_(bias)

    return TableBlocks("bias", (num_heads, seq_len, key_len), dtype, fill, dev)


def _bucket_fn(
    num_buckets: int, max_distance: int, bidirectional: bool, bucketing: Bucketing
) -> Callable[[Tensor], Tensor]:
    check_choice("bucketing", bucketing, T5_BUCKETINGS)
    if bucketing == "clip":
        check_int("max_distance", max_distance, 0)
        return lambda rel: clipped_bucket(
            rel, max_distance=max_distance, bidirectional=bidirectional
        )
    _check_log_buckets(num_buckets, max_distance, bidirectional)
    return lambda rel: relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


def relative_buckets_blocks(
    seq_len: int,
    key_len: int | None = None,
    *,
    num_buckets: int = 32,
    max_distance: int = 128,
    bidirectional: bool = True,
    bucketing: Bucketing = "log",
    device: str | torch.device | None = None,
) -> TableBlocks:
    """:func:`~posenc.relative.relative_buckets` ``(T, S)`` int64 in row blocks."""
    seq_len, key_len = check_lengths(seq_len, key_len)
    bucket = _bucket_fn(num_buckets, max_distance, bidirectional, bucketing)
    dev = device_or_cpu(device)
    key_pos = torch.arange(key_len, device=dev)

    def fill(start: int, stop: int, out: Tensor) -> None:
        _, rel = _query_key_rel(torch.arange(start, stop, device=dev), seq_len, key_len, key_pos)
        out.copy_(bucket(rel))

    return TableBlocks("buckets", (seq_len, key_len), torch.int64, fill, dev)


def relative_bias_blocks(
    seq_len: int,
    key_len: int | None = None,
    *,
    num_heads: int,
    num_buckets: int = 32,
    max_distance: int = 128,
    bidirectional: bool = True,
    bucketing: Bucketing = "log",
    seed: int = 0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> TableBlocks:
    """:func:`~posenc.relative.relative_bias` ``(H, T, S)`` of the seeded table, in blocks of
    its ``H·T`` rows: row ``h·T + i`` is ``table[buckets[i, :], h]``, cast once."""
    seq_len, key_len = check_lengths(seq_len, key_len)
    bucket = _bucket_fn(num_buckets, max_distance, bidirectional, bucketing)
    n_buckets = num_relative_buckets(
        num_buckets=num_buckets, max_distance=max_distance, bucketing=bucketing
    )
    dtype = resolve_dtype(dtype)
    dev = device_or_cpu(device)
    table = relative_bias_table(n_buckets, num_heads, seed=seed).to(dev)  # (NB, H) float32
    key_pos = torch.arange(key_len, device=dev)

    def fill(start: int, stop: int, out: Tensor) -> None:
        rows = torch.arange(start, stop, device=dev)
        head, rel = _query_key_rel(rows, seq_len, key_len, key_pos)  # (N,), (N, S)
        out.copy_(table[bucket(rel), head[:, None]])  # (N, S)

    return TableBlocks("bias", (num_heads, seq_len, key_len), dtype, fill, dev)
