"""GGUF token tables: posenc's dequantization against gguf's own, and refusals of bad files.

The fixtures (tests/fixtures/gguf, recorded by scripts/record_gguf_fixtures.py) are files
written by ``gguf.GGUFWriter``, each beside ``gguf.quants.dequantize``'s output for its stored
bytes: posenc must give the same float32 values bit for bit. Hand-built Q8_0 and Q4_0 blocks
check the block formulas independently of gguf.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.readers.gguf.tensors import GGML_TYPES, dequantize, read_gguf_table
from posenc.readers.models import load_safetensors_model

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gguf"
TYPES = [name for name, _, _ in GGML_TYPES.values()]


@pytest.mark.parametrize("type_name", TYPES)
def test_table_equals_gguf_dequantize_bit_for_bit(type_name: str) -> None:
    got = read_gguf_table(FIXTURES / f"tiny-{type_name}.gguf")
    want = np.load(FIXTURES / f"tiny-{type_name}.npy")
    assert got.type_name == type_name
    assert got.table.dtype == np.float32 and got.table.shape == want.shape == (4, 256)
    assert np.array_equal(got.table.view(np.uint32), want.view(np.uint32))
    assert np.isfinite(got.table).all() and np.abs(got.table).max() > 0


def test_q8_0_block_by_hand() -> None:
    q = np.arange(-16, 16, dtype=np.int8)  # (32,)
    block = np.concatenate([np.array([0.5], dtype=np.float16).view(np.uint8), q.view(np.uint8)])
    out = dequantize(block, 8, (32, 1))
    assert out.shape == (1, 32)
    assert out[0].tolist() == [0.5 * v for v in range(-16, 16)]


def test_q4_0_block_by_hand() -> None:
    low = np.arange(16, dtype=np.uint8)  # values 0..15 -> elements 0..15
    high = np.arange(15, -1, -1, dtype=np.uint8)  # values 15..0 -> elements 16..31
    block = np.concatenate(
        [np.array([2.0], dtype=np.float16).view(np.uint8), low | (high << np.uint8(4))]
    )
    out = dequantize(block, 2, (32, 1))[0]
    assert out.tolist() == [2.0 * (v - 8) for v in list(range(16)) + list(range(15, -1, -1))]


def test_bf16_and_f16_by_hand() -> None:
    values = np.array([1.0, -2.5, 3.140625, 0.0], dtype=np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    assert dequantize(bf16, 30, (4, 1))[0].tolist() == values.tolist()
    f16 = values.astype(np.float16).view(np.uint8)
    assert dequantize(f16, 1, (4, 1))[0].tolist() == values.tolist()


def _copy(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    shutil.copyfile(FIXTURES / name, out)
    return out


def test_truncated_tensor_data_is_refused_with_path(tmp_path: Path) -> None:
    path = _copy(tmp_path, "tiny-Q8_0.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(InvalidArgument) as exc:
        read_gguf_table(path)
    assert str(path) in exc.value.message
    assert "truncated" in exc.value.message and "100 missing" in exc.value.message


@pytest.mark.parametrize("keep", [0, 3, 24, 60])
def test_truncated_head_is_refused_with_path(tmp_path: Path, keep: int) -> None:
    path = _copy(tmp_path, "tiny-F16.gguf")
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(InvalidArgument) as exc:
        load_safetensors_model("g", path)
    assert str(path) in exc.value.message


def test_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(InvalidArgument, match="not a GGUF file"):
        read_gguf_table(path)


def test_type_not_dequantized_is_named(tmp_path: Path) -> None:
    path = _copy(tmp_path, "tiny-Q4_0.gguf")
    data = bytearray(path.read_bytes())
    name = b"token_embd.weight"
    at = data.index(name) + len(name) + 4 + 8 * 2  # after n_dims and the two dims: the type
    assert struct.unpack_from("<I", data, at)[0] == 2
    struct.pack_into("<I", data, at, 3)  # Q4_1
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidArgument, match="Q4_1"):
        read_gguf_table(path)


def test_model_reads_positions_as_llamacpp() -> None:
    model = load_safetensors_model("g", FIXTURES / "tiny-Q6_K.gguf")
    want = np.load(FIXTURES / "tiny-Q6_K.npy")
    assert torch.equal(model.token_table, torch.from_numpy(want))
    assert (model.vocab_size, model.d_model, model.max_positions) == (4, 256, 128)
    assert model.positional == "rope" and model.rope is not None
    assert (model.rope.head_dim, model.rope.rotary_dim) == (64, 64)
    assert model.rope.base == 500000.0 and model.rope.layout == "interleaved"  # llama: normal
    assert model.gguf is not None and model.gguf["tensor_type"] == "Q6_K"
    assert model.gguf["file_type"] == 18  # MOSTLY_Q6_K
    assert model.tokenizer is None and model.no_tokenizer and "GGUF" in model.no_tokenizer


def test_llamacpp_converted_file_loads() -> None:
    """A file llama.cpp's converter wrote from a transformers model (F32 token table)."""
    path = FIXTURES.parent / "llamacpp" / "gguf" / "converted-llama3.gguf"
    got = read_gguf_table(path)
    model = load_safetensors_model("c", path)
    assert got.type_name == "F32" and model.token_table.shape == (64, 32)
    raw = path.read_bytes()
    start = got.head.data + got.info.offset  # type: ignore[operator]
    want = np.frombuffer(raw, dtype="<f4", count=64 * 32, offset=start).reshape(64, 32)
    assert np.array_equal(model.token_table.numpy(), want)


