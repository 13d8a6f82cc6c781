"""Learned (absolute) position tables, as GPT-2 and BERT use them, made reproducible by a seed.

A freshly initialised ``nn.Embedding(P, D)`` draws its weight from ``N(0, 1)``
(``torch.nn.init.normal_``). :func:`seeded_normal` draws the same numbers, bit for bit, as
``torch.manual_seed(seed); nn.Embedding(rows, cols).weight`` but from a private
``torch.Generator`` on the CPU, so it never touches the global RNG (thread-safe in the server).

Notation used for tensor shapes: ``P`` table positions, ``D`` model dimension.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from posenc.core import kinds
from posenc.core.blocks import TableBlocks, tensor_blocks
from posenc.core.device import resolve_dtype
from posenc.core.errors import InvalidArgument, MissingField
from posenc.core.limits import check_elements
from posenc.core.validate import check_int, check_int_at_least, device_or_cpu

SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
"""The seeds ``torch.manual_seed`` takes."""


def seeded_normal(
    rows: int, cols: int, *, seed: int = 0, max_elements: int | None = None
) -> Tensor:
    """A ``N(0, 1)`` table equal to ``torch.manual_seed(seed); nn.Embedding(rows, cols).weight``.

    Args:
        rows: number of rows (``P`` or ``V``), >= 1.
        cols: number of columns (``D``), >= 1.
        seed: as ``torch.manual_seed`` takes it, in ``[-2**63, 2**64)``.
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(rows, cols)`` float32 CPU tensor, without grad.

    Raises:
        InvalidArgument: ``rows`` or ``cols`` < 1, or ``seed`` out of range.
    """
    check_int_at_least("rows", rows, 1)
    check_int_at_least("cols", cols, 1)
    check_elements(rows * cols, what=f"the table ({rows}, {cols})", max_elements=max_elements)
    if isinstance(seed, bool) or not isinstance(seed, int) or not SEED_MIN <= seed <= SEED_MAX:
        raise InvalidArgument(
            f"seed must be an int in [{SEED_MIN}, {SEED_MAX}], got {seed!r}", field="seed"
        )
    generator = torch.Generator(device="cpu").manual_seed(seed)
    # nn.Embedding.reset_parameters -> init.normal_(weight) -> weight.normal_(0, 1)
    return torch.empty(rows, cols, dtype=torch.float32).normal_(0.0, 1.0, generator=generator)


def learned_table(
    num_positions: int,
    d_model: int,
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    max_elements: int | None = None,
) -> Tensor:
    """A seeded learned position table, as a freshly initialised ``nn.Embedding(P, D)``.

    Radford et al., 2019 (GPT-2, ``wpe``) and Devlin et al., 2019 (BERT,
    ``position_embeddings``) learn this table; untrained, it is
    ``torch.manual_seed(seed); nn.Embedding(num_positions, d_model).weight``.

    Args:
        num_positions: ``P``, >= 1.
        d_model: ``D``, >= 1.
        seed: the seed given to ``torch.manual_seed``.
        device: where the table goes; ``None`` means the CPU. Drawn on the CPU either way.
        dtype: the output dtype (drawn in float32, cast once).
        max_elements: refuse a call whose output would exceed this many elements
            (:class:`~posenc.core.errors.TooLarge`, raised before anything is allocated); None means
            ``posenc.core.limits.MAX_ELEMENTS`` (2**31).

    Returns:
        ``(P, D)`` tensor of ``dtype``.
    """
    check_int_at_least("num_positions", num_positions, 1)
    check_int_at_least("d_model", d_model, 1)
    check_elements(
        num_positions * d_model,
        what=f"the table ({num_positions}, {d_model})",  # as seeded_normal says it
        max_elements=max_elements,
    )
    table = learned_blocks(num_positions, d_model, seed=seed, dtype=dtype).whole()  # (P, D)
    return table.to(device_or_cpu(device))  # drawn on the CPU, as the blocks are


# ---------------------------------------------------------------------------------------------
# The learned endpoint kind (posenc.core.kinds): a seeded table, or a loaded model's
# ---------------------------------------------------------------------------------------------


def _model_table(p: Mapping[str, Any], models: Callable[[str | None], Any]) -> Tensor:
    """The named model's ``(P, D)`` position table; InvalidArgument when it has none."""
    model = models(p["model"])
    table: Tensor | None = model.position_table
    if table is None:
        raise InvalidArgument(
            f"model {model.name!r} has no learned position table (its positional encoding is "
            f"{model.positional!r})",
            field="model",
        )
    return table


def _learned_complete(p: dict[str, Any], models: Callable[[str | None], Any]) -> dict[str, Any]:
    """With ``model``: its table's size gives ``d_model`` and the default ``seq_len``; without,
    both are required (from the caller, a preset or a config)."""
    if p["model"] is None:
        for name in ("seq_len", "d_model"):
            if p[name] is None:
                raise MissingField(
                    f"give {name} (or a model, preset or config that gives it)", field=name
                )
        size = p.get("table_size")
        if size is not None and p["seq_len"] > size:
            raise InvalidArgument(
                f"seq_len {p['seq_len']} is beyond the config's position table of {size} "
                f"positions (model_type {p.get('config_model_type')!r}: "
                f"max_position_embeddings / n_positions {size}; seq_len must be <= {size})",
                field="seq_len",
            )
        return p
    model = models(p["model"])
    num_positions, d_model = (int(n) for n in _model_table(p, models).shape)
    if p["d_model"] is not None and p["d_model"] != d_model:
        raise InvalidArgument(
            f"d_model {p['d_model']} differs from model {model.name!r}'s d_model {d_model}; "
            "omit d_model or give that",
            field="d_model",
        )
    seq_len = num_positions if p["seq_len"] is None else p["seq_len"]
    if seq_len > num_positions:
        raise InvalidArgument(
            f"seq_len {seq_len} is beyond model {model.name!r}'s position table of "
            f"{num_positions} positions (seq_len must be <= {num_positions})",
            field="seq_len",
        )
    return {**p, "seq_len": seq_len, "d_model": d_model, "model": model.name,
            "table_size": num_positions}  # fmt: skip


