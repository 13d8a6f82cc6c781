"""Heatmaps of tensors as PNG images: what the service's ``image/png`` format and the CLI's
``.png`` output draw.

A 2-D table is one panel with labelled axes, ticks and a colour bar; a 3-D tensor (an ALiBi or T5
bias, ``(H, T, S)``) is a grid of its leading index, or the one panel ``index`` picks. Colours:
viridis for one-signed data, a diverging red-blue map centred on 0 for signed data; −inf and NaN
(masked entries) are a neutral grey. The panel boxes and colour scale are also written as JSON in
the PNG text chunk ``posenc:layout``, so a program can read the picture back.

Needs Pillow (the ``service`` or ``client`` extra); the rest of the library does not.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

from posenc.core.errors import InvalidArgument

__all__ = ["heatmap_png"]


def _number_array(tensor: torch.Tensor) -> np.ndarray:
    """C-contiguous CPU numpy array of the tensor's values; bfloat16 widened to float32 (exact)."""
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


# viridis (van der Walt & Smith, the matplotlib default): every 16th entry of matplotlib's
# 256-entry table (lib/matplotlib/_cm_listed.py, _viridis_data) plus the last, at k/255.
_VIRIDIS_AT = (
    np.array([0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 255]) / 255
)
_VIRIDIS_RGB = np.array(
    [
        [0.267004, 0.004874, 0.329415],
        [0.282327, 0.094955, 0.417331],
        [0.278826, 0.175490, 0.483397],
        [0.258965, 0.251537, 0.524736],
        [0.229739, 0.322361, 0.545706],
        [0.199430, 0.387607, 0.554642],
        [0.172719, 0.448791, 0.557885],
        [0.149039, 0.508051, 0.557250],
        [0.127568, 0.566949, 0.550556],
        [0.120638, 0.625828, 0.533488],
        [0.157851, 0.683765, 0.501686],
        [0.246070, 0.738910, 0.452024],
        [0.369214, 0.788888, 0.382914],
        [0.515992, 0.831158, 0.294279],
        [0.678489, 0.863742, 0.189503],
        [0.845561, 0.887322, 0.099702],
        [0.993248, 0.906157, 0.143936],
    ]
)
# Diverging, for signed data centred on 0: ColorBrewer RdBu (11 classes, colorbrewer2.org),
# reversed so that negative is blue and positive red.
_RDBU_HEX = "053061 2166ac 4393c3 92c5de d1e5f0 f7f7f7 fddbc7 f4a582 d6604d b2182b 67001f"
_RDBU_RGB = np.array([[int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)] for h in _RDBU_HEX.split()])
_RDBU_AT = np.linspace(0.0, 1.0, len(_RDBU_RGB))

_MASKED_RGB = (128, 128, 128)  # −inf / NaN: a neutral grey that neither colour map contains
_BACKGROUND = (255, 255, 255)
_INK = (0, 0, 0)

_MAX_SIDE = 1024  # the image is at most this many pixels per side
_MAX_PANELS = 64  # a grid shows at most this many leading indices (use ?index= for the rest)
_MAX_PANEL_SIDE = 640  # small tables are enlarged up to this (panel's longer side, one panel)
_MIN_PANEL_SIDE = 40  # a one-row (1-D) panel is drawn at least this tall
_LEFT, _RIGHT, _TOP, _BOTTOM = 74, 120, 40, 52  # margins: y axis | colour bar | title | x axis
_GAP_X, _CAPTION = 12, 18  # between panels; the caption above each grid panel

# Axis names by tensor name, one per dimension (a bundle's meta["axes"][NAME] overrides).
_AXIS_NAMES: dict[str, tuple[str, ...]] = {
    "encoding": ("position", "dim"),
    "cos": ("position", "rotary dim"),
    "sin": ("position", "rotary dim"),
    "inv_freq": ("frequency index",),
    "bias": ("head", "query position i", "key position j"),
    "slopes": ("head",),
    "buckets": ("query position i", "key position j"),
    "position_ids": ("batch row", "token"),
    "attention_mask": ("batch row", "token"),
    "embeddings": ("batch row", "token", "dim"),
}


def _colormap(values: np.ndarray, *, diverging: bool) -> np.ndarray:
    """Values in [0, 1] (any shape) -> uint8 RGB (..., 3), linear between the control points."""
    at, rgb = (_RDBU_AT, _RDBU_RGB) if diverging else (_VIRIDIS_AT, _VIRIDIS_RGB)
    flat = values.reshape(-1)
    out = np.empty((flat.size, 3), dtype=np.uint8)
    for c in range(3):  # three channels, each one vectorised np.interp
        out[:, c] = np.rint(np.interp(flat, at, rgb[:, c]) * 255)
    return out.reshape(*values.shape, 3)


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow built without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.4g}"


