"""RoPE tables: cos and sin of ``positions × inv_freq`` in float64, whole or in row blocks, the
rotations that apply them (:func:`apply_rope`), and :class:`RotaryEmbedding`.

Layouts: ``half`` (GPT-NeoX, Llama): channel ``i`` pairs with ``i + R/2``, ``cos = cat(cos θ,
cos θ)`` and the rotation is ``rotate_half``; ``interleaved`` (GPT-J, RoFormer): channel ``2i``
pairs with ``2i + 1``, each angle repeated twice in place, rotated by ``rotate_every_two``.

Notation: ``B`` batch, ``H`` heads, ``T`` sequence length, ``Dh`` head dimension, ``R`` rotary
dimension (``R ≤ Dh``, even), ``N`` rows of a block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from posenc.core.angles import sin_cos_rows, split_tables
from posenc.core.blocks import TableBlocks, write_pair
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements, sequence_length
from posenc.core.validate import check_choice, check_int_at_least, device_or_cpu, first_true
from posenc.rope.scaling import (
    ROPE_CHANNELS,
    ROPE_LAYOUTS,
    ROPE_ROTATIONS,
    RopeChannels,
    RopeLayout,
    RopeRotation,
    RopeScaling,
    RopeTables,
    check_exponent_dim,
    check_rotary_dim,
    rope_inv_freq,
)


def positions_tensor(positions: Sequence[int] | Tensor | None, seq_len: int | None) -> Tensor:
    """Exactly one of ``positions`` / ``seq_len`` → a ``(T,)`` int64 CPU tensor of positions."""
    if (positions is None) == (seq_len is None):
        raise InvalidArgument(
            "give exactly one of positions or seq_len"
            f" (got positions={'None' if positions is None else '...'}, seq_len={seq_len!r})",
            field="positions",
        )
    if seq_len is not None:
        check_int_at_least("seq_len", seq_len, 1, noun="an integer")
        return torch.arange(seq_len, dtype=torch.int64)
    if isinstance(positions, Tensor):
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise InvalidArgument(
                f"positions must be integers, got a tensor of {positions.dtype}", field="positions"
            )
        if positions.dim() != 1:
            raise InvalidArgument(
                f"positions must be 1-D, got shape {tuple(positions.shape)}", field="positions"
            )
        pos = positions.detach().to(device="cpu", dtype=torch.int64)
    else:
        values = list(positions)  # type: ignore[arg-type]
        for i, p in enumerate(values):
            if not isinstance(p, int) or isinstance(p, bool):
                raise InvalidArgument(
                    f"positions[{i}] must be an integer, got {p!r}", field=f"positions[{i}]"
                )
        pos = torch.tensor(values, dtype=torch.int64)
    if pos.numel() == 0:
        raise InvalidArgument("positions must not be empty", field="positions")
    low = int(pos.min())
    if low < 0:
        (i,) = first_true(pos < 0)
        raise InvalidArgument(
            f"positions must be >= 0, got positions[{i}] = {int(pos[i])}", field=f"positions[{i}]"
        )
    return pos


def write_rope_values(
    out: Tensor, values: Tensor, attention_scaling: float, interleaved: bool
) -> None:
    """RoPE's one formula: ``out (N, R)`` = the float64 ``values (N, R/2)`` (cos or sin of the
    angles ``θ = p·inv_freq``) times the attention scaling, in both places of each angle
    (``[v | v]``, or each value twice in place), cast once into ``out``. The whole tables and
    their row blocks are both written by it; ``values`` may be changed in place."""
    if attention_scaling != 1.0:  # x * 1.0 is x exactly: skip the pass
        values.mul_(attention_scaling)
    write_pair(out, values, values, interleaved)


def _consecutive_from(positions: Tensor) -> int | None:
    """The first position when ``positions (N,)`` are ``p, p+1, …`` (the table of a
    ``seq_len``, or a block of one); else None."""
    n = positions.numel()
    if n == 0:
        return None
    first = int(positions[0])
    if n == 1 or (int(positions[-1]) - first == n - 1 and bool((positions.diff() == 1).all())):
        return first
    return None


def write_rope_rows(
    tables: Sequence[tuple[Tensor, str]],
    positions: Tensor,
    inv_freq: Tensor,
    attention_scaling: float,
    interleaved: bool,
    split: tuple[Tensor, Tensor, Tensor] | None = None,
    rotation: RopeRotation = "positive",
) -> None:
    """Write RoPE's ``cos`` and/or ``sin`` tables of the integer ``positions (N,)``: each
    ``(out (N, R), "cos" | "sin")`` of ``tables`` gets :func:`write_rope_values` of the float64
    ``cos θ`` or ``sin θ``, ``θ = fl(p·inv_freq)``, taken by angle addition
    (:func:`posenc.core.angles.sin_cos_rows`: within a few float64 ulps of ``cos(fl(p·w))``, at about a
    third of the cost; an element's value does not depend on the rows around it).

    Args:
        tables: the output tables and which function each holds.
        positions: ``(N,)`` integer positions ``>= 0`` (any integer or float dtype).
        inv_freq: ``(R/2,)`` float64, on the tables' device.
        attention_scaling: the magnitude the values are multiplied by.
        interleaved: the layout of the tables' columns.
        split: ``posenc.core.angles.split_tables(inv_freq)``, for a caller writing many blocks.
        rotation: ``"negative"`` (a model that rotates by ``−θ``, nanochat): ``sin`` is written
            times ``−attention_scaling``, an exact sign flip.
    """
    sin_scaling = -attention_scaling if rotation == "negative" else attention_scaling

    def emit(rows: slice, sin: Tensor, cos: Tensor) -> None:
        for out, which in tables:
            if which == "cos":
                write_rope_values(out[rows], cos, attention_scaling, interleaved)
            else:
                write_rope_values(out[rows], sin, sin_scaling, interleaved)

    n = positions.numel()
    first = _consecutive_from(positions)
    if first is not None:
        sin_cos_rows(inv_freq, n, emit, first=first, split=split)
    else:
        sin_cos_rows(inv_freq, n, emit, positions=positions.to(torch.float64), split=split)


def cos_sin_tables(
    positions: Tensor,
    inv_freq: Tensor,
    attention_scaling: float,
    layout: RopeLayout,
    dtype: torch.dtype,
    rotation: RopeRotation = "positive",
) -> tuple[Tensor, Tensor]:
    """cos and sin ``(..., R)`` for integer ``positions (...)``, in float64 until the final cast
    (:func:`write_rope_rows` over the positions flattened; ``rotation`` as there)."""
    inv = inv_freq.to(device=positions.device, dtype=torch.float64)  # (R/2,)
    shape = (*positions.shape, 2 * inv.numel())
    cos = torch.empty(shape, dtype=dtype, device=positions.device)  # (..., R)
    sin = torch.empty(shape, dtype=dtype, device=positions.device)  # (..., R)
    flat = positions.reshape(-1)
    write_rope_rows(
        ((cos.view(flat.numel(), -1), "cos"), (sin.view(flat.numel(), -1), "sin")),
        flat,
        inv,
        attention_scaling,
        layout == "interleaved",
        rotation=rotation,
    )
    return cos, sin


def rope_cos_sin(
    positions: Sequence[int] | Tensor | None = None,
    *,
    seq_len: int | None = None,
    rotary_dim: int,
    base: float = 10000.0,
    layout: RopeLayout = "half",
    scaling: RopeScaling | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
    exponent_dim: int | None = None,
    rotation: RopeRotation = "positive",
) -> RopeTables:
    """RoPE cos/sin tables for the given positions, attention scaling included.

    ``half`` (GPT-NeoX, Llama; transformers' ``LlamaRotaryEmbedding``): ``cos = cat(cos θ, cos θ)``.
    ``interleaved`` (GPT-J, RoFormer): each angle repeated twice in place. ``θ[t, i] =
    positions[t] · inv_freq[i]`` with ``inv_freq`` from :func:`rope_inv_freq`, given
    ``seq_len = max(positions) + 1``.

    The rows are written by :func:`rope_blocks`' own fill (one row writer, the same bytes),
    cos and sin in one pass of the angles: two blocks' ``whole()`` would take them twice.

    Args:
        positions: ``(T,)`` integers ≥ 0 (a sequence or a 1-D integer tensor); or
        seq_len: ``T``, meaning positions ``0 … T−1``. Exactly one of the two.
        rotary_dim: ``R`` (even, ≥ 2).
        base: ``rope_theta``.
        layout: ``"half"`` or ``"interleaved"``.
        scaling: the scaling scheme, or None.
        device: where the tables are computed and returned (None: CPU).
        dtype: the dtype of the returned tensors (all arithmetic is float64 before it).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).
        exponent_dim: the exponents' denominator ``E`` (:func:`rope_inv_freq`): ``R``, or the
            odd ``R − 1`` of a config whose rotated width is odd (GLM-4-MoE).
        rotation: ``"negative"`` for a model that rotates by ``−θ`` (nanochat): ``sin`` is
            negated, so that :func:`apply_rope` applies what that model applies.

    Returns:
        :class:`RopeTables` with ``cos`` and ``sin`` ``(T, R)``, ``inv_freq`` ``(R/2,)``, all in
        ``dtype`` on ``device``, and the attention scaling.

    Raises:
        InvalidArgument: see :func:`rope_inv_freq`; also a bad layout, negative or non-integer
            positions, or both / neither of ``positions`` and ``seq_len``.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_choice("rotation", rotation, ROPE_ROTATIONS)
    check_rotary_dim(rotary_dim)
    count = sequence_length(positions, seq_len)
    if count is not None:  # cos + sin (T, R) and inv_freq (R/2,), before anything exists
        check_elements(
            2 * count * rotary_dim + rotary_dim // 2,
            what=f"the RoPE tables (T={count}, R={rotary_dim})",
            max_elements=max_elements,
        )
    pos = positions_tensor(positions, seq_len)
    length = int(pos.max()) + 1
    inv_freq, attention_scaling = rope_inv_freq(
        rotary_dim,
        base,
        scaling,
        seq_len=length,
        max_elements=max_elements,
        exponent_dim=exponent_dim,
    )
    dev = torch.device("cpu") if device is None else torch.device(device)
    held = None if positions is None else pos.to(dev, torch.float64)  # (T,)
    write = _row_writer(held, inv_freq.to(dev), attention_scaling, layout, rotation)
    shape = (pos.numel(), rotary_dim)
    cos = torch.empty(shape, dtype=dtype, device=dev)  # (T, R)
    sin = torch.empty(shape, dtype=dtype, device=dev)  # (T, R)
    if shape[0]:
        write(0, shape[0], ((cos, "cos"), (sin, "sin")))  # rope_blocks' fill, both at once
    return RopeTables(
        cos=cos,
        sin=sin,
        inv_freq=inv_freq.to(device=dev, dtype=dtype),
        attention_scaling=attention_scaling,
    )


def rotate_half(x: Tensor) -> Tensor:
    """``[x1 | x2] → [−x2 | x1]`` on the last dim (GPT-NeoX, Llama)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: Tensor) -> Tensor:
    """``(x0, x1, x2, x3, …) → (−x1, x0, −x3, x2, …)`` on the last dim (GPT-J, RoFormer)."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x_odd, x_even), dim=-1).flatten(-2)


def apply_rope(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    *,
    layout: RopeLayout = "half",
    rotated_channels: RopeChannels = "leading",
) -> Tensor:
    """Rotate the first ``R`` channels of each head of ``x`` (or the last ``R``); leave the
    other ``Dh − R``.

    ``out_rot = x_rot · cos + rotate(x_rot) · sin`` with ``rotate_half`` (``half``) or
    ``rotate_every_two`` (``interleaved``): transformers' ``apply_rotary_pos_emb`` of Llama and
    of GPT-J, with GPT-NeoX's partial rotary (``rotary_pct``). The product is taken in ``x``'s
    dtype (cos and sin are cast to it, as transformers does).

    Args:
        x: ``(B, H, T, Dh)`` queries or keys.
        cos: ``(T, R)``, or ``(B, T, R)`` for per-row positions, from :func:`rope_cos_sin` with
            the same ``layout``.
        sin: same shape as ``cos``.
        layout: ``"half"`` or ``"interleaved"``.
        rotated_channels: ``"leading"`` (default) rotates ``x[..., :R]``; ``"trailing"``
            rotates ``x[..., Dh − R:]`` (DeepSeek-V4's ``apply_rotary_pos_emb``, whose heads
            are ``[nope | rope]``).

    Returns:
        ``(B, H, T, Dh)``, same dtype as ``x``.

    Raises:
        InvalidArgument: shapes that do not fit, an odd ``R``, or ``R > Dh``.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_choice("rotated_channels", rotated_channels, ROPE_CHANNELS)
    if x.dim() != 4:
        raise InvalidArgument(f"x must be (B, H, T, Dh), got shape {tuple(x.shape)}", field="x")
    if cos.shape != sin.shape:
        raise InvalidArgument(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}",
            field="sin",
        )
    if cos.dim() not in (2, 3):
        raise InvalidArgument(
            f"cos must be (T, R) or (B, T, R), got shape {tuple(cos.shape)}", field="cos"
        )
    head_dim, rotary_dim, t = x.shape[-1], cos.shape[-1], x.shape[-2]
    if rotary_dim % 2 or rotary_dim == 0:
        raise InvalidArgument(f"rotary_dim must be even and > 0, got {rotary_dim}", field="cos")
    if rotary_dim > head_dim:
        raise InvalidArgument(
            f"rotary_dim must be <= head_dim, got rotary_dim={rotary_dim} and head_dim={head_dim}",
            field="rotary_dim",
        )
    if cos.shape[-2] != t:
        raise InvalidArgument(f"cos has {cos.shape[-2]} positions but x has T = {t}", field="cos")
    if cos.dim() == 3:
        if cos.shape[0] not in (1, x.shape[0]):
            raise InvalidArgument(
                f"cos has batch {cos.shape[0]} but x has B = {x.shape[0]}", field="cos"
            )
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, R)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    split = rotary_dim if rotated_channels == "leading" else head_dim - rotary_dim
    x_first, x_last = x[..., :split], x[..., split:]
    # (B, H, T, R) rotated, (B, H, T, Dh − R) passed through
    x_rot, x_pass = (x_first, x_last) if rotated_channels == "leading" else (x_last, x_first)
    rotate = rotate_half if layout == "half" else rotate_every_two
    out = x_rot * cos + rotate(x_rot) * sin
    if rotary_dim == head_dim:
        return out
    return torch.cat((out, x_pass) if rotated_channels == "leading" else (x_pass, out), dim=-1)


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
    frequencies: tuple[Tensor, float] | None = None,
    exponent_dim: int | None = None,
    rotation: RopeRotation = "positive",
) -> TableBlocks:
    """The ``cos`` or ``sin`` table ``(T, R)`` of :func:`~posenc.rope.rope_cos_sin` in row blocks.

    Per block: :func:`write_rope_rows`, the arithmetic of the whole table: cos (or sin) of the
    float64 angles ``θ = p·inv_freq`` by angle addition, times the attention scaling, written
    into both halves (``half``) or both slots of each pair (``interleaved``) of ``out``, cast
    once. ``inv_freq`` and the scaling come from
    :func:`~posenc.rope.rope_inv_freq` with ``seq_len = max(positions) + 1``, as the whole
    table's do.

    Args:
        which: ``"cos"`` or ``"sin"``; the other arguments as :func:`~posenc.rope.rope_cos_sin`.
        frequencies: ``(inv_freq (R/2,), attention scaling)`` in place of ``rope_inv_freq``'s
            (another engine's rule, :mod:`posenc.rope.vllm`).
        exponent_dim, rotation: as :func:`~posenc.rope.rope_cos_sin`.

    Raises:
        InvalidArgument: as :func:`~posenc.rope.rope_cos_sin`; ``which`` not cos or sin.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_choice("which", which, ("cos", "sin"))
    check_choice("rotation", rotation, ROPE_ROTATIONS)
    dtype = resolve_dtype(dtype)
    dev = device_or_cpu(device)
    if seq_len is not None and positions is None:
        check_int_at_least("seq_len", seq_len, 1, noun="an integer")
        held: Tensor | None = None
        total = length = int(seq_len)
    else:
        held = positions_tensor(positions, seq_len)  # (T,) int64
        total, length = held.numel(), int(held.max()) + 1
        held = held.to(dev, torch.float64)
    if frequencies is None:
        inv_freq, attention_scaling = rope_inv_freq(
            rotary_dim, base, scaling, seq_len=length, exponent_dim=exponent_dim
        )
    else:
        inv_freq, attention_scaling = frequencies
    write = _row_writer(held, inv_freq.to(dev), attention_scaling, layout, rotation)

    def fill(start: int, stop: int, out: Tensor) -> None:
        write(start, stop, ((out, which),))

    return TableBlocks(which, (total, rotary_dim), dtype, fill, dev)


def _row_writer(
    held: Tensor | None,
    inv_freq: Tensor,
    attention_scaling: float,
    layout: RopeLayout,
    rotation: RopeRotation,
) -> Callable[[int, int, Sequence[tuple[Tensor, str]]], None]:
    """The one fill of :func:`rope_blocks` and :func:`rope_cos_sin`: rows ``start … stop − 1``
    of the tables given (``(out (N, R), "cos" | "sin")`` each) by :func:`write_rope_rows`, for
    the float64 positions ``held (T,)`` on ``inv_freq``'s device, or ``0 … T − 1`` (None)."""
    dev = inv_freq.device
    inv_freq = inv_freq.to(torch.float64)  # (R/2,)
    split = split_tables(inv_freq)  # sin, cos of r·w for r < 64: once for all the blocks
    interleaved = layout == "interleaved"

    def write(start: int, stop: int, tables: Sequence[tuple[Tensor, str]]) -> None:
        if held is None:
            pos = torch.arange(start, stop, dtype=torch.float64, device=dev)  # (N,)
        else:
            pos = held[start:stop]
        write_rope_rows(tables, pos, inv_freq, attention_scaling, interleaved, split, rotation)

    return write


class RotaryEmbedding(nn.Module):
    """Rotary position embedding of queries and keys, built on :func:`rope_cos_sin`.

    RoFormer (Su et al., 2021), with GPT-NeoX's partial rotary and the scaling types of
    transformers' ``ROPE_INIT_FUNCTIONS``. For the static types (none, ``linear``, ``yarn``,
    ``llama3``) the tables for positions ``0 … max_seq_len − 1`` are cached in :meth:`rope_init`
    as non-persistent buffers; ``dynamic`` and ``longrope`` depend on ``max(positions) + 1`` and
    positions beyond the cache are computed on the fly (stateless, unlike transformers' dynamic
    update which keeps the largest length seen).

    Args:
        head_dim: ``Dh`` (even).
        rotary_dim: ``R`` (even, ≤ ``Dh``); None means ``Dh``.
        base: ``rope_theta``.
        layout: ``"half"`` or ``"interleaved"``.
        scaling: the scaling scheme, or None.
        max_seq_len: number of cached positions.
        exponent_dim: the exponents' denominator where a model's rotated width is odd (GLM-4-MoE:
            21, with ``rotary_dim`` 22); None means ``rotary_dim``.
        rotation: ``"negative"`` rotates by ``−θ`` (nanochat), ``"positive"`` otherwise.
        rotated_channels: ``"leading"`` rotates ``x[..., :R]``, ``"trailing"`` ``x[..., Dh−R:]``
            (DeepSeek-V4).
    """

    cos: Tensor  # (max_seq_len, R) buffer
    sin: Tensor  # (max_seq_len, R) buffer

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        layout: RopeLayout = "half",
        scaling: RopeScaling | None = None,
        max_seq_len: int = 4096,
        exponent_dim: int | None = None,
        rotation: RopeRotation = "positive",
        rotated_channels: RopeChannels = "leading",
    ) -> None:
        super().__init__()
        check_rotary_dim(head_dim, "head_dim")
        rotary_dim = head_dim if rotary_dim is None else rotary_dim
        check_rotary_dim(rotary_dim)
        if rotary_dim > head_dim:
            raise InvalidArgument(
                f"rotary_dim must be <= head_dim, got rotary_dim={rotary_dim} and "
                f"head_dim={head_dim}",
                field="rotary_dim",
            )
        check_choice("layout", layout, ROPE_LAYOUTS)
        check_choice("rotation", rotation, ROPE_ROTATIONS)
        check_choice("rotated_channels", rotated_channels, ROPE_CHANNELS)
        self.exponent_dim = check_exponent_dim(rotary_dim, exponent_dim)
        self.rotation: RopeRotation = rotation
        self.rotated_channels: RopeChannels = rotated_channels
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        self.base = base
        self.layout: RopeLayout = layout
        self.scaling = scaling
        self.max_seq_len = max_seq_len
        self.rope_init()

    def rope_init(self) -> None:
        """(Re)build the cached tables ``cos``, ``sin`` ``(max_seq_len, R)`` in float32."""
        tables = rope_cos_sin(
            seq_len=self.max_seq_len,
            rotary_dim=self.rotary_dim,
            base=self.base,
            layout=self.layout,
            scaling=self.scaling,
            exponent_dim=self.exponent_dim,
            rotation=self.rotation,
        )
        self.attention_scaling = tables.attention_scaling
        self.register_buffer("cos", tables.cos, persistent=False)
        self.register_buffer("sin", tables.sin, persistent=False)

    def tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin ``(..., R)`` for integer ``positions`` of shape ``(T,)`` or ``(B, T)``."""
        length = int(positions.max()) + 1
        length_dependent = self.scaling is not None and self.scaling.type in ("dynamic", "longrope")
        if not length_dependent and length <= self.max_seq_len:
            idx = positions.to(device=self.cos.device, dtype=torch.int64)
            return self.cos[idx], self.sin[idx]
        inv_freq, scale = rope_inv_freq(
            self.rotary_dim, self.base, self.scaling, seq_len=length, exponent_dim=self.exponent_dim
        )
        return cos_sin_tables(
            positions.to(torch.int64), inv_freq, scale, self.layout, torch.float32, self.rotation
        )

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Rotate ``x`` ``(B, H, T, Dh)`` at ``positions`` ``(T,)`` or ``(B, T)`` (default 0…T−1)."""
        if positions is None:
            positions = torch.arange(x.shape[-2], device=x.device)
        positions_tensor(positions.reshape(-1), None)  # validates: integers >= 0, not empty
        cos, sin = self.tables(positions)
        return apply_rope(x, cos, sin, layout=self.layout, rotated_channels=self.rotated_channels)
