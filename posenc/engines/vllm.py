"""vLLM: what its ``get_rope`` builds from the same config (``engine: "vllm"``).

Its exact tables are its rotary class's frequencies, magnitude and position remap in float64
(:class:`posenc.rope.vllm.VllmRope`, taken by the rope kind's exact path through
:meth:`Vllm.cache`); ``precision: "engine"`` is its float32 cache, bit for bit
(:func:`posenc.rope.precision.vllm_tables`). It reads what vLLM's model code passes
``get_rope`` beyond transformers' fields (the server's ``max_model_len``, DeepSeek's YaRN,
vLLM-only parameters), and its attention's softmax scale can leave ``mscale²`` out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from posenc.core.blocks import TableBlocks
from posenc.core.errors import InvalidArgument
from posenc.engines.base import ApplyHook, Engine, ShiftHook
from posenc.engines.key_shift import vllm_delta_tables, vllm_shift
from posenc.engines.rotation import vllm_apply
from posenc.facts.families import family
from posenc.rope.precision import (
    check_vllm_engine_types,
    check_xdrope_engine,
    refuse_llamacpp_field,
    vllm_blocks,
    vllm_tables,
    wants_engine_precision,
)
from posenc.rope.vllm import VllmRope, vllm_complete, vllm_for_fields


def _max_position(p: Mapping[str, Any]) -> int:
    """The largest position resolved fields ask for (``seq_len − 1`` without positions)."""
    rows = p["positions"]
    if rows is None:
        return int(p["seq_len"]) - 1
    if isinstance(rows[0], list):
        return int(max(max(r) for r in rows))
    return int(max(rows))


class Vllm(Engine):
    """vLLM 0.32's ``get_rope``: one class per scaling type (:mod:`posenc.rope.vllm_cache`)."""

    name = "vllm"
    summary = "vllm (what vLLM's get_rope builds from the same config)"
    kinds = frozenset({"rope"})
    precisions = ("exact", "engine")
    checked = ("exact",)
    takes_max_model_len = True
    scales_softmax = True
    describes_layers = True
    rope_type_key = "vllm_rope_type"
    apply: ApplyHook | None = staticmethod(vllm_apply)  # forward_native
    shift: ShiftHook | None = staticmethod(vllm_shift)

    def from_config(self, positions: Any, layer: Any) -> dict[str, Any]:
        fam = family(positions.model_type.removesuffix("_text"))
        info: dict[str, Any] = {
            "config_max_position_embeddings": positions.max_position_embeddings,
            "config_deepseek": fam.vllm_deepseek_yarn,
            "config_mrope_positions_factor": fam.vllm_mrope_positions_factor,
        }
        if layer.vllm is not None:  # read by vLLM only (posenc.rope.vllm.vllm_only_rope)
            info["config_vllm"] = dict(layer.vllm)
            if layer.vllm.get("xdrope_section") is not None:
                info["config_xdrope_section"] = list(layer.vllm["xdrope_section"])
        return info

    def complete(self, p: dict[str, Any]) -> dict[str, Any]:
        if p["exponent_dim"] not in (None, p["rotary_dim"]):
            raise InvalidArgument(  # posenc.rope.vllm builds its exponents over rotary_dim
                f"engine vllm takes no odd exponent_dim yet (got {p['exponent_dim']} for "
                f"rotary_dim {p['rotary_dim']}); use engine transformers",
                field="exponent_dim",
            )
        p = vllm_complete(p, _max_position(p))  # its defaults; positions beyond its cache
        refuse_llamacpp_field(p, self.name)
        if wants_engine_precision(p):
            if p.get("config_xdrope_section") is not None:
                check_xdrope_engine(p, self.name, replayed=False)
            else:
                check_vllm_engine_types(p)
        return p

    def cache(self, p: Mapping[str, Any]) -> VllmRope:
        return vllm_for_fields(p)

    def tables(
        self,
        p: Mapping[str, Any],
        rows: Sequence[Sequence[int]] | None,
        *,
        device: torch.device | str | None,
        dtype: torch.dtype,
    ) -> dict[str, Tensor]:
        return vllm_tables(p, rows, device=device, dtype=dtype)

    def blocks(
        self, p: Mapping[str, Any], *, device: torch.device | str | None, dtype: torch.dtype
    ) -> dict[str, TableBlocks]:
        return vllm_blocks(p, device=device, dtype=dtype)

    def meta(self, p: Mapping[str, Any]) -> dict[str, Any]:
        rope = vllm_for_fields(p)
        out: dict[str, Any] = {
            "max_model_len": p["vllm_max_model_len"],
            "vllm_rope": rope.rope_type,
        }
        out["vllm_rows"] = rope.rows if rope.rows < 2**53 else None  # None: no known limit
        if rope.dual_chunk is not None:
            chunk, local, cache = rope.dual_chunk
            out.update(dual_chunk_cache=cache, chunk_size=chunk, local_size=local)
        if rope.xdrope_section is not None:
            out["xdrope_section"] = list(rope.xdrope_section)
        return out

    def layer_entry(self, p: Mapping[str, Any]) -> dict[str, Any]:
        rope = vllm_for_fields(p)
        return {
            "attention_scaling": rope.attention_scaling,
            "vllm_rope_type": rope.rope_type,
            "vllm_rows": rope.rows,
            "layout": p["layout"],  # DeepSeek's model code: interleaved whatever the config
        }

    def softmax_factor(self, p: Mapping[str, Any]) -> float:
        return float(vllm_for_fields(p).softmax_factor)

    def frequencies(self, p: Mapping[str, Any], seq_len: int) -> tuple[Tensor, float]:
        vllm = vllm_for_fields(p)  # fixed once per server: seq_len is not read
        return vllm.inv_freq.to(torch.float64), float(vllm.attention_scaling)

    def frequencies_differ(self, p: Mapping[str, Any], from_seq_len: int, to_seq_len: int) -> bool:
        return False  # its cache is built once per server

    def shift_tables(self, p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
        return vllm_delta_tables(p, delta)


ENGINE = Vllm()
"""The vLLM engine."""

__all__ = ["ENGINE", "Vllm"]
