"""The context-parallel kind in the library: each rank's RoPE rows are the global table's rows
bit for bit (the rope kind computed for the whole row, independently here), and its mask rows
equal the per-document causal, sliding and chunked definitions written out in this test."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from posenc import resolve
from posenc.context_parallel import CONTEXT_PARALLEL
from posenc.core.errors import InvalidArgument
from posenc.rope_kinds.kind import ROPE
from tests.references import MROPE_CONFIGS

LIMIT = 2**26


def _run(**fields: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    params = resolve.resolve_fields(CONTEXT_PARALLEL, fields)
    tensors = resolve.compute(CONTEXT_PARALLEL, params, max_elements=LIMIT)
    return tensors, CONTEXT_PARALLEL.make_meta(params)


def _rope(**fields: Any) -> dict[str, torch.Tensor]:
    params = resolve.resolve_fields(ROPE, fields)
    return resolve.compute(ROPE, params, max_elements=LIMIT)


def _document_of(cu: list[int]) -> torch.Tensor:
    lengths = torch.tensor([b - a for a, b in itertools.pairwise(cu)])
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)


def _reference_mask(
    cu: list[int], kind: str = "causal", window: int = 0, chunk: int = 1
) -> torch.Tensor:
    """(T, T) bool written out: same document, key not after the query; sliding: fewer than
    ``window`` tokens back; chunked: the same chunk of the document's own positions."""
    total = cu[-1]
    doc = _document_of(cu)
    pos = torch.arange(total) - torch.tensor(cu[:-1])[doc]
    q, k = pos[:, None], pos[None, :]
    allowed = (doc[:, None] == doc[None, :]) & (k <= q)
    if kind == "sliding":
        allowed &= q - k < window
    if kind == "chunked":
        allowed &= torch.div(q, chunk, rounding_mode="floor") == torch.div(
            k, chunk, rounding_mode="floor"
        )
    return allowed


@pytest.mark.parametrize("scheme", ["head_tail", "per_document_head_tail", "ptrr", "contiguous"])
@pytest.mark.parametrize("reset", [True, False])
def test_rank_rows_are_the_global_table_rows_bit_for_bit(scheme: str, reset: bool) -> None:
    cu = [0, 256, 768, 1024]
    tensors, meta = _run(
        cu_seqlens=cu,
        cp_size=4,
        scheme=scheme,
        block_size=64,
        reset_positions=reset,
        preset="llama-3.1-8b",
    )
    doc = _document_of(cu)
    positions = torch.arange(1024) - (torch.tensor(cu[:-1])[doc] if reset else 0)
    table = _rope(positions=positions.tolist(), preset="llama-3.1-8b")
    for r in range(4):
        idx = tensors[f"{r}.indices"]
        assert torch.equal(tensors[f"{r}.position_ids"], positions[idx])
        assert torch.equal(tensors[f"{r}.cos"], table["cos"][idx])
        assert torch.equal(tensors[f"{r}.sin"], table["sin"][idx])
        # and the rank's own positions sent to the rope kind give the same bytes, as do the
        # rows of a table of positions 0 … max
        alone = _rope(positions=positions[idx].tolist(), preset="llama-3.1-8b")
        assert torch.equal(tensors[f"{r}.cos"], alone["cos"])
        counted = _rope(seq_len=int(positions.max()) + 1, preset="llama-3.1-8b")
        assert torch.equal(tensors[f"{r}.sin"], counted["sin"][positions[idx]])
    assert meta["rope"]["rope_type"] == "llama3"


def test_dynamic_scaling_follows_the_global_row() -> None:
    """Dynamic NTK's frequencies depend on the largest position of the whole row: a rank's
    rows are the global table's, whichever positions the rank holds."""
    scaling = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
    tensors, meta = _run(seq_len=512, cp_size=2, head_dim=16, scaling=scaling, reset_positions=True)
    table = _rope(seq_len=512, head_dim=16, scaling=scaling)
    for r in range(2):
        idx = tensors[f"{r}.indices"]
        assert torch.equal(tensors[f"{r}.cos"], table["cos"][idx])
    assert meta["rope"]["rope_type"] == "dynamic"


