"""Binary request bodies of /v1/embed and /v1/position-ids (API.md 1.1, "Binary request
bodies"): npy and safetensors token ids with the other fields as query parameters give the
same bytes as the JSON body with the same values; malformed bodies are 400s and other media
types 415s that say what is wrong; empty rows are rows of padding. In process and over uvicorn.
"""

from __future__ import annotations

import io
import struct

import httpx
import numpy as np
import orjson
import pytest
from safetensors.numpy import save as save_safetensors

from tests.helpers import GPT2_NAME, GPT2_SHAPE, json_tensor

NPY = {"content-type": "application/x-npy"}
SAFETENSORS = {"content-type": "application/vnd.safetensors"}


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def npy_with_header(header: str, data: bytes) -> bytes:
    """A version 1.0 npy file with the given header text (padded as numpy pads it)."""
    text = header.encode("latin1")
    pad = (64 - (10 + len(text) + 1) % 64) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


IDS = [[5, 6, 7, 8], [9, 10, 11, 0]]


@pytest.mark.parametrize("endpoint", ["/v1/embed", "/v1/position-ids"])
@pytest.mark.parametrize("fmt", ["json", "npy", "safetensors"])
@pytest.mark.parametrize(
    "dtype", ["<i8", "<i4", "<u2", ">i8", "i1"], ids=["int64", "int32", "uint16", "be", "int8"]
)
def test_npy_body_gives_the_json_bytes(
    api: httpx.Client, endpoint: str, fmt: str, dtype: str
) -> None:
    query = {"pad_token_id": "0", "format": fmt}
    body = {"input_ids": IDS, "pad_token_id": 0}
    if endpoint == "/v1/embed":
        query["model"] = GPT2_NAME
        body["model"] = GPT2_NAME
    by_json = api.post(endpoint, params={"format": fmt}, json=body)
    by_npy = api.post(
        endpoint, params=query, content=npy_bytes(np.array(IDS, dtype=dtype)), headers=NPY
    )
    assert by_json.status_code == 200, by_json.text
    assert by_npy.status_code == 200, by_npy.text
    assert by_npy.content == by_json.content
    if fmt == "json":  # hand-worked: the trailing 0 is padding
        assert json_tensor(by_npy.json(), "position_ids").tolist() == [[0, 1, 2, 3], [0, 1, 2, 0]]
        assert json_tensor(by_npy.json(), "attention_mask").tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]


def test_fortran_order_npy_is_read_in_c_order(api: httpx.Client) -> None:
    ids = np.asfortranarray(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64))
    r = api.post(
        "/v1/position-ids", params={"pad_token_id": "5"}, content=npy_bytes(ids), headers=NPY
    )
    assert r.status_code == 200, r.text
    assert json_tensor(r.json(), "attention_mask").tolist() == [[1, 1, 1], [1, 0, 1]]
    assert json_tensor(r.json(), "position_ids").tolist() == [[0, 1, 2], [0, 0, 1]]


def test_safetensors_with_mask_and_positions_equals_ragged_json(api: httpx.Client) -> None:
    """A ragged JSON batch (rows 3 and 1, an empty row) = the rectangle with its mask."""
    ragged = [[3, 4, 5], [6], []]
    ids = np.array([[3, 4, 5], [6, 0, 0], [0, 0, 0]], dtype=np.int32)
    mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=np.uint8)
    by_json = api.post(
        "/v1/embed",
        params={"format": "safetensors"},
        json={"input_ids": ragged, "model": GPT2_NAME},
    )
    by_st = api.post(
        "/v1/embed",
        params={"format": "safetensors", "model": GPT2_NAME},
        content=save_safetensors({"input_ids": ids, "attention_mask": mask}),
        headers=SAFETENSORS,
    )
    assert by_json.status_code == 200 and by_st.status_code == 200, (by_json.text, by_st.text)
    assert by_st.content == by_json.content
    # explicit positions from the body, bool mask
    positions = np.array([[2, 3, 4], [7, 0, 0], [0, 0, 0]], dtype=np.int64)
    by_st = api.post(
        "/v1/embed",
        params={"model": GPT2_NAME},
        content=save_safetensors(
            {"input_ids": ids, "attention_mask": mask.astype(bool), "position_ids": positions}
        ),
        headers=SAFETENSORS,
    )
    by_json = api.post(
        "/v1/embed",
        json={"input_ids": ragged, "model": GPT2_NAME, "position_ids": [[2, 3, 4], [7], []]},
    )
    assert by_st.status_code == 200, by_st.text
    assert by_st.content == by_json.content
    emb = json_tensor(by_st.json(), "embeddings")
    assert emb.shape == (3, 3, GPT2_SHAPE["d_model"])
    assert not emb[2].any() and not emb[1, 1:].any() and emb[1, 0].any()


