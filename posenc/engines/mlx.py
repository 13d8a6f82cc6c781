"""MLX: mlx-lm's ``initialize_rope`` and ``mx.fast.rope`` (``engine: "mlx"``).

Its arguments are what ``initialize_rope`` reads from the config (:class:`posenc.rope.mlx.MlxRope`,
whose ``rope_type`` is mlx-lm's name of the scaling type); its exact tables are that rule in
float64, ``precision: "engine"`` ``mx.fast.rope``'s float32 (:mod:`posenc.rope.mlx`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from posenc.engines.base import ApplyHook, OwnArithmetic, ShiftHook
from posenc.engines.rotation import mlx_apply
from posenc.rope.mlx import MlxRope, mlx_magnitude, mlx_speeds
from posenc.rope.precision import (
    mlx_complete,
    mlx_meta,
)


class Mlx(OwnArithmetic):
    """mlx-lm: ``initialize_rope``'s module, applied by ``mx.fast.rope``."""

    name = "mlx"
    summary = "mlx (mlx-lm's initialize_rope and mx.fast.rope)"
    kinds = frozenset({"rope"})
    precisions = ("exact", "engine")
    compute_ns = 40.0  # float32 arithmetic replayed step by step (13 ns measured)
    checked = ("exact", "engine")
    describes_layers = True
    rope_type_key = "mlx_rope_type"
    apply: ApplyHook | None = staticmethod(mlx_apply)  # mx.fast.rope
    shift: ShiftHook | None = None  # mlx-lm moves no cached keys: precision "exact" only

    def from_config(self, positions: Any, layer: Any) -> dict[str, Any]:
        return {"config_max_position_embeddings": positions.max_position_embeddings}

    def complete(self, p: dict[str, Any]) -> dict[str, Any]:
        return super().complete(mlx_complete(p))  # and refuse the other engines' fields

    def meta(self, p: Mapping[str, Any]) -> dict[str, Any]:
        return mlx_meta(p)

    def frequencies(self, p: Mapping[str, Any], seq_len: int) -> tuple[Tensor, float]:
        rope = MlxRope(**p["mlx"])
        return mlx_speeds(rope, seq_len), float(mlx_magnitude(rope))

    def layer_entry(self, p: Mapping[str, Any]) -> dict[str, Any]:
        meta = mlx_meta(p)
        return {
            "mlx": meta["mlx"],
            "layout": meta["layout"],
            "attention_scaling": meta["attention_scaling"],
            "mlx_rope_type": meta["mlx"]["rope_type"],
        }


ENGINE = Mlx()
"""The MLX engine."""

__all__ = ["ENGINE", "Mlx"]
