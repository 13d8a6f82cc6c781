"""|difference| against position as a PNG: ``POST /v1/configs/compare?format=png``.

One line per pair of engines, in its own colour, the vertical axis log scale (decades), the
horizontal axis the positions compared (linear). Each pixel column draws the largest
difference of the positions that fall in it, so a spike at one position of a million is never
lost. A difference of exactly 0 has no logarithm: it is drawn on the bottom edge (the legend
says so). The plot box, the decades shown and each pair's colour are also written as JSON in
the PNG text chunk ``posenc:plot``, so a program can read the picture back.

Needs Pillow (the ``service`` or ``client`` extra); the rest of the library does not.
"""

from __future__ import annotations

import colorsys
import io
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

from posenc.core.errors import InvalidArgument

__all__ = ["HEIGHT", "PALETTE", "WIDTH", "difference_png", "pair_colours"]

WIDTH, HEIGHT = 960, 540
"""The image's size in pixels."""

#: The first ten pairs' colours (Tableau 10); more pairs get evenly spaced hues.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)
_BOX = (84, 44, WIDTH - 300, HEIGHT - 56)  # plot area: left, top, right, bottom
_BACKGROUND, _INK, _GRID = (255, 255, 255), (0, 0, 0), (225, 225, 225)
_MAX_DECADES = 18


def pair_colours(n: int) -> list[tuple[int, int, int]]:
    """``n`` distinct RGB colours: :data:`PALETTE`, then hues spaced around the circle."""
    if n <= len(PALETTE):
        return list(PALETTE[:n])
    out = []
    for i in range(n):
        r, g, b = colorsys.hsv_to_rgb(i / n, 0.85, 0.8)
        out.append((round(r * 255), round(g * 255), round(b * 255)))
    if len(set(out)) < n:
        raise InvalidArgument(
            f"{n} pairs are too many to draw in distinct colours", field="engines"
        )
    return out


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow built without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _decades(curves: Sequence[np.ndarray]) -> tuple[int, int]:
    """(lowest, highest) power of ten on the axis: around the positive differences."""
    positive = [c[c > 0] for c in curves]
    values = np.concatenate(positive) if positive else np.zeros(0)
    if not values.size:
        return -17, -15
    hi = math.ceil(math.log10(float(values.max())))
    lo = math.floor(math.log10(float(values.min())))
    lo = max(lo, hi - _MAX_DECADES)
    return (lo, hi) if hi > lo else (hi - 1, hi)


def _columns(pos: np.ndarray, p0: int, p1: int) -> np.ndarray:
    """The pixel column of each position."""
    left, _, right, _ = _BOX
    span = max(p1 - p0, 1)
    return np.rint(left + (pos - p0) / span * (right - left)).astype(np.int64)


def _envelope(cols: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The columns that hold positions and the largest difference in each."""
    present = np.unique(cols)
    top = np.full(present.shape, -1.0)
    np.maximum.at(top, np.searchsorted(present, cols), delta)
    return present, top


def _row(value: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The pixel row of each difference (0 and below the axis: the bottom edge)."""
    _, top, _, bottom = _BOX
    logs = np.log10(np.where(value > 0, value, 10.0**lo))
    frac = (np.clip(logs, lo, hi) - lo) / (hi - lo)
    return np.rint(bottom - frac * (bottom - top)).astype(np.int64)


def _axes(draw: ImageDraw.ImageDraw, lo: int, hi: int, p0: int, p1: int, font: Any) -> None:
    left, top, right, bottom = _BOX
    step = max(1, math.ceil((hi - lo) / 9))
    for k in range(lo, hi + 1, step):
        y = int(_row(np.array([10.0**k]), lo, hi)[0])
        draw.line([(left, y), (right, y)], fill=_GRID)
        draw.text((left - 6, y), f"1e{k}", fill=_INK, font=font, anchor="rm")
    span = max(p1 - p0, 1)
    raw = span / 6
    magnitude = 10 ** math.floor(math.log10(max(raw, 1)))
    tick = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(p0 / tick) * tick
    for p in range(int(first), p1 + 1, max(int(tick), 1)):
        x = int(_columns(np.array([p]), p0, p1)[0])
        draw.line([(x, bottom), (x, bottom + 4)], fill=_INK)
        draw.text((x, bottom + 7), f"{p:,}", fill=_INK, font=font, anchor="mt")
    draw.rectangle([left, top, right, bottom], outline=_INK)
    draw.text(((left + right) // 2, HEIGHT - 8), "position", fill=_INK, font=font, anchor="md")


def difference_png(
    positions: np.ndarray, pairs: Sequence[tuple[str, np.ndarray]], *, title: str
) -> bytes:
    """Draw each pair's |difference| against position.

    Args:
        positions: the positions compared, ``(T,)`` integers (any order).
        pairs: ``(label, |difference| (T,))`` per pair, in the order they are listed.
        title: the line at the top.

    Returns:
        A :data:`WIDTH` x :data:`HEIGHT` RGB PNG, with ``posenc:plot`` (module docstring).

    Raises:
        InvalidArgument: no positions or no pair.
    """
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    if not pos.size or not pairs:
        raise InvalidArgument("nothing to draw: no positions or no pair", field="positions")
    curves = [np.abs(np.asarray(d, dtype=np.float64).reshape(-1)) for _, d in pairs]
    lo, hi = _decades(curves)
    p0, p1 = int(pos.min()), int(pos.max())
    colours = pair_colours(len(pairs))
    image = Image.new("RGB", (WIDTH, HEIGHT), _BACKGROUND)
    draw = ImageDraw.Draw(image)
    font = _font(12)
    _axes(draw, lo, hi, p0, p1, font)
    draw.text((_BOX[0], 14), title, fill=_INK, font=_font(14))
    cols = _columns(pos, p0, p1)
    legend = []
    room = _BOX[3] - _BOX[1] - 24
    step = 34 if 34 * len(pairs) <= room else max(13, room // len(pairs))
    for n, ((label, _), curve, colour) in enumerate(zip(pairs, curves, colours, strict=True)):
        x, top = _envelope(cols, curve)
        y = _row(top, lo, hi)
        points = [(int(a), int(b)) for a, b in zip(x, y, strict=True)]
        if len(points) == 1:
            draw.rectangle([points[0][0] - 2, points[0][1] - 2, points[0][0] + 2, points[0][1] + 2],
                           fill=colour)  # fmt: skip
        else:
            draw.line(points, fill=colour, width=2)
        ly = _BOX[1] + 4 + step * n
        draw.rectangle([_BOX[2] + 16, ly, _BOX[2] + 36, ly + min(12, step - 2)], fill=colour)
        biggest = float(curve.max()) if curve.size else 0.0
        if step == 34:
            draw.text((_BOX[2] + 44, ly - 2), label, fill=_INK, font=font)
            draw.text((_BOX[2] + 44, ly + 13), f"max {biggest:.3g}", fill=_INK, font=font)
        else:
            draw.text((_BOX[2] + 44, ly - 2), f"{label}: {biggest:.3g}", fill=_INK, font=font)
        legend.append({"label": label, "colour": list(colour), "max_abs_diff": biggest})
    draw.text((_BOX[2] + 16, _BOX[3] - 14), "0 is drawn on the bottom edge", fill=_INK, font=font)
    info = PngInfo()
    layout = {"box": list(_BOX), "decades": [lo, hi], "positions": [p0, p1], "pairs": legend}
    info.add_text("posenc:plot", json.dumps(layout))
    out = io.BytesIO()
    image.save(out, format="PNG", pnginfo=info)
    return out.getvalue()
