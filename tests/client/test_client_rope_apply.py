"""The client's ``rope_apply``: arrays go as a safetensors body in their own dtype, seeded
requests as JSON; both give the library's rotation (:func:`posenc.rope_kinds.rotate.rotate`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from posenc.client import PosencClient
from posenc.rope_kinds.rotate import rotate, seeded_vectors


def test_rope_apply_arrays_and_seeded(live_server: str) -> None:
    q, k = seeded_vectors(3, 2, 1, 128, seed=5)
    common: dict[str, Any] = {"preset": "llama-3.1-8b", "positions": [0, 9, 4096]}
    want = rotate(common, q, k, engine="vllm", precision="engine")
    with PosencClient(live_server, timeout=60) as client:
        got = client.rope_apply(q.numpy(), k, engine="vllm", precision="engine", **common)
        assert np.array_equal(got["q"], want["q"].numpy())
        assert np.array_equal(got["k"], want["k"].numpy())
        assert got.meta["engine"] == "vllm" and got.meta["layout"] == "neox"
        seeded = client.rope_apply(seed=5, num_heads=2, num_kv_heads=1, **common)
    exact = rotate(common, q, k)
    assert torch.equal(torch.from_numpy(np.array(seeded["q"])), exact["q"])
