"""The GGUF reader under generated heads (issue 39): hypothesis builds headers from the format's
grammar (``"GGUF"``, version, counts, typed key/value pairs with strings, arrays and arrays of
arrays, tensor records, a ``general.alignment``), written here by an encoder of our own, then
mutates them (counts inflated, bytes cut short or flipped).

- A well-formed head reads back exactly what was written: keys, values, tensor records.
- Any bytes at all either read or raise ``InvalidArgument`` (a 422 in the service): never
  another exception (``RecursionError``, ``ZeroDivisionError``, ``MemoryError``...).
- A head over the budget is refused as :class:`GgufLimit`, naming the count.

The default lane draws the same examples on every run (tests/conftest.py); ``./run.sh fuzz``
draws new ones, five times as many.
"""

from __future__ import annotations

import struct
from typing import Any, Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from posenc.core.errors import InvalidArgument
from posenc.readers.gguf.metadata import GgufBudget, GgufLimit, read_gguf_head

# value type -> struct format, as the GGUF specification lists them
SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING, ARRAY = 8, 9


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(kind: int, value: Any) -> bytes:
    if kind in SCALARS:
        return struct.pack(SCALARS[kind], value)
    if kind == STRING:
        return _string(value)
    item, items = value
    return struct.pack("<IQ", item, len(items)) + b"".join(_value(item, v) for v in items)