def _nice_ticks(n: int, length_px: int, min_spacing_px: int = 56) -> list[int]:
    """Index ticks 0, k, 2k, ... for an axis of ``n`` cells drawn over ``length_px`` pixels."""
    if n <= 1:
        return [0]
    max_ticks = max(2, length_px // min_spacing_px)
    raw = (n - 1) / max_ticks
    magnitude = 10 ** math.floor(math.log10(max(raw, 1)))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(int(step), 1)
    return list(range(0, n, step))


def _sample_indices(n: int, pixels: int) -> np.ndarray:
    """Nearest-neighbour source index of each of ``pixels`` pixels over ``n`` cells."""
    idx = ((np.arange(pixels) + 0.5) * (n / pixels)).astype(np.int64)
    return np.minimum(idx, n - 1)


def _grid_shape(panels: int, rows: int, cols: int, avail_w: int, avail_h: int) -> tuple[int, int]:
    """(grid rows, grid cols) that makes the cells largest."""
    best = (1, panels)
    best_scale = -1.0
    for ncols in range(1, panels + 1):
        nrows = math.ceil(panels / ncols)
        w = (avail_w - (ncols - 1) * _GAP_X) / ncols
        h = (avail_h - nrows * _CAPTION - (nrows - 1) * _GAP_X) / nrows
        scale = min(w / cols, h / rows)
        if scale > best_scale:
            best, best_scale = (nrows, ncols), scale
    return best


def _text_width(draw: ImageDraw.ImageDraw, text: str, font: Any) -> int:
    left, _, right, _ = draw.textbbox((0, 0), text, font=font)
    return int(right - left)


def heatmap_png(  # noqa: C901, PLR0915 (allowed: pyproject.toml)
    name: str, tensor: torch.Tensor, meta: dict[str, Any], index: int | None
) -> bytes:
    """Draw ``tensor`` as a heatmap PNG.

    Shapes: () and (N,) are one row; (R, C) one panel; (P, R, C) a grid of P panels (at most
    ``_MAX_PANELS``), or panel ``index`` alone; more leading dimensions are flattened into P.
    """
    shape = tuple(int(n) for n in tensor.shape)
    ndim = len(shape)
    axes_meta = meta.get("axes") if isinstance(meta, dict) else None
    axis_names: Sequence[str] | None = None
    if isinstance(axes_meta, dict) and isinstance(axes_meta.get(name), list | tuple):
        axis_names = [str(a) for a in axes_meta[name]]
    if axis_names is None or len(axis_names) != ndim:
        # Known names fill the trailing dimensions: a 2-D "bias" is one head's (T, S).
        known = tuple(_AXIS_NAMES.get(name, ()))[-ndim:] if ndim else ()
        axis_names = tuple(f"axis {d}" for d in range(ndim - len(known))) + known

    if index is not None and ndim != 3:
        raise InvalidArgument(
            f"index picks one panel of a 3-D tensor; {name} has shape {list(shape)}, "
            "so leave index out",
            field="index",
        )

    values = _number_array(tensor)
    if values.dtype == np.bool_:
        values = values.astype(np.float32)
    elif values.dtype.kind in "iu":
        values = values.astype(np.float64)
    elif values.dtype == np.float16:
        values = values.astype(np.float32)
    if ndim == 0:
        panels = values.reshape(1, 1, 1)
    elif ndim == 1:
        panels = values.reshape(1, 1, shape[0])
    elif ndim == 2:
        panels = values.reshape(1, *shape)
    else:
        panels = values.reshape(-1, shape[-2], shape[-1])
    total_panels = panels.shape[0]
    panel_labels: list[str] = []
    if ndim >= 3:
        lead = axis_names[0] if ndim == 3 else "index"
        if index is not None:
            if not 0 <= index < total_panels:
                raise InvalidArgument(
                    f"index must be in [0, {total_panels - 1}] for {name} of shape "
                    f"{list(shape)} ({total_panels} {axis_names[0]}s), got {index}",
                    field="index",
                )
            panels = panels[index : index + 1]
            panel_labels = [f"{lead} {index}"]
        else:
            panels = panels[:_MAX_PANELS]
            if ndim == 3:
                panel_labels = [f"{lead} {k}" for k in range(panels.shape[0])]
            else:
                panel_labels = [
                    "[" + ",".join(map(str, np.unravel_index(k, shape[:-2]))) + "]"
                    for k in range(panels.shape[0])
                ]
    n_panels, rows, cols = panels.shape
    y_name = axis_names[-2] if ndim >= 2 else ""
    x_name = axis_names[-1] if ndim >= 1 else ""

    # Colour scale over the finite values of everything shown.
    finite = np.isfinite(panels)
    any_masked = not bool(finite.all())
    shown = panels[finite] if any_masked else panels
    if shown.size:
        vmin, vmax = float(shown.min()), float(shown.max())
    else:
        vmin = vmax = math.nan
    diverging = bool(vmin < 0 < vmax)
    if diverging:
        lim = max(-vmin, vmax)
        lo, hi = -lim, lim
    else:
        lo, hi = vmin, vmax

    # Layout.
    has_captions = bool(panel_labels) and index is None  # with index, the title names it
    avail_w = _MAX_SIDE - _LEFT - _RIGHT
    avail_h = _MAX_SIDE - _TOP - _BOTTOM
    grid_rows, grid_cols = _grid_shape(n_panels, rows, cols, avail_w, avail_h)
    caption_h = _CAPTION if has_captions else 0
    cell_w = (avail_w - (grid_cols - 1) * _GAP_X) / grid_cols
    cell_h = (avail_h - grid_rows * caption_h - (grid_rows - 1) * _GAP_X) / grid_rows
    scale = min(cell_w / cols, cell_h / rows)
    scale = min(scale, max(1.0, _MAX_PANEL_SIDE / max(rows, cols)))  # enlarge small tables less
    pw = max(1, min(int(cell_w), round(cols * scale)))
    ph = max(1, min(int(cell_h), round(rows * scale)))
    min_side = min(_MIN_PANEL_SIDE, int(cell_h), int(cell_w))
    ph, pw = max(ph, min_side), max(pw, min_side)

    title_font, label_font, tick_font = _font(15), _font(13), _font(11)
    scratch = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    title = f"{name}  {tuple(shape)}  {str(tensor.dtype).removeprefix('torch.')}"
    if index is not None:
        title += f"  [{panel_labels[0]}]"
    elif total_panels > n_panels:
        title += f"  (first {n_panels} of {total_panels}; ?index= picks one)"
    grid_w = grid_cols * pw + (grid_cols - 1) * _GAP_X
    grid_h = grid_rows * (ph + caption_h) + (grid_rows - 1) * _GAP_X
    width = max(_LEFT + grid_w + _RIGHT, _text_width(scratch, title, title_font) + 24, 320)
    height = _TOP + max(grid_h, 160) + _BOTTOM
    width, height = min(width, _MAX_SIDE), min(height, _MAX_SIDE)

    canvas = np.full((height, width, 3), _BACKGROUND, dtype=np.uint8)
    rows_idx, cols_idx = _sample_indices(rows, ph), _sample_indices(cols, pw)
    sampled = panels[:, rows_idx][:, :, cols_idx]  # (P, ph, pw)
    span = hi - lo if hi > lo else math.inf  # a constant table sits at the bottom of the map
    norm = np.clip((sampled - lo) / span, 0.0, 1.0)
    rgb = _colormap(np.nan_to_num(norm, nan=0.5), diverging=diverging)
    if any_masked:
        rgb[~np.isfinite(sampled)] = _MASKED_RGB

    origins: list[tuple[int, int]] = []
    for k in range(n_panels):
        gr, gc = divmod(k, grid_cols)
        x0 = _LEFT + gc * (pw + _GAP_X)
        y0 = _TOP + gr * (ph + caption_h + _GAP_X) + caption_h
        canvas[y0 : y0 + ph, x0 : x0 + pw] = rgb[k]
        origins.append((x0, y0))

    # Colour bar: hi at the top, lo at the bottom.
    bar_x0 = _LEFT + grid_w + 18
    bar_w = 16
    bar_y0 = _TOP
    bar_h = max(min(grid_h, 512), 120)
    if any_masked:
        bar_h = min(bar_h, height - _TOP - _BOTTOM - 30)
    ramp = np.linspace(1.0, 0.0, bar_h)[:, None].repeat(bar_w, axis=1)
    if math.isfinite(lo):
        canvas[bar_y0 : bar_y0 + bar_h, bar_x0 : bar_x0 + bar_w] = _colormap(
            ramp, diverging=diverging
        )
    else:
        canvas[bar_y0 : bar_y0 + bar_h, bar_x0 : bar_x0 + bar_w] = _MASKED_RGB

    image = Image.fromarray(canvas, "RGB")
    draw = ImageDraw.Draw(image)
    draw.text((width // 2, 8), title, fill=_INK, font=title_font, anchor="mt")

    for k, (x0, y0) in enumerate(origins):
        draw.rectangle((x0 - 1, y0 - 1, x0 + pw, y0 + ph), outline=_INK)
        if has_captions and k < len(panel_labels):
            draw.text(
                (x0 + pw // 2, y0 - 3), panel_labels[k], fill=_INK, font=tick_font, anchor="mb"
            )
        gr, gc = divmod(k, grid_cols)
        if gr == grid_rows - 1 or k + grid_cols >= n_panels:  # bottom panel of its column
            for t in _nice_ticks(cols, pw):
                x = x0 + int((t + 0.5) * pw / cols)
                draw.line((x, y0 + ph, x, y0 + ph + 3), fill=_INK)
                draw.text((x, y0 + ph + 4), str(t), fill=_INK, font=tick_font, anchor="mt")
        if gc == 0 and ndim >= 2:
            for t in _nice_ticks(rows, ph, 36):
                y = y0 + int((t + 0.5) * ph / rows)
                draw.line((x0 - 4, y, x0 - 1, y), fill=_INK)
                draw.text((x0 - 6, y), str(t), fill=_INK, font=tick_font, anchor="rm")

    # Axis labels: x under the grid, y rotated along the left edge.
    if x_name:
        draw.text(
            (_LEFT + grid_w // 2, min(_TOP + grid_h + 22, height - 16)),
            x_name,
            fill=_INK,
            font=label_font,
            anchor="mt",
        )
    if y_name:
        tw = _text_width(scratch, y_name, label_font) + 4
        label = Image.new("L", (tw, 18), 0)
        ImageDraw.Draw(label).text((2, 1), y_name, fill=255, font=label_font)
        label = label.rotate(90, expand=True)
        y_mid = _TOP + min(grid_h, height - _TOP - _BOTTOM) // 2
        image.paste(_INK, (6, max(0, y_mid - label.height // 2)), label)

    # Colour bar frame and values.
    draw.rectangle((bar_x0 - 1, bar_y0 - 1, bar_x0 + bar_w, bar_y0 + bar_h), outline=_INK)
    text_x = bar_x0 + bar_w + 5
    if math.isfinite(lo):
        draw.text((text_x, bar_y0), _fmt(hi), fill=_INK, font=tick_font, anchor="lt")
        draw.text((text_x, bar_y0 + bar_h), _fmt(lo), fill=_INK, font=tick_font, anchor="lb")
        if diverging:
            draw.text((text_x, bar_y0 + bar_h // 2), "0", fill=_INK, font=tick_font, anchor="lm")
            draw.text(
                (bar_x0 - 2, bar_y0 + bar_h + 4),
                f"min {_fmt(vmin)}\nmax {_fmt(vmax)}",
                fill=_INK,
                font=tick_font,
            )
    else:
        draw.text((text_x, bar_y0), "no finite", fill=_INK, font=tick_font, anchor="lt")
    if any_masked:
        sw_y = bar_y0 + bar_h + (36 if diverging else 10)
        draw.rectangle(
            (bar_x0, sw_y, bar_x0 + bar_w - 1, sw_y + 11), fill=_MASKED_RGB, outline=_INK
        )
        non_finite = panels[~finite]
        masked = "-inf" if bool(np.all(np.isneginf(non_finite))) else "-inf/inf/NaN"
        draw.text((text_x, sw_y + 6), masked, fill=_INK, font=tick_font, anchor="lm")

    # Machine-readable layout (tEXt chunks), so that a client can map pixels back to indices.
    info = PngInfo()
    info.add_text("Title", title)
    info.add_text("Software", "posenc")
    layout = {
        "tensor": name,
        "shape": list(shape),
        "panels": [[x0, y0, pw, ph] for x0, y0 in origins],
        "panel_labels": panel_labels,
        "cells": [rows, cols],
        "colorbar": [bar_x0, bar_y0, bar_w, bar_h],
        "colormap": "RdBu_r" if diverging else "viridis",
        "vmin": lo if math.isfinite(lo) else None,
        "vmax": hi if math.isfinite(hi) else None,
        "masked_rgb": list(_MASKED_RGB),
        "axes": {"y": y_name, "x": x_name},
    }
    info.add_text("posenc:layout", json.dumps(layout, separators=(",", ":"), ensure_ascii=False))
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=6, pnginfo=info)
    return out.getvalue()