@pytest.mark.parametrize("endpoint", ["/v1/embed", "/v1/position-ids"])
def test_an_empty_row_is_a_row_of_padding(api: httpx.Client, endpoint: str) -> None:
    rows = [[1, 2, 3]] * 63 + [[]]
    r = api.post(
        endpoint,
        json={"input_ids": rows, "pad_position": 1}
        if endpoint.endswith("ids")
        else {"input_ids": rows},
    )
    assert r.status_code == 200, r.text
    mask = json_tensor(r.json(), "attention_mask")
    pos = json_tensor(r.json(), "position_ids")
    assert mask.shape == (64, 3) and mask[:63].all() and not mask[63].any()
    pad = 1 if endpoint.endswith("ids") else 0
    assert pos[63].tolist() == [pad] * 3 and pos[0].tolist() == [0, 1, 2]
    if endpoint == "/v1/embed":
        emb = json_tensor(r.json(), "embeddings")
        assert not emb[63].any() and emb[:63].all(axis=-1).any()


@pytest.mark.parametrize("endpoint", ["/v1/embed", "/v1/position-ids"])
def test_an_all_empty_batch_has_length_zero(api: httpx.Client, endpoint: str) -> None:
    """Decided: T = 0 is allowed; every tensor has a 0-length sequence axis (png: 406)."""
    r = api.post(endpoint, json={"input_ids": [[], []]})
    assert r.status_code == 200, r.text
    tensors = r.json()["tensors"]
    assert tensors["attention_mask"]["shape"] == [2, 0]
    assert tensors["position_ids"]["shape"] == [2, 0]
    if endpoint == "/v1/embed":
        assert tensors["embeddings"]["shape"][:2] == [2, 0]
    png = api.post(endpoint, params={"format": "png"}, json={"input_ids": [[], []]})
    assert png.status_code == 406 and "nothing to draw" in png.json()["detail"]
    assert api.post(endpoint, json={"input_ids": []}).status_code == 422  # no rows at all


def _st_header(entries: dict, data: bytes = b"") -> bytes:
    header = orjson.dumps(entries)
    return struct.pack("<Q", len(header)) + header + data


MALFORMED = [
    (NPY, b"", "is not an .npy file"),
    (NPY, b"PK\x03\x04 a zip file", "is not an .npy file"),
    (NPY, npy_bytes(np.array(IDS, dtype=np.int64))[:-5], "truncated"),
    (NPY, npy_bytes(np.array(IDS, dtype=np.int64)) + b"\x00", "extra bytes"),
    (NPY, npy_bytes(np.array(IDS, dtype=np.float32)), "integer dtype"),
    (NPY, npy_bytes(np.array([1, 2, 3])), "must be 2-D"),
    (NPY, npy_bytes(np.zeros((2, 2, 2), dtype=np.int64)), "must be 2-D"),
    (NPY, npy_bytes(np.zeros((0, 3), dtype=np.int64)), "at least 1 row"),
    (
        NPY,
        npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (1, 1), }", b"x" * 8),
        "integer dtype",
    ),
    (
        NPY,
        npy_with_header(
            "{'descr': '<i8', 'fortran_order': False, 'shape': (1048576, 1048576), }", b"\x00" * 64
        ),
        "claims shape (1048576, 1048576)",
    ),
    (NPY, npy_with_header("__import__('os').system('true')", b""), "not a Python literal"),
    (NPY, npy_with_header("{'descr': '<i8'}", b""), "keys descr, fortran_order and shape"),
    (NPY, b"\x93NUMPY\x01\x00\xff\xff{", "truncated"),
    (NPY, b"\x93NUMPY\x01\x00", "under the 10 of its preamble"),
    (SAFETENSORS, b"\x01", "under 8"),
    (SAFETENSORS, struct.pack("<Q", 2**40) + b"{}", "over"),
    (SAFETENSORS, struct.pack("<Q", 100) + b"{}", "truncated"),
    (SAFETENSORS, struct.pack("<Q", 4) + b"\xff\xfe{}", "not JSON"),
    (SAFETENSORS, _st_header([1, 2]), "JSON object"),  # type: ignore[arg-type]
    (SAFETENSORS, _st_header({}), "no input_ids"),
    (
        SAFETENSORS,
        _st_header(
            {"tokens": {"dtype": "I64", "shape": [1, 1], "data_offsets": [0, 8]}}, b"\x00" * 8
        ),
        "unknown tensor 'tokens'",
    ),
    (
        SAFETENSORS,
        _st_header(
            {"input_ids": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]}}, b"\x00" * 8
        ),
        "must have dtype",
    ),
    (
        SAFETENSORS,
        _st_header(
            {"input_ids": {"dtype": "BOOL", "shape": [1, 2], "data_offsets": [0, 2]}}, b"\x00" * 2
        ),
        "an integer dtype",
    ),
    (
        SAFETENSORS,
        _st_header(
            {"input_ids": {"dtype": "I64", "shape": [1, 2], "data_offsets": [0, 8]}}, b"\x00" * 8
        ),
        "needs 16 bytes",
    ),
    (
        SAFETENSORS,
        _st_header(
            {"input_ids": {"dtype": "I64", "shape": [1048576, 1048576], "data_offsets": [0, 8]}},
            b"\x00" * 8,
        ),
        "needs 8796093022208 bytes",
    ),
    (
        SAFETENSORS,
        _st_header(
            {"input_ids": {"dtype": "I64", "shape": [1, 1], "data_offsets": [0, 80]}}, b"\x00" * 8
        ),
        "within the 8 data bytes",
    ),
    (
        SAFETENSORS,
        _st_header(
            {"input_ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}}, b"\x00" * 16
        ),
        "must be 2-D",
    ),
    (
        SAFETENSORS,
        save_safetensors(
            {"input_ids": np.zeros((2, 3), np.int64), "attention_mask": np.ones((2, 2), np.int64)}
        ),
        "must match",
    ),
]


