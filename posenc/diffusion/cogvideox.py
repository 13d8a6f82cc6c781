"""CogVideoX: 3-D RoPE (frame D/4, row and column 3D/8 each), text first and unrotated.

Reference: diffusers ``get_3d_rotary_pos_embed`` (``models/embeddings.py``) as
``CogVideoXPipeline._prepare_rotary_positional_embeddings`` calls it:

- CogVideoX 1.0 (``patch_size_t`` null): ``grid_type="linspace"`` over the crop that
  ``get_resize_crop_region_for_grid`` fits into the base grid ``(sample_height // p,
  sample_width // p)``: rows ``linspace(top, bottom·(H−1)/H, H)``, columns likewise, frames
  ``0 … F−1``;
- CogVideoX 1.5 (``patch_size_t`` set): ``grid_type="slice"``: positions ``0 … n−1``, the grid
  at most the base grid.

Angles per axis ``get_1d_rotary_pos_embed(dim, grid, theta=10000, use_real=True)`` (float32
there), interleaved. The processor rotates ``query[:, :, text_seq_length:]``: the text that comes
first is left as it is. Only configs with ``use_rotary_positional_embeddings`` (CogVideoX-5b, 1.5);
the others add the sin-cos table of ``POST /v1/encodings/sincos-2d``.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.diffusion.rules import (
    ConfigValues,
    RopeGrid,
    RopeRule,
    concat_axes_angles,
    config_int,
    limit,
)

THETA = 10000.0  # get_3d_rotary_pos_embed's default, which the pipeline keeps


def cogvideox_axes(head_dim: int) -> tuple[int, int, int]:
    """``(t, h, w)`` channels: ``D // 4`` and ``D // 8 · 3`` twice."""
    return head_dim // 4, head_dim // 8 * 3, head_dim // 8 * 3


def resize_crop_region(
    height: int, width: int, base_width: int, base_height: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """diffusers' ``get_resize_crop_region_for_grid((H, W), base_w, base_h)``."""
    ratio = height / width
    if ratio > base_height / base_width:
        resize_height, resize_width = base_height, round(base_height / height * width)
    else:
        resize_width, resize_height = base_width, round(base_width / width * height)
    top = round((base_height - resize_height) / 2.0)
    left = round((base_width - resize_width) / 2.0)
    return (top, left), (top + resize_height, left + resize_width)


def _read(values: ConfigValues, frames: int, height: int, width: int, text_len: int) -> RopeGrid:
    if not values.get("use_rotary_positional_embeddings"):
        raise InvalidArgument(
            "this CogVideoX config has use_rotary_positional_embeddings false: it adds a 3-D "
            "sin-cos table instead (POST /v1/encodings/sincos-2d)",
            field="config.use_rotary_positional_embeddings",
        )
    head_dim = config_int(values, "attention_head_dim", 8)
    if head_dim % 16:
        raise InvalidArgument(
            f"config.attention_head_dim must be a multiple of 16 for CogVideoX's 3-D rotary "
            f"split (D/4, 3D/8, 3D/8, each even), got {head_dim}",
            field="config.attention_head_dim",
        )
    p = config_int(values, "patch_size")
    base_h = config_int(values, "sample_height") // p
    base_w = config_int(values, "sample_width") // p
    if min(base_h, base_w) < 1:
        raise InvalidArgument(
            f"config.sample_height and sample_width // patch_size must be >= 1, got "
            f"{base_h} x {base_w}",
            field="config.sample_height",
        )
    numbers: dict[str, object] = {"base_height": base_h, "base_width": base_w}
    if values.get("patch_size_t") is None:
        numbers["grid_type"] = "linspace"
        numbers["crop"] = resize_crop_region(height, width, base_w, base_h)
    else:
        numbers["grid_type"] = "slice"
        why = f"CogVideoX 1.5 slices positions from its base grid {base_h}x{base_w}"
        limit("height", height, base_h, why)
        limit("width", width, base_w, why)
    return RopeGrid(
        "cogvideox", frames, height, width, text_len, cogvideox_axes(head_dim), numbers=numbers
    )


@functools.lru_cache(maxsize=4)
def _points32(start: float, end: float, size: int, device: torch.device) -> Tensor:
    """diffusers' float32 ``linspace(start, end, n)`` (n,), widened exactly: made once per axis
    rather than once per row block (float32 ``linspace`` is only reproduced whole)."""
    return torch.linspace(start, end, size, dtype=torch.float32, device=device).double()


def _axis(start: float, stop: float, size: int, index: Tensor, engine: bool) -> Tensor:
    """``linspace(start, stop·(n−1)/n, n)[index]``: (n,) float64 positions along one axis of
    the crop; in float64 straight from the index (no table), or as diffusers' float32 table."""
    end = stop * (size - 1) / size
    if engine:
        return _points32(float(start), end, size, index.device)[index]
    if size == 1:
        return torch.full(index.shape, float(start), dtype=torch.float64, device=index.device)
    return start + index.to(torch.float64) * ((end - start) / (size - 1))


def _video_ids(grid: RopeGrid, t: Tensor, h: Tensor, w: Tensor) -> Tensor:
    if grid.numbers["grid_type"] == "slice":
        return torch.stack([t, h, w], dim=1).to(torch.float64)
    (top, left), (bottom, right) = grid.numbers["crop"]
    frame = _axis(0, grid.frames, grid.frames, t, grid.engine)
    row = _axis(top, bottom, grid.height, h, grid.engine)
    column = _axis(left, right, grid.width, w, grid.engine)
    return torch.stack([frame, row, column], dim=1)


def _text_ids(grid: RopeGrid, j: Tensor) -> Tensor:
    return torch.zeros((j.numel(), 3), dtype=torch.float64, device=j.device)


def _angles(grid: RopeGrid, ids: Tensor) -> Tensor:
    return concat_axes_angles(grid, ids, THETA, float32=grid.engine)


COGVIDEOX = RopeRule(
    name="cogvideox",
    class_names=("CogVideoXTransformer3DModel",),
    reference="diffusers get_3d_rotary_pos_embed (models/embeddings.py) as "
    "CogVideoXPipeline._prepare_rotary_positional_embeddings calls it",
    keys={
        "attention_head_dim": 64,
        "patch_size": 2,
        "patch_size_t": None,
        "sample_height": 60,
        "sample_width": 90,
        "use_rotary_positional_embeddings": False,
    },
    text="first",
    text_rotated=False,
    axis_names=("frame", "height", "width"),
    read=_read,
    video_ids=_video_ids,
    text_ids=_text_ids,
    angles=_angles,
    precision="float32",
    notes="text tokens come first and are not rotated (ids 0, cos 1, sin 0); "
    "1.0 positions are fractional (a linspace over the crop), 1.5's are integers",
)
