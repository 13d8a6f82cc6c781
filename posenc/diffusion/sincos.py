"""Fixed 2-D and 3-D sin-cos position tables of diffusion transformers (SD3, PixArt, DiT, CogVideoX).

Reference: diffusers ``get_2d_sincos_pos_embed`` / ``get_3d_sincos_pos_embed`` and
``get_1d_sincos_pos_embed_from_grid`` (``models/embeddings.py``), as ``PatchEmbed`` and
``CogVideoXPatchEmbed`` call them:

- 1-D, ``E`` channels over positions ``p``: ``ω_k = 1 / 10000^(k / (E/2))`` for ``k < E/2``;
  the row is ``[sin(p·ω) | cos(p·ω)]``;
- 2-D, ``D`` channels: ``[1-D(D/2, column coordinate) | 1-D(D/2, row coordinate)]`` (diffusers'
  ``meshgrid(grid_w, grid_h, indexing="xy")`` puts the column coordinate first), rows in
  row-major order (row ``i``, column ``j``: ``i·W + j``);
- 3-D (CogVideoX): ``[1-D(D/4, frame) | 2-D(3D/4)]``, frames outermost.

Coordinates (float64 here, float32 in diffusers, whose ``omega`` is float64):

- PixArt, DiT (``PatchEmbed`` without a maximum): row ``i`` of ``H`` is
  ``i / (H / base_size) / interpolation_scale``, ``base_size = sample_size // patch_size``;
  PixArt's ``interpolation_scale`` is the config's, or ``max(sample_size // 64, 1)``; DiT's 1;
- SD3 (``pos_embed_max_size = M``): the ``M × M`` table of coordinates ``k / (M / base_size)``,
  cropped to the grid's centre: rows ``top + i``, ``top = (M − H) // 2``, columns likewise;
- CogVideoX without rotary: ``i / spatial_interpolation_scale``, ``t /
  temporal_interpolation_scale``.

Notation used for tensor shapes:
    N: patches (frames × height × width).
    D: the transformer's inner dimension (heads × head dim).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.diffusion.rules import ConfigValues, config_float, config_int, grid_coordinates, limit

__all__ = [
    "SINCOS_RULES",
    "SincosGrid",
    "SincosRule",
    "fill_sincos_rows",
    "sincos_1d",
]


@dataclass(frozen=True)
class SincosGrid:
    """One request read against a model's sin-cos rule.

    Attributes:
        model: the served name (``sd3``, ``pixart``, ``dit``, ``cogvideox``).
        frames, height, width: the grid in the transformer's patches.
        dim: ``D``, the table's width.
        temporal: ``D/4`` channels for a frame coordinate first (CogVideoX), else 0.
        numbers: what the coordinates use (base size, scales, crop).
        engine: coordinates in float32 as diffusers forms them (``precision="diffusers"``).
    """

    model: str
    frames: int
    height: int
    width: int
    dim: int
    temporal: int = 0
    numbers: Mapping[str, Any] = field(default_factory=dict)
    engine: bool = False

    @property
    def coordinate_dtype(self) -> torch.dtype:
        """float32 where diffusers forms the coordinates so, else float64."""
        return torch.float32 if self.engine else torch.float64

    @property
    def tokens(self) -> int:
        return self.frames * self.height * self.width


@dataclass(frozen=True)
class SincosRule:
    """One model's sin-cos table, as diffusers' patch embedding computes it.

    Attributes:
        name: the served name.
        class_names: diffusers transformer classes it stands for.
        reference: the diffusers functions it follows.
        keys: config keys it reads, with diffusers' defaults.
        read: ``(config values, frames, height, width) -> SincosGrid``.
        coordinates: ``(grid, t, h, w) -> (frame, row, column)`` float64 coordinates.
    """

    name: str
    class_names: tuple[str, ...]
    reference: str
    keys: Mapping[str, Any]
    read: Callable[[ConfigValues, int, int, int], SincosGrid]
    coordinates: Callable[[SincosGrid, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]


def sincos_1d(channels: int, positions: Tensor) -> Tensor:
    """``[sin(p·ω) | cos(p·ω)]`` (n, channels) float64, ``ω_k = 1/10000^(k/(channels/2))``, in
    the order of operations of diffusers' ``get_1d_sincos_pos_embed_from_grid``."""
    omega = torch.arange(channels // 2, dtype=torch.float64, device=positions.device)
    omega /= channels / 2.0
    omega = 1.0 / 10000**omega
    angles = torch.outer(positions.to(torch.float64), omega)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


def fill_sincos_rows(
    grid: SincosGrid, rule: SincosRule, start: int, stop: int, out: Tensor
) -> None:
    """Rows ``start … stop − 1`` of ``pos_embed`` (n, D) into ``out``, float64 until the cast:
    the one formula of the whole table and its row blocks."""
    rows = torch.arange(start, stop, dtype=torch.int64, device=out.device)
    t, h, w = grid_coordinates(rows, grid.frames, grid.height, grid.width)
    frame, row, column = rule.coordinates(grid, t, h, w)
    spatial = grid.dim - grid.temporal
    parts = [sincos_1d(spatial // 2, column), sincos_1d(spatial // 2, row)]
    if grid.temporal:
        parts.insert(0, sincos_1d(grid.temporal, frame))
    out.copy_(torch.cat(parts, dim=1))


def _inner_dim(values: ConfigValues, multiple: int) -> int:
    dim = config_int(values, "num_attention_heads") * config_int(values, "attention_head_dim")
    if dim % multiple:
        raise InvalidArgument(
            f"the sin-cos table's width (num_attention_heads x attention_head_dim = {dim}) must "
            f"be a multiple of {multiple}",
            field="config.attention_head_dim",
        )
    return dim


def _base_size(values: ConfigValues) -> int:
    """``sample_size // patch_size`` (>= 1): the grid the table was trained at."""
    base = config_int(values, "sample_size") // config_int(values, "patch_size")
    if base < 1:
        raise InvalidArgument(
            f"config.sample_size // patch_size must be >= 1, got {base}",
            field="config.sample_size",
        )
    return base


def _image_only(model: str, frames: int) -> None:
    if frames != 1:
        raise InvalidArgument(
            f"frames must be 1 for an image model ({model}), got {frames}", field="frames"
        )


# --- PixArt and DiT: PatchEmbed without a maximum -------------------------------------------


def _patched(
    name: str, fixed_scale: float | None
) -> Callable[[ConfigValues, int, int, int], SincosGrid]:
    def read(values: ConfigValues, frames: int, height: int, width: int) -> SincosGrid:
        _image_only(name, frames)
        dim = _inner_dim(values, 4)
        sample = config_int(values, "sample_size")
        base = _base_size(values)
        if fixed_scale is not None:
            scale = fixed_scale
        elif values.get("interpolation_scale") is not None:
            scale = config_float(values, "interpolation_scale")
        else:
            scale = float(max(sample // 64, 1))
        numbers = {"base_size": base, "interpolation_scale": scale}
        return SincosGrid(name, 1, height, width, dim, numbers=numbers)

    return read


def _patched_coordinates(
    grid: SincosGrid, t: Tensor, h: Tensor, w: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    base, scale = grid.numbers["base_size"], grid.numbers["interpolation_scale"]
    dtype = grid.coordinate_dtype
    row = h.to(dtype) / (grid.height / base) / scale
    column = w.to(dtype) / (grid.width / base) / scale
    return t.to(torch.float64), row.to(torch.float64), column.to(torch.float64)


PIXART = SincosRule(
    name="pixart",
    class_names=("PixArtTransformer2DModel", "Transformer2DModel"),
    reference="diffusers PatchEmbed / get_2d_sincos_pos_embed (models/embeddings.py), "
    "interpolation_scale = config or max(sample_size // 64, 1)",
    keys={
        "num_attention_heads": 16,
        "attention_head_dim": 72,
        "sample_size": 128,
        "patch_size": 2,
        "interpolation_scale": None,
    },
    read=_patched("pixart", None),
    coordinates=_patched_coordinates,
)

DIT = SincosRule(
    name="dit",
    class_names=("DiTTransformer2DModel",),
    reference="diffusers PatchEmbed / get_2d_sincos_pos_embed (models/embeddings.py), "
    "interpolation_scale 1",
    keys={"num_attention_heads": 16, "attention_head_dim": 72, "sample_size": 32, "patch_size": 2},
    read=_patched("dit", 1.0),
    coordinates=_patched_coordinates,
)


# --- SD3: the pos_embed_max_size table, cropped ---------------------------------------------


def _read_sd3(values: ConfigValues, frames: int, height: int, width: int) -> SincosGrid:
    _image_only("sd3", frames)
    dim = _inner_dim(values, 4)
    most = config_int(values, "pos_embed_max_size")
    base = _base_size(values)
    why = f"SD3 crops from its pos_embed_max_size {most} x {most} table"
    limit("height", height, most, why)
    limit("width", width, most, why)
    numbers = {
        "pos_embed_max_size": most,
        "base_size": base,
        "top": (most - height) // 2,
        "left": (most - width) // 2,
    }
    return SincosGrid("sd3", 1, height, width, dim, numbers=numbers)


def _sd3_coordinates(
    grid: SincosGrid, t: Tensor, h: Tensor, w: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    most, base = grid.numbers["pos_embed_max_size"], grid.numbers["base_size"]
    dtype = grid.coordinate_dtype
    row = (h + grid.numbers["top"]).to(dtype) / (most / base) / 1.0
    column = (w + grid.numbers["left"]).to(dtype) / (most / base) / 1.0
    return t.to(torch.float64), row.to(torch.float64), column.to(torch.float64)


SD3 = SincosRule(
    name="sd3",
    class_names=("SD3Transformer2DModel",),
    reference="diffusers PatchEmbed(pos_embed_max_size).cropped_pos_embed / "
    "get_2d_sincos_pos_embed (models/embeddings.py)",
    keys={
        "num_attention_heads": 18,
        "attention_head_dim": 64,
        "sample_size": 128,
        "patch_size": 2,
        "pos_embed_max_size": 96,
    },
    read=_read_sd3,
    coordinates=_sd3_coordinates,
)


# --- CogVideoX without rotary: 3-D sin-cos --------------------------------------------------


def _read_cogvideox(values: ConfigValues, frames: int, height: int, width: int) -> SincosGrid:
    if values.get("use_rotary_positional_embeddings"):
        raise InvalidArgument(
            "this CogVideoX config has use_rotary_positional_embeddings true: it rotates "
            "(POST /v1/encodings/diffusion-rope) and adds no sin-cos table",
            field="config.use_rotary_positional_embeddings",
        )
    if values.get("use_learned_positional_embeddings"):
        raise InvalidArgument(
            "this CogVideoX config has use_learned_positional_embeddings true: its table is a "
            "learned weight of the checkpoint, not a formula",
            field="config.use_learned_positional_embeddings",
        )
    dim = _inner_dim(values, 16)
    numbers = {
        "spatial_interpolation_scale": config_float(values, "spatial_interpolation_scale"),
        "temporal_interpolation_scale": config_float(values, "temporal_interpolation_scale"),
        "max_text_seq_length": values.get("max_text_seq_length"),
    }
    return SincosGrid("cogvideox", frames, height, width, dim, temporal=dim // 4, numbers=numbers)


def _cogvideox_coordinates(
    grid: SincosGrid, t: Tensor, h: Tensor, w: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    spatial = grid.numbers["spatial_interpolation_scale"]
    temporal = grid.numbers["temporal_interpolation_scale"]
    dtype = grid.coordinate_dtype
    return (
        (t.to(dtype) / temporal).to(torch.float64),
        (h.to(dtype) / spatial).to(torch.float64),
        (w.to(dtype) / spatial).to(torch.float64),
    )


COGVIDEOX_SINCOS = SincosRule(
    name="cogvideox",
    class_names=("CogVideoXTransformer3DModel",),
    reference="diffusers CogVideoXPatchEmbed._get_positional_embeddings / "
    "get_3d_sincos_pos_embed (models/embeddings.py)",
    keys={
        "num_attention_heads": 30,
        "attention_head_dim": 64,
        "spatial_interpolation_scale": 1.875,
        "temporal_interpolation_scale": 1.0,
        "max_text_seq_length": 226,
        "use_rotary_positional_embeddings": False,
        "use_learned_positional_embeddings": False,
    },
    read=_read_cogvideox,
    coordinates=_cogvideox_coordinates,
)

SINCOS_RULES: Mapping[str, SincosRule] = {r.name: r for r in (SD3, PIXART, DIT, COGVIDEOX_SINCOS)}
"""The sin-cos rules by served name."""
