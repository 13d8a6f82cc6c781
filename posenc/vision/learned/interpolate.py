"""``interpolate_pos_encoding``: ViT, DeiT, DINOv2, CLIP, SigLIP, BLIP and their copies.

The tower reshapes its patch rows to the native ``s × s`` grid, resizes them with
``F.interpolate(size=(h, w), align_corners=False)`` (bicubic for most; antialiased where the
model says so: DINOv2 with registers) and puts the prefix rows back in front (Dosovitskiy et
al., 2021, "An Image is Worth 16x16 Words", §3.2; Caron et al., 2021, DINO's
``interpolate_pos_encoding``). The reference is each model's own ``interpolate_pos_encoding`` in
transformers 5 (``ViTEmbeddings``, ``DeiTEmbeddings`` keeps two prefix rows, ``Dinov2Embeddings``
upcasts to float32, ``CLIPVisionEmbeddings``, ``SiglipVisionEmbeddings`` has no class row...).
At the native grid the model adds the table as it is; bicubic and antialiased resizes to the
same size are the identity, so both paths agree.

The per-axis weights are ``F.interpolate`` of the ``s × s`` identity along that axis in float64,
the other axis kept at its size ``s`` (not squeezed to 1: torch's antialiased kernels weight a
one-wide axis differently), so that output ``[k, c]`` is the weight of row ``c``. Their Kronecker
product equals the resize of the whole ``s² × s²`` identity to float64 rounding.

Notation used for tensor shapes: ``s`` native side, ``n`` output length of one axis, ``D`` width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, ResizeRule

__all__ = ["INTERPOLATE", "interpolate_axis_weights", "interpolate_patch_rows"]


def interpolate_axis_weights(tower: LearnedTower, side: int, n: int) -> Tensor:
    """``(n, s)`` float64: how ``F.interpolate`` weights the ``s`` rows of one axis for each of
    its ``n`` outputs, computed by resizing the identity: the ``s × s`` identity resized to
    ``n × s`` (the other axis keeps its size, so its weights are one-hot), output ``[k, c]`` is
    the weight of row ``c`` in output ``k``. ``s²`` elements in, ``n·s`` out."""
    eye = torch.eye(side, dtype=torch.float64).reshape(1, 1, side, side)
    if tower.scale_offset is not None:  # the model's scale_factor, the other axis kept
        out = F.interpolate(
            eye,
            scale_factor=((n + tower.scale_offset) / side, 1.0),
            mode=tower.mode,
            align_corners=False,
        )  # (1, 1, n, s)
    else:
        out = F.interpolate(
            eye, size=(n, side), mode=tower.mode, align_corners=False, antialias=tower.antialias
        )  # (1, 1, n, s)
    return out[0, 0].contiguous()  # (n, s)


def interpolate_patch_rows(tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    """``(h·w, D)``: the patch rows ``(s², D)`` resized as the model's ``interpolate_pos_encoding``
    does it, in their dtype, with the same tensor layout (so the same kernel and the same bits)."""
    dim = rows.shape[-1]
    grid = rows.reshape(1, side, side, dim).permute(0, 3, 1, 2)  # (1, D, s, s) channels-last
    if tower.scale_offset is not None:  # HY-V4-VL: by scale factor, even at the native grid
        scale = ((h + tower.scale_offset) / side, (w + tower.scale_offset) / side)
        out = F.interpolate(grid, scale_factor=scale, mode=tower.mode, align_corners=False)
        return out.permute(0, 2, 3, 1).reshape(h * w, dim)
    if h == side and w == side:
        return rows
    out = F.interpolate(
        grid, size=(h, w), mode=tower.mode, align_corners=False, antialias=tower.antialias
    )  # (1, D, h, w)
    return out.permute(0, 2, 3, 1).reshape(h * w, dim)


INTERPOLATE = ResizeRule(
    name="interpolate_pos_encoding",
    axis_weights=interpolate_axis_weights,
    engine=interpolate_patch_rows,
)
