"""ALiBi: attention with linear biases.

Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
Extrapolation" (ICLR 2022). Reference implementations: the authors' fairseq code
(``ofirpress/attention_with_linear_biases``), BLOOM (``transformers`` ``build_alibi_tensor``) and
MPT (``llm-foundry`` ``gen_slopes``, ``alibi_bias_max``); all three give the same slopes.

Notation used for tensor shapes:
    H: number of heads.
    T: query (sequence) length.
    S: key length (``S >= T``; with a key/value cache the ``T`` queries are the last ``T`` of
       the ``S`` positions, so query ``i`` sits at position ``i + S - T``).

Slopes and biases are computed in float64 and cast once to the requested dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc.core import kinds
from posenc.core.blocks import TableBlocks, query_key_rel, tensor_blocks
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.core.validate import (
    bias_lengths,
    check_bias_lengths,
    check_choice,
    check_int,
    check_lengths,
    device_or_cpu,
    is_number,
)

AlibiMode = Literal["causal", "symmetric"]
ALIBI_MODES: tuple[str, ...] = get_args(AlibiMode)


def _check_max_bias(max_bias: float) -> float:
    if not is_number(max_bias):
        raise InvalidArgument(f"max_bias must be a number, got {max_bias!r}", field="max_bias")
    if not math.isfinite(max_bias) or max_bias <= 0:
        raise InvalidArgument(
            f"max_bias must be a finite number > 0, got {max_bias}", field="max_bias"
        )
    return float(max_bias)


def _slopes64(num_heads: int, max_bias: float) -> torch.Tensor:
    """Slopes ``m_h = 2**e_h`` in float64, shape (H,).

    Each power is taken with Python's ``2.0 ** e`` (the C library's correctly rounded ``pow``):
    torch's vectorised ``exp2`` / ``pow`` are off by one float64 ulp for some heads.
    """
    p = 1 << (num_heads.bit_length() - 1)  # largest power of two <= num_heads
    exponents = [-max_bias * (h + 1) / p for h in range(p)]  # the p slopes for p heads
    # then the even-indexed slopes (0, 2, 4, ...) of the 2p-head list: 1-based heads 1, 3, 5, ...
    exponents += [-max_bias * (2 * k + 1) / (2 * p) for k in range(num_heads - p)]
    return torch.tensor([2.0**e for e in exponents], dtype=torch.float64)


def alibi_slopes(
    num_heads: int,
    max_bias: float = 8.0,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
) -> torch.Tensor:
    """Per-head ALiBi slopes ``m_h`` (Press et al. 2022; BLOOM, MPT).

    For a power of two ``n``, ``m_h = 2**(-max_bias * (h + 1) / n)`` for ``h = 0 .. n-1`` (8 heads
    give ``2**-1 .. 2**-8``). Otherwise, with ``p`` the largest power of two below ``n``: the ``p``
    slopes for ``p`` heads followed by the first ``n - p`` of the even-indexed slopes
    (0, 2, 4, ...) of the ``2p``-head list, as the paper's code, BLOOM and MPT do.

    Args:
        num_heads: number of heads ``H`` (>= 1).
        max_bias: the exponent scale (MPT's ``alibi_bias_max``; 8 in the paper and BLOOM).
        device: where the result lives (None: CPU).
        dtype: floating dtype of the result (computed in float64, cast once).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        (H,) slopes, all in ``(0, 1)`` for ``max_bias > 0``.

    Raises:
        InvalidArgument: ``num_heads < 1`` or ``max_bias`` not a finite positive number.
    """
    num_heads = check_int("num_heads", num_heads, 1)
    check_elements(num_heads, what=f"the slopes (H={num_heads})", max_elements=max_elements)
    max_bias = _check_max_bias(max_bias)
    dtype = resolve_dtype(dtype)
    slopes = _slopes64(num_heads, max_bias)  # (H,) float64
    return slopes.to(device=device_or_cpu(device), dtype=dtype)


def alibi_bias(
    num_heads: int,
    seq_len: int,
    key_len: int | None = None,
    *,
    mode: AlibiMode = "causal",
    max_bias: float = 8.0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
) -> torch.Tensor:
    """The ALiBi attention bias added to the (H, T, S) attention logits.

    Query ``i`` sits at position ``i' = i + S - T`` (the last ``T`` of ``S`` positions, as in
    cached decoding); key ``j`` at position ``j``.

    - ``causal``: ``bias[h, i, j] = -m_h * (i' - j)`` for ``j <= i'`` and ``-inf`` for ``j > i'``
      (the future is masked).
    - ``symmetric``: ``bias[h, i, j] = -m_h * |i' - j|`` (bidirectional, no mask).

    The diagonal is ``+0.0``. BLOOM and MPT instead add one row, ``m_h * j`` (MPT:
    ``m_h * (j - S + 1)``), broadcast over the queries; that differs from this by a constant per
    query, so the causal softmax is the same. This is the paper's form.

    Args:
        num_heads: number of heads ``H`` (>= 1).
        seq_len: number of queries ``T`` (>= 1).
        key_len: number of keys ``S`` (>= ``T``; default ``T``).
        mode: ``"causal"`` (default) or ``"symmetric"``.
        max_bias: the slope exponent scale, see :func:`alibi_slopes`.
        device: where the result lives (None: CPU).
        dtype: floating dtype of the result (computed in float64, cast once).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        (H, T, S) bias.

    Raises:
        InvalidArgument: a size below 1, ``key_len < seq_len``, an unknown ``mode``.
    """
    num_heads = check_int("num_heads", num_heads, 1)
    seq_len, key_len = check_lengths(seq_len, key_len)
    check_elements(
        num_heads * seq_len * key_len,
        what=f"the ALiBi bias (H={num_heads}, T={seq_len}, S={key_len})",
        max_elements=max_elements,
    )
    blocks = alibi_bias_blocks(
        num_heads, seq_len, key_len, mode=mode, max_bias=max_bias, device=device, dtype=dtype
    )
    return blocks.whole()  # (H, T, S): one block of all the H·T rows


def alibi_values(slopes: torch.Tensor, rel: torch.Tensor, causal: bool) -> torch.Tensor:
    """ALiBi's one formula, for the whole bias and its row blocks alike: ``-m·(i' − j)``
    (causal, ``-inf`` where ``j > i'``) or ``-m·|i' − j|`` (symmetric), in float64.

    Args:
        slopes: float64 slopes ``m``, shaped to broadcast against ``rel`` (``(H, 1, 1)`` for the
            whole ``(H, T, S)`` bias, ``(N, 1)`` for ``N`` rows of it).
        rel: int64 ``j − i'``.
        causal: mask the future with ``-inf``.
    """
    # Negate in integers so that the diagonal is +0.0, never -0.0.
    dist = rel if causal else -rel.abs()  # <= 0 wherever unmasked
    bias = slopes * dist.to(torch.float64)
    if causal:
        bias.masked_fill_(rel > 0, float("-inf"))
    return bias


__all__ = ["AlibiMode", "alibi_bias", "alibi_bias_blocks", "alibi_slopes", "alibi_values"]


# ---------------------------------------------------------------------------------------------
# The alibi endpoint kind (posenc.core.kinds)
# ---------------------------------------------------------------------------------------------


def _key_len(p: Mapping[str, Any]) -> int:
    return bias_lengths(p)[1]


def _bias_arguments(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    """The arguments of :func:`alibi_bias` (and of its row blocks) from resolved fields."""
    return dict(
        num_heads=p["num_heads"],
        seq_len=p["seq_len"],
        key_len=_key_len(p),
        mode=p["mode"],
        max_bias=p["max_bias"],
        device=ctx.device,
        dtype=ctx.dtype,
    )


def _alibi_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, torch.Tensor]:
    bias = alibi_bias(**_bias_arguments(p, ctx))  # (H, T, S)
    slopes = alibi_slopes(p["num_heads"], p["max_bias"], device=ctx.device, dtype=ctx.dtype)
    return {"bias": bias, "slopes": slopes}  # slopes: (H,)


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
    """:func:`~posenc.relative_schemes.alibi.alibi_bias` ``(H, T, S)`` in blocks of its ``H·T`` rows.

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
        head, rel = query_key_rel(rows, seq_len, key_len, key_pos)  # (N,), (N, S)
        out.copy_(alibi_values(slopes[head][:, None], rel, causal))  # (N, S)

    return TableBlocks("bias", (num_heads, seq_len, key_len), dtype, fill, dev)


def _alibi_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    slopes = alibi_slopes(p["num_heads"], p["max_bias"], device=ctx.device, dtype=ctx.dtype)
    return {
        "bias": alibi_bias_blocks(**_bias_arguments(p, ctx)),
        "slopes": tensor_blocks("slopes", slopes),  # (H,)
    }


ALIBI: kinds.Kind = kinds.Kind(
    name="alibi",
    path="/v1/biases/alibi",
    tag="biases",
    summary="ALiBi attention bias",
    description="Press et al. (2022) linear biases; slopes as the paper's code, BLOOM and "
    "MPT. Query i sits at position i + S − T. `bias` is −inf (`null` in JSON) above the "
    "diagonal in causal mode.",
    fields=(
        kinds.FieldSpec(
            "num_heads",
            "int",
            "H (required unless a preset or config gives it)",
            minimum=1,
            sourced=True,
            example=8,
        ),
        kinds.FieldSpec("seq_len", "int", "T, the number of queries", minimum=1, example=4),
        kinds.FieldSpec(
            "key_len",
            "int",
            "S ≥ T (default T); query i sits at position i + S − T",
            None,
            minimum=1,
        ),
        kinds.FieldSpec(
            "mode",
            "str",
            "causal: −m_h·(i−j), −inf above the diagonal; symmetric: −m_h·|i−j|",
            "causal",
            choices=ALIBI_MODES,
        ),
        kinds.FieldSpec(
            "max_bias",
            "float",
            "slope exponent scale (default 8 when neither preset nor config gives it)",
            8.0,
            exclusive_minimum=0,
            sourced=True,
        ),
        kinds.preset_field("alibi"),
        kinds.config_field("BLOOM, MPT (attn_config) or Falcon with alibi."),
    ),
    tensors=(kinds.TensorSpec("bias", ("H", "T", "S")), kinds.TensorSpec("slopes", ("H",))),
    shapes=lambda p: {
        "bias": (p["num_heads"], p["seq_len"], _key_len(p)),
        "slopes": (p["num_heads"],),
    },
    compute=_alibi_compute,
    check=check_bias_lengths,
    meta=lambda p: {
        "kind": "alibi",
        **{k: p[k] for k in ("num_heads", "seq_len")},
        "key_len": _key_len(p),
        **{k: p[k] for k in ("mode", "max_bias", "preset", "dtype")},
        **kinds.derived(ALIBI, p),
    },
    blocks=_alibi_blocks,
    row_elements=lambda p: max(_key_len(p), p["num_heads"]),
    sources=kinds.Sources("alibi"),
)
"""The alibi endpoint kind (see :mod:`posenc.core.kinds`)."""
