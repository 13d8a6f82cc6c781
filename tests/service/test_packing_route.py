"""Packed documents over HTTP: /v1/position-ids and /v1/position-ids/mrope with cu_seqlens."""

from __future__ import annotations

import httpx

from tests.references import IMG, MROPE_CONFIGS, VE, VS


def test_position_ids_restart_at_each_document(app_client: httpx.Client) -> None:
    r = app_client.post(
        "/v1/position-ids", json={"input_ids": [[5, 6, 7, 8, 9, 10]], "cu_seqlens": [0, 2, 6]}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tensors"]["position_ids"]["data"] == [[0, 1, 0, 1, 2, 3]]
    assert body["tensors"]["cu_seqlens"]["data"] == [0, 2, 6]
    assert body["meta"]["cu_seqlens"] == [0, 2, 6] and body["meta"]["max_seqlen"] == 4
    bad = app_client.post("/v1/position-ids", json={"input_ids": [[5, 6]], "cu_seqlens": [0, 3]})
    assert bad.status_code == 422 and "cu_seqlens" in bad.text


def test_mrope_ids_document_by_document(app_client: httpx.Client) -> None:
    """Two documents, an image in the second: its ids are those of the second sent alone."""
    second = [7, VS, IMG, IMG, IMG, IMG, VE, 9]
    body = {"image_grid_thw": [[1, 4, 4]], "config": MROPE_CONFIGS["qwen2_vl"]}
    packed = app_client.post(
        "/v1/position-ids/mrope",
        json={**body, "input_ids": [[1, 2, 3, *second]], "cu_seqlens": [0, 3, 11]},
    ).json()
    alone = app_client.post("/v1/position-ids/mrope", json={**body, "input_ids": [second]}).json()
    ids = packed["tensors"]["position_ids"]["data"]  # (3, 1, 11)
    assert [axis[0][:3] for axis in ids] == [[0, 1, 2]] * 3
    assert [axis[0][3:] for axis in ids] == [
        axis[0] for axis in alone["tensors"]["position_ids"]["data"]
    ]
    assert packed["tensors"]["rope_deltas"]["data"][1] == alone["tensors"]["rope_deltas"]["data"][0]
    assert packed["meta"]["max_seqlen"] == 8
