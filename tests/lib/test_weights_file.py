"""posenc.readers.weights_file: safetensors tensors read with plain reads into memory the process owns,
equal to ``safetensors``' own reader, and clear errors for files cut short."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from posenc.core.errors import InvalidArgument
from posenc.readers.weights_file import read_index, read_tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_tensors_equal_safetensors_own_reader(tmp_path: Path, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(7, 5, generator=g).to(dtype), "b": torch.arange(6).reshape(2, 3)}
    path = tmp_path / "t.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    expected = load_file(str(path))
    assert read_index(str(path)).names == ["a", "b"]
    for name in tensors:
        got = read_tensor(str(path), name)
        assert got.dtype == expected[name].dtype and got.shape == expected[name].shape
        assert torch.equal(got, expected[name])
        # memory of our own: the storage is not the file's
        assert got.untyped_storage().filename is None


def test_a_file_cut_short_is_an_error_not_a_fault(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    save_file({"a": torch.ones(64, 64)}, str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(InvalidArgument, match=r"truncated: a ends at byte \d+, and the file"):
        read_tensor(str(path), "a")
    path.write_bytes(data[:20])
    with pytest.raises(InvalidArgument, match=r"cannot read as a safetensors file"):
        read_tensor(str(path), "a")
    with pytest.raises(InvalidArgument, match=r"no such tensor"):
        save_file({"a": torch.ones(2)}, str(path))
        read_tensor(str(path), "zz")
