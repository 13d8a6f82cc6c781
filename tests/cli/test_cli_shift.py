"""``posenc shift``: the rope_shift kind from the command line, the same as the library."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from posenc import cli
from posenc.core import codec
from posenc.resolve import compute, resolve_fields
from posenc.rope_kinds.shift import ROPE_SHIFT


def test_shift_writes_the_moved_keys(tmp_path: Path) -> None:
    out = tmp_path / "shift.safetensors"
    k = [[[1.0, 0.0, 0.5, 2.0]], [[0.0, 1.0, -1.0, 0.25]]]
    argv = ["shift", "--head-dim", "4", "--positions", "3,4", "--delta", "-2",
            "--k", json.dumps(k), "-q", "-o", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    tensors, metadata = codec.decode_safetensors(out.read_bytes())
    fields = {"head_dim": 4, "positions": [3, 4], "delta": -2, "k": k}
    want = compute(ROPE_SHIFT, resolve_fields(ROPE_SHIFT, fields))
    for name in ("cos", "sin", "k"):
        assert torch.equal(torch.as_tensor(tensors[name]), want[name]), name
    assert json.loads(metadata["meta"])["kind"] == "rope_shift"
