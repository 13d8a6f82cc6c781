"""What a diffusion or video transformer's rotary rule is made of, and the table it gives.

Each model module (:mod:`posenc.diffusion.flux`, :mod:`~posenc.diffusion.wan`, …) declares one
:class:`RopeRule`: its served name, the diffusers transformer classes it stands for, the config
keys it reads with diffusers' defaults, where the text tokens go, and three small functions:

- ``read(config values, grid) -> RopeGrid``: the request checked against the model's limits,
  numbers only (a 422 before any tensor);
- ``video_ids(grid, t, h, w) -> (n, A)``: each video token's position per axis, float64;
- ``angles(grid, ids) -> (n, R/2)``: the rotation angle of each channel pair, float64.

:func:`fill_rows` is the one formula of the whole table and of its row blocks: rows ``start …
stop − 1`` of the model's token sequence (text first, last or absent, as the model concatenates),
ids and angles in float64, then ``cos``/``sin`` each angle on its pair's two adjacent channels
(every served model rotates adjacent pairs: diffusers' ``repeat_interleave_real`` /
``view_as_complex``), cast once into ``out``.

Notation used for tensor shapes:
    N: tokens of the joint sequence (text and video, as the model orders them).
    A: position axes (3: frame, row, column).
    R: rotated channels per head (or per hidden state, for LTX-Video).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument

__all__ = [
    "ConfigValues",
    "RopeGrid",
    "RopeRule",
    "TextPlace",
    "axis_frequencies",
    "concat_axes_angles",
    "fill_rows",
    "grid_coordinates",
]

TextPlace = Literal["first", "last", "cross_attention"]
"""Where a model puts its text tokens: before the video tokens in the joint sequence, after
them, or not in the rotated sequence at all (they reach the video through cross-attention)."""

ConfigValues = Mapping[str, Any]


@dataclass(frozen=True)
class RopeGrid:
    """One request read against a model's rule: everything its table depends on.

    Attributes:
        model: the served name (``flux``, ``wan`` …).
        frames, height, width: the latent grid in the transformer's patches.
        text_len: text tokens the model places in its rotated sequence (0 for cross-attention).
        axes: rotated channels given to each axis (summing, with ``pad``, to ``R``).
        pad: leading channels that are not rotated (LTX-Video pads ``R mod 6`` of them).
        numbers: the model's own numbers the ids and angles use (theta, crops, scales …).
        engine: diffusers' own arithmetic (``precision="diffusers"``): positions and angles in
            the dtype and order of operations diffusers uses (float32 where it does), instead of
            float64 throughout.
    """

    model: str
    frames: int
    height: int
    width: int
    text_len: int
    axes: tuple[int, ...]
    pad: int = 0
    numbers: Mapping[str, Any] = field(default_factory=dict)
    engine: bool = False

    @property
    def video_tokens(self) -> int:
        return self.frames * self.height * self.width

    @property
    def tokens(self) -> int:
        return self.text_len + self.video_tokens

    @property
    def rotary_dim(self) -> int:
        return self.pad + sum(self.axes)


@dataclass(frozen=True)
class RopeRule:
    """One diffusion transformer's rotary rule, as diffusers' module computes it.

    Attributes:
        name: the served name (the body's ``model``).
        class_names: diffusers transformer classes (a config's ``_class_name``) it stands for.
        reference: the diffusers module and function it follows.
        keys: config keys it reads, with diffusers' ``__init__`` defaults.
        text: where the text tokens go (:data:`TextPlace`).
        text_rotated: whether the text rows are rotated (False: the model leaves them as they
            are, which the table shows as the identity: ids 0, cos 1, sin 0).
        axis_names: one name per position axis.
        read: ``(config values, frames, height, width, text_len) -> RopeGrid``.
        video_ids: ``(grid, t, h, w) -> (n, A)`` float64 positions of video tokens.
        text_ids: ``(grid, j) -> (n, A)`` float64 positions of text token ``j``.
        angles: ``(grid, ids (n, A)) -> (n, (R - pad)/2)`` float64 angles in channel order.
        precision: how diffusers computes it (``float64`` angles, or ``float32`` ones).
        notes: what else a caller should know (meta).
    """

    name: str
    class_names: tuple[str, ...]
    reference: str
    keys: Mapping[str, Any]
    text: TextPlace
    text_rotated: bool
    axis_names: tuple[str, ...]
    read: Callable[[ConfigValues, int, int, int, int], RopeGrid]
    video_ids: Callable[[RopeGrid, Tensor, Tensor, Tensor], Tensor]
    text_ids: Callable[[RopeGrid, Tensor], Tensor]
    angles: Callable[[RopeGrid, Tensor], Tensor]
    precision: Literal["float64", "float32"]
    notes: str = ""


def axis_frequencies(dim: int, theta: float, *, device: torch.device | None = None) -> Tensor:
    """``1 / theta^(2i/dim)`` for ``i < dim/2``: (dim/2,) float64, in the order of operations of
    diffusers' ``get_1d_rotary_pos_embed`` (so float64 callers agree with it bit for bit)."""
    exponents = torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim
    return 1.0 / (theta**exponents)


def concat_axes_angles(
    grid: RopeGrid, ids: Tensor, theta: float, *, float32: bool = False
) -> Tensor:
    """The common rule: axis ``a`` takes ``axes[a]`` channels, its angles ``ids[:, a] ·
    axis_frequencies(axes[a])``, the axes one after the other: (n, R/2) float64.

    With ``float32`` (diffusers' ``get_1d_rotary_pos_embed`` at its default ``freqs_dtype``,
    or ``QwenEmbedRope.rope_params``): frequencies and products in float32, as diffusers forms
    them."""
    if float32:
        parts = []
        for a, d in enumerate(grid.axes):
            exponents = torch.arange(0, d, 2, dtype=torch.float32, device=ids.device) / d
            freqs = 1.0 / (theta**exponents)  # (d/2,) float32
            parts.append(torch.outer(ids[:, a].to(torch.float32), freqs))
        return torch.cat(parts, dim=1)
    parts = [
        ids[:, a : a + 1] * axis_frequencies(d, theta, device=ids.device)[None, :]
        for a, d in enumerate(grid.axes)
    ]
    return torch.cat(parts, dim=1)


def grid_coordinates(
    rows: Tensor, frames: int, height: int, width: int
) -> tuple[Tensor, Tensor, Tensor]:
    """``(t, h, w)`` of flat video rows ``t·H·W + h·W + w`` ``(n,)`` int64 each."""
    del frames
    plane = height * width
    t = torch.div(rows, plane, rounding_mode="floor")
    rest = rows - t * plane
    h = torch.div(rest, width, rounding_mode="floor")
    return t, h, rest - h * width


def _ids_of_rows(
    rule: RopeRule, grid: RopeGrid, start: int, stop: int, device: torch.device
) -> Tensor:
    """Rows ``start … stop − 1`` of the joint sequence's ids: (n, A) float64."""
    rows = torch.arange(start, stop, dtype=torch.int64, device=device)
    text_start = grid.video_tokens if rule.text == "last" else 0
    is_text = (rows >= text_start) & (rows < text_start + grid.text_len)
    video_rows = rows - (grid.text_len if rule.text == "first" else 0)
    ids = torch.empty((rows.numel(), len(rule.axis_names)), dtype=torch.float64, device=device)
    if bool(is_text.any()):
        ids[is_text] = rule.text_ids(grid, rows[is_text] - text_start)
    if not bool(is_text.all()):
        t, h, w = grid_coordinates(video_rows[~is_text], grid.frames, grid.height, grid.width)
        ids[~is_text] = rule.video_ids(grid, t, h, w)
    return ids


def fill_rows(
    rule: RopeRule, grid: RopeGrid, which: str, start: int, stop: int, out: Tensor
) -> None:
    """Rows ``start … stop − 1`` of ``ids`` (n, A), ``cos`` or ``sin`` (n, R) into ``out``:
    the one formula of the whole tables and their row blocks (float64, one cast)."""
    ids = _ids_of_rows(rule, grid, start, stop, out.device)
    if which == "ids":
        out.copy_(ids)
        return
    angles = rule.angles(grid, ids)  # (n, (R - pad)/2)
    if rule.text == "cross_attention" or rule.text_rotated or grid.text_len == 0:
        pass
    else:  # text rows stay as they are: ids 0 give angle 0 in every served rule
        text_start = grid.video_tokens if rule.text == "last" else 0
        rows = torch.arange(start, stop, device=out.device)
        angles[(rows >= text_start) & (rows < text_start + grid.text_len)] = 0.0
    values = torch.cos(angles) if which == "cos" else torch.sin(angles)
    values = values.repeat_interleave(2, dim=1)  # (n, R - pad): each pair's two channels
    if grid.pad:
        out[:, : grid.pad].fill_(1.0 if which == "cos" else 0.0)
    out[:, grid.pad :].copy_(values)


def check_positive(name: str, value: object) -> int:
    """A grid size: an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{name} must be an integer >= 1, got {value!r}", field=name)
    return value


def config_int(values: ConfigValues, key: str, minimum: int = 1) -> int:
    """An integer config value (``config.KEY``), at least ``minimum``."""
    value = values[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(
            f"config.{key} must be an integer >= {minimum}, got {value!r}", field=f"config.{key}"
        )
    return value


def config_float(values: ConfigValues, key: str) -> float:
    """A finite positive config value (``config.KEY``)."""
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(
            f"config.{key} must be a finite number, got {value!r}", field=f"config.{key}"
        )
    if value <= 0:
        raise InvalidArgument(f"config.{key} must be > 0, got {value!r}", field=f"config.{key}")
    return float(value)


def config_axes(values: ConfigValues, key: str, count: int = 3) -> tuple[int, ...]:
    """A list of ``count`` even channel widths (``config.KEY``)."""
    value = values[key]
    if (
        not isinstance(value, list | tuple)
        or len(value) != count
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 2 or v % 2 for v in value)
    ):
        raise InvalidArgument(
            f"config.{key} must be {count} even integers >= 2, got {value!r}",
            field=f"config.{key}",
        )
    return tuple(int(v) for v in value)


def no_text(model: str, text_len: int) -> int:
    """Text tokens of a cross-attention model: none in the rotated sequence."""
    del model, text_len
    return 0


def limit(name: str, value: int, most: int, why: str) -> None:
    """``value <= most``, or a 422 that says why the model stops there."""
    if value > most:
        raise InvalidArgument(
            f"{name} must be <= {most} for this model ({why}), got {value}", field=name
        )
