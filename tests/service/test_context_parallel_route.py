"""POST /v1/positions/context-parallel over HTTP: indices and restore equal torch 2.13's own load
balancers, each rank's cos/sin are /v1/encodings/rope's rows bit for bit, each rank's mask rows
equal the per-document causal (and sliding) definition written out here, and the answer has
the contract's layout in JSON and safetensors."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.numpy import load as load_safetensors
from torch.distributed.tensor.experimental._context_parallel._load_balancer import (
    _HeadTailLoadBalancer,
    _PerDocumentHeadTailLoadBalancer,
    _PTRRLoadBalancer,
)
from torch.nn.attention.flex_attention import create_block_mask

from posenc.client import PosencClient
from service.app import create_app
from tests.helpers import make_settings, safetensors_metadata

PATH = "/v1/positions/context-parallel"


def _post(client: httpx.Client, body: dict[str, Any], **params: str) -> httpx.Response:
    return client.post(PATH, json=body, params=params)


def _ok(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = _post(client, body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def _document(cu: list[int]) -> torch.Tensor:
    lengths = torch.tensor([b - a for a, b in itertools.pairwise(cu)])
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)


def _ranks_order(body: dict[str, Any]) -> list[int]:
    return [i for rank in body["ranks"] for i in rank["indices"]]


def _torch_indices(balancer: Any) -> tuple[list[int], list[int]]:
    return (
        balancer._generate_indices(restore=False)[0].tolist(),
        balancer._generate_indices(restore=True)[0].tolist(),
    )


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_head_tail_and_per_document_equal_torch(app_client: httpx.Client, cp: int) -> None:
    body = _ok(app_client, {"seq_len": 4096, "cp_size": cp, "scheme": "head_tail"})
    rearrange, restore = _torch_indices(_HeadTailLoadBalancer(4096, cp, "cpu"))
    assert _ranks_order(body) == rearrange and body["restore"] == restore
    assert [rank["rank"] for rank in body["ranks"]] == list(range(cp))

    lengths = [2 * cp * n for n in (7, 100, 3, 45)]
    cu = [0, *itertools.accumulate(lengths)]
    body = _ok(
        app_client, {"cu_seqlens": cu, "cp_size": cp, "scheme": "torch_per_document_head_tail"}
    )
    rearrange, restore = _torch_indices(_PerDocumentHeadTailLoadBalancer([lengths], cp, "cpu"))
    assert _ranks_order(body) == rearrange and body["restore"] == restore


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ptrr_equals_torch(app_client: httpx.Client, cp: int) -> None:
    cu = [0, 1000, 3000, 4096]
    doc = _document(cu)
    block_mask = create_block_mask(
        lambda b, h, q, k: (k <= q) & (doc[q] == doc[k]),
        B=1, H=1, Q_LEN=4096, KV_LEN=4096, device="cpu", BLOCK_SIZE=128,
    )  # fmt: skip
    body = _ok(app_client, {"cu_seqlens": cu, "cp_size": cp, "scheme": "ptrr"})
    rearrange, restore = _torch_indices(_PTRRLoadBalancer(block_mask, cp))
    assert _ranks_order(body) == rearrange and body["restore"] == restore
    assert body["meta"]["block_size"] == 128


def test_megatron_5243_over_http(app_client: httpx.Client) -> None:
    """cu_seqlens [0, 4, 8] on 2 ranks: rank 0 holds [0, 3, 4, 7], with positions [0, 3, 0, 3]
    restarting at each document, or [0, 3, 4, 7] continuing (Megatron-LM's default)."""
    base = {"cu_seqlens": [0, 4, 8], "cp_size": 2, "scheme": "per_document_head_tail"}
    reset = _ok(app_client, base)
    kept = _ok(app_client, {**base, "reset_positions": False})
    assert reset["ranks"][0]["indices"] == [0, 3, 4, 7]
    assert reset["ranks"][0]["position_ids"] == [0, 3, 0, 3]
    assert kept["ranks"][0]["position_ids"] == [0, 3, 4, 7]
    assert [r["cu_seqlens"] for r in reset["ranks"]] == [[0, 2, 4], [0, 2, 4]]
    assert [r["max_seqlen"] for r in reset["ranks"]] == [2, 2]
    assert reset["restore"] == [0, 4, 5, 1, 2, 6, 7, 3]


@pytest.mark.parametrize(
    "rope",
    [
        {"preset": "llama-3.1-8b"},
        {"head_dim": 32, "base": 500000.0, "scaling": {"type": "yarn", "factor": 4.0,
                                                        "original_max_position_embeddings": 64}},
    ],
)  # fmt: skip
def test_cos_sin_are_the_rope_endpoints_rows_bit_for_bit(
    app_client: httpx.Client, rope: dict[str, Any]
) -> None:
    cu = [0, 128, 384, 512]
    body = _ok(
        app_client, {"cu_seqlens": cu, "cp_size": 4, "scheme": "per_document_head_tail", **rope}
    )
    positions = [p for rank in body["ranks"] for p in rank["position_ids"]]
    glued = [i for rank in body["ranks"] for i in rank["indices"]]
    whole = np.empty(512, dtype=np.int64)
    whole[glued] = positions
    table = app_client.post("/v1/encodings/rope", json={"positions": whole.tolist(), **rope})
    assert table.status_code == 200, table.text
    tensors = table.json()["tensors"]
    for name in ("cos", "sin"):
        global_rows = np.array(tensors[name]["data"], dtype=np.float32)
        for rank in body["ranks"]:
            got = np.array(rank[name]["data"], dtype=np.float32)
            assert rank[name]["dtype"] == "float32"
            assert np.array_equal(got.view(np.uint32), global_rows[rank["indices"]].view(np.uint32))


@pytest.mark.parametrize(
    ("fields", "window"),
    [({}, None), ({"kind": "sliding", "window": 7}, 7)],
)
def test_mask_rows_are_causal_within_documents(
    app_client: httpx.Client, fields: dict[str, Any], window: int | None
) -> None:
    cu = [0, 16, 48, 64]
    body = _ok(
        app_client,
        {
            "cu_seqlens": cu,
            "cp_size": 4,
            "scheme": "per_document_head_tail",
            "mask": True,
            **fields,
        },
    )
    doc = _document(cu).numpy()
    q, k = np.arange(64)[:, None], np.arange(64)[None, :]
    allowed = (doc[:, None] == doc[None, :]) & (k <= q)
    if window is not None:
        allowed &= q - k < window
    for rank in body["ranks"]:
        got = np.array(rank["mask"]["data"], dtype=bool)
        assert rank["mask"]["shape"] == [16, 64]
        assert np.array_equal(got, allowed[rank["indices"]])


def test_safetensors_names_each_rank(app_client: httpx.Client) -> None:
    fields = {"seq_len": 16, "cp_size": 2, "head_dim": 8, "mask": True}
    r = _post(app_client, fields, format="safetensors")
    assert r.status_code == 200, r.text
    tensors = load_safetensors(r.content)
    assert {"restore", "0.cos", "0.sin", "0.mask", "1.cos", "1.sin", "1.mask"} <= set(tensors)
    meta = json.loads(safetensors_metadata(r.content)["meta"])
    as_json = _ok(app_client, fields)
    assert tensors["restore"].tolist() == as_json["restore"]
    for rank in meta["ranks"]:
        same = as_json["ranks"][rank["rank"]]
        assert rank["indices"] == same["indices"] and rank["cu_seqlens"] == same["cu_seqlens"]
        cos = np.array(same["cos"]["data"], dtype=np.float32)
        assert np.array_equal(tensors[f"{rank['rank']}.cos"], cos)
        mask = np.array(same["mask"]["data"], dtype=bool)
        assert np.array_equal(tensors[f"{rank['rank']}.mask"], mask)
        assert tensors[f"{rank['rank']}.indices"].tolist() == same["indices"]


@pytest.mark.parametrize(
    ("body", "needed"),
    [
        ({"seq_len": 4098, "cp_size": 4, "scheme": "head_tail"}, "multiple of 2·cp_size = 8"),
        ({"seq_len": 1000, "cp_size": 3, "scheme": "contiguous"}, "multiple of cp_size = 3"),
        ({"seq_len": 1280, "cp_size": 4, "scheme": "ptrr"}, "128·4 = 512"),
        ({"cu_seqlens": [0, 8, 14], "cp_size": 2, "scheme": "per_document_head_tail"},
         "document 1 has 6 tokens, not a multiple of 4"),
    ],
)  # fmt: skip
def test_a_length_that_does_not_divide_is_a_422(
    app_client: httpx.Client, body: dict[str, Any], needed: str
) -> None:
    r = _post(app_client, body)
    assert r.status_code == 422 and needed in r.text, r.text[:300]


def test_a_huge_request_is_refused_by_its_numbers(app_client: httpx.Client) -> None:
    """restore (T), and for each rank indices and position ids (T/2 each), cos and sin
    (T/2, 128 each) and mask rows (T/2, T): counted before anything is made."""
    t = 2**40
    r = _post(app_client, {"seq_len": t, "cp_size": 2, "mask": True, "head_dim": 128})
    assert r.status_code == 413, r.text
    assert r.json()["requested"] == t + 2 * (t // 2 * 2 + t // 2 * 128 * 2 + t // 2 * t)


def test_configs_positions_lists_each_stacks_scheme(app_client: httpx.Client) -> None:
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    r = app_client.post("/v1/configs/positions", json={"config": config})
    assert r.status_code == 200, r.text
    said = r.json()["context_parallel"]
    assert said["endpoint"] == PATH
    stacks = {s["stack"]: s for s in said["stacks"]}
    assert stacks["megatron-lm"]["scheme"] == "head_tail"
    assert stacks["transformer-engine"]["packed_scheme"] == "per_document_head_tail"
    assert stacks["torch"]["packed_scheme"] == "torch_per_document_head_tail"
    assert stacks["megatron-lm"]["reset_positions"] is False


STREAMED = {
    "cu_seqlens": [0, 256, 768, 1024],
    "cp_size": 4,
    "scheme": "ptrr",
    "block_size": 64,
    "mask": True,
    "kind": "sliding",
    "window": 100,
    "head_dim": 16,
    "scaling": {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64},
}


def test_past_the_limit_binary_formats_stream_the_same_bytes(
    app_client: httpx.Client, gpt2_file: Path
) -> None:
    """A service whose POSENC_MAX_ELEMENTS is below the answer (1,024² mask elements) streams
    it as safetensors, each tensor equal to the whole answer of a service with room for it;
    JSON is a 413 that says what streams."""
    whole = _ok(app_client, STREAMED)
    with TestClient(create_app(make_settings(gpt2_file, max_elements=100_000))) as small:
        streamed = small.post(PATH, json=STREAMED, params={"format": "safetensors"})
        refused = small.post(PATH, json=STREAMED)
    assert streamed.status_code == 200, streamed.text[:300]
    assert refused.status_code == 413 and "safetensors" in refused.text
    tensors = load_safetensors(streamed.content)
    assert tensors["restore"].tolist() == whole["restore"]
    for rank in whole["ranks"]:
        r = rank["rank"]
        assert tensors[f"{r}.indices"].tolist() == rank["indices"]
        assert np.array_equal(tensors[f"{r}.mask"], np.array(rank["mask"]["data"], dtype=bool))
        for name in ("cos", "sin"):
            want = np.array(rank[name]["data"], dtype=np.float32)
            assert np.array_equal(tensors[f"{r}.{name}"].view(np.uint32), want.view(np.uint32))


@pytest.mark.slow
def test_through_uvicorn_and_the_client(live_client: httpx.Client, live_server: str) -> None:
    """The same answer through a real server on loopback, and through the client's derived
    method (its tensors by name, its meta's ranks)."""
    body = _ok(live_client, {"seq_len": 64, "cp_size": 4, "scheme": "head_tail", "head_dim": 8})
    rearrange, restore = _torch_indices(_HeadTailLoadBalancer(64, 4, "cpu"))
    assert _ranks_order(body) == rearrange and body["restore"] == restore
    with PosencClient(live_server, timeout=60) as client:
        result = client.context_parallel(seq_len=64, cp_size=4, head_dim=8)
    assert result["restore"].tolist() == restore
    assert result["1.indices"].tolist() == rearrange[16:32]
    assert result.meta["ranks"][1]["indices"] == rearrange[16:32]
    cos = np.array(body["ranks"][1]["cos"]["data"], dtype=np.float32)
    assert np.array_equal(result["1.cos"], cos)
