"""llama.cpp: what it passes ``ggml_rope_ext`` for the model (``engine: "llama.cpp"``).

Its arguments are read as llama.cpp's converter and loader read the config (or given
directly, or read from a GGUF: the ``llamacpp`` field); its exact tables are those arguments in
float64, ``precision: "engine"`` ggml's float32 rope (:mod:`posenc.rope.llamacpp`). It names a
scaling type as its ``rope.scaling.type`` does (``none``, ``linear``, ``yarn``, ``longrope``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from posenc.engines.base import ApplyHook, OwnArithmetic, ShiftHook
from posenc.engines.key_shift import llamacpp_delta_tables, llamacpp_shift
from posenc.rope.llamacpp import LlamaCppRope, llamacpp_inv_freq
from posenc.rope.llamacpp_rotate import llamacpp_apply, rope_from_dict
from posenc.rope.precision import (
    check_xdrope_engine,
    llamacpp_arguments,
    llamacpp_complete,
    llamacpp_meta,
    refuse_dual_chunk,
    wants_engine_precision,
)
from posenc.rope.vllm import VLLM_ONLY_ROPE_TYPES


def llamacpp_rope_type(rope: LlamaCppRope) -> str:
    """The scaling type llama.cpp's arguments amount to, as its ``rope.scaling.type`` names
    it: ``yarn`` (an extrapolation mix), ``longrope`` (per-frequency factors with a magnitude),
    ``linear`` (a frequency scale), else ``none`` (Llama 3's factors ride on ``rope_freqs``
    with no scaling type)."""
    if rope.ext_factor > 0:
        return "yarn"
    if rope.freq_factors is not None and rope.attn_factor != 1.0:
        return "longrope"
    if rope.freq_scale != 1.0:
        return "linear"
    return "none"


def gguf_entry(rope: LlamaCppRope) -> dict[str, Any]:
    """What ``/v1/configs/positions`` adds to a GGUF's RoPE entry: the magnitude and the
    scaling type as llama.cpp names it (YaRN named, not only ``ext_factor: 1.0``)."""
    _speed, magnitude = llamacpp_inv_freq(rope)
    return {"attention_scaling": magnitude, "llamacpp_rope_type": llamacpp_rope_type(rope)}


class LlamaCpp(OwnArithmetic):
    """llama.cpp: ``ggml_rope_ext`` / ``ggml_rope_multi`` with the model's arguments."""

    name = "llama.cpp"
    summary = "llama.cpp (what llama.cpp passes ggml_rope_ext for the model)"
    kinds = frozenset({"rope"})
    precisions = ("exact", "engine")
    compute_ns = 40.0  # float32 arithmetic replayed step by step (13 ns measured)
    own_fields = ("llamacpp",)
    checked = ("exact", "engine")
    takes_max_model_len = True
    describes_layers = True
    rope_type_key = "llamacpp_rope_type"
    apply: ApplyHook | None = staticmethod(llamacpp_apply)  # ggml_rope_ext on F32 vectors
    shift: ShiftHook | None = staticmethod(llamacpp_shift)  # its K-shift

    def implements(self, rope_type: str) -> bool:
        return rope_type not in VLLM_ONLY_ROPE_TYPES

    def why_not(self, rope_type: str) -> str:
        return "llama.cpp's converter writes no arguments for it"

    def from_config(self, positions: Any, layer: Any) -> dict[str, Any]:
        return {"config_max_position_embeddings": positions.max_position_embeddings}

    def complete(self, p: dict[str, Any]) -> dict[str, Any]:
        p = llamacpp_complete(p)
        refuse_dual_chunk(p)
        if wants_engine_precision(p) and p.get("config_xdrope_section") is not None:
            check_xdrope_engine(p, self.name, replayed=False)
        return p

    def meta(self, p: Mapping[str, Any]) -> dict[str, Any]:
        return llamacpp_meta(p)

    def layer_entry(self, p: Mapping[str, Any]) -> dict[str, Any]:
        meta = llamacpp_meta(p)
        return {
            "llamacpp": meta["llamacpp"],
            "layout": meta["layout"],
            "attention_scaling": meta["attention_scaling"],
            "llamacpp_rope_type": llamacpp_rope_type(llamacpp_arguments(p)),
        }

    def notes(self, p: Mapping[str, Any]) -> list[str]:
        return list(p.get("llamacpp_notes") or [])

    def frequencies(self, p: Mapping[str, Any], seq_len: int) -> tuple[Tensor, float]:
        return llamacpp_inv_freq(rope_from_dict(p["llamacpp"]))  # fixed by the GGUF's arguments

    def frequencies_differ(self, p: Mapping[str, Any], from_seq_len: int, to_seq_len: int) -> bool:
        return False  # ggml_rope_ext's arguments are the model's, whatever the length

    def shift_tables(self, p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
        return llamacpp_delta_tables(p, delta)


ENGINE = LlamaCpp()
"""The llama.cpp engine."""

__all__ = ["ENGINE", "LlamaCpp", "gguf_entry", "llamacpp_rope_type"]
