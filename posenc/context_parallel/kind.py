"""The context-parallel endpoint kind (:mod:`posenc.core.kinds`): a row split across ranks
(:mod:`posenc.context_parallel.split`), with each rank's position ids, its rows of the global
RoPE table (the rope kind's own computation, :data:`posenc.rope_kinds.kind.ROPE`) and its rows of the
per-document attention mask (:func:`posenc.attention.masks.mask_rows`).

Tensors (``T`` tokens, ``T_r = T / cp`` a rank, ``R`` rotary dimension): ``restore`` (T,), then
for each rank ``r``: ``{r}.indices`` (T_r,), ``{r}.position_ids`` (T_r,) or (3, T_r) for M-RoPE,
``{r}.cos`` and ``{r}.sin`` (T_r, R) with rope settings, ``{r}.mask`` (T_r, T) with ``mask``.
``meta.ranks`` holds each rank's ``rank``, ``indices``, ``position_ids``, ``cu_seqlens`` and
``max_seqlen`` as plain lists; the JSON answer lays them out as the contract's ``ranks``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posenc.attention.masks import MASK_KINDS, mask_inputs, mask_rows, mask_rule
from posenc.context_parallel.split import (
    SCHEMES,
    ContextSplit,
    check_split,
    document_positions,
    split_sequence,
)
from posenc.core import kinds
from posenc.core.blocks import TableBlocks, tensor_blocks
from posenc.core.errors import InvalidArgument
from posenc.rope import RopeScaling, rope_blocks, rope_inv_freq
from posenc.rope_kinds.kind import ROPE
from posenc.tokens.position_ids import check_cu_seqlens

__all__ = ["CONTEXT_PARALLEL"]

#: The rope kind's fields this kind takes as they are (``head_dim`` becomes optional).
_ROPE_FIELDS = (
    "rotary_dim",
    "base",
    "layout",
    "scaling",
    "exponent_dim",
    "rotation",
    "layer_type",
    "mrope_section",
    "mrope_interleaved",
)
#: Rows of the mask computed at once: the (N, T) intermediates stay a few MiB.
_MASK_BLOCK_ELEMENTS = 2**20


def _length(p: Mapping[str, Any]) -> int:
    """``T`` from the numbers: seq_len, the last boundary, or the given position ids."""
    rows = p["position_ids"]
    found = {}
    if p["seq_len"] is not None:
        found["seq_len"] = int(p["seq_len"])
    if p["cu_seqlens"] is not None:
        found["cu_seqlens"] = int(p["cu_seqlens"][-1])
    if rows is not None:
        found["position_ids"] = len(rows[0]) if isinstance(rows[0], list) else len(rows)
    if not found:
        raise InvalidArgument(
            "give seq_len, cu_seqlens (packed documents) or position_ids", field="seq_len"
        )
    if len(set(found.values())) > 1:
        said = ", ".join(f"{name} gives T = {t}" for name, t in found.items())
        raise InvalidArgument(f"the lengths disagree: {said}", field=next(iter(found)))
    return next(iter(found.values()))


def _rows(p: Mapping[str, Any]) -> int:
    """Rows of the position ids: 3 for M-RoPE's (3, T) ids given, else 1."""
    given = p["position_ids"]
    return len(given) if given is not None and isinstance(given[0], list) else 1


def _rope_fields(p: Mapping[str, Any], info: Mapping[str, Any], models: Any) -> dict[str, Any]:
    """The rope kind's resolved fields for these settings, its ``complete`` run on a stand-in
    position (the real ones are made once the size is accepted)."""
    fields = {f.name: None if f.required else f.default for f in ROPE.fields}
    fields.update({name: p[name] for name in ("head_dim", *_ROPE_FIELDS, "preset", "dtype")})
    rows = _rows(p)
    fields.update(info, positions=[[0]] * rows if rows > 1 else [0], seq_len=None)
    if ROPE.check is not None:
        ROPE.check(fields)
    return ROPE.complete(fields, models) if ROPE.complete is not None else fields


def _mask_rule_fields(p: Mapping[str, Any]) -> dict[str, Any] | None:
    if not p["mask"]:
        for name in ("kind", "window", "chunk_size"):
            if p[name] is not None:
                raise InvalidArgument(
                    f"{name} shapes the mask: give it with mask: true", field=name
                )
        return None
    rule = mask_rule(p["kind"] or "causal", window=p["window"], chunk_size=p["chunk_size"])
    return {"kind": rule.kind, "window": rule.window, "chunk_size": rule.chunk_size}


