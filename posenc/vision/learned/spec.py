"""What a config says about its tower's learned table, with the grids to cover: the record
every computation of :mod:`posenc.vision.learned` starts from, and the per-axis weights of its
rule (:func:`axes`).

Notation used for tensor shapes: ``P`` table rows, ``D`` width, ``s`` native side, ``h``/``w``
a grid's rows and columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.vision.learned.base import LearnedTower

__all__ = ["VisionLearnedSpec", "axes", "check_table"]


@dataclass(frozen=True)
class VisionLearnedSpec:
    """What a config says about its tower's learned table, with the grids to cover.

    Attributes:
        model_type: the vision config's ``model_type`` (transformers' name).
        tower: its :class:`~posenc.vision.learned.base.LearnedTower`.
        width: ``D``.
        side: ``s``, the native grid's side.
        grids: the ``(h, w)`` patch grids, in order.
        defaulted: the config keys that took transformers' class default.
        where: where the vision config was found (``config.vision_config``...).
        prefix: table rows before the patch rows (the tower's, or its config's
            ``prefix_key``); the tokens keep them unless the tower drops them
            (:attr:`kept`).
        merge: the side of the merge blocks the tower orders its patches in (1: row-major).
    """

    model_type: str
    tower: LearnedTower
    width: int
    side: int
    grids: tuple[tuple[int, int], ...]
    defaulted: tuple[str, ...] = ()
    where: str = "config"
    prefix: int = 1
    merge: int = 1

    def order(self, h: int, w: int) -> Tensor:
        """``(h·w,)`` int64: the row-major patch each token is, in the tower's order: row-major,
        or ``merge × merge`` blocks (block row, block column, row in block, column in block)."""
        m = self.merge
        index = torch.arange(h * w, dtype=torch.int64)
        if m == 1:
            return index
        return index.reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).reshape(-1)

    @property
    def table_rows(self) -> int:
        """``P``: the table's rows (prefix and ``s²`` patches)."""
        return self.prefix + self.side * self.side

    @property
    def kept(self) -> int:
        """Prefix rows each grid's tokens start with (0 where the tower drops them)."""
        return 0 if self.tower.drops_prefix else self.prefix

    @property
    def tokens_per_grid(self) -> list[int]:
        return [self.kept + h * w for h, w in self.grids]

    @property
    def tokens(self) -> int:
        """``N``: the rows of the resized table (numbers only)."""
        return sum(self.tokens_per_grid)

    @property
    def native(self) -> bool:
        """Every grid is the native ``s × s``: the model adds the table as it is."""
        return all(g == (self.side, self.side) for g in self.grids)


def axes(spec: VisionLearnedSpec, h: int, w: int) -> tuple[Tensor, Tensor]:
    """``(h, s)`` and ``(w, s)`` float64: the rule's weights of each axis of an ``h × w`` grid."""
    rule = spec.tower.rule
    if rule.axis_pair is not None:
        return rule.axis_pair(spec.tower, spec.side, h, w)
    return rule.axis_weights(spec.tower, spec.side, h), rule.axis_weights(spec.tower, spec.side, w)


def check_table(spec: VisionLearnedSpec, table: Tensor) -> None:
    """``table`` must be ``(P, D)`` for this spec."""
    want = (spec.table_rows, spec.width)
    if tuple(table.shape) != want:
        raise InvalidArgument(
            f"the position table is {tuple(table.shape)}, but the config's tower needs {want} "
            f"({spec.prefix} prefix rows + {spec.side}² patches, width {spec.width})",
            field="model",
        )