def _learned_from_config(
    positions: Any, given: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A config's table: ``seq_len`` and ``d_model`` as defaults; its size (and, for RoBERTa's
    and BART's families, the rows its positions reach) for the size check and ``meta``."""
    learned = dict(positions.learned or {})
    defaults = {k: learned.get(k) for k in ("seq_len", "d_model")}
    info = {k: learned[k] for k in ("table_size", "first_position", "usable_positions")
            if learned.get(k) is not None}  # fmt: skip
    if "first_position" in info:
        info["positions_note"] = (
            f"{info['usable_positions']} of the {info['table_size']} rows are reachable: the "
            f"model reads row p + {info['first_position']} for position p (RoBERTa's family "
            "counts from padding_idx + 1, BART's LearnedPositionalEmbedding adds 2)"
        )
    return defaults, info


def _learned_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    if p["model"] is not None:
        keys: tuple[str, ...] = ("seq_len", "d_model", "model", "table_size", "dtype")
        return {"kind": "learned", **{k: p[k] for k in keys}}
    keys = ("seq_len", "d_model", "seed", "dtype")
    return {"kind": "learned", **{k: p[k] for k in keys}, **kinds.derived(LEARNED, p)}


def _learned_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    if p["model"] is not None:
        table = _model_table(p, ctx.models)[: p["seq_len"]]
        return {"encoding": table.to(device=ctx.device, dtype=ctx.dtype)}  # (T, D)
    return {
        "encoding": learned_table(
            p["seq_len"], p["d_model"], seed=p["seed"], device=ctx.device, dtype=ctx.dtype
        )
    }


def learned_blocks(
    seq_len: int,
    d_model: int,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    name: str = "encoding",
) -> TableBlocks:
    """:func:`~posenc.absolute.learned.learned_table` ``(T, D)`` in row blocks, in order (``sequential``).

    One generator seeded once draws the blocks one after another, as ``normal_`` draws the whole
    table; block sizes keep to its groups of 16 (see the module docstring).
    """
    check_int("seq_len", seq_len, 1)
    check_int("d_model", d_model, 1)
    dtype = resolve_dtype(dtype)
    seeded_normal(1, 1, seed=seed)  # validates the seed
    state: dict[str, Any] = {}

    def fill(start: int, stop: int, out: Tensor) -> None:
        if start == 0:
            state["generator"] = torch.Generator(device="cpu").manual_seed(seed)
        target = out if dtype == torch.float32 else torch.empty(out.shape, dtype=torch.float32)
        target.normal_(0.0, 1.0, generator=state["generator"])
        if target is not out:
            out.copy_(target)

    return TableBlocks(
        name,
        (seq_len, d_model),
        dtype,
        fill,
        row_multiple=16 // math.gcd(d_model, 16),
        min_last_rows=-(-16 // d_model),
        sequential=True,
    )


def _learned_blocks(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Any]:
    if p["model"] is not None:
        return {"encoding": tensor_blocks("encoding", _learned_compute(p, ctx)["encoding"])}
    return {"encoding": learned_blocks(p["seq_len"], p["d_model"], seed=p["seed"], dtype=ctx.dtype)}


LEARNED: kinds.Kind = kinds.Kind(
    name="learned",
    path="/v1/encodings/learned",
    tag="encodings",
    summary="Learned positional table",
    description="A loaded model's position table (`model`), or a seeded one: "
    "`torch.manual_seed(seed); nn.Embedding(max(seq_len, 1), d_model).weight` (GPT-2's "
    "`wpe`, BERT's `position_embeddings` at initialisation).",
    fields=(
        kinds.FieldSpec(
            "seq_len",
            "int",
            "T (required unless model, preset or config gives it)",
            None,
            minimum=1,
            sourced=True,
            example=8,
        ),
        kinds.FieldSpec(
            "d_model",
            "int",
            "D (may be omitted with model, preset or config)",
            None,
            minimum=1,
            sourced=True,
            example=16,
        ),
        kinds.FieldSpec("model", "str", "name from GET /v1/models: use its position table", None),
        kinds.FieldSpec(
            "seed",
            "int",
            "torch.manual_seed of the table",
            0,
            minimum=SEED_MIN,
            maximum=SEED_MAX,
            example=0,
        ),
        kinds.preset_field("learned"),
        kinds.config_field("Gives d_model and the table size (seq_len)."),
    ),
    tensors=(kinds.TensorSpec("encoding", ("T", "D")),),
    shapes=lambda p: {"encoding": (p["seq_len"], p["d_model"])},
    compute=_learned_compute,
    meta=_learned_meta,
    blocks=_learned_blocks,
    row_elements=lambda p: int(p["d_model"]),
    sources=kinds.Sources("learned", from_config=_learned_from_config),
    complete=_learned_complete,
    model_field="model",
)
"""The learned endpoint kind (see :mod:`posenc.core.kinds`)."""
