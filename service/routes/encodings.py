"""``/v1/encodings/{learned,rope}``: positional encoding tables (POST and GET).

``/v1/encodings/sinusoidal`` is a kind of the library's registry (:mod:`posenc.kinds`),
served by :mod:`service.routes.registered`."""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter

from posenc import resolve_dtype
from posenc.blocks import learned_blocks, rope_blocks, tensor_blocks
from posenc.errors import InvalidArgument
from posenc.learned import learned_table
from posenc.rope import RopeScaling, rope_cos_sin, rope_inv_freq
from posenc.rope_sections import mrope_channel_axes, mrope_cos_sin
from service.formats import Bundle
from service.query import Source, missing
from service.responding import Plan
from service.routes.model_config import merge_sources
from service.routes.tables import add_compute_routes
from service.schemas import LearnedRequest, RopeRequest
from service.state import ServiceState
from service.streaming import StreamBundle, check_row_width

router = APIRouter(prefix="/v1/encodings", tags=["encodings"])


def learned_plan(req: LearnedRequest, state: ServiceState, source: Source) -> Plan:
    req, info = merge_sources(req, "learned", source)
    dtype = resolve_dtype(req.dtype)
    params = {**req.model_dump(mode="json"), **info}
    if req.model is not None:
        model = state.model(req.model)
        table = model.position_table
        if table is None:
            raise InvalidArgument(
                f"model {model.name!r} has no learned position table (its positional encoding "
                f"is {model.positional!r})",
                field="model",
            )
        num_positions, d_model = int(table.shape[0]), int(table.shape[1])
        if req.d_model is not None and req.d_model != d_model:
            raise InvalidArgument(
                f"d_model {req.d_model} differs from model {model.name!r}'s d_model {d_model}; "
                "omit d_model or give that",
                field="d_model",
            )
        seq_len = num_positions if req.seq_len is None else req.seq_len
        if seq_len > num_positions:
            raise InvalidArgument(
                f"seq_len {seq_len} is beyond model {model.name!r}'s position table of "
                f"{num_positions} positions (seq_len must be <= {num_positions})",
                field="seq_len",
            )
        meta = {
            "kind": "learned",
            "seq_len": seq_len,
            "d_model": d_model,
            "model": model.name,
            "table_size": num_positions,
            "dtype": req.dtype,
        }

        def compute() -> Bundle:
            return Bundle({"encoding": table[:seq_len].to(dtype)}, meta)  # (T, D)

        return Plan(
            route="/v1/encodings/learned",
            params={**params, "seq_len": seq_len, "model": model.name},
            elements=seq_len * d_model,
            compute=compute,
            names=("encoding",),
            model=model.name,
            row_elements=d_model,
            stream=lambda: StreamBundle(
                {"encoding": tensor_blocks("encoding", table[:seq_len].to(dtype))}, meta
            ),
        )

    if req.seq_len is None:
        raise missing(source, "seq_len", "Field required: give seq_len (or a model or preset)")
    if req.d_model is None:
        raise missing(source, "d_model", "Field required: give d_model (or a model or preset)")
    seq_len, d_model, seed = req.seq_len, req.d_model, req.seed
    meta = {
        "kind": "learned",
        "seq_len": seq_len,
        "d_model": d_model,
        "seed": seed,
        "dtype": req.dtype,
        **info,
    }

    def compute_seeded() -> Bundle:
        table = learned_table(seq_len, d_model, seed=seed, device=state.device, dtype=dtype)
        return Bundle({"encoding": table}, meta)  # (T, D)

    return Plan(
        route="/v1/encodings/learned",
        params=params,
        elements=seq_len * d_model,
        compute=compute_seeded,
        names=("encoding",),
        row_elements=d_model,
        stream=lambda: StreamBundle(
            {"encoding": learned_blocks(seq_len, d_model, seed=seed, dtype=dtype)}, meta
        ),
    )


def mrope_positions(req: RopeRequest) -> list[list[int]] | None:
    """The ``(3, T)`` M-RoPE position rows of ``req``, or None for plain RoPE.

    Three rows need ``mrope_section``; with ``mrope_section`` (from the body or a config), a
    single row or ``seq_len`` is text: the same positions on all three axes, as transformers
    expands them.
    """
    rows = req.positions
    two_d = rows is not None and len(rows) > 0 and isinstance(rows[0], list)
    if req.mrope_section is None:
        if two_d:
            raise InvalidArgument(
                "positions given as three rows (temporal, height, width) need mrope_section "
                "(three ints summing to rotary_dim/2), or a config that has one",
                field="mrope_section",
            )
        return None
    if two_d:
        lengths = {len(r) for r in rows}  # type: ignore[union-attr, arg-type]
        if len(lengths) != 1:
            raise InvalidArgument(
                f"the three position rows must have the same length, got {sorted(lengths)}",
                field="positions",
            )
        return [list(r) for r in rows]  # type: ignore[union-attr, arg-type]
    text = list(rows) if rows is not None else list(range(int(req.seq_len or 0)))
    return [text, text, text]  # type: ignore[list-item]


