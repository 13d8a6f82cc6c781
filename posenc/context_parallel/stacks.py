"""Which context-parallel split each training or serving stack uses by default.

One record per stack: the scheme of :mod:`posenc.context_parallel.split` it applies to one
sequence and to packed documents, whether its position ids restart at each document, and where
that is decided in its source. ``POST /v1/configs/positions`` reports them
(:func:`context_parallel_schemes`), so a caller sees which ``scheme`` to send to
``POST /v1/positions/context-parallel`` to check a rank's positions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["STACKS", "StackSplit", "context_parallel_schemes"]


@dataclass(frozen=True)
class StackSplit:
    """One stack's default split.

    Attributes:
        stack: the stack's name.
        scheme: the scheme for one sequence (``null``: the stack does not split queries).
        packed_scheme: the scheme for packed documents (``null``: not supported).
        reset_positions: position ids restart at each document by default.
        source: where the stack decides it.
        note: what else a caller must know.
    """

    stack: str
    scheme: str | None
    packed_scheme: str | None
    reset_positions: bool
    source: str
    note: str = ""


STACKS: tuple[StackSplit, ...] = (
    StackSplit(
        "megatron-lm",
        "head_tail",
        "per_document_head_tail",
        False,
        "megatron/training/utils.py get_batch_on_this_cp_rank (2·cp chunks, chunks r and "
        "2·cp−1−r); packed THD batches through Transformer Engine's "
        "thd_get_partitioned_indices",
        "position ids continue across documents unless --reset-position-ids (Megatron-LM "
        "#5243: rank 0 of cu_seqlens [0, 4, 8] on 2 ranks holds positions [0, 3, 4, 7])",
    ),
    StackSplit(
        "transformer-engine",
        "head_tail",
        "per_document_head_tail",
        True,
        "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
        "(bshd/sbhd: the dual-chunk split; thd: thd_get_partitioned_indices per document)",
        "kernels get each rank's cu_seqlens // cp_size",
    ),
    StackSplit(
        "torch",
        "head_tail",
        "torch_per_document_head_tail",
        True,
        "torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py "
        "(_create_default_load_balancer: _HeadTailLoadBalancer when T divides by 2·cp, "
        "else no rearrangement)",
        "T not a multiple of 2·cp is split contiguous; _PerDocumentHeadTailLoadBalancer and "
        "_PTRRLoadBalancer (ptrr, FlexAttention block masks) are chosen by the caller",
    ),
    StackSplit(
        "vllm",
        None,
        None,
        True,
        "vllm docs/serving/context_parallel_deployment.md: decode context parallel shards "
        "the KV cache round robin (cp_kv_cache_interleave_size), not the queries",
        "prefill context parallel (split queries) is under development there",
    ),
    StackSplit(
        "sglang",
        "head_tail",
        None,
        True,
        "sglang/srt/layers/attention/nsa/utils.py ContextParallelMetadata (zigzag_index: "
        "chunks r and 2·cp−1−r), its attention context parallel for DeepSeek's sparse "
        "attention",
        "sglang #28463: RoPE fed the wrong token positions; a rank's rope rows are those of its "
        "global positions",
    ),
)
"""Every stack posenc knows, in the order :func:`context_parallel_schemes` lists them."""


def context_parallel_schemes() -> dict[str, Any]:
    """The ``context_parallel`` entry of ``POST /v1/configs/positions``: the endpoint that
    splits a row, and each stack's default split (:data:`STACKS`)."""
    return {
        "endpoint": "/v1/positions/context-parallel",
        "stacks": [asdict(stack) for stack in STACKS],
    }
