"""xPos: the per-position scales a length-extrapolatable rotary embedding applies.

Sun et al., "A Length-Extrapolatable Transformer" (ACL 2023). Reference implementation:
lucidrains' rotary-embedding-torch (``RotaryEmbedding(dim, use_xpos=True,
xpos_scale_base=...)``, ``get_scale`` and ``rotate_queries_and_keys``), whose formula posenc
writes independently:

- per frequency pair ``i`` of the ``R`` rotated channels, ``ζ_i = (2i + 0.4 R) / (1.4 R)``;
- for a sequence of ``N`` positions ``t = 0 … N − 1``, the power ``(t − N // 2) / scale_base``;
- queries are multiplied by ``ζ_i ^ power`` and keys by its inverse, each value repeated on the
  pair's two adjacent channels (the library rotates adjacent pairs: ``interleaved``).

So ``q_t · k_s`` carries ``ζ_i^((t − s) / scale_base)``: a decay by relative distance. Powers
are formed in float64 (``exp(power · ln ζ_i)``) and cast once.

Notation used for tensor shapes:
    T: positions.
    R: rotated channels (the embedding's ``dim``, even).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from posenc.core import kinds
from posenc.core.blocks import TableBlocks
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.limits import check_elements
from posenc.core.validate import check_int, device_or_cpu


def xpos_zeta(dim: int, *, device: str | torch.device | None = None) -> torch.Tensor:
    """``ζ_i = (2i + 0.4 R) / (1.4 R)`` for ``i = 0 … R/2 − 1``: (R/2,) float64."""
    dim = check_int("dim", dim, 2)
    if dim % 2:
        raise InvalidArgument(f"dim must be even, got {dim}", field="dim")
    two_i = torch.arange(0, dim, 2, dtype=torch.float64, device=device_or_cpu(device))
    return (two_i + 0.4 * dim) / (1.4 * dim)


def xpos_scales(
    seq_len: int,
    dim: int,
    *,
    scale_base: float = 512.0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The query and key scales of ``rotate_queries_and_keys`` for ``N = seq_len`` positions.

    Args:
        seq_len: ``N`` (>= 1): positions ``0 … N − 1``, centred on ``N // 2``.
        dim: ``R``, the rotary embedding's ``dim`` (even).
        scale_base: ``xpos_scale_base`` (> 0; the library's default 512).
        dtype: dtype of the results (computed in float64).
        device: where they live (None: CPU).
        max_elements: refuse a call whose outputs would exceed this many elements in all.

    Returns:
        ``(query_scale, key_scale)``, each (T, R): ``ζ^power`` and ``ζ^−power``, each
        frequency's value on its two adjacent channels.
    """
    seq_len = check_int("seq_len", seq_len, 1)
    log_zeta = _checked_log_zeta(seq_len, dim, scale_base, dtype, device)
    check_elements(
        2 * seq_len * dim,
        what=f"the two (T={seq_len}, R={dim}) xPos scales",
        max_elements=max_elements,
    )
    # Both scales from one pass of the exponents: write_rows, on :func:`_log_scales` as each
    # block of xpos_blocks is (two blocks' whole() would take the exponents twice).
    query = torch.empty((seq_len, dim), dtype=resolve_dtype(dtype), device=log_zeta.device)
    key = torch.empty_like(query)
    write_rows(query, key, 0, seq_len, seq_len=seq_len, scale_base=scale_base, log_zeta=log_zeta)
    return query, key


def xpos_blocks(
    seq_len: int,
    dim: int,
    *,
    which: str,
    scale_base: float = 512.0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
) -> TableBlocks:
    """The ``query_scale`` or ``key_scale`` ``(T, R)`` of :func:`xpos_scales` in row blocks:
    ``exp(±power·ln ζ)`` of each block's rows (:func:`_log_scales`), the same bytes.

    Raises:
        InvalidArgument: as :func:`xpos_scales`; ``which`` not one of the two scales.
    """
    if which not in ("query_scale", "key_scale"):
        raise InvalidArgument(
            f"which must be query_scale or key_scale, got {which!r}", field="which"
        )
    seq_len = check_int("seq_len", seq_len, 1)
    dtype = resolve_dtype(dtype)
    log_zeta = _checked_log_zeta(seq_len, dim, scale_base, dtype, device)
    inverse = which == "key_scale"

    def fill(start: int, stop: int, out: torch.Tensor) -> None:
        log_scale = _log_scales(start, stop, out.device, seq_len, scale_base, log_zeta)
        out.copy_(torch.exp(-log_scale if inverse else log_scale))

    return TableBlocks(which, (seq_len, dim), dtype, fill, log_zeta.device)