def rope_plan(req: RopeRequest, state: ServiceState, source: Source) -> Plan:
    req, info = merge_sources(req, "rope", source)
    if req.head_dim is None:
        raise missing(source, "head_dim", "Field required: give head_dim (or a rope preset)")
    rotary_dim = req.head_dim if req.rotary_dim is None else req.rotary_dim
    mrope_rows = mrope_positions(req)  # (3, T) rows, or None for plain RoPE
    if mrope_rows is not None:
        seq_len, length = len(mrope_rows[0]), max(max(r) for r in mrope_rows) + 1
    elif req.positions is not None:
        positions = cast(list[int], req.positions)  # one row: (3, T) rows were taken above
        seq_len, length = len(positions), max(positions) + 1
    else:
        seq_len = length = int(req.seq_len or 0)
    scaling = (
        RopeScaling.from_dict(req.scaling.model_dump(exclude_none=True))
        if req.scaling is not None
        else None
    )
    base = float(req.base)  # type: ignore[arg-type]  # merge_sources applied the default
    elements = 2 * seq_len * rotary_dim + rotary_dim // 2
    settings = state.settings
    _inv_freq, attention_scaling = None, None
    if elements <= max(settings.max_elements, settings.max_stream_elements) and (
        rotary_dim // 2 <= settings.max_elements
    ):
        # Validates the scaling against rotary_dim (longrope factors) and gives the attention
        # scaling for meta: R/2 numbers, within the limits. Over them nothing is made here and
        # the size check answers 413 from the numbers alone (head_dim 1,121,509,132 once took
        # 4.5 GB and 40 s before its 413, when this ran first).
        _inv_freq, attention_scaling = rope_inv_freq(rotary_dim, base, scaling, seq_len=length)
    dtype = resolve_dtype(req.dtype)
    meta = {
        "kind": "rope",
        "seq_len": seq_len,
        "head_dim": req.head_dim,
        "rotary_dim": rotary_dim,
        "base": req.base,
        "layout": req.layout,
        "scaling": req.scaling.model_dump(mode="json", exclude_none=True) if req.scaling else None,
        "preset": req.preset,
        "rope_type": scaling.type if scaling is not None else "default",
        "attention_scaling": attention_scaling,
        "layer_type": req.layer_type,
        "dtype": req.dtype,
        **info,
    }
    if mrope_rows is not None:
        meta["mrope_section"] = req.mrope_section
        meta["mrope_interleaved"] = bool(req.mrope_interleaved)
        mrope_channel_axes(rotary_dim, req.mrope_section or (), interleaved=False)  # validates

    def compute() -> Bundle:
        if mrope_rows is not None:
            tables = mrope_cos_sin(
                mrope_rows,
                rotary_dim=rotary_dim,
                mrope_section=req.mrope_section or (),
                interleaved=bool(req.mrope_interleaved),
                base=base,
                layout=req.layout,  # type: ignore[arg-type]
                scaling=scaling,
                device=state.device,
                dtype=dtype,
            )
            return Bundle({"cos": tables.cos, "sin": tables.sin, "inv_freq": tables.inv_freq}, meta)
        tables = rope_cos_sin(
            cast("list[int] | None", req.positions),  # one row here (mrope_rows is None)
            seq_len=req.seq_len,
            rotary_dim=rotary_dim,
            base=base,
            layout=req.layout,  # type: ignore[arg-type]
            scaling=scaling,
            device=state.device,
            dtype=dtype,
        )
        return Bundle(
            {"cos": tables.cos, "sin": tables.sin, "inv_freq": tables.inv_freq},
            {**meta, "attention_scaling": tables.attention_scaling},
        )

    def stream() -> StreamBundle:
        kw = dict(
            seq_len=req.seq_len,
            rotary_dim=rotary_dim,
            base=base,
            layout=req.layout,
            scaling=scaling,
            device=state.device,
            dtype=dtype,
        )
        check_row_width("cos", rotary_dim, settings.max_elements)  # before anything is made
        freq = _inv_freq
        if freq is None:
            freq, _ = rope_inv_freq(rotary_dim, base, scaling, seq_len=length)
        inv_freq = tensor_blocks("inv_freq", freq.to(device=state.device, dtype=dtype))
        return StreamBundle(
            {
                "cos": rope_blocks(req.positions, which="cos", **kw),  # type: ignore[arg-type]
                "sin": rope_blocks(req.positions, which="sin", **kw),  # type: ignore[arg-type]
                "inv_freq": inv_freq,
            },
            meta,
        )

    return Plan(
        route="/v1/encodings/rope",
        params={**req.model_dump(mode="json"), "rotary_dim": rotary_dim, **info},
        elements=elements,
        compute=compute,
        names=("cos", "sin", "inv_freq"),
        row_elements=rotary_dim,
        # row blocks are of 1-D positions: (3, T) multimodal positions are not streamed
        stream=None if req.positions and isinstance(req.positions[0], list) else stream,
    )


add_compute_routes(
    router,
    "/learned",
    LearnedRequest,
    learned_plan,
    names=("encoding",),
    summary="Learned positional table",
    description=(
        "A loaded model's position table (`model`), or a seeded one: "
        "`torch.manual_seed(seed); nn.Embedding(max(seq_len, 1), d_model).weight`. "
        "Tensors: `encoding` (T, D)."
    ),
)
add_compute_routes(
    router,
    "/rope",
    RopeRequest,
    rope_plan,
    names=("cos", "sin", "inv_freq"),
    summary="Rotary position embedding tables",
    description=(
        "RoPE cos/sin tables with the scaling types of Hugging Face transformers (linear, "
        "dynamic, yarn, longrope, llama3, proportional); cos and sin include the attention "
        "scaling (`meta.attention_scaling`, with `meta.rope_type`). `config` takes a model's "
        "config.json (as transformers 5 reads it; `layer_type` for per-layer-type RoPE). Tensors: `cos` (T, rotary_dim), `sin` (T, rotary_dim), "
        "`inv_freq` (rotary_dim/2)."
    ),
)
