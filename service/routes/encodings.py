"""``/v1/encodings/{sinusoidal,learned,rope}``: positional encoding tables (POST and GET)."""

from __future__ import annotations

from fastapi import APIRouter

from posenc import resolve_dtype
from posenc.blocks import learned_blocks, rope_blocks, sinusoidal_blocks, tensor_blocks
from posenc.errors import InvalidArgument
from posenc.learned import learned_table
from posenc.rope import RopeScaling, rope_cos_sin, rope_inv_freq
from posenc.sinusoidal import sinusoidal_table
from service.formats import Bundle
from service.routes.common import Plan, ServiceState, Source, merge_preset, missing
from service.routes.tables import add_compute_routes
from service.schemas import LearnedRequest, RopeRequest, SinusoidalRequest
from service.streaming import StreamBundle

router = APIRouter(prefix="/v1/encodings", tags=["encodings"])


def sinusoidal_plan(req: SinusoidalRequest, state: ServiceState, source: Source) -> Plan:
    seq_len = req.seq_len if req.seq_len is not None else len(req.positions or ())
    dtype = resolve_dtype(req.dtype)
    meta = {
        "kind": "sinusoidal",
        "seq_len": seq_len,
        "d_model": req.d_model,
        "base": req.base,
        "layout": req.layout,
        "offset": req.offset,
        "dtype": req.dtype,
    }

    def compute() -> Bundle:
        table = sinusoidal_table(
            req.positions,
            seq_len=req.seq_len,
            d_model=req.d_model,
            base=req.base,
            layout=req.layout,
            offset=req.offset,
            device=state.device,
            dtype=dtype,
        )  # (T, D)
        return Bundle({"encoding": table}, meta)

    return Plan(
        route="/v1/encodings/sinusoidal",
        params=req.model_dump(mode="json"),
        elements=seq_len * req.d_model,
        compute=compute,
        names=("encoding",),
        stream=lambda: StreamBundle(
            {
                "encoding": sinusoidal_blocks(
                    req.positions,
                    seq_len=req.seq_len,
                    d_model=req.d_model,
                    base=req.base,
                    layout=req.layout,
                    offset=req.offset,
                    device=state.device,
                    dtype=dtype,
                )
            },
            meta,
        ),
    )


def learned_plan(req: LearnedRequest, state: ServiceState, source: Source) -> Plan:
    req, _ = merge_preset(req, "learned", source)
    dtype = resolve_dtype(req.dtype)
    params = req.model_dump(mode="json")
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
        stream=lambda: StreamBundle(
            {"encoding": learned_blocks(seq_len, d_model, seed=seed, dtype=dtype)}, meta
        ),
    )


def rope_plan(req: RopeRequest, state: ServiceState, source: Source) -> Plan:
    req, _ = merge_preset(req, "rope", source)
    if req.head_dim is None:
        raise missing(source, "head_dim", "Field required: give head_dim (or a rope preset)")
    rotary_dim = req.head_dim if req.rotary_dim is None else req.rotary_dim
    if req.positions is not None:
        seq_len, length = len(req.positions), max(req.positions) + 1
    else:
        seq_len = length = int(req.seq_len or 0)
    scaling = (
        RopeScaling.from_dict(req.scaling.model_dump(exclude_none=True))
        if req.scaling is not None
        else None
    )
    # Validates the scaling against rotary_dim (longrope factors) and gives the attention
    # scaling for meta; R/2 numbers, cheap.
    _inv_freq, attention_scaling = rope_inv_freq(rotary_dim, req.base, scaling, seq_len=length)
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
        "attention_scaling": attention_scaling,
        "dtype": req.dtype,
    }

    def compute() -> Bundle:
        tables = rope_cos_sin(
            req.positions,
            seq_len=req.seq_len,
            rotary_dim=rotary_dim,
            base=req.base,
            layout=req.layout,
            scaling=scaling,
            device=state.device,
            dtype=dtype,
        )
        return Bundle({"cos": tables.cos, "sin": tables.sin, "inv_freq": tables.inv_freq}, meta)

    def stream() -> StreamBundle:
        kw = dict(
            seq_len=req.seq_len,
            rotary_dim=rotary_dim,
            base=req.base,
            layout=req.layout,
            scaling=scaling,
            device=state.device,
            dtype=dtype,
        )
        inv_freq = tensor_blocks("inv_freq", _inv_freq.to(device=state.device, dtype=dtype))
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
        params={**req.model_dump(mode="json"), "rotary_dim": rotary_dim},
        elements=2 * seq_len * rotary_dim + rotary_dim // 2,
        compute=compute,
        names=("cos", "sin", "inv_freq"),
        # row blocks are of 1-D positions: (3, T) multimodal positions are not streamed
        stream=None if req.positions and isinstance(req.positions[0], list) else stream,
    )


add_compute_routes(
    router,
    "/sinusoidal",
    SinusoidalRequest,
    sinusoidal_plan,
    names=("encoding",),
    summary="Sinusoidal positional encoding",
    description=(
        "Vaswani et al. (2017) fixed sinusoidal table, computed in float64 and cast once. "
        "Tensors: `encoding` (T, D)."
    ),
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
        "dynamic, yarn, longrope, llama3); cos and sin include the attention scaling "
        "(`meta.attention_scaling`). Tensors: `cos` (T, rotary_dim), `sin` (T, rotary_dim), "
        "`inv_freq` (rotary_dim/2)."
    ),
)
