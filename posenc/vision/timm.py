"""timm's vision rotary tables (``engine: "timm"`` on vision-rope).

timm builds the rotary embedding of its ViTs with one factory,
``timm.layers.pos_embed_sincos.create_rope_embed(rope_type, dim, num_heads, **kwargs)``; the
request's ``config`` is that call's arguments, named as timm names them. Three families:

- ``cat`` / ``base`` (``RotaryEmbeddingCat`` / ``RotaryEmbedding``, through
  ``build_rotary_pos_embed``): EVA-02's axial RoPE (Fang et al., 2023, "EVA-02", pixel
  frequencies ``π·linspace(1, max_res/2, F)`` or ``π·2^linspace(0, log2(max_res) − 1, F)`` over
  a grid in ``[−1, 1]``) and ROPE-ViT's axial RoPE (Heo et al., 2024, "Rotary Position Embedding
  for Vision Transformer": ``in_pixels=False``, ``F`` frequencies ``θ^(−i/F)`` over patch
  indices), with ``ref_feat_shape`` (EVA's rescale to the pretraining grid), ``grid_offset``,
  ``grid_indexing`` and ``grid_type``;
- ``mixed`` (``RotaryEmbeddingMixed``, ROPE-ViT's RoPE-Mixed): per block and head, frequencies
  ``(f_x, f_y)`` turned by a random angle; the table is ``x·f_x + y·f_y``, interleaved. Its
  frequencies are trained weights: here they are timm's initial ones, the module built right
  after ``torch.manual_seed(seed)``;
- ``dinov3`` (``RotaryEmbeddingDinoV3``, NaFlexViT's and timm's DINOv3): patch centres in
  ``[−1, 1]``, angles ``2π·c / period``, in eval mode (no coordinate augmentation).

Angles are float64 here, cast once (timm computes them in float32). ``cos`` and ``sin`` are laid
out as timm applies them: ``half`` (``rotate_half=True``) or ``interleaved``.

Notation used for tensor shapes: ``N`` tokens of all the grids (times blocks and heads for
``mixed``), ``Dh`` the head dimension, ``F`` frequencies of one axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.core.blocks import TableBlocks
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument
from posenc.core.validate import device_or_cpu

__all__ = [
    "TIMM_MODULES",
    "TIMM_ROPE_TYPES",
    "TimmRopeSpec",
    "timm_position_ids",
    "timm_rope_angles",
    "timm_rope_blocks",
    "timm_rope_cos_sin",
    "timm_rope_fill",
    "timm_rope_spec",
]

RopeType = Literal["base", "cat", "mixed", "dinov3"]
TIMM_ROPE_TYPES: tuple[str, ...] = ("base", "cat", "mixed", "dinov3")
#: The timm class each ``rope_type`` builds.
TIMM_MODULES: dict[str, str] = {
    "base": "timm.layers.pos_embed_sincos.RotaryEmbedding",
    "cat": "timm.layers.pos_embed_sincos.RotaryEmbeddingCat",
    "mixed": "timm.layers.pos_embed_sincos.RotaryEmbeddingMixed",
    "dinov3": "timm.layers.pos_embed_sincos.RotaryEmbeddingDinoV3",
}

#: create_rope_embed's arguments and their defaults in timm 1.0 (the modules' own defaults).
_COMMON = {"rope_type": "cat", "dim": 768, "num_heads": 12}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "cat": {
        "max_res": 224,
        "temperature": 10000.0,
        "in_pixels": True,
        "linear_bands": False,
        "ref_feat_shape": None,
        "grid_offset": 0.0,
        "grid_indexing": "ij",
        "rotate_half": False,
        "grid_type": None,
        "normalize_coords": "separate",
    },
    "mixed": {"depth": None, "temperature": 10.0, "grid_indexing": "xy", "seed": 0},
    "dinov3": {
        "temperature": 100.0,
        "min_period": None,
        "max_period": None,
        "normalize_coords": "separate",
        "grid_offset": 0.0,
        "grid_indexing": "ij",
        "rotate_half": True,
    },
}
_DEFAULTS["base"] = _DEFAULTS["cat"]
#: Keys create_rope_embed drops for a type (accepted, not read).
_IGNORED = {
    "mixed": ("in_pixels", "ref_feat_shape", "rotate_half"),
    "dinov3": ("in_pixels", "ref_feat_shape"),
}


@dataclass(frozen=True)
class TimmRopeSpec:
    """A timm rotary module, as ``create_rope_embed`` builds it, and the grids to cover.

    Attributes:
        rope_type: ``base``, ``cat``, ``mixed`` or ``dinov3``.
        head_dim: ``Dh = dim // num_heads``.
        args: the module's arguments (defaults filled in).
        grids: the ``(h, w)`` grids, in order.
    """

    rope_type: RopeType
    head_dim: int
    num_heads: int
    args: Mapping[str, Any] = field(default_factory=dict)
    grids: tuple[tuple[int, int], ...] = ()

    @property
    def layout(self) -> Literal["half", "interleaved"]:
        return "half" if self.rope_type != "mixed" and self.args["rotate_half"] else "interleaved"

    @property
    def width(self) -> int:
        """The columns of timm's sin and cos: ``4·(Dh // 4)``."""
        return 4 * (self.head_dim // 4)

    @property
    def copies(self) -> int:
        """Tables per token: ``depth · num_heads`` for ``mixed``, else 1."""
        return int(self.args["depth"]) * self.num_heads if self.rope_type == "mixed" else 1

    @property
    def tokens(self) -> int:
        """``N``: the rows of the tables."""
        return self.copies * sum(h * w for h, w in self.grids)


def _number(args: Mapping[str, Any], key: str, *, positive: bool = True) -> float:
    value = args[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(
            f"config.{key} must be a finite number, got {value!r}", field=f"config.{key}"
        )
    if positive and not value > 0:
        raise InvalidArgument(f"config.{key} must be > 0, got {value!r}", field=f"config.{key}")
    return float(value)


def _int(args: Mapping[str, Any], key: str) -> int:
    value = args[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31:
        raise InvalidArgument(
            f"config.{key} must be an int in [1, 2**31], got {value!r}", field=f"config.{key}"
        )
    return value


def _choice(args: Mapping[str, Any], key: str, allowed: Sequence[str | None]) -> None:
    if args[key] not in allowed:
        raise InvalidArgument(
            f"config.{key} must be one of {', '.join(map(str, allowed))}, got {args[key]!r}",
            field=f"config.{key}",
        )


def _check_args(rope_type: str, args: Mapping[str, Any]) -> None:
    """The numbers and names of one type's arguments (a 422 naming the key)."""
    if "temperature" in args and args["temperature"] is not None:
        _number(args, "temperature")
    if "grid_indexing" in args:
        _choice(args, "grid_indexing", ("ij", "xy"))
    if args.get("temperature", 0) is None and rope_type != "dinov3":
        raise InvalidArgument(
            f"config.temperature must be a number for rope_type {rope_type}",
            field="config.temperature",
        )
    if "normalize_coords" in args:
        _choice(args, "normalize_coords", ("separate", "min", "max"))
    if "grid_offset" in args:
        _number(args, "grid_offset", positive=False)
    if rope_type in ("cat", "base"):
        _int(args, "max_res")
        _choice(args, "grid_type", (None, "index", "pixel", "centered"))
        ref = args["ref_feat_shape"]
        if ref is not None and (
            not isinstance(ref, list | tuple)
            or len(ref) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in ref)
        ):
            raise InvalidArgument(
                f"config.ref_feat_shape must be [h, w] (positive ints), got {ref!r}",
                field="config.ref_feat_shape",
            )
    if rope_type == "mixed":
        if args["depth"] is None:
            raise InvalidArgument(
                "config.depth is required for rope_type mixed (one table per block)",
                field="config.depth",
            )
        _int(args, "depth")
        seed = args["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise InvalidArgument(
                f"config.seed must be an int in [0, 2**63), got {seed!r}", field="config.seed"
            )
    if rope_type == "dinov3":
        periods = (args["min_period"], args["max_period"])
        if (periods[0] is None) != (periods[1] is None):
            raise InvalidArgument(
                "config.min_period and config.max_period go together", field="config.min_period"
            )
        if periods[0] is not None:
            _number(args, "min_period")
            _number(args, "max_period")
        elif args["temperature"] is None:
            raise InvalidArgument(
                "config: rope_type dinov3 needs temperature or min_period and max_period",
                field="config.temperature",
            )


def timm_rope_spec(config: Any, grid_thw: Any) -> TimmRopeSpec:
    """Read ``create_rope_embed``'s arguments and check the grids (numbers only).

    Raises:
        InvalidArgument: an unknown ``rope_type`` or key, a bad value (``field`` names it), a
            grid with ``t`` other than 1 (timm's towers take images).
    """
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            "config must be an object: timm's create_rope_embed arguments", field="config"
        )
    rope_type = config.get("rope_type", _COMMON["rope_type"])
    if rope_type not in TIMM_ROPE_TYPES:
        raise InvalidArgument(
            f"config.rope_type must be one of {', '.join(TIMM_ROPE_TYPES)} (timm's "
            f"create_rope_embed), got {rope_type!r}",
            field="config.rope_type",
        )
    if rope_type == "mixed" and config.get("rotate_half"):
        raise InvalidArgument(
            "config.rotate_half: timm's mixed RoPE is interleaved only (create_rope_embed "
            "refuses rotate_half=True)",
            field="config.rotate_half",
        )
    known = {**_COMMON, **_DEFAULTS[rope_type]}
    unknown = sorted(set(config) - set(known) - set(_IGNORED.get(rope_type, ())))
    if unknown:
        raise InvalidArgument(
            f"config.{unknown[0]} is not an argument of timm's {rope_type} rotary embedding; "
            f"it takes {', '.join(sorted(known))}",
            field=f"config.{unknown[0]}",
        )
    args = {**known, **{k: v for k, v in config.items() if k in known}}
    _int(args, "dim")
    heads = _int(args, "num_heads")
    _check_args(rope_type, args)
    head_dim = args["dim"] // heads
    if head_dim < 4 or (rope_type == "mixed" and head_dim % 4):
        raise InvalidArgument(
            f"config: dim // num_heads = {head_dim} must be at least 4"
            + (" and a multiple of 4 for mixed" if rope_type == "mixed" else ""),
            field="config.num_heads",
        )
    return TimmRopeSpec(rope_type, head_dim, heads, args, _image_grids(grid_thw))


def _image_grids(grid_thw: Any) -> tuple[tuple[int, int], ...]:
    if grid_thw is None:
        raise InvalidArgument(
            "grid_thw is required with engine timm: the [1, h, w] patch grid of each image",
            field="grid_thw",
        )
    out = []
    for i, row in enumerate(grid_thw):
        t, h, w = row
        if t != 1:
            raise InvalidArgument(
                f"grid_thw[{i}] = {list(row)}: timm's vision towers take images, so t must be 1",
                field="grid_thw",
            )
        out.append((int(h), int(w)))
    if not out:
        raise InvalidArgument("grid_thw must hold at least one [t, h, w]", field="grid_thw")
    return tuple(out)


def _axis(
    k: Tensor, n: Tensor, spec: TimmRopeSpec, grid_type: str, ref: int | None, denom: Tensor
) -> Tensor:
    """float64 coordinate of index ``k`` on an axis of ``n`` (element-wise ``(R,)``: timm's
    ``_build_grid``)."""
    offset = float(spec.args.get("grid_offset", 0.0))
    kf, nf = k.to(torch.float64), n.to(torch.float64)
    if grid_type == "pixel":  # linspace(-1, 1, n)
        t = torch.where(n > 1, -1.0 + 2.0 * kf / (nf - 1).clamp(min=1), -1.0)
    elif grid_type == "index":
        t = kf + offset
    else:  # centered: (k + ½ + offset) / denominator, then 2c − 1
        t = (kf + 0.5 + offset) / denom
    if ref is not None:
        t = t / nf * ref  # EVA's rescale to the pretraining grid
    return 2.0 * t - 1.0 if grid_type == "centered" else t


def _grid_type(spec: TimmRopeSpec) -> str:
    if spec.rope_type == "mixed":
        return "index"
    if spec.rope_type == "dinov3":
        return "centered"
    return str(spec.args["grid_type"] or ("pixel" if spec.args["in_pixels"] else "index"))


def _coordinates(spec: TimmRopeSpec, token: Tensor) -> Tensor:
    """float64 ``(R, 2)``: the two coordinates of tokens ``token`` ``(R,)`` of all the grids
    (row-major in each), channels ``(y, x)`` for ``ij`` and ``(x, y)`` for ``xy`` (timm's
    ``_build_grid``; ``xy`` swaps ``feat_shape`` and ``ref_feat_shape`` together, so each axis
    keeps its own reference)."""
    counts = torch.tensor([h * w for h, w in spec.grids], dtype=torch.int64)  # (G,)
    ends = torch.cumsum(counts, 0)
    grid = torch.searchsorted(ends, token, right=True)  # (R,)
    local = token - (ends - counts)[grid]
    sizes = torch.tensor(spec.grids, dtype=torch.int64)  # (G, 2)
    h, w = sizes[grid, 0], sizes[grid, 1]
    mode = spec.args.get("normalize_coords", "separate")
    if mode == "separate":
        denom_h, denom_w = h, w
    else:
        pick = torch.maximum if mode == "max" else torch.minimum
        denom_h = denom_w = pick(h, w)
    ref = spec.args.get("ref_feat_shape")
    grid_type = _grid_type(spec)
    y = _axis(local // w, h, spec, grid_type, None if ref is None else int(ref[0]), denom_h)
    x = _axis(local % w, w, spec, grid_type, None if ref is None else int(ref[1]), denom_w)
    if spec.args.get("grid_indexing", "ij") == "xy":
        return torch.stack((x, y), dim=-1)
    return torch.stack((y, x), dim=-1)


def _bands(spec: TimmRopeSpec) -> Tensor:
    """float64 frequencies ``(F,)`` of ``cat``/``base`` (timm's ``_build_bands``)."""
    args = spec.args
    f = spec.head_dim // 4
    if args["in_pixels"]:
        max_freq = float(args["max_res"])
        if args["linear_bands"]:
            bands = torch.linspace(1.0, max_freq / 2, f, dtype=torch.float64)
        else:
            bands = 2 ** torch.linspace(0, math.log(max_freq, 2) - 1, f, dtype=torch.float64)
        return bands * math.pi
    return 1.0 / (float(args["temperature"]) ** (torch.arange(f, dtype=torch.float64) / f))


def _mixed_freqs(spec: TimmRopeSpec) -> Tensor:
    """float64 ``(2, L, H, Dh/2)``: timm's ``init_random_2d_freqs`` after
    ``torch.manual_seed(seed)`` (its random angles drawn in float32, as timm draws them)."""
    args = spec.args
    d, depth = spec.head_dim, int(args["depth"])
    mag = 1.0 / (float(args["temperature"]) ** (torch.arange(0, d, 4, dtype=torch.float64) / d))
    generator = torch.Generator().manual_seed(int(args["seed"]))
    angles = torch.rand(depth, spec.num_heads, 1, generator=generator).double() * 2 * math.pi
    fx = torch.cat((mag * angles.cos(), mag * (angles + math.pi / 2).cos()), dim=-1)
    fy = torch.cat((mag * angles.sin(), mag * (angles + math.pi / 2).sin()), dim=-1)
    return torch.stack((fx, fy), dim=0)


def timm_rope_angles(spec: TimmRopeSpec, start: int = 0, stop: int | None = None) -> Tensor:
    """float64 angles ``(R, 2F)`` (one value per rotated pair) of rows ``start … stop−1`` of
    the tables (``mixed``: rows run over blocks, then heads, then tokens)."""
    stop = spec.tokens if stop is None else stop
    per_copy = spec.tokens // spec.copies  # T: tokens of all the grids
    rows = torch.arange(start, stop)
    c = _coordinates(spec, rows % per_copy)  # (R, 2)
    if spec.rope_type == "mixed":
        freqs = _mixed_freqs(spec).flatten(1, 2)  # (2, L·H, Dh/2)
        copy = rows // per_copy  # (R,) block · H + head
        return c[:, 0, None] * freqs[0][copy] + c[:, 1, None] * freqs[1][copy]
    if spec.rope_type == "dinov3":
        return (2 * math.pi * c[:, :, None] / _periods(spec)).flatten(1)  # (R, 2F)
    return (c[:, :, None] * _bands(spec)).flatten(1)  # (R, 2F)


def _periods(spec: TimmRopeSpec) -> Tensor:
    """float64 periods ``(F,)`` of ``dinov3`` (timm's ``_compute_periods``)."""
    args = spec.args
    f = spec.head_dim // 4
    if args["min_period"] is not None:
        low, high = float(args["min_period"]), float(args["max_period"])
        return low * (high / low) ** torch.linspace(0, 1, f, dtype=torch.float64)
    return float(args["temperature"]) ** (
        2.0 * torch.arange(f, dtype=torch.float64) / (spec.head_dim // 2)
    )


def timm_rope_fill(spec: TimmRopeSpec, which: str, start: int, stop: int, out: Tensor) -> None:
    """Rows ``start … stop−1`` of ``cos`` or ``sin`` ``(N, 4F)`` into ``out``, cast once, in
    the layout timm applies them."""
    angles = timm_rope_angles(spec, start, stop).to(out.device)  # (R, 2F) float64
    values = angles.cos() if which == "cos" else angles.sin()
    if spec.layout == "half":
        out[:, : values.shape[-1]].copy_(values)
        out[:, values.shape[-1] :].copy_(values)
    else:
        out.view(out.shape[0], -1, 2).copy_(values[:, :, None].expand(-1, -1, 2))


def timm_rope_cos_sin(
    spec: TimmRopeSpec, *, dtype: torch.dtype = torch.float32, device: Any = None
) -> tuple[Tensor, Tensor]:
    """``cos`` and ``sin`` ``(N, 4F)`` laid out as timm applies them, cast once."""
    cos = timm_rope_blocks(spec, which="cos", dtype=dtype, device=device).whole()  # (N, 4F)
    sin = timm_rope_blocks(spec, which="sin", dtype=dtype, device=device).whole()  # (N, 4F)
    return cos, sin


def timm_rope_blocks(
    spec: TimmRopeSpec, *, which: str, dtype: torch.dtype = torch.float32, device: Any = None
) -> TableBlocks:
    """``cos`` or ``sin`` ``(N, 4F)`` of :func:`timm_rope_cos_sin` in row blocks:
    :func:`timm_rope_fill` on each block's rows, the same bytes."""
    if which not in ("cos", "sin"):
        raise InvalidArgument(f"which must be cos or sin, got {which!r}", field="which")

    def fill(start: int, stop: int, out: Tensor) -> None:
        timm_rope_fill(spec, which, start, stop, out)

    shape = (spec.tokens, spec.width)
    return TableBlocks(which, shape, resolve_dtype(dtype), fill, device_or_cpu(device))


def timm_position_ids(spec: TimmRopeSpec) -> Tensor:
    """``(N, 2)`` int64: each row's ``(row, column)`` in its grid (repeated per block and head
    for ``mixed``)."""
    ids = []
    for h, w in spec.grids:
        rows = torch.arange(h).repeat_interleave(w)
        cols = torch.arange(w).repeat(h)
        ids.append(torch.stack((rows, cols), dim=-1))
    return torch.cat(ids, dim=0).repeat(spec.copies, 1)  # blocks, heads, tokens for mixed
