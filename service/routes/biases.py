"""``/v1/biases/{alibi,relative}``: attention biases (POST and GET)."""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter

from posenc import resolve_dtype
from posenc.alibi import alibi_bias, alibi_slopes
from posenc.blocks import (
    alibi_bias_blocks,
    relative_bias_blocks,
    relative_buckets_blocks,
    tensor_blocks,
)
from posenc.relative import (
    num_relative_buckets,
    relative_bias,
    relative_bias_table,
    relative_buckets,
)
from service.formats import Bundle
from service.query import Source, missing
from service.responding import Plan
from service.routes.model_config import merge_sources
from service.routes.tables import add_compute_routes
from service.schemas import AlibiRequest, RelativeRequest
from service.state import ServiceState
from service.streaming import StreamBundle

router = APIRouter(prefix="/v1/biases", tags=["biases"])


def alibi_plan(req: AlibiRequest, state: ServiceState, source: Source) -> Plan:
    req, info = merge_sources(req, "alibi", source)
    if req.num_heads is None:
        raise missing(source, "num_heads", "Field required: give num_heads (or an alibi preset)")
    heads, seq_len = req.num_heads, req.seq_len
    key_len = seq_len if req.key_len is None else req.key_len
    dtype = resolve_dtype(req.dtype)
    meta = {
        "kind": "alibi",
        "num_heads": heads,
        "seq_len": seq_len,
        "key_len": key_len,
        "mode": req.mode,
        "max_bias": req.max_bias,
        "preset": req.preset,
        "dtype": req.dtype,
        **info,
    }
    max_bias = cast(float, req.max_bias)  # merge_sources applied the default

    def compute() -> Bundle:
        bias = alibi_bias(
            heads,
            seq_len,
            key_len,
            mode=req.mode,
            max_bias=max_bias,
            device=state.device,
            dtype=dtype,
        )  # (H, T, S)
        slopes = alibi_slopes(heads, max_bias, device=state.device, dtype=dtype)  # (H,)
        return Bundle({"bias": bias, "slopes": slopes}, meta)

    return Plan(
        route="/v1/biases/alibi",
        params={**req.model_dump(mode="json"), "key_len": key_len, **info},
        elements=heads * seq_len * key_len + heads,
        compute=compute,
        names=("bias", "slopes"),
        row_elements=max(key_len, heads),
        stream=lambda: StreamBundle(
            {
                "bias": alibi_bias_blocks(
                    heads,
                    seq_len,
                    key_len,
                    mode=req.mode,
                    max_bias=max_bias,
                    device=state.device,
                    dtype=dtype,
                ),
                "slopes": tensor_blocks(
                    "slopes", alibi_slopes(heads, max_bias, device=state.device, dtype=dtype)
                ),
            },
            meta,
        ),
    )


def relative_plan(req: RelativeRequest, state: ServiceState, source: Source) -> Plan:
    req, info = merge_sources(req, "relative", source)
    seq_len = req.seq_len
    key_len = seq_len if req.key_len is None else req.key_len
    # merge_sources applied the documented defaults to what neither a preset nor a config gave
    num_buckets, max_distance = cast(int, req.num_buckets), cast(int, req.max_distance)
    bidirectional = cast(bool, req.bidirectional)
    n_buckets = num_relative_buckets(
        num_buckets=num_buckets, max_distance=max_distance, bucketing=req.bucketing
    )
    heads = req.num_heads
    dtype = resolve_dtype(req.dtype)
    meta = {
        "kind": "relative",
        "seq_len": seq_len,
        "key_len": key_len,
        "num_buckets": req.num_buckets,
        "bucket_count": n_buckets,
        "max_distance": req.max_distance,
        "bidirectional": req.bidirectional,
        "bucketing": req.bucketing,
        "num_heads": heads,
        "seed": req.seed,
        "preset": req.preset,
        "dtype": req.dtype,
        **info,
    }

    def compute() -> Bundle:
        buckets = relative_buckets(
            seq_len,
            key_len,
            num_buckets=num_buckets,
            max_distance=max_distance,
            bidirectional=bidirectional,
            bucketing=req.bucketing,
            device=state.device,
        )  # (T, S) int64
        tensors = {"buckets": buckets}
        if heads is not None:
            table = relative_bias_table(n_buckets, heads, seed=req.seed).to(state.device)
            tensors["bias"] = relative_bias(buckets, table, dtype=dtype)  # (H, T, S)
        return Bundle(tensors, meta)

    def stream() -> StreamBundle:
        kw = dict(
            num_buckets=num_buckets,
            max_distance=max_distance,
            bidirectional=bidirectional,
            bucketing=req.bucketing,
            device=state.device,
        )
        tables = {"buckets": relative_buckets_blocks(seq_len, key_len, **kw)}  # type: ignore[arg-type]
        if heads is not None:
            tables["bias"] = relative_bias_blocks(
                seq_len,
                key_len,
                num_heads=heads,
                seed=req.seed,
                dtype=dtype,
                **kw,  # type: ignore[arg-type]
            )
        return StreamBundle(tables, meta)

    pairs = seq_len * key_len
    return Plan(
        route="/v1/biases/relative",
        params={**req.model_dump(mode="json"), "key_len": key_len, **info},
        elements=pairs + (heads * pairs if heads else 0),
        compute=compute,
        names=("buckets", "bias") if heads else ("buckets",),
        allocations={"num_heads": n_buckets * heads} if heads else {},
        row_elements=key_len,
        stream=stream,
    )


add_compute_routes(
    router,
    "/alibi",
    AlibiRequest,
    alibi_plan,
    names=("bias", "slopes"),
    summary="ALiBi attention bias",
    description=(
        "Press et al. (2022) linear biases; slopes as the paper's code, BLOOM and MPT. Query i "
        "sits at position i + S − T. Tensors: `bias` (H, T, S) (−inf, `null` in JSON, above "
        "the diagonal in causal mode), `slopes` (H)."
    ),
)
add_compute_routes(
    router,
    "/relative",
    RelativeRequest,
    relative_plan,
    names=("buckets", "bias"),
    summary="T5 relative position buckets and bias",
    description=(
        "T5's `_relative_position_bucket` of `j − (i + S − T)` (or clipped distances), and with "
        "`num_heads` a seeded bias table `torch.manual_seed(seed); nn.Embedding(n_buckets, H)` "
        "gathered per pair. Tensors: `buckets` (T, S) int64, `bias` (H, T, S) when `num_heads` "
        "is given."
    ),
)