def _checked_log_zeta(
    seq_len: int,
    dim: int,
    scale_base: float,
    dtype: torch.dtype,
    device: str | torch.device | None,
) -> torch.Tensor:
    """``ln ζ`` (R/2,) float64, once the settings are checked: a finite ``scale_base > 0`` and
    scales that stay finite in ``dtype`` (the largest is ``ζ_0^−|power|max``, known from the
    numbers alone)."""
    zeta = xpos_zeta(dim, device=device)  # (R/2,), validates dim
    if not isinstance(scale_base, int | float) or not math.isfinite(scale_base) or scale_base <= 0:
        raise InvalidArgument(
            f"scale_base must be a finite number > 0, got {scale_base!r}", field="scale_base"
        )
    largest_power = max(seq_len // 2, seq_len - 1 - seq_len // 2) / scale_base
    largest_log = largest_power * abs(math.log((0.4 * dim) / (1.4 * dim)))  # ζ_0 = 2/7
    largest = torch.tensor(largest_log, dtype=torch.float64).exp().to(dtype)
    if not torch.isfinite(largest):
        name = str(dtype).removeprefix("torch.")
        raise InvalidArgument(
            f"the xPos scales reach 10^±{largest_log / math.log(10):.0f} at seq_len {seq_len} "
            f"with scale_base {scale_base:g}, beyond {name}; use a larger scale_base or fewer "
            f"positions{'' if dtype == torch.float64 else ', or float64'}",
            field="seq_len",
        )
    return torch.log(zeta)


def write_rows(
    query: torch.Tensor,
    key: torch.Tensor,
    start: int,
    stop: int,
    *,
    seq_len: int,
    scale_base: float,
    log_zeta: torch.Tensor,
) -> None:
    """Rows ``start … stop − 1`` of both scales into ``query`` and ``key`` ``(stop − start, R)``:
    the one formula of the whole tables and their row blocks (float64, one cast into each)."""
    log_scale = _log_scales(start, stop, query.device, seq_len, scale_base, log_zeta)
    query.copy_(torch.exp(log_scale))
    key.copy_(torch.exp(-log_scale))


def _log_scales(
    start: int,
    stop: int,
    device: torch.device,
    seq_len: int,
    scale_base: float,
    log_zeta: torch.Tensor,
) -> torch.Tensor:
    """``power·ln ζ`` of rows ``start … stop − 1``: ``(N, R)`` float64, each frequency's value
    on its two adjacent channels; the scales are its ``exp`` and ``exp`` of its negation."""
    t = torch.arange(start, stop, dtype=torch.int64, device=device)
    power = (t - seq_len // 2).to(torch.float64) / scale_base  # (N,)
    log_scale = power[:, None] * log_zeta.to(device)[None, :]  # (N, R/2)
    return log_scale.repeat_interleave(2, dim=-1)  # (N, R): pairs adjacent


__all__ = ["XPOS", "write_rows", "xpos_blocks", "xpos_scales", "xpos_zeta"]


# ---------------------------------------------------------------------------------------------
# The xpos endpoint kind (posenc.core.kinds)
# ---------------------------------------------------------------------------------------------


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, torch.Tensor]:
    q, k = xpos_scales(
        p["seq_len"], p["dim"], scale_base=p["scale_base"], dtype=ctx.dtype, device=ctx.device
    )
    return {"query_scale": q, "key_scale": k}


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    kw: dict[str, Any] = dict(scale_base=p["scale_base"], dtype=ctx.dtype, device=ctx.device)
    return {
        which: xpos_blocks(p["seq_len"], p["dim"], which=which, **kw)
        for which in ("query_scale", "key_scale")
    }


XPOS: kinds.Kind = kinds.Kind(
    name="xpos",
    path="/v1/encodings/xpos",
    tag="encodings",
    summary="xPos query and key scales (rotary-embedding-torch use_xpos)",
    description="The per-position scales of a length-extrapolatable rotary embedding (Sun et "
    "al. 2023), as rotary-embedding-torch's `RotaryEmbedding(dim, use_xpos=True, "
    "xpos_scale_base)` applies them in `rotate_queries_and_keys`: ζ_i = (2i + 0.4R)/(1.4R), "
    "power (t − N//2)/scale_base for t = 0 … N−1; `query_scale` = ζ^power and `key_scale` = "
    "ζ^−power, each on its pair's two adjacent channels. float64, cast once.",
    fields=(
        kinds.FieldSpec("seq_len", "int", "N: positions 0 … N−1", minimum=1, example=8),
        kinds.FieldSpec(
            "dim",
            "int",
            "R: the rotary embedding's dim (even)",
            minimum=2,
            multiple_of=2,
            example=64,
        ),
        kinds.FieldSpec(
            "scale_base",
            "float",
            "xpos_scale_base (rotary-embedding-torch: 512)",
            512.0,
            exclusive_minimum=0,
        ),
    ),
    tensors=(
        kinds.TensorSpec("query_scale", ("T", "R")),
        kinds.TensorSpec("key_scale", ("T", "R")),
    ),
    shapes=lambda p: {
        "query_scale": (p["seq_len"], p["dim"]),
        "key_scale": (p["seq_len"], p["dim"]),
    },
    compute=_compute,
    meta=lambda p: {"kind": "xpos", "layout": "interleaved", **p},
    blocks=_blocks,
    row_elements=lambda p: int(p["dim"]),
)
"""The xpos endpoint kind (see :mod:`posenc.core.kinds`)."""
