"""``posenc apply``: the rotation written to a file equals :func:`posenc.rope_kinds.rotate.rotate`'s, and
bad arguments are exit status 2 with the library's message."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.cli import main
from posenc.core import codec
from posenc.rope_kinds.rotate import rotate


def test_apply_seeded_then_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rot.safetensors"
    argv = ["apply", "--preset", "llama-3.1-8b", "--seq-len", "3", "--offset", "7", "--seed", "4",
            "--num-heads", "2", "--num-kv-heads", "1", "--precision", "engine", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["precision"] == "engine" and meta["layout"] == "neox"
    tensors, _ = codec.decode_safetensors(out.read_bytes())
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(3, 2, 128, generator=g), torch.randn(3, 1, 128, generator=g)
    want = rotate({"preset": "llama-3.1-8b", "positions": [7, 8, 9]}, q, k, precision="engine")
    assert torch.equal(torch.from_numpy(np.array(tensors["q"])), want["q"])
    assert torch.equal(torch.from_numpy(np.array(tensors["k"])), want["k"])

    src = tmp_path / "in.safetensors"
    src.write_bytes(codec.encode_safetensors({"q": q}))
    npy = tmp_path / "q.npy"
    assert main(["apply", "--preset", "llama-3.1-8b", "--positions", "7,8,9", "--input", str(src),
                 "--engine", "vllm", "--precision", "engine", "-o", str(npy)]) == 0  # fmt: skip
    got = codec.decode_npy(npy.read_bytes())
    assert torch.equal(torch.from_numpy(np.array(got)), want["q"])  # vLLM: the same bits for Llama


def test_apply_bad_head_dim_is_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "q.npy"
    src.write_bytes(codec.encode_npy(torch.zeros(2, 1, 64)))
    code = main(["apply", "--preset", "llama-3.1-8b", "--seq-len", "2", "--input", str(src),
                 "-o", str(tmp_path / "o.npy")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "64" in err and "128" in err
