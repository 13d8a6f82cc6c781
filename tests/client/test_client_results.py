"""Decoding the service's answers in the client (:mod:`posenc.client.results`), on responses
built here by hand (never by the service's own encoder): a JSON bundle (nested lists, ``null``
as ``-inf``, base64 little-endian bytes, ``bfloat16``), an npy body, a raw body described by its
``X-Tensor-*`` headers, a safetensors file with its ``meta``; the tensors in the endpoint's
order, reachable by name, attribute and :attr:`~TensorResult.primary`; and bodies that are not
what they say refused with :class:`PosencClientError`."""

from __future__ import annotations

import base64
import io
import json
import struct

import httpx
import numpy as np
import pytest
import torch

from posenc.client.errors import PosencClientError
from posenc.client.results import decode_response

ROPE = "/v1/encodings/rope"


def _safetensors(tensors: dict[str, np.ndarray], meta: dict) -> bytes:
    """A safetensors file written by hand: 8-byte header length, JSON header, the data."""
    header: dict = {"__metadata__": {"meta": json.dumps(meta)}}
    data, offset = b"", 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).astype("<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        data, offset = data + raw, offset + len(raw)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def test_a_json_bundle_in_the_endpoints_order() -> None:
    body = {
        "tensors": {
            "sin": {"dtype": "float32", "shape": [1, 2], "data": [[0.0, 0.5]]},
            "cos": {"dtype": "float32", "shape": [1, 2], "data": [[1.0, None]]},
        },
        "meta": {"attention_scaling": 1.0},
    }
    result = decode_response(httpx.Response(200, json=body), ROPE, "json", "numpy", None)
    assert result.keys()[:2] == ["cos", "sin"]  # the rope kind lists cos first
    np.testing.assert_array_equal(result.primary, np.array([[1.0, -np.inf]], dtype=np.float32))
    assert result.cos.dtype == np.float32 and "sin" in result and len(result) == 2
    assert result.meta == {"attention_scaling": 1.0} and result.format == "json"


def test_base64_json_and_bfloat16() -> None:
    values = np.array([[1.5, -2.0, 3.25]], dtype="<f4")
    body = {
        "tensors": {
            "cos": {
                "dtype": "float32",
                "shape": [1, 3],
                "data": base64.b64encode(values.tobytes()).decode(),
            },
            "sin": {"dtype": "bfloat16", "shape": [1, 3], "data": [[0.5, 1.0, -0.25]]},
        }
    }
    result = decode_response(httpx.Response(200, json=body), ROPE, "json", "torch", None)
    assert torch.equal(result["cos"], torch.from_numpy(values))
    assert result["sin"].dtype == torch.bfloat16
    assert result["sin"].float().tolist() == [[0.5, 1.0, -0.25]]


def test_npy_and_raw_hold_the_primary_tensor() -> None:
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = io.BytesIO()
    np.save(buffer, table)
    npy = decode_response(
        httpx.Response(200, content=buffer.getvalue()), ROPE, "npy", "numpy", None
    )
    assert list(npy) == ["cos"] and np.array_equal(npy.cos, table)
    headers = {"X-Tensor-Name": "cos", "X-Tensor-Shape": "2,3", "X-Tensor-Dtype": "float32"}
    raw = decode_response(
        httpx.Response(200, content=table.astype("<f4").tobytes(), headers=headers),
        ROPE,
        "raw",
        "numpy",
        None,
    )
    assert np.array_equal(raw["cos"], table) and raw.meta == {}


def test_safetensors_with_its_meta() -> None:
    cos, sin = np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32)
    content = _safetensors({"sin": sin, "cos": cos}, {"positions": [0, 1]})
    result = decode_response(
        httpx.Response(200, content=content), ROPE, "safetensors", "numpy", None
    )
    assert result.keys()[:2] == ["cos", "sin"]
    assert np.array_equal(result.cos, cos) and np.array_equal(result.sin, sin)
    assert result.meta == {"positions": [0, 1]}


def test_bodies_that_are_not_what_they_say() -> None:
    bad = httpx.Response(200, content=b"not a file")
    for fmt, words in (("safetensors", "not a safetensors body"), ("npy", "not an npy body")):
        with pytest.raises(PosencClientError, match=words):
            decode_response(bad, ROPE, fmt, "numpy", None)
    short = httpx.Response(200, content=b"\0" * 5, headers={"X-Tensor-Shape": "2,3"})
    with pytest.raises(PosencClientError, match="tensor 'cos'"):
        decode_response(short, ROPE, "raw", "numpy", None)
    odd = {"tensors": {"cos": {"dtype": "float7", "shape": [1], "data": "AAAA"}}}
    with pytest.raises(PosencClientError, match="unknown dtype 'float7'"):
        decode_response(httpx.Response(200, json=odd), ROPE, "json", "numpy", None)
    empty = decode_response(httpx.Response(200, content=b"\x89PNG"), ROPE, "png", "numpy", None)
    with pytest.raises(KeyError, match="holds no tensors"):
        empty.primary  # noqa: B018
