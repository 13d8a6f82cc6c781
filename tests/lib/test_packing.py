"""Packed sequences: position ids (1-D and M-RoPE) of documents packed in one row.

Each packed row must equal its documents sent one by one, and transformers must find the same
documents in it: ``masking_utils.find_packed_sequence_indices`` (the masks) and
``modeling_flash_attention_utils.prepare_fa_kwargs_from_position_ids`` (flash-attn's varlen
``cu_seqlens`` and ``max_seqlen``).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
import torch

from posenc import resolve
from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.rope.mrope_ids import packed_mrope_position_ids
from posenc.tokens.position_ids import packed_position_ids
from tests.references import IMG, MROPE_CONFIGS, VE, VID, VS
from tests.references import mrope_reference as reference

transformers = pytest.importorskip("transformers")
from transformers import masking_utils, modeling_flash_attention_utils  # noqa: E402

POSITION_IDS = kinds.REGISTRY["position_ids"]
MROPE = kinds.REGISTRY["mrope_position_ids"]


def _run(kind: kinds.Kind, fields: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict]:
    params = resolve.resolve_fields(kind, fields)
    return resolve.compute(kind, params), kind.make_meta(params)


@pytest.mark.parametrize("start", [0, 2])
def test_packed_position_ids_equal_documents_one_by_one(start: int) -> None:
    rng = random.Random(f"pack-{start}")
    for _ in range(20):
        docs = [[rng.randint(1, 999) for _ in range(rng.randint(1, 9))] for _ in range(4)]
        row = [t for d in docs for t in d]
        cu = [0]
        for d in docs:
            cu.append(cu[-1] + len(d))
        out, meta = _run(POSITION_IDS, {"input_ids": [row], "cu_seqlens": cu, "start": start})
        alone = [_run(POSITION_IDS, {"input_ids": [d], "start": start})[0] for d in docs]
        want = torch.cat([a["position_ids"][0] for a in alone])
        assert torch.equal(out["position_ids"][0], want)
        assert out["attention_mask"].all()
        assert meta["cu_seqlens"] == cu and meta["max_seqlen"] == max(map(len, docs))
        assert out["cu_seqlens"].tolist() == cu
        ids = out["position_ids"]
        # transformers finds the same documents, in its masks and in its flash-attn kwargs
        found = masking_utils.find_packed_sequence_indices(ids)
        doc_of = torch.repeat_interleave(torch.arange(4), torch.tensor(list(map(len, docs))))
        assert found is not None and torch.equal(found[0], doc_of)
        (cu_q, _), (max_q, _) = modeling_flash_attention_utils.prepare_fa_kwargs_from_position_ids(
            ids
        )
        assert cu_q.tolist() == cu and int(max_q) == meta["max_seqlen"]


def test_hand_worked_and_refusals() -> None:
    assert packed_position_ids([0, 2, 5]).tolist() == [0, 1, 0, 1, 2]
    assert packed_position_ids([0, 3], start=5).tolist() == [5, 6, 7]
    for fields, field in (
        ({"input_ids": [[1, 2], [3, 4]], "cu_seqlens": [0, 2]}, "cu_seqlens"),
        ({"input_ids": [[1, 2, 3]], "cu_seqlens": [0, 2]}, "cu_seqlens[1]"),
        ({"input_ids": [[1, 2, 3]], "cu_seqlens": [0, 3], "pad_token_id": 0}, "pad_token_id"),
        ({"input_ids": [[1, 2, 3]], "cu_seqlens": [0, 3, 3]}, "cu_seqlens[2]"),
    ):
        with pytest.raises(InvalidArgument) as err:
            _run(POSITION_IDS, fields)
        assert err.value.field == field


def _document(rule: str, rng: random.Random) -> tuple[list[int], list, list]:
    """One document's tokens with its images and videos, as the Qwen processors lay them out."""
    row = [rng.randint(10, 5000) for _ in range(rng.randint(1, 3))]
    images, videos = [], []
    for _ in range(rng.randint(0, 2)):
        if rng.random() < 0.6:
            t, h, w = 1, 2 * rng.randint(1, 3), 2 * rng.randint(1, 3)
            images.append([t, h, w])
            row += [VS] + [IMG] * (h * w // 4) + [VE]
        else:
            t, h, w = rng.randint(1, 3), 2 * rng.randint(1, 2), 2 * rng.randint(1, 2)
            videos.append([t, h, w])
            if rule == "qwen3_vl":
                for _ in range(t):
                    row += [rng.randint(10, 5000), VS] + [VID] * (h * w // 4) + [VE]
            else:
                row += [VS] + [VID] * (t * h * w // 4) + [VE]
        row += [rng.randint(10, 5000) for _ in range(rng.randint(1, 3))]
    return row, images, videos


def _grids(grids: list) -> torch.Tensor | None:
    return torch.tensor(grids).reshape(-1, 3) if grids else None


@pytest.mark.parametrize("rule", list(MROPE_CONFIGS))
def test_packed_mrope_equals_get_rope_index_document_by_document(rule: str) -> None:
    """transformers' own get_rope_index on each document alone, concatenated, equals the
    packed row's ids; through the kind, with meta's cu_seqlens and max_seqlen."""
    rng = random.Random(f"packed-mrope-{rule}")
    for _ in range(15):
        docs = [_document(rule, rng) for _ in range(rng.randint(1, 4))]
        want_ids, want_deltas = [], []
        for row, images, videos in docs:
            pos, deltas = reference(
                rule,
                torch.tensor([row]),
                image_grid_thw=_grids(images),
                video_grid_thw=_grids(videos),
            )
            want_ids.append(pos[:, 0])
            want_deltas.append(deltas)
        packed = [t for row, _, _ in docs for t in row]
        cu = [0]
        for row, _, _ in docs:
            cu.append(cu[-1] + len(row))
        images = [g for _, imgs, _ in docs for g in imgs]
        videos = [g for _, _, vids in docs for g in vids]
        out, meta = _run(
            MROPE,
            {
                "input_ids": [packed],
                "cu_seqlens": cu,
                "image_grid_thw": images or None,
                "video_grid_thw": videos or None,
                "config": MROPE_CONFIGS[rule],
            },
        )
        assert torch.equal(out["position_ids"][:, 0], torch.cat(want_ids, dim=1))
        assert torch.equal(out["rope_deltas"], torch.cat(want_deltas))
        assert out["cu_seqlens"].tolist() == cu
        assert meta["cu_seqlens"] == cu and meta["max_seqlen"] == max(
            b - a for a, b in itertools.pairwise(cu)
        )


def test_packed_mrope_one_document_is_the_unpacked_row() -> None:
    from posenc.rope.mrope_ids import mrope_position_ids, mrope_settings

    settings = mrope_settings(MROPE_CONFIGS["qwen2_vl"]).kwargs()
    row = torch.tensor([[7, VS, IMG, IMG, IMG, IMG, VE, 9]])
    grid = [[1, 4, 4]]
    packed, _ = packed_mrope_position_ids(row, [0, 8], image_grid_thw=grid, **settings)
    whole, _ = mrope_position_ids(row, image_grid_thw=grid, **settings)
    assert torch.equal(packed, whole)
