"""MLX: mlx-lm's ``initialize_rope`` and ``mx.fast.rope`` (``engine: "mlx"``).

Its arguments are what ``initialize_rope`` reads from the config (:class:`posenc.rope.mlx.MlxRope`,
whose ``rope_type`` is mlx-lm's name of the scaling type); its exact tables are that rule in
float64, ``precision: "engine"`` ``mx.fast.rope``'s float32 (:mod:`posenc.rope.mlx`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from posenc.core.blocks import TableBlocks
from posenc.engines.base import ApplyHook, Engine, ShiftHook
from posenc.engines.rotation import mlx_apply
from posenc.rope.mlx import MlxRope, mlx_magnitude, mlx_speeds
from posenc.rope.precision import (
    check_xdrope_engine,
    mlx_complete,
    mlx_meta,
    own_blocks,
    own_tables,
    refuse_dual_chunk,
    refuse_llamacpp_field,
    wants_engine_precision,
)


class Mlx(Engine):
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
        p = mlx_complete(p)
        refuse_dual_chunk(p)
        refuse_llamacpp_field(p, self.name)
        if wants_engine_precision(p) and p.get("config_xdrope_section") is not None:
            check_xdrope_engine(p, self.name, replayed=False)
        return p

    def computes(self, p: Mapping[str, Any]) -> bool:
        return True

    def tables(
        self,
        p: Mapping[str, Any],
        rows: Sequence[Sequence[int]] | None,
        *,
        device: torch.device | str | None,
        dtype: torch.dtype,
    ) -> dict[str, Tensor]:
        return own_tables(p, rows, device=device, dtype=dtype)

    def blocks(
        self, p: Mapping[str, Any], *, device: torch.device | str | None, dtype: torch.dtype
    ) -> dict[str, TableBlocks]:
        return own_blocks(p, device=device, dtype=dtype)

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
