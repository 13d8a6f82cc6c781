"""transformers: the reference engine (``engine: "transformers"``, the default).

Its exact tables are posenc's rule in float64 (:mod:`posenc.rope`), its own float32
arithmetic is :func:`posenc.rope.precision.transformers_tables` (``modeling_rope_utils.py``
and each model's ``<Model>RotaryEmbedding``, bit for bit), and it reads every scaling type but
the few vLLM alone builds (:data:`posenc.rope.vllm.VLLM_ONLY_ROPE_TYPES`). Its vision towers
are vision-rope's default engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from posenc.core.blocks import TableBlocks
from posenc.engines.base import ApplyHook, Engine, ShiftHook
from posenc.engines.key_shift import transformers_delta_tables, transformers_shift
from posenc.engines.rotation import transformers_apply
from posenc.rope.precision import (
    check_transformers_float32,
    check_xdrope_engine,
    refuse_dual_chunk,
    refuse_llamacpp_field,
    transformers_blocks,
    transformers_inv_freq,
    transformers_tables,
    wants_engine_precision,
)
from posenc.rope.scaling import RopeScaling
from posenc.rope.vllm import VLLM_ONLY_ROPE_TYPES


class Transformers(Engine):
    """transformers 5: :mod:`posenc.rope` exact, its float32 modules with ``precision:
    "engine"``."""

    name = "transformers"
    summary = "transformers (default)"
    kinds = frozenset({"rope", "vision_rope"})
    precisions = ("exact", "engine")
    checked = ("exact", "engine")
    transformers_order = True  # apply_rotary_pos_emb_interleave: cat(evens, odds)
    apply: ApplyHook | None = staticmethod(transformers_apply)  # apply_rotary_pos_emb
    shift: ShiftHook | None = staticmethod(transformers_shift)

    def implements(self, rope_type: str) -> bool:
        return rope_type not in VLLM_ONLY_ROPE_TYPES

    def why_not(self, rope_type: str) -> str:
        return (
            "transformers 5.24 has no rule for it: not in ROPE_INIT_FUNCTIONS, its rotary "
            "module fails on this config"
        )

    def complete(self, p: dict[str, Any]) -> dict[str, Any]:
        refuse_dual_chunk(p)
        refuse_llamacpp_field(p, self.name)
        if wants_engine_precision(p) and p.get("config_xdrope_section") is not None:
            check_xdrope_engine(p, self.name, replayed=True)  # HunYuanVL's module
        elif wants_engine_precision(p) and p.get("scaling") is not None:
            check_transformers_float32(RopeScaling.from_dict(p["scaling"]).type)
        return p

    def tables(
        self,
        p: Mapping[str, Any],
        rows: Sequence[Sequence[int]] | None,
        *,
        device: torch.device | str | None,
        dtype: torch.dtype,
    ) -> dict[str, Tensor]:
        return transformers_tables(p, rows, device=device, dtype=dtype)

    def blocks(
        self, p: Mapping[str, Any], *, device: torch.device | str | None, dtype: torch.dtype
    ) -> dict[str, TableBlocks]:
        return transformers_blocks(p, device=device, dtype=dtype)

    def frequencies_differ(self, p: Mapping[str, Any], from_seq_len: int, to_seq_len: int) -> bool:
        # its rotary module's float32 inv_freq and scaling: what it would rotate by
        scaling = RopeScaling.from_dict(p["scaling"]) if p.get("scaling") is not None else None
        dim, base = int(p["rotary_dim"]), float(p["base"])
        kw = {"exponent_dim": p.get("exponent_dim")}
        a, sa = transformers_inv_freq(dim, base, scaling, seq_len=from_seq_len, **kw)
        b, sb = transformers_inv_freq(dim, base, scaling, seq_len=to_seq_len, **kw)
        return sa != sb or not torch.equal(a, b)

    def shift_tables(self, p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
        return transformers_delta_tables(p, delta)


ENGINE = Transformers()
"""The transformers engine."""

__all__ = ["ENGINE", "Transformers"]
