"""Relative position buckets (T5, DeBERTa-v2/v3, Swin) and the learned per-head bias they index.

Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer" (JMLR 2020). Reference implementations: Mesh TensorFlow
``transformer_layers._relative_position_bucket`` and transformers'
``T5Attention._relative_position_bucket``, which :func:`relative_position_bucket` reproduces bit
for bit (including its float32 logarithm, so the bucket boundaries are the same).

Notation used for tensor shapes:
    H: number of heads.
    T: query (sequence) length.
    S: key length (``S >= T``; query ``i`` sits at position ``i + S - T``).
    NB: number of buckets.

The relative position of key ``j`` seen from query ``i`` is ``j - (i + S - T)``: negative for
keys in the past, as T5 defines it (memory position minus query position).

Two other families index their relative embeddings differently:

- DeBERTa-v2/v3 (He et al., "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", ICLR
  2021; transformers ``models/deberta_v2/modeling_deberta_v2.py::build_relative_position`` and
  ``make_log_bucket_position``): ``i - j`` with query ``i`` at position ``i`` (so the opposite
  sign of T5's, and no shift when ``S > T``), log-bucketed beyond ``position_buckets // 2``
  (:func:`deberta_relative_positions`). posenc takes the logarithm in float64; transformers'
  float32 arithmetic agrees with it for the published settings at distances up to 2**15.
- Swin and Swin v2 (Liu et al., ICCV 2021 / CVPR 2022; transformers
  ``SwinRelativePositionBias._create_relative_position_index`` and
  ``Swinv2SelfAttention.create_coords_table_and_index``): the index of the 2-D offset between two
  cells of a ``W x W`` window into a ``(2W - 1)**2``-row table
  (:func:`swin_relative_position_index`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc.absolute.learned import SEED_MAX, SEED_MIN, seeded_normal
from posenc.core import kinds
from posenc.core.blocks import TableBlocks
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument, MissingField
from posenc.core.limits import check_elements
from posenc.core.validate import (
    bias_lengths,
    check_bias_lengths,
    check_choice,
    check_int,
    check_lengths,
    device_or_cpu,
)

Bucketing = Literal["log", "clip", "deberta", "swin"]

BUCKETINGS: tuple[str, ...] = get_args(Bucketing)
#: The bucketings of T5-style positions ``j - (i + S - T)`` (:func:`relative_buckets`).
T5_BUCKETINGS: tuple[str, ...] = ("log", "clip")


def _check_log_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    """T5's formula needs at least one exact bucket and ``max_distance > max_exact``."""
    check_int("num_buckets", num_buckets, 2)
    check_int("max_distance", max_distance, 1)
    minimum = 4 if bidirectional else 2
    if num_buckets < minimum:
        raise InvalidArgument(
            f"num_buckets must be >= {minimum} when bidirectional={bidirectional} (T5 keeps half "
            f"of each direction's buckets exact), got {num_buckets}",
            field="num_buckets",
        )
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if max_distance <= max_exact:
        raise InvalidArgument(
            f"max_distance must be > {max_exact} (the exact buckets of num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}), got {max_distance}",
            field="max_distance",
        )


def _as_positions(relative_position: torch.Tensor | int | list[int]) -> torch.Tensor:
    rp = torch.as_tensor(relative_position)
    if rp.is_floating_point() or rp.is_complex() or rp.dtype == torch.bool:
        raise InvalidArgument(
            f"relative_position must hold integers, got dtype {rp.dtype}",
            field="relative_position",
        )
    return rp.to(torch.int64)


def _checked_lengths(
    seq_len: int, key_len: int | None, max_elements: int | None
) -> tuple[int, int]:
    """``(T, S)`` validated, and the table refused (:class:`~posenc.core.errors.TooLarge`) over
    ``max_elements`` before anything is allocated."""
    seq_len, key_len = check_lengths(seq_len, key_len)
    check_elements(
        seq_len * key_len,
        what=f"the (T={seq_len}, S={key_len}) relative positions",
        max_elements=max_elements,
    )
    return seq_len, key_len


