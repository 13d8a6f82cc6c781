"""The client sends numpy / torch token ids as binary bodies (npy, or safetensors with a mask
or positions) and lists as JSON; against a live server, both give the same arrays."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
import torch

from posenc.client import AsyncPosencClient, PosencClient
from tests.helpers import GPT2_NAME


class RecordingTransport(httpx.HTTPTransport):
    """A real HTTP transport that remembers each request's Content-Type and query."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str | None, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.headers.get("content-type"), request.url.query.decode()))
        return super().handle_request(request)


@pytest.fixture()
def recorded(live_server: str):
    transport = RecordingTransport()
    with PosencClient(live_server, timeout=60, transport=transport) as c:
        yield c, transport


IDS = [[5, 6, 7, 0], [8, 9, 0, 0]]


def test_numpy_ids_go_as_npy_and_equal_the_json_answer(recorded) -> None:  # type: ignore[no-untyped-def]
    client, transport = recorded
    by_list = client.embed(input_ids=IDS, model=GPT2_NAME, pad_token_id=0, scale=True)
    by_array = client.embed(
        input_ids=np.array(IDS, dtype=np.int32), model=GPT2_NAME, pad_token_id=0, scale=True
    )
    assert transport.seen[0][0] == "application/json"
    content_type, query = transport.seen[1]
    assert content_type == "application/x-npy"
    assert "pad_token_id=0" in query and f"model={GPT2_NAME}" in query and "scale=true" in query
    for name in ("embeddings", "position_ids", "attention_mask"):
        np.testing.assert_array_equal(by_array[name], by_list[name])
    assert by_array["position_ids"].tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]


def test_torch_ids_with_a_mask_go_as_safetensors(recorded) -> None:  # type: ignore[no-untyped-def]
    client, transport = recorded
    mask = [[1, 1, 1, 0], [1, 1, 0, 0]]
    by_list = client.position_ids(input_ids=IDS, attention_mask=mask, start=2, pad_position=1)
    by_tensor = client.position_ids(
        input_ids=torch.tensor(IDS),
        attention_mask=torch.tensor(mask).bool(),
        start=2,
        pad_position=1,
    )
    assert transport.seen[-1][0] == "application/vnd.safetensors"
    assert by_tensor["position_ids"].tolist() == [[2, 3, 4, 1], [2, 3, 1, 1]]
    np.testing.assert_array_equal(by_tensor["attention_mask"], by_list["attention_mask"])
    # a list mask beside an array of ids: everything goes as JSON
    client.position_ids(input_ids=np.array(IDS), attention_mask=mask)
    assert transport.seen[-1][0] == "application/json"


def test_server_errors_reach_the_client_from_a_binary_body(recorded) -> None:  # type: ignore[no-untyped-def]
    from posenc.client import PosencHTTPError

    client, _ = recorded
    with pytest.raises(PosencHTTPError) as info:
        client.embed(input_ids=np.array([[1, 10_000]]), model=GPT2_NAME)
    assert info.value.status_code == 422 and "input_ids[0][1]" in str(info.value.detail)


def test_async_client_sends_npy_too(live_server: str) -> None:
    async def run():  # type: ignore[no-untyped-def]
        async with AsyncPosencClient(live_server, timeout=60) as client:
            return await client.position_ids(input_ids=np.array(IDS), pad_token_id=0)

    result = asyncio.run(run())
    assert result["position_ids"].tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]


def test_a_float_key_goes_as_safetensors_and_keeps_its_dtype(recorded) -> None:  # type: ignore[no-untyped-def]
    """``/v1/rope/shift``'s ``k`` as a torch tensor: a safetensors body, the other fields in
    its ``__metadata__``; the answer's ``k`` in the key's own dtype, equal to the JSON call's
    (read in that dtype)."""
    client, transport = recorded
    k = torch.randn(2, 1, 16, dtype=torch.float64)
    fields = {"head_dim": 16, "positions": [3, 9], "delta": 5}
    by_tensor = client.rope_shift(k=k, as_="torch", **fields)
    by_list = client.rope_shift(k=k.tolist(), dtype="float64", as_="torch", **fields)
    assert transport.seen[0][0] == "application/vnd.safetensors"
    assert transport.seen[1][0] == "application/json"
    assert by_tensor["k"].dtype == torch.float64
    assert torch.equal(by_tensor["k"], by_list["k"])
