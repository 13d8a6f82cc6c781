"""Fixed sinusoidal positional encodings (Vaswani et al., 2017, "Attention Is All You Need", §3.5).

Three layouts are served, all computed in float64 (positions × frequencies, then sin and cos) and
cast once to the requested dtype, so a float32 table is within 1e-6 of the float64 formula at
every position below 2**20:

- ``"interleaved"`` (the paper; The Annotated Transformer): ``PE[p, 2i] = sin(p·w_i)``,
  ``PE[p, 2i+1] = cos(p·w_i)`` with ``w_i = base**(-2i/D)``.
- ``"concat"``: ``[sin(p·w_0 … p·w_{D/2-1}) | cos(same)]`` with the same ``w_i``.
- ``"tensor2tensor"`` (tensor2tensor ``get_timing_signal_1d``; fairseq
  ``SinusoidalPositionalEmbedding.get_embedding``): ``[sin | cos]`` halves with
  ``w_i = base**(-i/max(D/2-1, 1))``.

Notation used for tensor shapes: ``B`` batch, ``T`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn

from posenc.core import kinds
from posenc.core.angles import sin_cos_rows, split_tables
from posenc.core.blocks import TableBlocks, write_pair
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements, sequence_length
from posenc.core.validate import (
    check_choice,
    check_int,
    check_int_at_least,
    check_seq_len_or_positions,
    device_or_cpu,
    dtype_name,
    first_true,
)

SinusoidalLayout = Literal["interleaved", "concat", "tensor2tensor"]

_LAYOUTS: tuple[str, ...] = get_args(SinusoidalLayout)


def _check_d_model(d_model: int) -> None:
    check_int("d_model", d_model, 2, noun="an int")
    if d_model % 2:
        raise InvalidArgument(f"d_model must be even, got {d_model}", field="d_model")


def _check_base(base: float) -> None:
    if not math.isfinite(base) or base <= 0:
        raise InvalidArgument(f"base must be a finite number > 0, got {base}", field="base")


def sinusoidal_frequencies(
    d_model: int,
    base: float = 10000.0,
    layout: SinusoidalLayout = "interleaved",
    *,
    max_elements: int | None = None,
) -> Tensor:
    """Angular frequencies ``w_i`` of the sinusoidal table, in float64.

    Args:
        d_model: ``D``, an even int >= 2.
        base: the wavelength base (10000 in the paper).
        layout: ``"interleaved"`` and ``"concat"`` use ``w_i = base**(-2i/D)`` (Vaswani et al.);
            ``"tensor2tensor"`` uses ``w_i = base**(-i/max(D/2-1, 1))`` (tensor2tensor, fairseq).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(D/2,)`` float64 CPU tensor; ``w_0`` is exactly 1.

    Raises:
        InvalidArgument: ``d_model`` odd or < 2, ``base`` not finite and > 0, unknown layout.
    """
    _check_d_model(d_model)
    _check_base(base)
    check_choice("layout", layout, _LAYOUTS)
    half = d_model // 2
    check_elements(half, what=f"the frequencies (D/2={half})", max_elements=max_elements)
    i = torch.arange(half, dtype=torch.float64)
    exponent = -i / max(half - 1, 1) if layout == "tensor2tensor" else -2.0 * i / d_model
    return torch.pow(torch.tensor(base, dtype=torch.float64), exponent)


def write_rows(
    out: Tensor,
    freqs: Tensor,
    interleaved: bool,
    *,
    first: int = 0,
    positions: Tensor | None = None,
    split: tuple[Tensor, Tensor, Tensor] | None = None,
) -> None:
    """Write the sinusoidal rows of ``positions``, or of ``first, first+1, …``, into ``out``:
    ``sin`` and ``cos`` of the float64 angles ``fl(p·w_i)`` (:func:`posenc.core.angles.sin_cos_rows`,
    by angle addition), each value cast once.

    Args:
        out: ``(N, D)`` of the table's dtype on ``freqs``' device, C-contiguous: interleaved
            ``sin, cos, …`` or ``[sin | cos]`` halves.
        freqs: ``(D/2,)`` float64.
        interleaved: the layout of ``out``'s columns.
        first: the first of consecutive positions (when ``positions`` is None).
        positions: ``(N,)`` float64 integer positions ``>= 0``, in any order.
        split: ``posenc.core.angles.split_tables(freqs)``, for a caller that writes many blocks.
    """

    def put(rows: slice, sin: Tensor, cos: Tensor) -> None:
        write_pair(out[rows], sin, cos, interleaved)

    sin_cos_rows(freqs, out.shape[0], put, first=first, positions=positions, split=split)


def _positions_tensor(
    positions: Sequence[int] | Tensor | None, seq_len: int | None, offset: int
) -> Tensor:
    """The int64 positions ``(T,)`` on the CPU, validated."""
    check_int_at_least("offset", offset, 0)
    if (positions is None) == (seq_len is None):
        raise InvalidArgument(
            "give exactly one of positions or seq_len, got "
            + ("both" if positions is not None else "neither"),
            field="positions",
        )
    if seq_len is not None:
        check_int_at_least("seq_len", seq_len, 1)
        return torch.arange(offset, offset + seq_len, dtype=torch.int64)
    try:
        pos = torch.as_tensor(positions).to("cpu")
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InvalidArgument(
            f"positions must be a 1-D sequence of ints >= 0: {exc}", field="positions"
        ) from exc
    if pos.numel() == 0:
        raise InvalidArgument("positions must not be empty, got 0 positions", field="positions")
    if pos.dtype.is_floating_point or pos.dtype.is_complex or pos.dtype == torch.bool:
        raise InvalidArgument(
            f"positions must be ints, got dtype {dtype_name(pos.dtype)}",
            field="positions",
        )
    if pos.dim() != 1:
        raise InvalidArgument(
            f"positions must be 1-D, got shape {tuple(pos.shape)}", field="positions"
        )
    pos = pos.to(torch.int64)
    if bool((pos < 0).any()):
        (k,) = first_true(pos < 0)
        raise InvalidArgument(
            f"positions must be >= 0, got {int(pos[k])} at positions[{k}]",
            field=f"positions[{k}]",
        )
    return pos + offset


def sinusoidal_table(
    positions: Sequence[int] | Tensor | None = None,
    *,
    seq_len: int | None = None,
    d_model: int,
    base: float = 10000.0,
    layout: SinusoidalLayout = "interleaved",
    offset: int = 0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
) -> Tensor:
    """The sinusoidal position table for the given positions.

    Angles ``p·w_i`` are formed in float64 (positions are exact in float64 up to 2**53), sin and
    cos are taken in float64, and the result is cast once to ``dtype``.

    Args:
        positions: ``(T,)`` ints >= 0 (a sequence or a 1-D integer tensor); ``offset`` is added.
        seq_len: ``T``; the positions are then ``offset … offset+T-1``. Give exactly one of
            ``positions`` and ``seq_len``.
        d_model: ``D``, an even int >= 2.
        base: the wavelength base (10000 in Vaswani et al.).
        layout: ``"interleaved"``, ``"concat"`` or ``"tensor2tensor"`` (see the module docstring).
        offset: int >= 0 added to every position.
        device: where the table is built; ``None`` means the CPU.
        dtype: the output dtype.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(T, D)`` tensor of ``dtype``.

    Raises:
        InvalidArgument: a bad argument; the message states the value.
    """
    length = sequence_length(positions, seq_len)
    if length is not None and isinstance(d_model, int):
        check_elements(
            length * d_model,
            what=f"the sinusoidal table (T={length}, D={d_model})",
            max_elements=max_elements,
        )
    sinusoidal_frequencies(d_model, base, layout, max_elements=max_elements)  # validates
    blocks = sinusoidal_blocks(
        positions,
        seq_len=seq_len,
        d_model=d_model,
        base=base,
        layout=layout,
        offset=offset,
        device=device,
        dtype=dtype,
    )
    return blocks.whole()  # (T, D): one block of all the rows


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding to a batch of embeddings.

    Vaswani et al., 2017, §3.5; reference implementations: The Annotated Transformer
    (``PositionalEncoding``, interleaved) and fairseq ``SinusoidalPositionalEmbedding``
    (tensor2tensor layout). No dropout. The table for ``max_seq_len`` positions is cached as a
    non-persistent buffer; longer inputs are computed on the fly with :func:`sinusoidal_table`.

    Args:
        d_model: ``D``, an even int >= 2.
        max_seq_len: positions cached, ``0 … max_seq_len-1``.
        base: the wavelength base.
        layout: ``"interleaved"``, ``"concat"`` or ``"tensor2tensor"``.
        dtype: the dtype of the cached table.
    """

    pe: Tensor  # (max_seq_len, D) buffer

    def __init__(
        self,
        d_model: int,
        max_seq_len: int = 2048,
        *,
        base: float = 10000.0,
        layout: SinusoidalLayout = "interleaved",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_seq_len = max_seq_len
        self.base = base
        self.layout: SinusoidalLayout = layout
        self.register_buffer(
            "pe",
            sinusoidal_table(
                seq_len=max_seq_len, d_model=d_model, base=base, layout=layout, dtype=dtype
            ),
            persistent=False,
        )  # (max_seq_len, D)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        """Return ``x + PE[offset : offset+T]``.

        Args:
            x: ``(B, T, D)`` embeddings.
            offset: position of the first token (e.g. the length of a KV cache).

        Returns:
            ``(B, T, D)`` in ``x``'s dtype.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise InvalidArgument(
                f"x must have shape (B, T, {self.d_model}), got {tuple(x.shape)}", field="x"
            )
        seq_len = x.shape[1]
        if offset + seq_len <= self.max_seq_len and offset >= 0:
            pe = self.pe[offset : offset + seq_len]
        else:
            pe = sinusoidal_table(
                seq_len=seq_len,
                d_model=self.d_model,
                base=self.base,
                layout=self.layout,
                offset=offset,
                device=x.device,
            )
        return x + pe.to(device=x.device, dtype=x.dtype)[None]  # (B, T, D)


