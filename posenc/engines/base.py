"""The :class:`Engine` protocol: what posenc knows of one engine, in one module.

An engine (transformers, vLLM, llama.cpp, MLX, timm, diffusers) is one module of
:mod:`posenc.engines` holding one object that implements this protocol: its name as the API
spells it, the endpoint kinds whose ``engine`` field takes it, the precisions its tables have,
what it reads from a config, its tables in its own arithmetic, and what
``POST /v1/configs/positions`` says of each RoPE layer type as it reads them. The registry
(:mod:`posenc.engines.registry`) is the only list of engines: every route, schema, comparison
and check iterates over it, and nothing compares an engine's name elsewhere.

Notation: ``T`` positions (tokens), ``H`` heads, ``D`` head dimension, ``R`` rotary dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from posenc.core.blocks import TableBlocks
from posenc.core.errors import InvalidArgument
from posenc.rope.precision import (
    check_xdrope_engine,
    own_blocks,
    own_tables,
    refuse_dual_chunk,
    refuse_llamacpp_field,
    wants_engine_precision,
)
from posenc.rope.scaling import RopeScaling, rope_inv_freq

#: ``apply(x, positions, fields) -> x rotated``: ``x`` ``(T, H, D)`` queries or keys,
#: ``positions`` ``(T,)`` (or ``(3, T)`` M-RoPE rows), ``fields`` the rope kind's resolved
#: fields (:func:`posenc.resolve.resolve_fields` with this engine); returns ``(T, H, D)``, ``x``
#: rotated in the engine's own channel order and arithmetic.
ApplyHook = Callable[[Tensor, Tensor, Mapping[str, Any]], Tensor]

#: ``shift(k, from_positions, to_positions, fields) -> k re-rotated``: cached keys ``k``
#: ``(T, H, D)`` rotated at ``from_positions`` ``(T,)``, rotated again by the difference so that
#: they stand at ``to_positions`` ``(T,)`` as the engine's own cache shift does it (llama.cpp's
#: K-shift: ``ggml_rope_ext`` of the delta on the cached keys); ``fields`` as for
#: :data:`ApplyHook`; returns ``(T, H, D)``.
ShiftHook = Callable[[Tensor, Tensor, Tensor, Mapping[str, Any]], Tensor]


class Engine(Protocol):
    """One engine: subclass it (the defaults below are an engine with no RoPE of its own).

    Attributes:
        name: as the API spells it (``"llama.cpp"``): the value of every ``engine`` field.
        summary: one clause for the ``engine`` fields' descriptions (what its tables are).
        kinds: the endpoint kinds whose ``engine`` field takes it (``"rope"``: text RoPE, which
            also makes it one of ``/v1/configs/positions``', ``compare``'s and ``check``'s).
        precisions: the rope kind's precisions it computes.
        checked: the precisions ``/v1/configs/check`` compares a caller's table with.
        takes_max_model_len: the rope kind's ``max_model_len`` (a server's context length) is
            read by it, so ``compare`` and ``positions`` pass it the request's.
        scales_softmax: its attention's softmax scale is not the config's
            (:meth:`softmax_factor`).
        describes_layers: ``/v1/configs/positions`` resolves each RoPE layer type with it and
            adds :meth:`layer_entry` (else the config's reading alone).
        rope_type_key: the key of a positions entry naming the scaling type as the engine calls
            it (``vllm_rope_type``), or None when it calls it as transformers does.
        own_fields: the rope kind's fields that only this engine reads (llama.cpp's
            ``llamacpp``: a GGUF's ``ggml_rope_ext`` arguments); a request that compares every
            engine (``/v1/configs/check``) gives them to this engine alone.
        transformers_order: its apply answers in transformers' channel order, the order
            ``precision: "exact"`` answers in whatever the engine (its layouts; DeepSeek-V3's
            ``apply_rotary_pos_emb_interleave``: the rotated even channels, then the odd ones);
            the others rotate the pairs in place in their own layout.
        compute_ns: nanoseconds of CPU its engine-precision arithmetic takes per output
            element, with about 50 % added (measured; the service's cost admission prices a
            request with it, docs/sizing.md).
        apply: the 1.4 rotation of queries and keys (:data:`ApplyHook`), or None (the
            registry refuses it by name: :func:`posenc.engines.registry.engine_hook`).
        shift: the 1.4 re-rotation of cached keys (:data:`ShiftHook`), or None; an engine
            with one also gives :meth:`shift_tables`.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    kinds: ClassVar[frozenset[str]]
    precisions: ClassVar[tuple[str, ...]] = ("exact", "engine")
    checked: ClassVar[tuple[str, ...]] = ()
    takes_max_model_len: ClassVar[bool] = False
    scales_softmax: ClassVar[bool] = False
    describes_layers: ClassVar[bool] = False
    rope_type_key: ClassVar[str | None] = None
    own_fields: ClassVar[tuple[str, ...]] = ()
    transformers_order: ClassVar[bool] = False
    compute_ns: ClassVar[float] = 30.0
    apply: ApplyHook | None = None
    shift: ShiftHook | None = None

    def implements(self, rope_type: str) -> bool:
        """Whether it has a rule for a config's ``rope_type`` (the registry refuses the others
        by name: :func:`posenc.engines.registry.refuse_rope_type`)."""
        return True

    def why_not(self, rope_type: str) -> str:
        """Why it has no rule for ``rope_type``, for the refusal."""
        return f"{self.name} has no rule for it"

    def from_config(self, positions: Any, layer: Any) -> dict[str, Any]:
        """What it reads from a config beyond transformers' rope fields, for one layer type
        (``positions``: the config read, :class:`posenc.readers.hf.results.ModelPositions`; ``layer``
        the layer type's RoPE): ``config_*`` fields for :meth:`complete`."""
        return {}

    def complete(self, p: dict[str, Any]) -> dict[str, Any]:
        """The rope kind's resolved fields completed with its own arguments (numbers only: no
        table is made), or refused with the reason (default: refuse the other engines' own
        fields, :func:`refuse_foreign_fields`)."""
        refuse_foreign_fields(p, self.name)
        return p

    def cache(self, p: Mapping[str, Any]) -> Any:
        """Its fixed frequencies, magnitude and position remap where its exact tables take them
        in place of transformers' rule (vLLM's :class:`posenc.rope.vllm.VllmRope`), or None."""
        return None

    def computes(self, p: Mapping[str, Any]) -> bool:
        """Whether :meth:`tables` and :meth:`blocks` make the tables for resolved fields
        (its own arithmetic, or its own rule); False: the exact path of the rope kind."""
        return p.get("precision") == "engine"

    def tables(
        self,
        p: Mapping[str, Any],
        rows: Sequence[Sequence[int]] | None,
        *,
        device: torch.device | str | None,
        dtype: torch.dtype,
    ) -> dict[str, Tensor]:
        """``cos``, ``sin`` ``(T, R)`` and ``inv_freq`` ``(R/2,)`` where :meth:`computes` (``rows``:
        M-RoPE's three rows of positions, or None)."""
        raise InvalidArgument(f"engine {self.name} computes no text RoPE tables", field="engine")

    def blocks(
        self, p: Mapping[str, Any], *, device: torch.device | str | None, dtype: torch.dtype
    ) -> dict[str, TableBlocks]:
        """:meth:`tables` for 1-D positions, in row blocks."""
        raise InvalidArgument(f"engine {self.name} computes no text RoPE tables", field="engine")

    def meta(self, p: Mapping[str, Any]) -> dict[str, Any]:
        """What the rope kind's ``meta`` adds for it (its arguments, its magnitude)."""
        return {}

    def layer_entry(self, p: Mapping[str, Any]) -> dict[str, Any]:
        """What ``/v1/configs/positions`` says of one RoPE layer type as it reads it, from the
        rope kind's resolved fields for that layer with this engine (:attr:`describes_layers`):
        every field it adds or replaces comes from here, ``rope_type_key`` included."""
        return {}

    def softmax_factor(self, p: Mapping[str, Any]) -> float:
        """What its attention multiplies the config's softmax scale by, for one layer type's
        resolved fields (:attr:`scales_softmax`)."""
        return 1.0

    def notes(self, p: Mapping[str, Any]) -> list[str]:
        """How it read the model, one sentence each (warnings of ``positions``, ``compare``'s
        differences)."""
        return []

    def frequencies(self, p: Mapping[str, Any], seq_len: int) -> tuple[Tensor, float]:
        """Its float64 angle per position ``(R/2,)`` and its magnitude for a sequence of
        ``seq_len`` positions (``POST /v1/rope/shift``'s exact rotation; default: transformers'
        rule, whose dynamic and LongRoPE types read ``seq_len``)."""
        scaling = RopeScaling.from_dict(p["scaling"]) if p.get("scaling") is not None else None
        inv, scale = rope_inv_freq(
            int(p["rotary_dim"]),
            float(p["base"]),
            scaling,
            seq_len=seq_len,
            exponent_dim=p.get("exponent_dim"),
        )
        return inv.to(torch.float64), float(scale)

    def frequencies_differ(self, p: Mapping[str, Any], from_seq_len: int, to_seq_len: int) -> bool:
        """Whether its frequencies or magnitude at ``from_seq_len`` and ``to_seq_len`` differ
        (LongRoPE's switch, dynamic NTK's base): its :attr:`shift` rotates by one table at the
        delta, so it has none across them (default: :meth:`frequencies` at both)."""
        a, sa = self.frequencies(p, from_seq_len)
        b, sb = self.frequencies(p, to_seq_len)
        return sa != sb or not torch.equal(a, b)

    def shift_tables(self, p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
        """The ``(T, R/2)`` float32 cos and sin its :attr:`shift` rotates by at each token's
        ``delta`` ``(T,)`` (one step), for the shift's resolved fields."""
        raise InvalidArgument(f"engine {self.name} re-rotates no cached keys", field="engine")


class OwnArithmetic(Engine):
    """An engine whose tables are always its own arguments' (exact: float64; ``precision:
    "engine"``: its float32 replayed), never the rope kind's exact path: llama.cpp and MLX
    (:func:`posenc.rope.precision.own_tables`)."""

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


def refuse_foreign_fields(p: Mapping[str, Any], engine: str) -> None:
    """The fields of vLLM's and llama.cpp's own (``dual_chunk_cache``, ``llamacpp``) given to
    ``engine``, which reads neither; and XD-RoPE in an engine's precision, which only
    transformers' HunYuanVL module is replayed for."""
    refuse_dual_chunk(p)
    refuse_llamacpp_field(p, engine)
    if wants_engine_precision(p) and p.get("config_xdrope_section") is not None:
        check_xdrope_engine(p, engine, replayed=False)
