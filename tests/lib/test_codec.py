"""posenc.core.codec against the formats' own libraries: numpy's ``lib.format`` and ``safetensors``."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from posenc.core import codec

DTYPES = [torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool]  # fmt: skip
SHAPES = [(0,), (3,), (2, 5), (1, 0, 4), (2, 3, 4)]


def _sample(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(shape, generator=g) * 50).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_npy_is_byte_for_byte_numpys_save(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    t = _sample(shape, dtype)
    buf = io.BytesIO()
    np.save(buf, t.numpy(), allow_pickle=False)
    assert codec.encode_npy(t) == buf.getvalue()
    assert codec.encode_npy(t.numpy()) == buf.getvalue()
    np.testing.assert_array_equal(codec.decode_npy(buf.getvalue()), t.numpy())


def test_npy_header_of_a_huge_shape_is_format_2() -> None:
    shape = tuple(range(1, 20000))  # a header over 64 KiB
    header = codec.npy_header(shape, torch.float32)
    f = io.BytesIO(header)
    assert np.lib.format.read_magic(f) == (2, 0)
    got, fortran, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=1 << 20)
    assert (got, fortran, dtype) == (shape, False, np.dtype("<f4")) and f.tell() == len(header)
    with pytest.raises(codec.CodecError, match="over 65536"):  # the reader's own bound
        codec.read_npy_header(header)


def test_fortran_order_npy_reads_in_c_order() -> None:
    a = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    buf = io.BytesIO()
    np.save(buf, a)
    np.testing.assert_array_equal(codec.decode_npy(buf.getvalue()), a)


def test_npy_has_no_bfloat16() -> None:
    with pytest.raises(codec.CodecError, match="npy has no bfloat16 type"):
        codec.encode_npy(torch.zeros(2, dtype=torch.bfloat16))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x93NUMPY\x01", "truncated"),
        (b"PK\x03\x04 not npy", "not an .npy file"),
        (b"\x93NUMPY\x09\x00" + b"\x00" * 8, "version 9.0"),
        (b"\x93NUMPY\x01\x00\xff\xff", "truncated: the header claims 65535"),
        (b"\x93NUMPY\x01\x00\x04\x00{1:2", "not a Python literal"),
        (b"\x93NUMPY\x01\x00\x05\x00{1:2}", "keys descr, fortran_order and shape"),
    ],
)
def test_malformed_npy_is_a_codec_error(body: bytes, message: str) -> None:
    with pytest.raises(codec.CodecError, match=message):
        codec.read_npy_header(body)


def test_npy_data_of_the_wrong_length_is_refused() -> None:
    body = codec.encode_npy(torch.arange(6).reshape(2, 3))
    header = codec.read_npy_header(body)
    with pytest.raises(codec.CodecError, match="extra bytes"):
        codec.npy_array(body + b"\x00", header, (2, 3))
    with pytest.raises(codec.CodecError, match="truncated"):
        codec.npy_array(body[:-1], header, (2, 3))


def test_safetensors_header_is_the_librarys() -> None:
    tensors = {
        "cos": _sample((4, 6), torch.float32),
        "sin": _sample((4, 6), torch.float16),
        "ids": _sample((2, 3), torch.int64),
        "mask": _sample((5,), torch.bool),
    }
    meta = {"meta": json.dumps({"a": [1, 2], "ü": "ß"})}
    want = safetensors.torch.save(tensors, metadata=meta)
    header, order = codec.safetensors_header(
        {k: (t.shape, t.dtype) for k, t in tensors.items()}, meta
    )
    assert want.startswith(header)
    assert codec.encode_safetensors(tensors, meta) == want
    (n,) = struct.unpack("<Q", want[:8])
    offsets = json.loads(want[8 : 8 + n])
    assert order == sorted(tensors, key=lambda k: offsets[k]["data_offsets"][0])


def test_safetensors_decodes_what_the_library_wrote() -> None:
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int8)}
    body = safetensors.numpy.save(arrays, metadata={"meta": "{}"})  # type: ignore[arg-type]
    tensors, metadata = codec.decode_safetensors(body)
    assert metadata == {"meta": "{}"}
    for k, a in arrays.items():
        np.testing.assert_array_equal(tensors[k], a)
    bf = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    tensors, _ = codec.decode_safetensors(safetensors.torch.save({"x": bf}))
    assert isinstance(tensors["x"], torch.Tensor) and torch.equal(tensors["x"], bf)


def test_views_of_one_storage_are_written_apart() -> None:
    table = torch.arange(8.0)
    body = codec.encode_safetensors({"lo": table[:4], "hi": table[4:]})
    got = safetensors.torch.load(body)
    assert torch.equal(got["lo"], table[:4]) and torch.equal(got["hi"], table[4:])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x01\x02", "under 8"),
        (struct.pack("<Q", 1 << 30), "over"),
        (struct.pack("<Q", 100) + b"{}", "truncated"),
        (struct.pack("<Q", 2) + b"[]", "JSON object"),
        (struct.pack("<Q", 2) + b"{x", "not JSON"),
    ],
)
def test_malformed_safetensors_is_a_codec_error(body: bytes, message: str) -> None:
    with pytest.raises(codec.CodecError, match=message):
        codec.read_safetensors_header(body)


def test_safetensors_offsets_outside_the_data_are_refused() -> None:
    body = safetensors.numpy.save({"x": np.arange(4, dtype=np.int32)})
    header = codec.read_safetensors_header(body)
    with pytest.raises(codec.CodecError, match="needs 32 bytes"):
        codec.safetensors_array(body, header, "x", np.dtype("<i4"), (8,))
    header.entries["x"]["data_offsets"] = [0, 10**9]
    with pytest.raises(codec.CodecError, match="within the 16 data bytes"):
        codec.safetensors_array(body, header, "x", np.dtype("<i4"), (4,))


@pytest.mark.parametrize("dtype", [*DTYPES, torch.bfloat16])
def test_raw_round_trips(dtype: torch.dtype) -> None:
    t = _sample((3, 4), dtype)
    body = codec.encode_raw(t)
    assert len(body) == t.numel() * t.element_size()
    name = str(dtype).removeprefix("torch.")
    back = codec.decode_raw(body, (3, 4), name)
    assert torch.equal(torch.as_tensor(back), t)


def test_raw_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(codec.CodecError, match="holds 5 bytes"):
        codec.decode_raw(b"\x00" * 5, (2,), "float32")
    with pytest.raises(codec.CodecError, match="is not one of"):
        codec.decode_raw(b"", (0,), "complex64")