@pytest.mark.parametrize("type_name", TYPES)
def test_live_random_blocks_equal_gguf_where_importable(type_name: str) -> None:
    """Where gguf is installed: 1100 rows of seeded random blocks (any bytes, NaN and inf scales
    included; more than one of posenc's chunks of blocks for Q4_0 and Q8_0) dequantized by gguf
    now and by posenc, bit for bit."""
    gguf = pytest.importorskip("gguf")
    qtype = getattr(gguf.GGMLQuantizationType, type_name)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, width = 1100, 2 * 256
    raw = np.random.default_rng(7).integers(0, 256, (rows, width // block * size), np.uint8)
    with np.errstate(invalid="ignore", over="ignore"):
        want = gguf.quants.dequantize(raw, qtype)
    got = dequantize(raw.reshape(-1), qtype.value, (width, rows))
    assert got.shape == want.shape == (rows, width)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_head_larger_than_the_first_read_is_read_whole(tmp_path: Path) -> None:
    """A key/value section past the first 1 MiB read (a large vocabulary) is read in larger
    prefixes: a 3 MiB string added as one more key leaves the table as it was."""
    data = (FIXTURES / "tiny-Q4_K.gguf").read_bytes()
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    key, text = b"general.big", b"x" * (3 << 20)
    extra = struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(text)) + text
    head = read_gguf_table(FIXTURES / "tiny-Q4_K.gguf").head
    kv_end, data_start = head.kv_end, head.data
    assert data_start is not None
    record = 8 + len(b"token_embd.weight") + 4 + 8 * 2 + 4 + 8  # the one tensor's record
    directory = data[kv_end : kv_end + record]
    pad = -(kv_end + len(extra) + record) % 32
    body = data[:16] + struct.pack("<Q", n_kv + 1) + data[24:kv_end] + extra
    body += directory + b"\0" * pad + data[data_start:]
    path = tmp_path / "big.gguf"
    path.write_bytes(body)
    got = read_gguf_table(path)
    assert got.head.metadata["general.big"] == text.decode()
    assert np.array_equal(got.table, np.load(FIXTURES / "tiny-Q4_K.npy"))


def test_unknown_version_is_refused(tmp_path: Path) -> None:
    data = bytearray((FIXTURES / "tiny-F32.gguf").read_bytes())
    struct.pack_into("<I", data, 4, 9)
    path = tmp_path / "v9.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidArgument, match="version 9"):
        read_gguf_table(path)