def relative_positions(
    seq_len: int,
    key_len: int | None = None,
    *,
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> torch.Tensor:
    """Relative positions ``j - (i + S - T)`` of every key ``j`` from every query ``i``.

    Args:
        seq_len: number of queries ``T`` (>= 1).
        key_len: number of keys ``S`` (>= ``T``; default ``T``). The queries are the last ``T``
            of the ``S`` positions, as in cached decoding.
        device: where the result lives (None: CPU).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        (T, S) int64; 0 on the (shifted) diagonal, negative for keys before the query.

    Raises:
        InvalidArgument: a length below 1, or ``key_len < seq_len``.
    """
    seq_len, key_len = _checked_lengths(seq_len, key_len, max_elements)
    dev = device_or_cpu(device)
    query_pos = torch.arange(seq_len, dtype=torch.int64, device=dev) + (key_len - seq_len)  # (T,)
    key_pos = torch.arange(key_len, dtype=torch.int64, device=dev)  # (S,)
    return key_pos[None, :] - query_pos[:, None]  # (T, S)


def relative_position_bucket(
    relative_position: torch.Tensor | int | list[int],
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """T5's bucket of each relative position (memory position minus query position).

    Exactly Mesh TensorFlow's / transformers' ``_relative_position_bucket``: when
    ``bidirectional``, half of the buckets are for positive positions (keys after the query);
    otherwise positive positions share bucket 0. Within a direction, the first half of the
    buckets hold the distances ``0 .. max_exact - 1`` one each, and the rest cover
    ``max_exact .. max_distance`` logarithmically; everything farther shares the last bucket.

    The logarithm is taken in float32, in the reference's order of operations, and truncated
    toward zero, so every bucket boundary is the reference's (this is the one place posenc does
    not compute in float64: the convention *is* the float32 arithmetic).

    Args:
        relative_position: integer tensor (any shape) or Python ints.
        bidirectional: whether keys after the query get their own buckets (T5 encoder: True;
            decoder self-attention: False).
        num_buckets: number of buckets ``NB`` (>= 4 bidirectional, >= 2 otherwise).
        max_distance: distance from which on all positions share the last bucket
            (> ``max_exact``, the count of exact buckets).

    Returns:
        int64 tensor of the input's shape and device, values in ``[0, NB)``.

    Raises:
        InvalidArgument: non-integer positions, or bucket settings the formula cannot use.
    """
    _check_log_buckets(num_buckets, max_distance, bidirectional)
    rp = _as_positions(relative_position)

    buckets = torch.zeros_like(rp)
    if bidirectional:
        num_buckets //= 2
        buckets += (rp > 0).to(torch.int64) * num_buckets
        rp = torch.abs(rp)
    else:
        rp = -torch.min(rp, torch.zeros_like(rp))
    # rp is now a distance in [0, inf)

    max_exact = num_buckets // 2
    is_small = rp < max_exact
    # Reference arithmetic, kept as is: float32 division and log, a Python float divisor.
    if_large = max_exact + (
        torch.log(rp.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.int64)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return buckets + torch.where(is_small, rp, if_large)


def clipped_bucket(
    relative_position: torch.Tensor | int | list[int],
    *,
    max_distance: int = 128,
    bidirectional: bool = True,
) -> torch.Tensor:
    """Clipped relative positions as bucket ids (Shaw et al. 2018 style clipping).

    The position is clamped to ``[-max_distance, max_distance]`` (to ``[-max_distance, 0]`` when
    not ``bidirectional``) and shifted by ``max_distance``, so there are ``2 * max_distance + 1``
    buckets and relative position 0 is bucket ``max_distance``.

    Args:
        relative_position: integer tensor (any shape) or Python ints.
        max_distance: the clipping distance (>= 0).
        bidirectional: whether positive positions (keys after the query) are kept.

    Returns:
        int64 tensor of the input's shape and device, values in ``[0, 2 * max_distance]``.

    Raises:
        InvalidArgument: non-integer positions or ``max_distance < 0``.
    """
    max_distance = check_int("max_distance", max_distance, 0)
    rp = _as_positions(relative_position)
    upper = max_distance if bidirectional else 0
    return rp.clamp(-max_distance, upper) + max_distance


def num_relative_buckets(
    *, num_buckets: int = 32, max_distance: int = 128, bucketing: Bucketing = "log"
) -> int:
    """Number of buckets ``NB`` (rows of the bias table): ``num_buckets`` for ``"log"``,
    ``2 * max_distance + 1`` for ``"clip"``."""
    check_choice("bucketing", bucketing, T5_BUCKETINGS)
    if bucketing == "clip":
        return 2 * check_int("max_distance", max_distance, 0) + 1
    return check_int("num_buckets", num_buckets, 2)


def relative_buckets(
    seq_len: int,
    key_len: int | None = None,
    *,
    num_buckets: int = 32,
    max_distance: int = 128,
    bidirectional: bool = True,
    bucketing: Bucketing = "log",
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> torch.Tensor:
    """Bucket id of every (query, key) pair, from :func:`relative_positions`.

    Args:
        seq_len: number of queries ``T``.
        key_len: number of keys ``S`` (>= ``T``; default ``T``).
        num_buckets: number of buckets for ``"log"`` (ignored by ``"clip"``).
        max_distance: T5's ``max_distance`` for ``"log"``; the clipping distance for ``"clip"``.
        bidirectional: see :func:`relative_position_bucket` and :func:`clipped_bucket`.
        bucketing: ``"log"`` (T5, default) or ``"clip"``.
        device: where the result lives (None: CPU).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        (T, S) int64 bucket ids in ``[0, NB)``, ``NB = num_relative_buckets(...)``.
    """
    _bucket_fn(num_buckets, max_distance, bidirectional, bucketing)  # validates, first
    seq_len, key_len = _checked_lengths(seq_len, key_len, max_elements)
    blocks = relative_buckets_blocks(
        seq_len,
        key_len,
        num_buckets=num_buckets,
        max_distance=max_distance,
        bidirectional=bidirectional,
        bucketing=bucketing,
        device=device,
    )
    return blocks.whole()  # (T, S): one block of all the rows


def _check_deberta_buckets(position_buckets: int | None, max_position: int | None) -> bool:
    """Whether DeBERTa's log buckets apply (``position_buckets > 0``); refuses settings whose
    logarithm the reference cannot form (a zero or infinite ``log((max_position - 1) / mid)``)."""
    if position_buckets is None or position_buckets <= 0:
        return False
    position_buckets = check_int("position_buckets", position_buckets, 1)
    if position_buckets < 2:
        raise InvalidArgument(
            "position_buckets must be >= 2 (its half is the exact range), or <= 0 for plain "
            f"relative positions, got {position_buckets}",
            field="position_buckets",
        )
    if max_position is None:
        raise InvalidArgument(
            f"max_position is required with position_buckets={position_buckets} (DeBERTa's "
            "max_relative_positions, or max_position_embeddings where that is < 1)",
            field="max_position",
        )
    max_position = check_int("max_position", max_position, 1)
    mid = position_buckets // 2
    if max_position - 1 <= mid:
        raise InvalidArgument(
            f"max_position must be > {mid + 1} (position_buckets // 2 + 1, so that "
            f"log((max_position - 1) / {mid}) > 0), got {max_position}",
            field="max_position",
        )
    return True


def deberta_log_bucket(
    relative_position: torch.Tensor | int | list[int], *, position_buckets: int, max_position: int
) -> torch.Tensor:
    """DeBERTa-v2's ``make_log_bucket_position``, with the logarithm in float64.

    Positions with ``|r| <= mid`` (``mid = position_buckets // 2``) are kept; farther ones become
    ``sign(r) * (ceil(log(|r| / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid)``.

    Args:
        relative_position: integer tensor (any shape) or Python ints (``i - j``).
        position_buckets: DeBERTa's ``position_buckets`` (>= 2).
        max_position: ``max_relative_positions`` (> ``position_buckets // 2 + 1``).

    Returns:
        int64 tensor of the input's shape and device.
    """
    _check_deberta_buckets(position_buckets, max_position)
    rp = _as_positions(relative_position)
    mid = position_buckets // 2
    distance = rp.abs()
    far = distance.to(torch.float64).clamp(min=mid)  # the near ones are replaced below
    log_ratio = math.log((max_position - 1) / mid)
    log_pos = torch.ceil(torch.log(far / mid) / log_ratio * (mid - 1)) + mid  # float64
    return torch.where(distance <= mid, rp, log_pos.to(torch.int64) * torch.sign(rp))


def deberta_relative_positions(
    seq_len: int,
    key_len: int | None = None,
    *,
    position_buckets: int | None = None,
    max_position: int | None = None,
    device: str | torch.device | None = None,
    max_elements: int | None = None,
) -> torch.Tensor:
    """DeBERTa-v2/v3's relative positions: transformers'
    ``build_relative_position(q, k, bucket_size=position_buckets, max_position=max_position)[0]``.

    Args:
        seq_len: number of queries ``T`` (>= 1), query ``i`` at position ``i``.
        key_len: number of keys ``S`` (>= ``T``; default ``T``), key ``j`` at position ``j``.
        position_buckets: DeBERTa's ``position_buckets``; None or <= 0: plain ``i - j``.
        max_position: ``max_relative_positions`` (the model's fallback to
            ``max_position_embeddings`` where that is < 1 is the caller's, as
            :func:`posenc.readers.hf.positions.read_positions` does it); needed with ``position_buckets``.
        device: where the result lives (None: CPU).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`); None means ``posenc.core.limits.MAX_ELEMENTS``.

    Returns:
        (T, S) int64: ``i - j``, log-bucketed beyond ``position_buckets // 2``.

    Raises:
        InvalidArgument: a length below 1, ``key_len < seq_len``, or bucket settings the formula
            cannot use.
    """
    _check_deberta_buckets(position_buckets, max_position)  # validates, first
    seq_len, key_len = _checked_lengths(seq_len, key_len, max_elements)
    blocks = deberta_positions_blocks(
        seq_len,
        key_len,
        position_buckets=position_buckets,
        max_position=max_position,
        device=device,
    )
    return blocks.whole()  # (T, S): one block of all the rows


def _deberta_rows(
    key_len: int, position_buckets: int | None, max_position: int | None, dev: torch.device
) -> Callable[[Tensor], Tensor]:
    """DeBERTa's one formula, for the whole table and its row blocks alike: queries ``(N,)`` ->
    their rows ``(N, S)`` of ``i - j``, log-bucketed when ``position_buckets`` is given (settings
    already checked)."""
    key_pos = torch.arange(key_len, dtype=torch.int64, device=dev)  # (S,)

    def rows(query_pos: Tensor) -> Tensor:
        rel = query_pos[:, None] - key_pos[None, :]  # (N, S)
        if position_buckets is None or max_position is None:
            return rel
        return deberta_log_bucket(rel, position_buckets=position_buckets, max_position=max_position)

    return rows


def swin_relative_position_index(
    window_size: int, *, device: str | torch.device | None = None, max_elements: int | None = None
) -> torch.Tensor:
    """Swin's ``relative_position_index`` of a ``W x W`` window, as a (W², W²) matrix.

    Cells are numbered row-major (``n = h * W + w``); the pair ``(n, m)`` gets
    ``(h_n - h_m + W - 1) * (2W - 1) + (w_n - w_m + W - 1)``, a row of the model's
    ``(2W - 1)**2``-row ``relative_position_bias_table``.

    Args:
        window_size: ``W`` (>= 1).
        device: where the result lives (None: CPU).
        max_elements: refuse a call whose output would exceed this many elements.

    Returns:
        (W², W²) int64, values in ``[0, (2W - 1)**2)``.
    """
    w = check_int("window_size", window_size, 1)
    check_elements(
        w**4, what=f"the (W²={w * w}, W²={w * w}) window index", max_elements=max_elements
    )
    return swin_index_blocks(w, device=device).whole()  # (W², W²): one block of all the rows


def _swin_rows(w: int, dev: torch.device) -> Callable[[Tensor], Tensor]:
    """Swin's one formula, for the whole index and its row blocks alike: cells ``(N,)`` -> their
    rows ``(N, W²)`` of ``relative_position_index``."""
    cells = torch.arange(w * w, dtype=torch.int64, device=dev)  # (W²,)
    h, col = cells // w, cells % w  # (W²,) each

    def rows(query_cells: Tensor) -> Tensor:
        qh, qcol = query_cells // w, query_cells % w  # (N,) each
        dh = qh[:, None] - h[None, :] + (w - 1)  # (N, W²)
        dw = qcol[:, None] - col[None, :] + (w - 1)  # (N, W²)
        return dh * (2 * w - 1) + dw

    return rows


def relative_bias_table(
    num_buckets: int, num_heads: int, *, seed: int = 0, max_elements: int | None = None
) -> torch.Tensor:
    """A seeded bias table, the same numbers as
    ``torch.manual_seed(seed); nn.Embedding(num_buckets, num_heads).weight`` (T5's
    ``relative_attention_bias`` at initialisation), made without touching the global RNG.

    Args:
        num_buckets: rows ``NB`` (>= 1).
        num_heads: columns ``H`` (>= 1).
        seed: the seed, as ``torch.manual_seed`` takes it.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        (NB, H) float32 CPU tensor.
    """
    num_buckets = check_int("num_buckets", num_buckets, 1)
    num_heads = check_int("num_heads", num_heads, 1)
    return seeded_normal(num_buckets, num_heads, seed=seed, max_elements=max_elements)


def relative_bias(
    buckets: torch.Tensor,
    table: torch.Tensor,
    *,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
) -> torch.Tensor:
    """Per-head bias gathered from the table: ``bias[h, i, j] = table[buckets[i, j], h]``.

    As T5's ``compute_bias`` (``relative_attention_bias(buckets).permute(2, 0, 1)``). The gather is
    exact; the values are cast once to ``dtype``.

    Args:
        buckets: (T, S) integer bucket ids in ``[0, NB)``.
        table: (NB, H) bias table.
        dtype: floating dtype of the result.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        (H, T, S) bias on ``buckets``' device.

    Raises:
        InvalidArgument: wrong ranks, non-integer buckets, or a bucket id outside the table.
    """
    dtype = resolve_dtype(dtype)
    if buckets.dim() != 2:
        raise InvalidArgument(
            f"buckets must be 2-D (T, S), got shape {tuple(buckets.shape)}", field="buckets"
        )
    if table.dim() != 2:
        raise InvalidArgument(
            f"table must be 2-D (NB, H), got shape {tuple(table.shape)}", field="table"
        )
    if buckets.is_floating_point() or buckets.is_complex() or buckets.dtype == torch.bool:
        raise InvalidArgument(
            f"buckets must hold integers, got dtype {buckets.dtype}", field="buckets"
        )
    check_elements(
        buckets.numel() * table.shape[1],
        what=f"the bias (H={table.shape[1]}, T={buckets.shape[0]}, S={buckets.shape[1]})",
        max_elements=max_elements,
    )
    n_rows = table.shape[0]
    if buckets.numel() > 0:
        low, high = int(buckets.min()), int(buckets.max())
        if low < 0 or high >= n_rows:
            raise InvalidArgument(
                f"bucket ids must lie in [0, {n_rows}) for a table of {n_rows} rows, "
                f"got ids from {low} to {high}",
                field="buckets",
            )
    held = buckets.to(torch.int64)  # (T, S)
    shape = (int(buckets.shape[0]), int(buckets.shape[1]))
    blocks = _bias_blocks(lambda query: held[query], shape, table, dtype, buckets.device)
    return blocks.whole()  # (H, T, S): the gather of relative_bias_blocks, all rows at once


__all__ = [
    "Bucketing",
    "clipped_bucket",
    "deberta_log_bucket",
    "deberta_positions_blocks",
    "deberta_relative_positions",
    "num_relative_buckets",
    "relative_bias",
    "relative_bias_table",
    "relative_buckets",
    "relative_position_bucket",
    "relative_positions",
    "swin_bias_blocks",
    "swin_index_blocks",
    "swin_relative_position_index",
]


# ---------------------------------------------------------------------------------------------
# The relative endpoint kind (posenc.core.kinds)
# ---------------------------------------------------------------------------------------------


def _lengths(p: Mapping[str, Any]) -> tuple[int, int]:
    """``(T, S)`` of resolved fields: a Swin window's ``(W², W²)`` (``seq_len`` and ``key_len``
    optional, and W² when given), else ``seq_len`` (required) and ``key_len``."""
    if p["bucketing"] == "swin":
        if p.get("window_size") is None:
            raise MissingField(
                "window_size is required with bucketing swin: give window_size or a Swin config",
                field="window_size",
            )
        cells = p["window_size"] ** 2
        _check_window_lengths(p, cells)
        return cells, cells
    if p["bucketing"] == "deberta":
        _check_deberta_buckets(p["position_buckets"], p["max_position"])
    if p.get("seq_len") is None:
        raise MissingField(
            "seq_len is required: give seq_len (T, the number of queries)", field="seq_len"
        )
    return bias_lengths(p)


def _check_window_lengths(p: Mapping[str, Any], cells: int) -> None:
    for name in ("seq_len", "key_len"):
        if p.get(name) is not None and p[name] != cells:
            raise InvalidArgument(
                f"{name} must be W² = {cells} for a Swin window of window_size "
                f"{p['window_size']}, got {p[name]}",
                field=name,
            )


def _check_relative(p: Mapping[str, Any]) -> None:
    """Cross-field checks; also run on the caller's fields before a config is merged (absent
    fields are None there, ``bucketing`` included)."""
    scheme = p.get("bucketing")
    if scheme == "swin":
        if p.get("window_size") is not None:
            _check_window_lengths(p, p["window_size"] ** 2)
    else:
        check_bias_lengths(p)
    if scheme == "deberta" and None not in (p.get("position_buckets"), p.get("max_position")):
        _check_deberta_buckets(p["position_buckets"], p["max_position"])
    if scheme == "deberta" and p.get("num_heads") is not None:
        raise InvalidArgument(
            f"num_heads={p['num_heads']} given with bucketing deberta: DeBERTa's relative "
            "positions index its shared rel_embeddings (disentangled attention), not a per-head "
            "bias table; omit num_heads",
            field="num_heads",
        )


def _bucket_count(p: Mapping[str, Any]) -> int | None:
    """Rows of the bias table the buckets index (None: DeBERTa, whose ids are signed)."""
    if p["bucketing"] == "swin":
        return int((2 * p["window_size"] - 1) ** 2)
    if p["bucketing"] == "deberta":
        return None
    return num_relative_buckets(
        num_buckets=p["num_buckets"], max_distance=p["max_distance"], bucketing=p["bucketing"]
    )


def _bucket_arguments(p: Mapping[str, Any]) -> dict[str, Any]:
    return {k: p[k] for k in ("num_buckets", "max_distance", "bidirectional", "bucketing")}


def _relative_shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    seq_len, key_len = _lengths(p)
    shapes: dict[str, tuple[int, ...]] = {"buckets": (seq_len, key_len)}
    if p["num_heads"] is not None and p["bucketing"] != "deberta":
        shapes["bias"] = (p["num_heads"], seq_len, key_len)
    return shapes


def _relative_buckets(p: Mapping[str, Any], ctx: kinds.Context) -> torch.Tensor:
    seq_len, key_len = _lengths(p)
    if p["bucketing"] == "swin":
        return swin_relative_position_index(p["window_size"], device=ctx.device)
    if p["bucketing"] == "deberta":
        return deberta_relative_positions(
            seq_len,
            key_len,
            position_buckets=p["position_buckets"],
            max_position=p["max_position"],
            device=ctx.device,
        )
    return relative_buckets(seq_len, key_len, **_bucket_arguments(p), device=ctx.device)


def _relative_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, torch.Tensor]:
    buckets = _relative_buckets(p, ctx)  # (T, S) int64
    tensors = {"buckets": buckets}
    count = _bucket_count(p)
    if p["num_heads"] is not None and count is not None:
        table = relative_bias_table(count, p["num_heads"], seed=p["seed"])
        tensors["bias"] = relative_bias(buckets, table.to(ctx.device), dtype=ctx.dtype)
    return tensors


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


def _t5_rows(
    seq_len: int, key_len: int, bucket: Callable[[Tensor], Tensor], dev: torch.device
) -> Callable[[Tensor], Tensor]:
    """T5's one formula, for the whole buckets and their row blocks alike: queries ``(N,)`` ->
    their rows ``(N, S)`` of ``bucket(j - (i + S - T))``."""
    key_pos = torch.arange(key_len, dtype=torch.int64, device=dev)  # (S,)

    def rows(query: Tensor) -> Tensor:
        return bucket(key_pos[None, :] - (query + (key_len - seq_len))[:, None])  # (N, S)

    return rows


def _index_blocks(
    rows: Callable[[Tensor], Tensor], shape: tuple[int, int], dev: torch.device
) -> TableBlocks:
    """The ``(T, S)`` int64 index whose query rows ``rows`` computes, in row blocks."""

    def fill(start: int, stop: int, out: Tensor) -> None:
        out.copy_(rows(torch.arange(start, stop, device=dev)))

    return TableBlocks("buckets", shape, torch.int64, fill, dev)


def _bias_blocks(
    rows: Callable[[Tensor], Tensor],
    shape: tuple[int, int],
    table: Tensor,
    dtype: torch.dtype,
    dev: torch.device,
) -> TableBlocks:
    """:func:`relative_bias` ``(H, T, S)`` of ``table`` ``(NB, H)`` over the index whose query
    rows ``rows`` computes, in blocks of its ``H·T`` rows: row ``h·T + i`` is
    ``table[rows(i), h]``, cast once."""
    seq_len, key_len = shape
    table = table.to(dev)

    def fill(start: int, stop: int, out: Tensor) -> None:
        flat = torch.arange(start, stop, device=dev)  # (N,) h·T + i
        head = torch.div(flat, seq_len, rounding_mode="floor")  # (N,)
        out.copy_(table[rows(flat - head * seq_len), head[:, None]])  # (N, S)

    return TableBlocks("bias", (table.shape[1], seq_len, key_len), dtype, fill, dev)


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
    """:func:`~posenc.relative_schemes.relative.relative_buckets` ``(T, S)`` int64 in row blocks."""
    seq_len, key_len = check_lengths(seq_len, key_len)
    bucket = _bucket_fn(num_buckets, max_distance, bidirectional, bucketing)
    dev = device_or_cpu(device)
    return _index_blocks(_t5_rows(seq_len, key_len, bucket, dev), (seq_len, key_len), dev)


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
    """:func:`~posenc.relative_schemes.relative.relative_bias` ``(H, T, S)`` of the seeded table, in blocks of
    its ``H·T`` rows: row ``h·T + i`` is ``table[buckets[i, :], h]``, cast once."""
    seq_len, key_len = check_lengths(seq_len, key_len)
    bucket = _bucket_fn(num_buckets, max_distance, bidirectional, bucketing)
    n_buckets = num_relative_buckets(
        num_buckets=num_buckets, max_distance=max_distance, bucketing=bucketing
    )
    dev = device_or_cpu(device)
    table = relative_bias_table(n_buckets, num_heads, seed=seed)  # (NB, H) float32
    rows = _t5_rows(seq_len, key_len, bucket, dev)
    return _bias_blocks(rows, (seq_len, key_len), table, resolve_dtype(dtype), dev)


def deberta_positions_blocks(
    seq_len: int,
    key_len: int | None = None,
    *,
    position_buckets: int | None = None,
    max_position: int | None = None,
    device: str | torch.device | None = None,
) -> TableBlocks:
    """:func:`deberta_relative_positions` ``(T, S)`` int64 in row blocks."""
    bucketed = _check_deberta_buckets(position_buckets, max_position)
    seq_len, key_len = check_lengths(seq_len, key_len)
    dev = device_or_cpu(device)
    rows = _deberta_rows(key_len, position_buckets if bucketed else None, max_position, dev)
    return _index_blocks(rows, (seq_len, key_len), dev)


def swin_index_blocks(window_size: int, *, device: str | torch.device | None = None) -> TableBlocks:
    """:func:`swin_relative_position_index` ``(W², W²)`` int64 in row blocks."""
    w = check_int("window_size", window_size, 1)
    dev = device_or_cpu(device)
    return _index_blocks(_swin_rows(w, dev), (w * w, w * w), dev)


def swin_bias_blocks(
    window_size: int,
    *,
    num_heads: int,
    seed: int = 0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> TableBlocks:
    """:func:`relative_bias` ``(H, W², W²)`` of a seeded ``(2W - 1)²``-row table over a Swin
    window's index, in blocks of its ``H·W²`` rows."""
    w = check_int("window_size", window_size, 1)
    dev = device_or_cpu(device)
    table = relative_bias_table((2 * w - 1) ** 2, num_heads, seed=seed)  # ((2W-1)², H)
    return _bias_blocks(_swin_rows(w, dev), (w * w, w * w), table, resolve_dtype(dtype), dev)


def _relative_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    seq_len, key_len = _lengths(p)
    scheme = p["bucketing"]
    if scheme == "swin":
        tables = {"buckets": swin_index_blocks(p["window_size"], device=ctx.device)}
        if p["num_heads"] is not None:
            tables["bias"] = swin_bias_blocks(
                p["window_size"],
                num_heads=p["num_heads"],
                seed=p["seed"],
                device=ctx.device,
                dtype=ctx.dtype,
            )
        return tables
    if scheme == "deberta":
        return {
            "buckets": deberta_positions_blocks(
                seq_len,
                key_len,
                position_buckets=p["position_buckets"],
                max_position=p["max_position"],
                device=ctx.device,
            )
        }
    kw = {**_bucket_arguments(p), "device": ctx.device}
    tables = {"buckets": relative_buckets_blocks(seq_len, key_len, **kw)}
    if p["num_heads"] is not None:
        tables["bias"] = relative_bias_blocks(
            seq_len, key_len, num_heads=p["num_heads"], seed=p["seed"], dtype=ctx.dtype, **kw
        )
    return tables


def _relative_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    seq_len, key_len = _lengths(p)
    scheme = p["bucketing"]
    if scheme == "deberta":
        own: tuple[str, ...] = ("position_buckets", "max_position")
    elif scheme == "swin":
        own = ("window_size", "num_heads", "seed")
    else:
        own = ("num_buckets", "max_distance", "bidirectional", "num_heads", "seed")
    return {
        "kind": "relative",
        "seq_len": seq_len,
        "key_len": key_len,
        "bucketing": scheme,
        "bucket_count": _bucket_count(p),
        **{k: p[k] for k in own},
        "preset": p["preset"],
        "dtype": p["dtype"],
        **kinds.derived(RELATIVE, p),
    }


RELATIVE: kinds.Kind = kinds.Kind(
    name="relative",
    path="/v1/biases/relative",
    tag="biases",
    summary="Relative position buckets (T5, DeBERTa, Swin) and bias",
    description="`bucketing` log: T5's `_relative_position_bucket` of `j − (i + S − T)`; clip: "
    "those distances clamped; deberta: DeBERTa-v2/v3's `build_relative_position` (`i − j`, "
    "log-bucketed beyond `position_buckets // 2`, float64 log); swin: a Swin window's "
    "`relative_position_index` (W², W²). With `num_heads`, a seeded bias table "
    "`torch.manual_seed(seed); nn.Embedding(n_buckets, H)` gathered per pair (T5 and "
    "Swin, whose table has (2W − 1)² rows); `bias` only when `num_heads` is given.",
    fields=(
        kinds.FieldSpec(
            "seq_len",
            "int",
            "T, the number of queries (required, except with a Swin window: W², optional)",
            None,
            minimum=1,
            example=4,
        ),
        kinds.FieldSpec("key_len", "int", "S (default T)", None, minimum=1),
        kinds.FieldSpec(
            "num_buckets",
            "int",
            "log bucketing: the number of buckets (default 32 when neither preset nor "
            "config gives it)",
            32,
            minimum=2,
            sourced=True,
        ),
        kinds.FieldSpec(
            "max_distance",
            "int",
            "log: distance of the last bucket; clip: the clamp (default 128 when neither "
            "preset nor config gives it)",
            128,
            minimum=1,
            sourced=True,
        ),
        kinds.FieldSpec(
            "bidirectional",
            "bool",
            "keys on both sides of the query (default true)",
            True,
            sourced=True,
        ),
        kinds.FieldSpec(
            "bucketing",
            "str",
            "log: T5's _relative_position_bucket; clip: clamp to ±max_distance; deberta: "
            "DeBERTa-v2/v3's build_relative_position; swin: a Swin window's "
            "relative_position_index (default log; a DeBERTa or Swin config sets its own)",
            "log",
            choices=BUCKETINGS,
            sourced=True,
        ),
        kinds.FieldSpec(
            "position_buckets",
            "int",
            "deberta: DeBERTa's position_buckets; absent or <= 0: plain i − j",
            None,
            minimum=-1,
            sourced=True,
        ),
        kinds.FieldSpec(
            "max_position",
            "int",
            "deberta: max_position of the log buckets (the config's max_relative_positions, "
            "or max_position_embeddings where that is < 1)",
            None,
            minimum=1,
            sourced=True,
        ),
        kinds.FieldSpec(
            "window_size",
            "int",
            "swin: the window W (the config's window_size)",
            None,
            minimum=1,
            maximum=256,
            sourced=True,
        ),
        kinds.FieldSpec(
            "num_heads",
            "int",
            "H: when given, also the bias tensor (not with deberta)",
            None,
            minimum=1,
            sourced=True,
            example=2,
        ),
        kinds.FieldSpec(
            "seed",
            "int",
            "torch.manual_seed of the bias table",
            0,
            minimum=SEED_MIN,
            maximum=SEED_MAX,
        ),
        kinds.preset_field("relative"),
        kinds.config_field(
            "T5: relative_attention_num_buckets, relative_attention_max_distance, num_heads; "
            "DeBERTa-v2/v3 (relative_attention true): position_buckets, "
            "max_relative_positions, max_position_embeddings; Swin / Swin v2: window_size."
        ),
    ),
    tensors=(
        kinds.TensorSpec("buckets", ("T", "S"), integer=True),
        kinds.TensorSpec("bias", ("H", "T", "S")),
    ),
    shapes=_relative_shapes,
    compute=_relative_compute,
    check=_check_relative,
    meta=_relative_meta,
    blocks=_relative_blocks,
    row_elements=lambda p: _lengths(p)[1],
    sources=kinds.Sources("relative"),
    allocations=lambda p: (
        {"num_heads": (_bucket_count(p) or 0) * p["num_heads"]} if p["num_heads"] else {}
    ),
)
"""The relative endpoint kind (see :mod:`posenc.core.kinds`)."""