@pytest.mark.parametrize(
    "settings",
    [
        {"config": MROPE_CONFIGS["qwen3_vl"]},  # interleaved sections, from the config
        {"head_dim": 16, "mrope_section": [2, 3, 3]},  # Qwen2-VL's contiguous sections
    ],
)
def test_mrope_columns_and_their_tables(settings: dict[str, Any]) -> None:
    """(3, T) position ids: each rank gets its columns and the rows of the table the rope kind
    makes of all three rows."""
    total = 64
    rows = [
        list(range(total)),
        [p // 4 for p in range(total)],
        [p % 7 for p in range(total)],
    ]
    tensors, _meta = _run(position_ids=rows, cp_size=4, scheme="head_tail", **settings)
    table = _rope(positions=rows, **settings)
    ids = torch.tensor(rows)
    for r in range(4):
        idx = tensors[f"{r}.indices"]
        assert torch.equal(tensors[f"{r}.position_ids"], ids[:, idx])
        assert torch.equal(tensors[f"{r}.cos"], table["cos"][idx])
        assert torch.equal(tensors[f"{r}.sin"], table["sin"][idx])


@pytest.mark.parametrize(
    ("kind", "extra", "reference"),
    [
        ("causal", {}, {}),
        ("sliding", {"window": 5}, {"window": 5}),
        ("chunked", {"chunk_size": 6}, {"chunk": 6}),
    ],
)
@pytest.mark.parametrize("scheme", ["head_tail", "per_document_head_tail", "ptrr"])
def test_mask_rows_equal_the_per_document_definition(
    kind: str, extra: dict[str, int], reference: dict[str, int], scheme: str
) -> None:
    cu = [0, 16, 48, 64]
    tensors, meta = _run(
        cu_seqlens=cu, cp_size=2, scheme=scheme, block_size=8, mask=True, kind=kind, **extra
    )
    whole = _reference_mask(cu, kind, **reference)
    for r in range(2):
        idx = tensors[f"{r}.indices"]
        assert torch.equal(tensors[f"{r}.mask"], whole[idx])
    assert meta["mask"]["kind"] == kind


def test_one_sequence_mask_is_causal() -> None:
    tensors, _meta = _run(seq_len=32, cp_size=4, mask=True)
    whole = torch.ones(32, 32, dtype=torch.bool).tril()
    for r in range(4):
        assert torch.equal(tensors[f"{r}.mask"], whole[tensors[f"{r}.indices"]])


def test_meta_ranks_hold_the_lists() -> None:
    tensors, meta = _run(cu_seqlens=[0, 4, 8], cp_size=2, scheme="per_document_head_tail")
    assert [m["indices"] for m in meta["ranks"]] == [[0, 3, 4, 7], [1, 2, 5, 6]]
    assert [m["position_ids"] for m in meta["ranks"]] == [[0, 3, 0, 3], [1, 2, 1, 2]]
    assert [m["cu_seqlens"] for m in meta["ranks"]] == [[0, 2, 4], [0, 2, 4]]
    assert tensors["restore"].tolist() == [0, 4, 5, 1, 2, 6, 7, 3]
    assert "0.cos" not in tensors and "0.mask" not in tensors


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"seq_len": 8, "cu_seqlens": [0, 4, 10]}, "seq_len"),
        ({"seq_len": 8, "kind": "sliding", "window": 2}, "kind"),
        ({"seq_len": 8, "mask": True, "kind": "sliding"}, "window"),
        ({"cu_seqlens": [0, 4, 3]}, "cu_seqlens[2]"),
        ({"position_ids": [[0, 1], [0, 1], [0, 1]], "head_dim": 8}, "mrope_section"),
    ],
)
def test_bad_fields_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        resolve.resolve_fields(CONTEXT_PARALLEL, {"cp_size": 1, **fields})
    assert caught.value.field == field
