"""Binary token bodies under generated headers (issue 39): hypothesis writes npy and safetensors
headers from their grammar (a dtype, a shape of any size up to 2^64 and beyond, Fortran order,
data offsets) with data that matches or not.

- A body whose header and data agree reads back the ids exactly (int64, C order).
- Any header at all is read or refused as ``BadBody`` (a 400) or ``InvalidArgument`` (a 422):
  never another exception. Shapes whose product overflows int64 once wrapped in ``np.prod``
  (``(2^32, 2^32)`` with no data, ``(2^64, 1)``) and answered 500.

The default lane draws the same examples on every run (tests/conftest.py); ``./run.sh fuzz``
draws new ones.
"""

from __future__ import annotations

import json
import struct

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from posenc.core.errors import InvalidArgument
from service.errors import BadBody
from service.routes.token_bodies import parse_npy, parse_safetensors

NAMES = ["input_ids", "attention_mask", "position_ids"]
INT_DESCRS = ["<i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|i1"]
ST_DTYPES = {"I8": "<i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "|u1", "BOOL": "|b1"}


def npy_body(descr: str, shape: tuple[int, ...], fortran: bool, data: bytes) -> bytes:
    """An npy 1.0 file written by hand: magic, version, header length, the dict, padding."""
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape!r}, }}"
    pad = 64 - (10 + len(header) + 1) % 64
    text = (header + " " * pad + "\n").encode("latin-1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def safetensors_body(entries: dict[str, dict[str, object]], data: bytes) -> bytes:
    header = json.dumps(entries).encode()
    return struct.pack("<Q", len(header)) + header + data


huge = st.sampled_from([2**31, 2**32, 2**62 + 1, 2**63, 2**64, 2**64 + 1, 2**80])
dims = st.one_of(st.integers(0, 6), huge)
shapes = st.lists(dims, min_size=0, max_size=3).map(tuple)


@settings(max_examples=150)
@given(
    st.sampled_from(INT_DESCRS),
    st.integers(1, 4),
    st.integers(0, 5),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_an_npy_body_that_agrees_reads_back_its_ids(
    descr: str, b: int, t: int, fortran: bool, rnd: object
) -> None:
    dtype = np.dtype(descr)
    top = min(np.iinfo(dtype).max, 2**62)
    ids = np.array(
        [[rnd.randrange(0, top + 1) for _ in range(t)] for _ in range(b)],  # type: ignore[attr-defined]
        dtype=dtype,
    ).reshape(b, t)
    raw = (ids.T if fortran else ids).tobytes()
    body = npy_body(descr, (b, t), fortran, raw)
    got = parse_npy(body)["input_ids"].numpy()
    np.testing.assert_array_equal(got, ids.astype(np.int64))
    assert got.dtype == np.int64 and got.flags.c_contiguous


@settings(max_examples=300)
@given(
    st.sampled_from([*INT_DESCRS, "<f4", "<c8", "O", "x"]),
    shapes,
    st.booleans(),
    st.integers(0, 96),
)
@example("<i8", (2**32, 2**32), False, 0)
@example("<i8", (2**62 + 1, 4), False, 0)
@example("<i8", (2**64, 1), False, 0)
@example("<i4", (2**63, 0), True, 0)
def test_any_npy_header_is_read_or_refused(
    descr: str, shape: tuple[int, ...], fortran: bool, data_len: int
) -> None:
    body = npy_body(descr, shape, fortran, b"\x01" * data_len)
    try:
        parse_npy(body)
    except BadBody as exc:
        assert exc.status == 400 and exc.detail
    except InvalidArgument as exc:  # an id above int64 in a uint64 body
        assert "int64" in exc.message


entries = st.dictionaries(
    st.sampled_from([*NAMES, "other"]),
    st.fixed_dictionaries(
        {
            "dtype": st.sampled_from([*ST_DTYPES, "F32", "X", 3]),
            "shape": st.one_of(shapes, st.just("nope")),
            "data_offsets": st.one_of(
                st.lists(st.integers(-2, 2**65), min_size=2, max_size=2),
                st.tuples(st.integers(0, 64), st.integers(0, 64)).map(sorted),
            ),
        }
    ),
    max_size=3,
)


@settings(max_examples=300)
@given(entries, st.integers(0, 96))
@example({"input_ids": {"dtype": "I64", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}, 0)
@example({"input_ids": {"dtype": "I64", "shape": [2**62 + 1, 4], "data_offsets": [0, 0]}}, 0)
@example({"input_ids": {"dtype": "I64", "shape": [2**64, 1], "data_offsets": [0, 0]}}, 0)
def test_any_safetensors_header_is_read_or_refused(
    header: dict[str, dict[str, object]], data_len: int
) -> None:
    body = safetensors_body(header, b"\x00" * data_len)
    try:
        out = parse_safetensors(body, NAMES)
    except BadBody as exc:
        assert exc.status == 400 and exc.detail
        return
    except InvalidArgument as exc:
        assert "int64" in exc.message or "bool" in exc.message or exc.message
        return
    # read: every tensor (B, T) int64, of the shape its entry gave
    for name, tensor in out.items():
        assert list(tensor.shape) == list(header[name]["shape"])  # type: ignore[call-overload]


@settings(max_examples=100)
@given(st.integers(1, 3), st.integers(0, 4), st.sampled_from(["I32", "I64", "U8"]), st.booleans())
def test_a_safetensors_body_that_agrees_reads_back_its_ids(
    b: int, t: int, dtype: str, with_mask: bool
) -> None:
    ids = (np.arange(b * t, dtype=np.int64).reshape(b, t) * 7 % 200).astype(ST_DTYPES[dtype])
    tensors = {"input_ids": ids}
    if with_mask:
        tensors["attention_mask"] = np.ones((b, t), dtype=np.bool_)
    header: dict[str, dict[str, object]] = {}
    data = b""
    for name, array in tensors.items():
        raw = array.tobytes()
        header[name] = {
            "dtype": dtype if name == "input_ids" else "BOOL",
            "shape": [b, t],
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    out = parse_safetensors(safetensors_body(header, data), NAMES)
    np.testing.assert_array_equal(out["input_ids"].numpy(), ids.astype(np.int64))
    if with_mask:
        np.testing.assert_array_equal(out["attention_mask"].numpy(), np.ones((b, t), np.int64))
