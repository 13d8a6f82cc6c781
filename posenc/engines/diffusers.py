"""diffusers: its transformers' rotary and sin-cos position tables (diffusion-rope, sincos-2d).

Those kinds take no ``engine`` field: diffusers is their only engine, and ``precision`` picks
``exact`` (float64, cast once) or diffusers' own arithmetic (``engine``, or its name
``diffusers``: :meth:`Diffusers.own_arithmetic`). Its rules are :mod:`posenc.diffusion`'s. A
diffusers config sent to ``/v1/configs/positions`` is read by it whatever the engine asked.
"""

from __future__ import annotations

from posenc.engines.base import ApplyHook, Engine, ShiftHook


class Diffusers(Engine):
    """diffusers' position embeddings (FLUX, Wan, HunyuanVideo, Qwen-Image, CogVideoX,
    LTX-Video)."""

    name = "diffusers"
    summary = "diffusers (its transformers' rotary and sin-cos tables)"
    kinds = frozenset({"diffusion_rope", "sincos_2d"})
    precisions = ("exact", "engine", "diffusers")
    apply: ApplyHook | None = None
    shift: ShiftHook | None = None

    def own_arithmetic(self, precision: object) -> bool:
        """Whether ``precision`` asks for diffusers' own arithmetic (``engine`` or
        ``diffusers``) rather than exact float64."""
        return precision in self.precisions[1:]


ENGINE = Diffusers()
"""The diffusers engine."""

__all__ = ["ENGINE", "Diffusers"]