# ---------------------------------------------------------------------------------------------
# The endpoint kind (posenc.core.kinds): POST/GET /v1/encodings/sinusoidal, the client, the CLI
# ---------------------------------------------------------------------------------------------


def _one_of_seq_len_positions(params: Mapping[str, Any]) -> None:
    check_seq_len_or_positions(params.get("seq_len"), params.get("positions"))


def _length(params: Mapping[str, Any]) -> int:
    return int(params["seq_len"]) if params["seq_len"] is not None else len(params["positions"])


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
    """:func:`~posenc.absolute.sinusoidal.sinusoidal_table` ``(T, D)`` in row blocks, the same bytes.

    Per block: :func:`~posenc.absolute.sinusoidal.write_rows`, the arithmetic of the whole table (sin
    and cos of the float64 angles by angle addition, cast once into their columns of ``out``).
    Explicit ``positions`` are held as a ``(T,)`` tensor; ``seq_len`` positions are made per
    block. Arguments and errors as :func:`~posenc.absolute.sinusoidal.sinusoidal_table`.
    """
    freqs = sinusoidal_frequencies(d_model, base, layout)  # (D/2,) float64, validates
    dtype = resolve_dtype(dtype)
    dev = device_or_cpu(device)
    interleaved = layout == "interleaved"
    if seq_len is not None and positions is None:
        _positions_tensor(None, seq_len, offset)  # validates seq_len and offset
        held: Tensor | None = None
        total = seq_len
    else:
        held = _positions_tensor(positions, seq_len, offset).to(dev, torch.float64)  # (T,)
        total = held.numel()
    freqs = freqs.to(dev)
    split = split_tables(freqs)  # sin, cos of r·w for r < 64: once for all the blocks

    def fill(start: int, stop: int, out: Tensor) -> None:
        if held is None:
            write_rows(out, freqs, interleaved, first=offset + start, split=split)
        else:
            write_rows(out, freqs, interleaved, positions=held[start:stop], split=split)

    return TableBlocks(name, (total, d_model), dtype, fill, dev)