def encode_head(
    metadata: list[tuple[str, int, Any]], tensors: list[tuple[str, tuple[int, ...], int, int]]
) -> bytes:
    """A GGUF v3 head: ``metadata`` as (key, type, value) (an array's value is (item type,
    items)), then ``tensors`` as (name, dims, ggml type, offset)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        out += _string(key) + struct.pack("<I", kind) + _value(kind, value)
    for name, dims, ggml_type, offset in tensors:
        out += _string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ggml_type, offset)
    return out


def _scalar(kind: int) -> st.SearchStrategy[Any]:
    fmt = SCALARS[kind]
    if fmt == "<?":
        return st.booleans()
    if fmt in ("<f", "<d"):
        width: Literal[32, 64] = 32 if fmt == "<f" else 64
        return st.floats(width=width, allow_nan=False)
    bits = struct.calcsize(fmt) * 8
    if fmt[1].isupper():
        return st.integers(0, 2**bits - 1)
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


texts = st.text(max_size=12)


def typed_value(depth: int = 0) -> st.SearchStrategy[tuple[int, Any]]:
    """(type, value) of the grammar: a scalar, a string, or an array of one item type."""
    scalar = st.sampled_from(sorted(SCALARS)).flatmap(lambda k: _scalar(k).map(lambda v: (k, v)))
    string = texts.map(lambda t: (STRING, t))
    leaves = st.one_of(scalar, string)
    if depth >= 2:
        return leaves

    def array_of(item: int) -> st.SearchStrategy[tuple[int, Any]]:
        if item == STRING:
            values: st.SearchStrategy[Any] = st.lists(texts, max_size=5)
        elif item == ARRAY:
            values = st.lists(typed_value(depth + 1).filter(lambda tv: tv[0] == ARRAY), max_size=3)
            return values.map(lambda vs: (ARRAY, (ARRAY, [v for _, v in vs])))
        else:
            values = st.lists(_scalar(item), max_size=5)
        return values.map(lambda vs: (ARRAY, (item, vs)))

    arrays = st.sampled_from([*sorted(SCALARS), STRING, ARRAY]).flatmap(array_of)
    return st.one_of(leaves, arrays)


def _plain(kind: int, value: Any) -> Any:
    """What the reader gives for (type, value): lists for arrays, float32 rounded."""
    if kind == 6:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if kind == ARRAY:
        item, items = value
        return [_plain(item, v) for v in items]
    return value


metadata_lists = st.lists(
    st.tuples(st.text(min_size=1, max_size=16), typed_value()).map(lambda kv: (kv[0], *kv[1])),
    max_size=8,
    unique_by=lambda kv: kv[0],
)
tensor_lists = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=8),
        st.lists(st.integers(1, 4096), min_size=1, max_size=4).map(tuple),
        st.sampled_from([0, 1, 8, 30]),
        st.integers(0, 2**20).map(lambda n: n * 32),
    ),
    max_size=4,
    unique_by=lambda t: t[0],
)


@settings(max_examples=150)
@given(metadata_lists, tensor_lists, st.sampled_from([None, 1, 8, 32, 64]))
def test_a_well_formed_head_reads_back_what_was_written(
    metadata: list[tuple[str, int, Any]],
    tensors: list[tuple[str, tuple[int, ...], int, int]],
    align: int | None,
) -> None:
    metadata = [m for m in metadata if m[0] != "general.alignment"]
    if align is not None:
        metadata.append(("general.alignment", 4, align))
    data = encode_head(metadata, tensors)
    head = read_gguf_head(data)
    assert head.metadata == {k: _plain(kind, v) for k, kind, v in metadata}
    assert {n: (t.shape, t.ggml_type, t.offset) for n, t in head.tensors.items()} == {
        name: (dims, ggml_type, offset) for name, dims, ggml_type, offset in tensors
    }
    step = align or 32
    assert head.data is not None and head.data % step == 0 and 0 <= head.data - len(data) < step


def _mutate(data: bytes, how: int, where: int, byte: int) -> bytes:
    if not data:
        return data
    at = where % len(data)
    if how == 0:  # cut short
        return data[:at]
    if how == 1:  # one byte changed
        return data[:at] + bytes([byte]) + data[at + 1 :]
    # a count or length field made huge: 8 bytes of 0xff written at `at`
    return data[:at] + b"\xff" * 8 + data[at + 8 :]


@settings(max_examples=300)
@given(
    metadata_lists,
    tensor_lists,
    st.integers(0, 2),
    st.integers(0, 2**16),
    st.integers(0, 255),
)
@example([("general.alignment", 4, 0)], [("t", (2,), 0, 0)], 1, 0, 71)  # alignment 0
@example([("general.alignment", 7, False)], [], 1, 0, 71)  # alignment a bool
def test_any_bytes_read_or_raise_invalid_argument(
    metadata: list[tuple[str, int, Any]],
    tensors: list[tuple[str, tuple[int, ...], int, int]],
    how: int,
    where: int,
    byte: int,
) -> None:
    data = _mutate(encode_head(metadata, tensors), how, where, byte)
    try:
        read_gguf_head(data)
    except InvalidArgument as exc:
        assert exc.field == "body" and exc.message


def _array_head(item: int, count: int, payload: bytes, nested: int = 0) -> bytes:
    """One key ``a`` holding ``nested`` arrays of one item each around an array of ``count``."""
    inner = struct.pack("<IQ", item, count) + payload
    for _ in range(nested):
        inner = struct.pack("<IQ", ARRAY, 1) + inner
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("a") + struct.pack("<I", ARRAY) + inner


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 10**7), "10000000 key/value pairs"),
        (b"GGUF" + struct.pack("<IQQ", 3, 10**9, 0), "1000000000 tensors"),
        (_array_head(ARRAY, 5_500_000, b""), "array items"),
        (_array_head(ARRAY, 70_000, struct.pack("<IQ", 0, 0) * 70_000), "nested in arrays"),
        (_array_head(STRING, 3_000_000, b""), "3000000, over the limit of 2097152"),
        (_array_head(0, 1, b"\x00", nested=3000), "nests arrays more than 3 deep"),
        (
            b"GGUF"
            + struct.pack("<IQQ", 3, 1, 0)
            + _string("t")
            + struct.pack("<I", 2)
            + struct.pack("<QQ", 2**40, 2**40)
            + struct.pack("<IQ", 0, 0),
            "of more than 2^63 - 1 elements",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + _string("t") + struct.pack("<I", 9),
            "has 9 dimensions",
        ),
    ],
    ids=["kv", "tensors", "items", "nested", "strings", "deep", "elements", "dims"],
)
def test_a_head_over_the_budget_is_refused_naming_the_count(data: bytes, words: str) -> None:
    with pytest.raises(GgufLimit) as info:
        read_gguf_head(data)
    assert words in info.value.message


def test_the_budget_is_a_parameter() -> None:
    """A smaller budget refuses what the default reads: the counts, not the bytes, decide."""
    data = encode_head([("a", ARRAY, (4, list(range(10))))], [])
    assert read_gguf_head(data).metadata["a"] == list(range(10))
    with pytest.raises(GgufLimit, match="10, over the limit of 9 array items"):
        read_gguf_head(data, GgufBudget(max_items=9))