def _complete(p: dict[str, Any], models: Any) -> dict[str, Any]:
    """``T``, the documents, the split checked (a 422 naming the multiple needed), the rope
    settings and the mask rule: numbers only, before any tensor."""
    info = {k: v for k, v in p.items() if k not in CONTEXT_PARALLEL.field_names}
    total = _length(p)
    cu = check_cu_seqlens(p["cu_seqlens"], total) if p["cu_seqlens"] is not None else [0, total]
    check_split(p["scheme"], p["cp_size"], cu, block_size=p["block_size"])
    rope = _rope_fields(p, info, models) if p["head_dim"] is not None else None
    return {**p, "seq_len": total, "cu": cu, "rope": rope, "rule": _mask_rule_fields(p)}


def _split(p: Mapping[str, Any]) -> ContextSplit:
    return split_sequence(p["scheme"], p["cp_size"], cu_seqlens=p["cu"], block_size=p["block_size"])


def _positions(p: Mapping[str, Any]) -> Tensor:
    """``(T,)`` or ``(3, T)`` int64 global position ids: the given ones, else per document."""
    if p["position_ids"] is not None:
        return torch.tensor(p["position_ids"], dtype=torch.int64)
    return document_positions(p["cu"], reset=p["reset_positions"])


def _shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    total, cp = int(p["seq_len"]), int(p["cp_size"])
    per_rank, rows = total // cp, _rows(p)
    shapes: dict[str, tuple[int, ...]] = {"restore": (total,)}
    for r in range(cp):
        shapes[f"{r}.indices"] = (per_rank,)
        shapes[f"{r}.position_ids"] = (rows, per_rank) if rows > 1 else (per_rank,)
        if p["rope"] is not None:
            width = int(p["rope"]["rotary_dim"])
            shapes[f"{r}.cos"] = shapes[f"{r}.sin"] = (per_rank, width)
        if p["rule"] is not None:
            shapes[f"{r}.mask"] = (per_rank, total)
    return shapes