def _table_arguments(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in ("seq_len", "d_model", "base", "layout", "offset")}


def _blocks(params: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    blocks = sinusoidal_blocks(
        params["positions"], **_table_arguments(params), device=ctx.device, dtype=ctx.dtype
    )
    return {"encoding": blocks}


SINUSOIDAL: kinds.Kind = kinds.Kind(
    name="sinusoidal",
    path="/v1/encodings/sinusoidal",
    tag="encodings",
    summary="Sinusoidal positional encoding",
    description="Vaswani et al. (2017) fixed sinusoidal table, computed in float64 and cast once.",
    fields=(
        kinds.FieldSpec(
            "seq_len", "int", "T: positions offset … offset+T−1", None, minimum=1, example=8
        ),
        kinds.FieldSpec(
            "positions",
            "ints",
            "explicit positions (ints ≥ 0) instead of seq_len",
            None,
            minimum=0,
        ),
        kinds.FieldSpec("d_model", "int", "D, even int ≥ 2", minimum=2, multiple_of=2, example=16),
        kinds.FieldSpec("base", "float", "wavelength base", 10000.0, exclusive_minimum=0),
        kinds.FieldSpec(
            "layout",
            "str",
            "interleaved: PE[p,2i]=sin, PE[p,2i+1]=cos; concat: [sin | cos]; "
            "tensor2tensor: [sin | cos] with w_i = base^(−i/max(D/2−1, 1))",
            "interleaved",
            choices=_LAYOUTS,
        ),
        kinds.FieldSpec(
            "offset",
            "int",
            "added to every position",
            0,
            minimum=0,
        ),
    ),
    tensors=(kinds.TensorSpec("encoding", ("T", "D")),),
    shapes=lambda p: {"encoding": (_length(p), p["d_model"])},
    compute=lambda p, ctx: {
        "encoding": sinusoidal_table(
            p["positions"], **_table_arguments(p), device=ctx.device, dtype=ctx.dtype
        )
    },
    check=_one_of_seq_len_positions,
    meta=lambda p: {
        "kind": "sinusoidal",
        "seq_len": _length(p),
        **{k: p[k] for k in ("d_model", "base", "layout", "offset", "dtype")},
    },
    blocks=_blocks,
    row_elements=lambda p: int(p["d_model"]),
)
"""The sinusoidal endpoint kind: described here once, served, documented, called and offered
on the command line from this description (see :mod:`posenc.core.kinds`)."""
