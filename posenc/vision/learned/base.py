"""What every resizing rule of a learned 2-D position table shares: the tower record and the
rule's interface.

A vision tower that learns an absolute position table holds ``P = prefix + s²`` rows of width
``D``: ``prefix`` rows for its class (and DeiT's distillation) token, then one row per patch of
its native ``s × s`` grid, row-major. An image of ``h × w`` patches gets ``h·w`` patch rows made
from the ``s²`` by the model's own rule. Every rule here is separable and linear: patch row
``(y, x)`` is ``Σ_ij Wh[y, i] · Ww[x, j] · T[i·s + j]``, with per-axis weights ``Wh (h, s)`` and
``Ww (w, s)``, so the whole resize is the matrix ``kron(Wh, Ww)`` ``(h·w, s²)``.

Notation used for tensor shapes: ``P`` table rows, ``D`` width, ``s`` native side, ``h``/``w``
the grid's rows and columns, ``n`` one axis' output length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from posenc.facts.learned_towers import LearnedTowerRecord, Mode

__all__ = ["LearnedTower", "Mode", "ResizeRule"]


@dataclass(frozen=True)
class ResizeRule:
    """One way a tower resizes its patch rows to an image's grid.

    Attributes:
        name: what ``meta.resize`` says (``interpolate_pos_encoding``, ``naflex``,
            ``navit_buckets``).
        axis_weights: ``(tower, s, n) -> (n, s)`` float64: the weights of one axis, as the
            model's own resize computes them, from the identity.
        engine: ``(tower, patch rows (s², D), s, h, w) -> (h·w, D)``: the model's own arithmetic
            in the table's dtype (bit for bit what its forward adds).
        position_ids: ``(tower, s, h, w) -> (h·w,)`` int64 rows of the table each patch reads,
            for a rule that gathers rows (NaViT buckets), else None.
        axis_pair: ``(tower, s, h, w) -> ((h, s), (w, s))``: both axes' weights, for a rule
            whose weights of one axis depend on the other's length (RADIO's crop), else None
            (``axis_weights`` per axis).
        engine_at: ``(tower, patch rows (s², D), s, h, w, y, x) -> (n, D)``: the ``engine`` at
            the patches ``(y, x)`` ``(n,)`` only, the same bits as its rows there, for a rule
            whose model code computes each patch on its own (``grid_sample``, a gather of
            taps), else None (the engine runs on the whole grid).
        engine_elements: ``(s, h, w, D) -> int``: elements the ``engine`` holds for one grid
            beyond its ``(h·w, D)`` output (NaFlex's ``(h·w, s²)`` weights, RADIO's ``M × M``
            resize, a gather's taps), from the numbers alone; None: nothing to speak of.
    """

    name: str
    axis_weights: Callable[[LearnedTower, int, int], Tensor]
    engine: Callable[[LearnedTower, Tensor, int, int, int], Tensor]
    position_ids: Callable[[LearnedTower, int, int, int], Tensor] | None = None
    axis_pair: Callable[[LearnedTower, int, int, int], tuple[Tensor, Tensor]] | None = None
    engine_at: Callable[[LearnedTower, Tensor, int, int, int, Tensor, Tensor], Tensor] | None = None
    engine_elements: Callable[[int, int, int, int], int] | None = None


@dataclass(frozen=True)
class LearnedTower(LearnedTowerRecord):
    """A vision tower's record (:class:`~posenc.facts.learned_towers.LearnedTowerRecord`) with
    the code of its resizing rule.

    Attributes:
        rule: how it resizes the patch rows (:class:`ResizeRule`): the rule its record's
            ``resize`` names.
    """

    rule: ResizeRule = field(kw_only=True)

    def describe(self) -> dict[str, Any]:
        """The rule's settings, for ``meta`` and ``/v1/configs/positions``."""
        out: dict[str, Any] = {"rule": self.rule.name}
        if self.rule.name == "interpolate_pos_encoding":
            out.update(mode=self.mode, align_corners=False, antialias=self.antialias)
            if self.scale_offset is not None:
                out["scale_factor"] = f"(n + {self.scale_offset}) / s"
            if self.drops_prefix:
                out["class_row_dropped"] = True
        elif self.rule.name == "interpolate_gather":
            out.update(mode=self.mode, align_corners=False, taps="clamped to the border")
        elif self.rule.name == "cropped":
            out.update(mode="bilinear", align_corners=False, crop="resized to max(h, w) square")
        elif self.rule.name == "grid_sample":
            out.update(mode=self.mode, align_corners=False, padding_mode="border")
        elif self.rule.name == "naflex":
            out.update(mode="bilinear", align_corners=False, antialias=True)
        return out