@pytest.mark.parametrize("headers,body,words", MALFORMED, ids=[m[2] for m in MALFORMED])
def test_malformed_binary_bodies_are_400s_that_say_why(
    api: httpx.Client, headers: dict, body: bytes, words: str
) -> None:
    for endpoint in ("/v1/embed", "/v1/position-ids"):
        r = api.post(endpoint, content=body, headers=headers)
        assert r.status_code == 400, (endpoint, r.text)
        assert words in r.json()["detail"], r.text


def test_position_ids_endpoint_does_not_read_position_ids_tensor(api: httpx.Client) -> None:
    ids = np.ones((1, 2), np.int64)
    r = api.post(
        "/v1/position-ids",
        content=save_safetensors({"input_ids": ids, "position_ids": ids}),
        headers=SAFETENSORS,
    )
    assert r.status_code == 400
    assert "reads input_ids, attention_mask" in r.json()["detail"]


@pytest.mark.parametrize(
    "content_type",
    ["text/csv", "application/octet-stream", "multipart/form-data; boundary=x", "image/png"],
)
def test_other_media_types_are_415_listing_the_accepted(
    api: httpx.Client, content_type: str
) -> None:
    r = api.post("/v1/embed", content=b"1,2,3", headers={"content-type": content_type})
    assert r.status_code == 415, r.text
    body = r.json()
    assert body["accepted"] == [
        "application/json",
        "application/x-npy",
        "application/vnd.safetensors",
    ]
    assert content_type.split(";")[0] in body["detail"]


def test_query_fields_go_through_the_request_model(api: httpx.Client) -> None:
    body = npy_bytes(np.array([[1, 2]], dtype=np.int64))
    r = api.post("/v1/embed", params={"padding_sid": "left"}, content=body, headers=NPY)
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == ["query", "padding_sid"] and "did you mean 'padding_side'" in item["msg"]
    r = api.post("/v1/embed", params={"padding_side": "middle"}, content=body, headers=NPY)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "padding_side"]
    r = api.post("/v1/embed", params={"input_ids": "1,2"}, content=body, headers=NPY)
    assert r.status_code == 422 and "send it in the application/vnd.safetensors body" in r.text
    r = api.post("/v1/embed", params={"model": "tiny-gpt"}, content=body, headers=NPY)
    assert r.status_code == 422 and r.json()["suggestion"] == GPT2_NAME


def test_token_out_of_range_names_its_slot(api: httpx.Client) -> None:
    ids = np.array([[1, 2, 3], [4, 5, GPT2_SHAPE["vocab"]]], dtype=np.int32)
    r = api.post("/v1/embed", params={"model": GPT2_NAME}, content=npy_bytes(ids), headers=NPY)
    assert r.status_code == 422 and "input_ids[1][2]" in r.json()["detail"]
    big = np.array([[1, 2**63 + 5]], dtype=np.uint64)
    r = api.post("/v1/position-ids", content=npy_bytes(big), headers=NPY)
    assert r.status_code == 422 and "input_ids[0][1]" in r.json()["detail"]


def test_binary_body_over_the_limit_is_413_from_the_header(api: httpx.Client) -> None:
    """(B, T) x D over POSENC_MAX_ELEMENTS: 413, with the size asked."""
    ids = np.zeros((64, 2**16), dtype=np.int8)  # 4 Mi ids x 24 dims + 2 = 109 M elements
    r = api.post("/v1/embed", params={"model": GPT2_NAME}, content=npy_bytes(ids), headers=NPY)
    assert r.status_code == 413, r.text
    assert r.json()["requested"] == 64 * 2**16 * (GPT2_SHAPE["d_model"] + 2)


def test_a_binary_body_declaring_too_many_bytes_is_413_before_it_is_read(
    live_server: str,
) -> None:
    """Content-Length over 12 x POSENC_MAX_ELEMENTS (+ header room): refused unread (the client
    sends only the headers and a first chunk; the server answers without waiting for more)."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(live_server)
    declared = 12 * 67_108_864 + (1 << 20) + 9
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-npy\r\n"
            + f"Content-Length: {declared}\r\nConnection: close\r\n\r\n".encode()
            + b"\x93NUMPY"
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), reply[:300]
    detail = orjson.loads(body)["detail"]
    assert f"declares {declared} bytes" in detail and "67108864" in detail
