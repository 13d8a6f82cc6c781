"""Context parallelism: one sequence, or packed documents, split across ranks.

:mod:`posenc.context_parallel.split` computes each scheme's indices (the same as torch's load
balancers, computed here), :mod:`posenc.context_parallel.stacks` says which scheme each stack
uses by default, and :mod:`posenc.context_parallel.kind` is ``POST
/v1/positions/context-parallel`` (each rank's positions, RoPE rows and mask rows).
"""

from __future__ import annotations

from posenc.context_parallel.kind import CONTEXT_PARALLEL
from posenc.context_parallel.split import (
    SCHEMES,
    ContextSplit,
    RankShard,
    Scheme,
    block_times,
    check_split,
    document_positions,
    ptrr_groups,
    split_sequence,
)
from posenc.context_parallel.stacks import STACKS, StackSplit, context_parallel_schemes

__all__ = [
    "CONTEXT_PARALLEL",
    "SCHEMES",
    "STACKS",
    "ContextSplit",
    "RankShard",
    "Scheme",
    "StackSplit",
    "block_times",
    "check_split",
    "context_parallel_schemes",
    "document_positions",
    "ptrr_groups",
    "split_sequence",
]