def _mask_of(p: Mapping[str, Any], indices: Tensor, device: torch.device) -> Tensor:
    """``(T_r, T)`` bool: the rank's query rows of the global mask, causal within documents."""
    r = p["rule"]
    rule = mask_rule(r["kind"], window=r["window"], chunk_size=r["chunk_size"])
    total = int(p["seq_len"])
    cu = p["cu"] if len(p["cu"]) > 2 else None
    inputs = mask_inputs(rule, total, cu_seqlens=cu)
    out = torch.empty((indices.numel(), total), dtype=torch.bool, device=device)
    step = max(1, _MASK_BLOCK_ELEMENTS // total)
    for start in range(0, indices.numel(), step):
        rows = indices[start : start + step].to(device)
        out[start : start + step] = mask_rows(rule, inputs, rows)
    return out


def _compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    """Every tensor whole: the row blocks filled once (:func:`_blocks`); for M-RoPE's
    ``(3, T)`` ids, the rope kind's own table of the whole row, each rank's rows gathered."""
    if _rows(p) == 1:
        return {name: table.whole() for name, table in _blocks(p, ctx).items()}
    split = _split(p)
    positions = _positions(p)
    tables = None
    if p["rope"] is not None:  # the global table, the rope kind's own computation
        tables = ROPE.compute({**p["rope"], "positions": positions.tolist()}, ctx)
    out = {"restore": split.restore.to(ctx.device)}
    for shard in split.ranks:
        r, idx = shard.rank, shard.indices
        out[f"{r}.indices"] = idx.to(ctx.device)
        out[f"{r}.position_ids"] = positions[..., idx].to(ctx.device)
        if tables is not None:
            rows = idx.to(tables["cos"].device)
            out[f"{r}.cos"], out[f"{r}.sin"] = tables["cos"][rows], tables["sin"][rows]
        if p["rule"] is not None:
            out[f"{r}.mask"] = _mask_of(p, idx, ctx.device)
    return out


def _largest_position(p: Mapping[str, Any]) -> int:
    """The row's largest position id, from the numbers (it sets dynamic and LongRoPE
    frequencies of the global table)."""
    given = p["position_ids"]
    if given is not None:
        return int(max(max(row) for row in given) if isinstance(given[0], list) else max(given))
    if p["reset_positions"]:
        return int(max(b - a for a, b in itertools.pairwise(p["cu"]))) - 1
    return int(p["seq_len"]) - 1


def _rope_rows(
    p: Mapping[str, Any], name: str, positions: Tensor, ctx: kinds.Context
) -> TableBlocks:
    """``(T_r, R)`` cos or sin rows of the global table at a rank's 1-D ``positions``, in row
    blocks: the rope kind's row function (:func:`posenc.rope.rope_blocks`) with the global
    table's frequencies (``seq_len`` = its largest position + 1)."""
    rope = p["rope"]
    scaling = RopeScaling.from_dict(rope["scaling"]) if rope["scaling"] is not None else None
    frequencies = rope_inv_freq(
        rope["rotary_dim"],
        rope["base"],
        scaling,
        seq_len=_largest_position(p) + 1,
        exponent_dim=rope["exponent_dim"],
    )
    table = rope_blocks(
        positions,
        rotary_dim=rope["rotary_dim"],
        base=rope["base"],
        layout=rope["layout"],
        scaling=scaling,
        which=name.rpartition(".")[2],
        device=ctx.device,
        dtype=ctx.dtype,
        frequencies=frequencies,
        exponent_dim=rope["exponent_dim"],
        rotation=rope["rotation"],
    )
    return dataclasses.replace(table, name=name)


def _mask_rows(
    p: Mapping[str, Any], name: str, indices: Tensor, device: torch.device
) -> TableBlocks:
    """``(T_r, T)`` bool: a rank's mask rows (:func:`_mask_of`) in row blocks."""

    def fill(start: int, stop: int, out: Tensor) -> None:
        out.copy_(_mask_of(p, indices[start:stop], device))

    return TableBlocks(name, (indices.numel(), int(p["seq_len"])), torch.bool, fill, device)


def _blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    """Every tensor of :func:`_compute` in row blocks (1-D position ids only), for answers
    past ``POSENC_MAX_ELEMENTS`` in raw, npy and safetensors: the same bytes."""
    split = _split(p)
    positions = _positions(p)
    dev = ctx.device
    out: dict[str, Any] = {"restore": tensor_blocks("restore", split.restore.to(dev))}
    for shard in split.ranks:
        r, idx = shard.rank, shard.indices
        out[f"{r}.indices"] = tensor_blocks(f"{r}.indices", idx.to(dev))
        out[f"{r}.position_ids"] = tensor_blocks(f"{r}.position_ids", positions[idx].to(dev))
        if p["rope"] is not None:
            for name in (f"{r}.cos", f"{r}.sin"):
                out[name] = _rope_rows(p, name, positions[idx], ctx)
        if p["rule"] is not None:
            out[f"{r}.mask"] = _mask_rows(p, f"{r}.mask", idx, ctx.device)
    return out


def _rope_meta(p: Mapping[str, Any]) -> dict[str, Any] | None:
    """The rope kind's meta for the global table (its largest position decides dynamic and
    LongRoPE scaling), without its one-table ``seq_len``."""
    if p["rope"] is None or ROPE.meta is None:
        return None
    largest = _largest_position(p)
    rows = _rows(p)
    stand_in = [[largest]] * rows if rows > 1 else [largest]
    meta = ROPE.meta({**p["rope"], "positions": stand_in})
    return {k: v for k, v in meta.items() if k not in ("kind", "seq_len", "dtype")}


def _meta(p: Mapping[str, Any]) -> dict[str, Any]:
    split = _split(p)
    positions = _positions(p)
    return {
        "kind": "context_parallel",
        "scheme": p["scheme"],
        "cp_size": p["cp_size"],
        "seq_len": p["seq_len"],
        "cu_seqlens": p["cu"],
        "reset_positions": p["reset_positions"] if p["position_ids"] is None else None,
        "block_size": p["block_size"] if p["scheme"] == "ptrr" else None,
        "ranks": [
            {
                "rank": shard.rank,
                "indices": shard.indices.tolist(),
                "position_ids": positions[..., shard.indices].tolist(),
                "cu_seqlens": shard.cu_seqlens,
                "max_seqlen": shard.max_seqlen,
            }
            for shard in split.ranks
        ],
        "rope": _rope_meta(p),
        "mask": p["rule"],
        "dtype": p["dtype"],
        **{k: p[k] for k in ("config_model_type",) if k in p},
    }


def _json_layout(
    tensors: Mapping[str, Tensor], entries: Mapping[str, Any], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON answer: ``ranks`` (each rank's plain lists, and ``cos``, ``sin``, ``mask`` as
    tensors), ``restore`` as a plain list, then every tensor and ``meta`` as elsewhere."""
    ranks = []
    for rank in meta["ranks"]:
        entry = dict(rank)
        for name in ("cos", "sin", "mask"):
            key = f"{rank['rank']}.{name}"
            if key in entries:
                entry[name] = entries[key]
        ranks.append(entry)
    restore = tensors["restore"].cpu().numpy()
    return {"ranks": ranks, "restore": restore, "tensors": dict(entries), "meta": dict(meta)}


def _allocations(p: Mapping[str, Any]) -> dict[str, int]:
    """``meta.ranks`` holds every rank's indices and position ids as Python lists: counted as
    8 elements a number (a Python int in a list takes about 8 times an int64's bytes)."""
    return {"meta.ranks": 8 * int(p["seq_len"]) * (1 + _rows(p))}


def _head_dim_field() -> kinds.FieldSpec:
    return dataclasses.replace(
        ROPE.field("head_dim"),
        default=None,
        description="Dh, even: with it (or a preset or config that gives it) each rank adds "
        "cos and sin, its rows of the global RoPE table (the fields as POST "
        "/v1/encodings/rope takes them)",
    )


CONTEXT_PARALLEL: kinds.Kind = kinds.Kind(
    name="context_parallel",
    path="/v1/positions/context-parallel",
    tag="tokens",
    summary="One row split across context-parallel ranks",
    description="One sequence (`seq_len`) or packed documents (`cu_seqlens`) split across "
    "`cp_size` context-parallel ranks by `scheme`: contiguous; head_tail (2·cp chunks, rank r "
    "holds chunks r and 2·cp−1−r: Megatron-LM, Transformer Engine, torch's "
    "_HeadTailLoadBalancer); per_document_head_tail (the same in every document: Transformer "
    "Engine's THD split); torch_per_document_head_tail (torch's "
    "_PerDocumentHeadTailLoadBalancer, sharded in equal contiguous pieces); ptrr (torch's "
    "_PTRRLoadBalancer over the per-document causal block mask). Each rank: its global token "
    "`indices`, `position_ids` (restarting at each document with reset_positions), local "
    "`cu_seqlens` and `max_seqlen`; with rope settings its rows of the global cos/sin table, "
    "bit for bit; with `mask: true` its (T_r, T) rows of the per-document causal (sliding, "
    "chunked) mask. `restore` puts the ranks' tokens, concatenated, back in order (torch's "
    "restore=True indices). JSON lays the ranks out as `ranks`; safetensors names the tensors "
    "`{rank}.{name}`.",
    fields=(
        kinds.FieldSpec("seq_len", "int", "T of one sequence", None, minimum=1, example=8),
        kinds.FieldSpec(
            "cu_seqlens",
            "ints",
            "packed documents instead of seq_len: 0 < … < T, as flash-attn's varlen calls "
            "take them",
            None,
            minimum=0,
        ),
        kinds.FieldSpec(
            "cp_size", "int", "the context-parallel ranks", minimum=1, maximum=4096, example=2
        ),
        kinds.FieldSpec(
            "scheme",
            "str",
            "how the row is split: contiguous, head_tail (default), per_document_head_tail, "
            "torch_per_document_head_tail or ptrr",
            "head_tail",
            choices=SCHEMES,
        ),
        kinds.FieldSpec(
            "block_size",
            "int",
            "ptrr: the block mask's BLOCK_SIZE; blocks are dealt out whole",
            128,
            minimum=1,
        ),
        kinds.FieldSpec(
            "reset_positions",
            "bool",
            "position ids restart at each document (default); false: they continue across "
            "documents, as Megatron-LM without --reset-position-ids",
            True,
        ),
        kinds.FieldSpec(
            "position_ids",
            "ints",
            "explicit global position ids (T), or M-RoPE's three rows (3, T); T then comes "
            "from them and each rank gets its columns",
            None,
            minimum=0,
            rows=3,
        ),
        kinds.FieldSpec("mask", "bool", "add each rank's (T_r, T) mask rows", False),
        kinds.FieldSpec(
            "kind",
            "str",
            "with mask: the rule, as POST /v1/masks takes it (default causal), within documents",
            None,
            choices=MASK_KINDS,
        ),
        kinds.FieldSpec("window", "int", "W of kind sliding", None, minimum=1),
        kinds.FieldSpec("chunk_size", "int", "C of kind chunked", None, minimum=1),
        _head_dim_field(),
        *(ROPE.field(name) for name in _ROPE_FIELDS),
    ),
    tensors=(
        kinds.TensorSpec("restore", ("T",), integer=True),
        kinds.TensorSpec("{rank}.indices", ("T_r",), integer=True),
        kinds.TensorSpec("{rank}.position_ids", ("T_r",), integer=True),
        kinds.TensorSpec("{rank}.cos", ("T_r", "R")),
        kinds.TensorSpec("{rank}.sin", ("T_r", "R")),
        kinds.TensorSpec("{rank}.mask", ("T_r", "T"), integer=True),
    ),
    shapes=_shapes,
    compute=_compute,
    meta=_meta,
    get=False,
    blocks=_blocks,
    streams=lambda p: _rows(p) == 1,  # M-RoPE's three rows are computed whole
    row_elements=lambda p: int(p["seq_len"]),  # restore is one row of T
    sources=ROPE.sources,
    complete=_complete,
    allocations=_allocations,
    json_layout=_json_layout,
    examples=(
        {"cu_seqlens": [0, 4, 8], "cp_size": 2, "scheme": "per_document_head_tail"},
        {"seq_len": 16, "cp_size": 2, "scheme": "head_tail", "head_dim": 8, "mask": True},
    ),
)
"""The context-parallel endpoint kind (see :mod:`posenc.core.kinds`)."""
