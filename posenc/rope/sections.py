"""Multimodal RoPE (M-RoPE) tables: three position rows, one per axis, over frequency sections.

Qwen2-VL (Wang et al., 2024, "Qwen2-VL") gives each token three positions (temporal, height,
width) and splits the ``R/2`` rotary frequencies into ``mrope_section = [s_t, s_h, s_w]``
(``s_t + s_h + s_w = R/2``): frequency ``j`` turns with the position of the axis that owns it.

- contiguous (Qwen2-VL, Qwen2.5-VL; transformers' ``recomposition_frequencies`` of
  ``Qwen2_5_VLRotaryEmbedding``): the first ``s_t`` frequencies follow the temporal row, the next
  ``s_h`` the height row, the last ``s_w`` the width row;
- interleaved (Qwen3-VL; ``Qwen3VLTextRotaryEmbedding``): frequency ``j`` follows the height row
  when ``j ≡ 1 (mod 3)`` and ``j < 3·s_h``, the width row when ``j ≡ 2 (mod 3)`` and
  ``j < 3·s_w``, else the temporal row.

HunyuanOCR's XD-RoPE (four rows, P/W/H/T, ``xdrope_section`` of ``R/2``) as transformers 5.24's
``HunYuanVLRotaryEmbedding`` applies it (:func:`hunyuan_vl_cos_sin`) doubles each section and
splits the whole ``cat(θ, θ)`` width with them, so the two halves of a rotated pair follow
different rows (vLLM's ``XDRotaryEmbedding`` splits the half: :func:`posenc.rope.vllm.
xdrope_cos_sin`).

The chosen angles are then laid out as plain RoPE (``cat(θ, θ)`` for ``half``). Angles are float64
until the final cast, as in :mod:`posenc.rope.tables`; with three equal rows the tables equal
:func:`posenc.rope.rope_cos_sin`.

Notation: ``T`` sequence length, ``R`` rotary dimension.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.core.validate import check_choice
from posenc.rope.scaling import (
    ROPE_LAYOUTS,
    ROPE_ROTATIONS,
    RopeLayout,
    RopeRotation,
    RopeScaling,
    RopeTables,
    rope_inv_freq,
)


def check_mrope_section(rotary_dim: int, mrope_section: Sequence[int]) -> list[int]:
    """``mrope_section`` as a list, checked against ``rotary_dim`` (numbers only).

    Raises:
        InvalidArgument: not three non-negative ints, or a sum other than ``R/2``.
    """
    section = list(mrope_section)
    half = rotary_dim // 2
    if len(section) != 3 or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in section
    ):
        raise InvalidArgument(
            f"mrope_section must be three ints >= 0 (temporal, height, width), got {section!r}",
            field="mrope_section",
        )
    if sum(section) != half:
        raise InvalidArgument(
            f"mrope_section must sum to rotary_dim/2 = {half}, got {section} (sum {sum(section)})",
            field="mrope_section",
        )
    return section


def mrope_channel_axes(
    rotary_dim: int, mrope_section: Sequence[int], *, interleaved: bool = False
) -> Tensor:
    """Which position row (0 temporal, 1 height, 2 width) drives each of the ``R/2``
    frequencies: ``(R/2,)`` int64.

    Raises:
        InvalidArgument: not three non-negative ints, or a sum other than ``R/2``.
    """
    section = check_mrope_section(rotary_dim, mrope_section)
    half = rotary_dim // 2
    if not interleaved:
        return torch.cat([torch.full((s,), i, dtype=torch.int64) for i, s in enumerate(section)])
    axes = torch.zeros(half, dtype=torch.int64)
    for axis in (1, 2):
        axes[axis : section[axis] * 3 : 3] = axis
    return axes


def mrope_cos_sin(
    positions: Sequence[Sequence[int]] | Tensor,
    *,
    rotary_dim: int,
    mrope_section: Sequence[int],
    interleaved: bool = False,
    base: float = 10000.0,
    layout: RopeLayout = "half",
    scaling: RopeScaling | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    exponent_dim: int | None = None,
    rotation: RopeRotation = "positive",
) -> RopeTables:
    """M-RoPE cos/sin tables, attention scaling included.

    Args:
        positions: ``(3, T)`` integers ≥ 0: temporal, height and width rows.
        rotary_dim: ``R`` (even).
        mrope_section: ``[s_t, s_h, s_w]`` summing to ``R/2``.
        interleaved: Qwen3-VL's interleaving (else Qwen2-VL's contiguous sections).
        base, layout, scaling, device, dtype, exponent_dim, rotation: as
            :func:`posenc.rope.rope_cos_sin`; a length-dependent scaling sees
            ``max(positions) + 1``.

    Returns:
        :class:`~posenc.rope.RopeTables`: ``cos``, ``sin`` ``(T, R)``, ``inv_freq`` ``(R/2,)``.

    Raises:
        InvalidArgument: positions not ``(3, T)`` non-negative integers; a bad section; see
            :func:`posenc.rope.rope_inv_freq`.
    """
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_choice("rotation", rotation, ROPE_ROTATIONS)
    if isinstance(positions, Tensor):
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise InvalidArgument(
                f"positions must be integers, got a tensor of {positions.dtype}", field="positions"
            )
        pos = positions.detach().to("cpu", torch.int64)
    else:
        rows = [list(r) for r in positions]
        for i, row in enumerate(rows):
            for j, p in enumerate(row):
                if not isinstance(p, int) or isinstance(p, bool):
                    raise InvalidArgument(
                        f"positions[{i}][{j}] must be an integer, got {p!r}",
                        field=f"positions[{i}][{j}]",
                    )
        lengths = {len(r) for r in rows}
        if len(lengths) > 1:
            raise InvalidArgument(
                f"the three position rows must have the same length, got {sorted(lengths)}",
                field="positions",
            )
        pos = torch.tensor(rows, dtype=torch.int64)
    if pos.dim() != 2 or pos.shape[0] != 3 or pos.shape[1] == 0:
        raise InvalidArgument(
            f"M-RoPE positions must be (3, T) with T >= 1 (temporal, height, width rows), got "
            f"shape {tuple(pos.shape)}",
            field="positions",
        )
    if int(pos.min()) < 0:
        raise InvalidArgument(f"positions must be >= 0, got {int(pos.min())}", field="positions")
    axes = mrope_channel_axes(rotary_dim, mrope_section, interleaved=interleaved)
    inv_freq, attention_scaling = rope_inv_freq(
        rotary_dim, base, scaling, seq_len=int(pos.max()) + 1, exponent_dim=exponent_dim
    )
    dev = torch.device("cpu") if device is None else torch.device(device)
    angles = pos.to(dev, torch.float64)[..., None] * inv_freq.to(dev)  # (3, T, R/2)
    index = axes.to(dev)[None, None, :].expand(1, pos.shape[1], -1)  # (1, T, R/2)
    chosen = angles.gather(0, index)[0]  # (T, R/2): angle of the axis owning each frequency
    if layout == "half":
        full = torch.cat((chosen, chosen), dim=-1)  # (T, R)
    else:
        full = chosen.repeat_interleave(2, dim=-1)  # (T, R)
    # −θ (nanochat's rotation): sin times −scaling, an exact sign flip
    sin_scaling = -attention_scaling if rotation == "negative" else attention_scaling
    return RopeTables(
        cos=(full.cos() * attention_scaling).to(dtype),
        sin=(full.sin() * sin_scaling).to(dtype),
        inv_freq=inv_freq.to(device=dev, dtype=dtype),
        attention_scaling=attention_scaling,
    )


def check_section_rows(
    rule: str, key: str, positions: Tensor, inv_freq: Tensor, section: Sequence[int]
) -> None:
    """Refuses ``positions`` that are not one row per part of ``section`` (``(len(section),
    T)``), or a ``section`` that does not sum to the ``R/2`` frequencies of ``inv_freq``
    (HunYuanVL's and XD-RoPE's position rows); ``rule`` and ``key`` name them in the message."""
    half = int(inv_freq.numel())
    if sum(section) != half or positions.dim() != 2 or positions.shape[0] != len(section):
        raise InvalidArgument(
            f"{rule} need {len(section)} position rows and {key} summing to rotary_dim/2 = "
            f"{half}; got rows of shape {tuple(positions.shape)} and {key} {list(section)}",
            field="positions",
        )


def hunyuan_vl_cos_sin(
    positions: Tensor, inv_freq: Tensor, section: Sequence[int]
) -> tuple[Tensor, Tensor]:
    """transformers' ``HunYuanVLRotaryEmbedding.recomposition_frequencies``: the ``half``
    table ``cat(θ, θ)`` of each position row, split into parts ``2·section[i]`` wide, part
    ``i`` from row ``i``; ``(T, R)`` float64 cos and sin (attention scaling 1).

    With ``section = [16, 16, 16, 16]`` and ``R = 128``: channels 0-31 follow row 0, 32-63 row 1,
    64-95 (the second copy of frequencies 0-31) row 2, 96-127 row 3; one row repeated four
    times gives plain RoPE.

    Args:
        positions: ``(len(section), T)`` integers ≥ 0.
        inv_freq: ``(R/2,)``; ``sum(section) == R/2``.
    """
    check_section_rows("HunYuanVL's sections", "sections", positions, inv_freq, section)
    widths = torch.tensor([2 * int(s) for s in section])
    axis = torch.repeat_interleave(torch.arange(len(section)), widths)  # (R,): row per channel
    full = torch.cat((inv_freq, inv_freq)).to(torch.float64)  # (R,)
    angles = positions.to(torch.float64)[axis, :].T * full[None, :]  # (T, R)
    return angles.cos(), angles.sin()
